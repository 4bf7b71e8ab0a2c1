"""Where a Docker engine is, found as the docker CLI finds it, and ssh engines reached through one
persistent connection each.

The order is the CLI's: `DOCKER_HOST`, else `DOCKER_CONTEXT`, else the `currentContext` of
`$DOCKER_CONFIG/config.json` (`~/.docker` by default), else the default socket. A context is
read from the CLI's own store (`contexts/meta/<sha256 of its name>/meta.json`, TLS files under
`contexts/tls/`); a context name that is not there is an error, never the default engine.

An `ssh://` engine is reached the way `docker -H ssh://…` reaches it, through the system's
OpenSSH client (its config, agent and known hosts), but over one login: a master connection
(`ControlMaster`) forwards a private local socket to the remote engine's socket, and every API
call of every client goes through it. (docker-py opens an ssh process, or a paramiko login, per
connection pool: measured 320 logins for a two-task batch, six times slower than a local socket.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from runner.base.children import with_parent_death_signal
from runner.base.errors import InfrastructureError, UsageError
from runner.model.settings import ssh_config_file

DEFAULT_HOST = "unix:///var/run/docker.sock"
_SSH_TIMEOUT = 30.0
# A context name as the docker CLI accepts it.
_CONTEXT = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.+-]*$")


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """One engine: its URL, what to call it, and the TLS files a context gives it."""

    url: str
    name: str
    tls_dir: Path | None = None  # ca.pem, cert.pem, key.pem (DOCKER_CERT_PATH's layout)
    tls_verify: bool = False
    from_host_variable: bool = False  # DOCKER_HOST: its TLS comes from DOCKER_TLS_*

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` pointed at this engine (for a child process), context variables removed."""
        env = {
            k: v
            for k, v in base.items()
            if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")
            and (self.from_host_variable or k not in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"))
        }
        env["DOCKER_HOST"] = self.url
        if self.tls_dir is not None:
            env["DOCKER_CERT_PATH"] = str(self.tls_dir)
            if self.tls_verify:
                env["DOCKER_TLS_VERIFY"] = "1"
        return env


def config_dir(env: Mapping[str, str]) -> Path:
    configured = env.get("DOCKER_CONFIG")
    if configured:
        return Path(configured)
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".docker"


def current_context(env: Mapping[str, str]) -> str | None:
    path = config_dir(env) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"the docker CLI's configuration cannot be read: {exc}", path=str(path)
        ) from None
    name = data.get("currentContext") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else None


def context_endpoint(name: str, env: Mapping[str, str], *, field: str) -> Endpoint:
    """The engine of Docker context `name` (the docker CLI's store in `config_dir`)."""
    if name == "default":
        return Endpoint(url=DEFAULT_HOST, name="default")
    root = config_dir(env) / "contexts"
    if not _CONTEXT.fullmatch(name):
        raise UsageError(f"{name!r} is not a Docker context name", field=field)
    key = hashlib.sha256(name.encode()).hexdigest()
    meta = root / "meta" / key / "meta.json"
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"Docker context {name!r} does not exist in {root} (`docker context ls` lists "
            "them; DOCKER_CONFIG chooses the directory)",
            field=field,
        ) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"Docker context {name!r} cannot be read: {exc}", path=str(meta)) from None
    endpoint = (data.get("Endpoints") or {}).get("docker") if isinstance(data, dict) else None
    host = endpoint.get("Host") if isinstance(endpoint, dict) else None
    if not isinstance(host, str) or not host:
        raise UsageError(
            f"Docker context {name!r} has no docker endpoint", path=str(meta), field=field
        )
    tls = root / "tls" / key / "docker"
    return Endpoint(
        url=host,
        name=name,
        tls_dir=tls if (tls / "ca.pem").is_file() or (tls / "cert.pem").is_file() else None,
        tls_verify=not bool(endpoint.get("SkipTLSVerify")) if isinstance(endpoint, dict) else True,
    )


def resolve(env: Mapping[str, str]) -> Endpoint:
    """The engine the docker CLI would use with this environment."""
    host = env.get("DOCKER_HOST")
    if host:
        return Endpoint(url=host, name=host, from_host_variable=True)
    named = env.get("DOCKER_CONTEXT")
    if named:
        return context_endpoint(named, env, field="DOCKER_CONTEXT")
    current = current_context(env)
    if current:
        return context_endpoint(current, env, field="currentContext")
    return Endpoint(url=DEFAULT_HOST, name="default")


# ---- ssh -------------------------------------------------------------------------------------


def _ssh_target(url: str) -> tuple[list[str], str]:
    parts = urlsplit(url)
    if parts.scheme != "ssh" or not parts.hostname:
        raise UsageError(f"{url!r} is not an ssh://[user@]host[:port] engine URL", field="engine")
    options: list[str] = []
    if parts.username:
        options += ["-l", parts.username]
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"{url!r}: the port is not a number", field="engine") from None
    if port:
        options += ["-p", str(port)]
    return options, parts.hostname


class SshTunnel:
    """One ssh login to an engine's host, forwarding a local socket to its engine socket."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._target, self._host = _ssh_target(url)
        if shutil.which("ssh") is None:
            raise InfrastructureError(
                f"{url}: ssh engines need the OpenSSH client (`ssh`), and it is not installed"
            )
        # Short: a unix socket's path has at most 107 bytes.
        self.directory = Path(tempfile.mkdtemp(prefix="sb-ssh.", dir="/tmp"))
        self.control = self.directory / "ctl"
        self.socket = self.directory / "docker.sock"
        self._log = self.directory / "ssh.log"
        self._master: subprocess.Popen[bytes] | None = None

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def _base(self) -> list[str]:
        config = ssh_config_file()
        return [
            "ssh",
            *(["-F", str(config)] if config is not None else []),
            "-o", "BatchMode=yes",
            "-o", f"ControlPath={self.control}",
            "-o", "ConnectTimeout=20",
            "-o", "ServerAliveInterval=10",
            "-o", "ServerAliveCountMax=3",
            "-o", "StreamLocalBindUnlink=yes",
            *self._target,
        ]  # fmt: skip

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self._base(), *args],
                capture_output=True,
                text=True,
                timeout=_SSH_TIMEOUT,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise InfrastructureError(
                f"{self.url}: ssh did not answer in {_SSH_TIMEOUT:g}s"
            ) from None

    def alive(self) -> bool:
        if self._master is None or self._master.poll() is not None:
            return False
        return self._run("-O", "check", "--", self._host).returncode == 0

    def open(self) -> str:
        """Log in once, forward the engine's socket; the local socket's URL."""
        self.close_master()
        # A master killed outright leaves its control socket behind; a new master would not
        # bind over it (and would run without multiplexing).
        for stale in (self.control, self.socket):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        with self._log.open("ab") as log:
            argv, preexec = with_parent_death_signal(
                [*self._base(), "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-N",
                 "--", self._host]
            )  # fmt: skip
            self._master = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                preexec_fn=preexec,  # noqa: PLW1509 - the login dies with the runner
            )
        deadline = time.monotonic() + _SSH_TIMEOUT
        while not self.control.exists():
            if self._master.poll() is not None or time.monotonic() > deadline:
                reason = self._last_error() or "ssh ended without logging in"
                self.close_master()
                raise InfrastructureError(f"{self.url}: ssh login failed: {reason}")
            time.sleep(0.05)
        asked = self._run(
            "--", self._host, 'printf %s "${DOCKER_HOST:-unix:///var/run/docker.sock}"'
        )
        remote = asked.stdout.strip()
        if asked.returncode != 0 or not remote.startswith("unix://"):
            self.close_master()
            raise InfrastructureError(
                f"{self.url}: the remote engine's socket is not known "
                f"({asked.stderr.strip()[-200:] or remote or 'no answer'})"
            )
        forwarded = self._run(
            "-O", "forward", "-L", f"{self.socket}:{remote[len('unix://') :]}", "--", self._host
        )
        if forwarded.returncode != 0:
            self.close_master()
            raise InfrastructureError(
                f"{self.url}: cannot forward the engine socket: {forwarded.stderr.strip()[-200:]}"
            )
        return self.docker_host

    def _last_error(self) -> str:
        with contextlib.suppress(OSError):
            lines = [ln for ln in self._log.read_text(errors="replace").splitlines() if ln.strip()]
            return lines[-1].strip()[:300] if lines else ""
        return ""

    def close_master(self) -> None:
        if self._master is None:
            return
        if self._master.poll() is None:
            with contextlib.suppress(InfrastructureError):
                self._run("-O", "exit", "--", self._host)
            try:
                self._master.wait(5)
            except subprocess.TimeoutExpired:
                self._master.kill()
                self._master.wait(5)
        self._master = None
        with contextlib.suppress(OSError):
            self.socket.unlink()

    def close(self) -> None:
        self.close_master()
        shutil.rmtree(self.directory, ignore_errors=True)
