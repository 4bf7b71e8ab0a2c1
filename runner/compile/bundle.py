"""A compiled Harbor bundle read from disk, as typed input for the plan.

A bundle on disk is untrusted: task.toml goes through the strict model, the required files must
be regular files, and the build contexts may hold only regular files, directories and symlinks
(hashed by their target text, never followed), so hashing one cannot block on a FIFO or read a
device.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from runner.base import validation as v
from runner.base.errors import InvalidInputError, InvalidTaskError, Problem
from runner.base.safeio import file_kind, optional_regular, require_directory
from runner.compile.exploits import TaskFacts
from runner.compile.render import (
    CONTEXT_DIRS,
    VERIFIER_CONTEXT,
    compose_file,
    default_smoke_script,
)
from runner.model.canaries import CanarySet, read_canaries
from runner.model.contract import EnvironmentContract
from runner.model.harbor import TaskToml, read_task_toml
from runner.model.layout import CENSUS_FILE, BundleLayout
from runner.model.manifest import BundleManifest, ManifestVerification

REQUIRED_FILES = (
    "task.toml",
    "instruction.md",
    "environment/Dockerfile",
    "tests/Dockerfile",
    "tests/test.sh",
    "solution/solve.sh",
)
MAX_CONTEXT_FILES = 100_000
COMPOSE_FILE = "tests/docker-compose.yaml"
MAX_MANIFEST_BYTES = 1024 * 1024
CONTEXT_EXCLUDES = frozenset({CENSUS_FILE})  # the census, in tests/


@dataclass(frozen=True, kw_only=True)
class Bundle:
    root: Path
    config: TaskToml
    # sha256 over each build context's file names, modes and bytes.
    context_digests: dict[str, str]
    # The environment contract the bundle was compiled with (from its manifest), if any.
    contract: EnvironmentContract | None = None
    # Whether tests/smoke.sh is the default, read-only check the runner renders itself.
    default_smoke: bool = False
    # What the hack gate chooses its exploits from (None: a bundle without that manifest entry).
    exploit_facts: TaskFacts | None = None
    # Its canaries (tests/canaries.json; none in a bundle compiled before them).
    canaries: CanarySet = field(default_factory=CanarySet)

    @property
    def task_id(self) -> str:
        return self.config.task_id

    def context(self, name: str) -> Path:
        return self.root / name


def _require_regular(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise InvalidTaskError("file not found", path=str(path)) from None
    except OSError as exc:
        raise InvalidTaskError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else file_kind(info.st_mode)
        raise InvalidTaskError(f"is {kind}; expected a regular file", path=str(path))


def context_digest(context: Path, exclude: frozenset[str] = frozenset()) -> str:
    """What a build of `context` depends on: every entry's path, type, mode and content, but the
    `exclude`d top-level files (the census: the executor puts the one a run needs into each
    verifier container, so a sealed bundle and its unsealed self share their images)."""
    digest = hashlib.sha256()
    count = 0
    for directory, dirnames, filenames in os.walk(context, followlinks=False):
        dirnames.sort()
        for name in sorted(
            [*filenames, *(d for d in dirnames if (Path(directory) / d).is_symlink())]
        ):
            path = Path(directory) / name
            relative = path.relative_to(context).as_posix()
            if relative in exclude:
                continue
            info = os.lstat(path)
            count += 1
            if count > MAX_CONTEXT_FILES:
                raise InvalidTaskError(
                    f"build context holds more than {MAX_CONTEXT_FILES} files", path=str(context)
                )
            if stat.S_ISLNK(info.st_mode):
                digest.update(
                    f"L\0{relative}\0{os.readlink(path)}\0".encode(errors="surrogateescape")
                )
                continue
            if not stat.S_ISREG(info.st_mode):
                raise InvalidTaskError(
                    f"is {file_kind(info.st_mode)}; a build context holds regular files only",
                    path=str(path),
                )
            digest.update(
                f"F\0{relative}\0{info.st_mode & 0o777:o}\0".encode(errors="surrogateescape")
            )
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
    return digest.hexdigest()


def is_bundle(path: Path) -> bool:
    return os.path.lexists(path / "task.toml")


def load_bundle(root: Path) -> Bundle:
    require_directory(root, what="bundle directory")
    for required in REQUIRED_FILES:
        _require_regular(root / required)
    config = read_task_toml(root)
    manifest = read_manifest(root)
    contract = read_contract(root, manifest)
    digests = {}
    for name in CONTEXT_DIRS:
        context = root / name
        if context.is_symlink() or not context.is_dir():
            raise InvalidTaskError("must be a directory", path=str(context))
        digests[name] = context_digest(
            context, CONTEXT_EXCLUDES if name == VERIFIER_CONTEXT else frozenset()
        )
    from runner.model.toolchains import load_catalog

    smoke = optional_regular(root / "tests" / "smoke.sh", limit=MAX_MANIFEST_BYTES)
    default = default_smoke_script(config.metadata.toolchains, load_catalog())
    return Bundle(
        root=root,
        config=config,
        context_digests=digests,
        contract=contract,
        default_smoke=smoke == default,
        exploit_facts=read_exploit_facts(root, config, manifest),
        canaries=read_canaries(
            optional_regular(BundleLayout(root).canaries, limit=64 * 1024 * 1024)
        )
        or CanarySet(),
    )


def _repo_paths(values: list[str]) -> list[str]:
    out = []
    for value in values:
        try:
            out.append(v.normalize_repo_path(value))
        except ValueError:
            continue
    return out


def read_manifest(root: Path) -> BundleManifest:
    """The bundle's manifest (an empty one when the bundle has none), read leniently."""
    from runner.compile.taskdir import parse_json_object

    path = BundleLayout(root).manifest
    raw = optional_regular(path, limit=MAX_MANIFEST_BYTES)
    return BundleManifest.model_validate(parse_json_object(raw, path) if raw is not None else {})


def read_exploit_facts(root: Path, config: TaskToml, manifest: BundleManifest) -> TaskFacts:
    """The hack gate's view of the task, from the manifest and the two patches. The bundle is
    untrusted: anything malformed is left out (fewer exploits, never a crash); the values reach
    exploit scripts only as quoted words."""
    from runner.compile.patches import PatchParseError, parse_patch

    verification = manifest.verification or ManifestVerification()
    gold_files: list[str] = []
    held_out = _repo_paths(verification.held_out)
    for name, into in (("solution/gold.patch", gold_files), ("tests/test.patch", held_out)):
        patch = optional_regular(root / name, limit=v.MAX_PATCH_BYTES)
        if patch is None:
            continue
        try:
            into.extend(_repo_paths(list(parse_patch(patch).files)))
        except PatchParseError:
            continue
    return TaskFacts(
        workdir=v.normalize_repo_path(config.metadata.workdir),
        test_command=verification.test_command,
        toolchains=[t.value for t in config.metadata.toolchains],
        held_out=sorted(set(held_out)),
        gold_files=sorted(set(gold_files)),
        selectors=[*verification.fail_to_pass, *verification.pass_to_pass],
        fail_to_pass=list(verification.fail_to_pass),
    )


def read_contract(root: Path, manifest: BundleManifest) -> EnvironmentContract | None:
    """The contract recorded in the bundle's manifest (strictly validated). A compose file of
    services must be exactly what that contract renders: one source of truth, so a forged
    compose file cannot add what the runner would not run."""

    path = BundleLayout(root).manifest
    contract = None
    document = manifest.environment
    if document is not None:
        try:
            contract = EnvironmentContract.model_validate_json(json.dumps(document))
        except ValidationError as exc:
            raise InvalidInputError(
                [
                    Problem(
                        file=str(path),
                        field="environment." + ".".join(str(p) for p in e["loc"]),
                        message=str(e["msg"]).removeprefix("Value error, "),
                    )
                    for e in exc.errors(include_url=False, include_input=False)
                ]
            ) from None
    compose = optional_regular(root / COMPOSE_FILE, limit=MAX_MANIFEST_BYTES)
    expected = compose_file(contract).encode() if contract and contract.services else None
    if compose != expected:
        raise InvalidTaskError(
            "does not match the services of the bundle's manifest (recompile the task)"
            if compose is not None
            else "is missing: the manifest declares services",
            path=str(root / COMPOSE_FILE),
        )
    return contract
