"""Debugging a red task as a person would: `debug` driven in tmux (send keys, read the screen),
`debug --print` run as a script, `logs --follow` on a running verification, and report.html
opened in headless Chromium (screenshot, DOM text, no external reference)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.helpers import LIB_GOLD, bash_task, write_task
from tests.integration.conftest import ROOT, run_verify

# Its tests share module-scoped fixtures: one worker runs them all (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_debug")

DEBUG_LABEL = "org.selfbench.kind=debug"


@dataclass(frozen=True)
class Runs:
    root: Path
    dirs: dict[str, Path]
    tasks: dict[str, Path]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, verify_options: list[str]) -> Runs:
    root = tmp_path_factory.mktemp("red")
    nonce = uuid.uuid4().hex[:10]
    tasks = {
        "accepted": bash_task(root, name="dbg-accepted").directory,
        # setup calls a script that is not there: red at build, in setupCommand's step
        "build": bash_task(
            root, name="dbg-build", setupCommand=f"echo {nonce} && ./no-such-step.sh"
        ).directory,
        "smoke": bash_task(
            root, name="dbg-smoke", environment={"smokeCommand": "test -f ./no-such-file"}
        ).directory,
        "nop": bash_task(
            root, name="dbg-nop", new_test='. ./lib.sh\n[ "$(greet y)" = "hello y" ]\n'
        ).directory,
        "oracle": bash_task(
            root,
            name="dbg-oracle",
            gold={"lib.sh": LIB_GOLD.replace('shout() { shout_0 "$@"; }', "shout() { :; }")},
        ).directory,
    }
    invalid = write_task(
        root / "dbg-invalid",
        {"schemaVersion": 1, "taskId": "dbg-invalid", "resources": {"cpus": "lots"}},
        test_patch=b"",
        gold_patch=b"",
    )
    tasks["invalid"] = invalid
    dirs = {}
    for kind, task in tasks.items():
        run = run_verify(task, verify_options, root / "runs" / kind)
        dirs[kind] = run.run_dir
    return Runs(root=root, dirs=dirs, tasks=tasks)


def no_debug_containers(client: docker.DockerClient) -> list[str]:
    return [str(c.name) for c in client.containers.list(all=True, filters={"label": DEBUG_LABEL})]


class Tmux:
    def __init__(self, name: str, command: str) -> None:
        self.name = name
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", name, "-x", "220", "-y", "60", command],
            check=True,
        )

    def screen(self) -> str:
        result = subprocess.run(
            ["tmux", "capture-pane", "-p", "-J", "-S", "-200", "-t", self.name],
            capture_output=True,
            text=True,
            check=False,
        )
        return result.stdout

    def wait_for(self, pattern: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            assert time.monotonic() < deadline, f"{pattern!r} not on screen:\n{screen}"
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        for key in keys:
            subprocess.run(["tmux", "send-keys", "-t", self.name, key], check=True)
            time.sleep(0.3)

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], check=False)


@pytest.fixture
def tmux() -> Iterator[list[Tmux]]:
    if shutil.which("tmux") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "tmux"], check=True)
    sessions: list[Tmux] = []
    yield sessions
    for session in sessions:
        session.kill()


def debug_shell(run_dir: Path, sessions: list[Tmux]) -> Tmux:
    name = f"dbg-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m runner debug {run_dir}; echo DEBUG-EXITED $?; sleep 600"
    session = Tmux(name, f"cd {ROOT} && {command}")
    sessions.append(session)
    return session


def test_debug_build_red_opens_the_last_good_layer_and_up_reruns_the_step(
    runs: Runs, tmux: list[Tmux], docker_client: docker.DockerClient
) -> None:
    report = json.loads((runs.dirs["build"] / "report.json").read_text())
    assert report["stages"]["build"]["status"] == "failed"
    session = debug_shell(runs.dirs["build"], tmux)
    session.wait_for(r"press Up, then Enter")
    session.wait_for(r"root@\w+:/#")
    assert no_debug_containers(docker_client), "the shell runs in a labelled container"
    session.keys("Up", "Enter")
    screen = session.wait_for(r"no-such-step\.sh: No such file or directory")
    assert "setup.sh" in screen
    session.keys("exit", "Enter")
    session.wait_for(r"DEBUG-EXITED 0")
    assert no_debug_containers(docker_client) == []


def test_debug_nop_red_is_the_verifier_state_with_the_test_command(
    runs: Runs, tmux: list[Tmux], docker_client: docker.DockerClient
) -> None:
    session = debug_shell(runs.dirs["nop"], tmux)
    screen = session.wait_for(r"verifier@\w+:/app\$")
    assert re.search(r"bash tests/run\.sh '?tests/test_new\.sh'?", screen)  # the test command
    session.keys("Up", "Enter")
    session.wait_for(r"PASS tests/test_new\.sh")  # the new test already passes: nop is red
    session.keys("whoami; test -w tests/test_new.sh && echo WRITABLE || echo READONLY", "Enter")
    screen = session.wait_for(r"READONLY|WRITABLE")
    assert "READONLY" in screen  # held-out tests in place and write-protected, as in the gate
    session.keys("exit", "Enter")
    session.wait_for(r"DEBUG-EXITED 0")
    assert no_debug_containers(docker_client) == []


def print_script(target: Path, *extra: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "runner", "debug", str(target), "--print", *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_debug_print_reproduces_each_failure_as_a_script(
    runs: Runs, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    cases = {
        "build": (127, "no-such-step.sh: No such file or directory"),
        "nop": (0, "PASS tests/test_new.sh"),
        "oracle": (1, "FAIL tests/test_new.sh"),
        "smoke": (1, ""),
    }
    for kind, (code, text) in cases.items():
        script = tmp_path / f"{kind}.sh"
        script.write_text(print_script(runs.dirs[kind]))
        if kind != "build":  # a gate's container, made as the gate made it: init as PID 1
            assert " --init " in script.read_text(), kind
        result = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=300, check=False
        )
        output = result.stdout + result.stderr
        assert result.returncode == code, (kind, output)
        assert text in output, (kind, output)
        assert no_debug_containers(docker_client) == [], kind


def test_debug_refuses_an_image_this_runner_did_not_label(
    runs: Runs, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """A plan.json edited to name an image of the runner's tag form that some other build
    made (no runner label): debug refuses it before anything starts, and so does the printed
    script on the engine it runs against."""
    tag = f"selfbench/dbg-nop:verifier-{uuid.uuid4().hex[:16]}"
    stranger = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input='FROM scratch\nCMD ["/x"]\n',
        capture_output=True,
        text=True,
        check=False,
    )
    assert stranger.returncode == 0, stranger.stderr
    forged = tmp_path / "forged"
    shutil.copytree(runs.dirs["nop"], forged, symlinks=True)
    plan = json.loads((forged / "plan.json").read_text())
    real = plan["trials"][0]["verifier"]["image"]
    (forged / "plan.json").write_text((forged / "plan.json").read_text().replace(real, tag))
    try:
        opened = subprocess.run(
            [sys.executable, "-m", "runner", "debug", str(forged)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert opened.returncode == 2, opened.stderr
        assert f"refused: image {tag} is not on this engine with the label" in opened.stderr
        script = tmp_path / "forged.sh"
        script.write_text(print_script(forged))
        ran = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=120, check=False
        )
        assert ran.returncode == 2 and "refused: image" in ran.stderr, ran.stderr
        assert no_debug_containers(docker_client) == []
    finally:
        docker_client.images.remove(tag, force=True)


def test_debug_of_a_task_dir_uses_its_last_run_and_refuses_a_green_one(runs: Runs) -> None:
    logs = runs.root / "task-logs"
    first = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "debug",
            str(runs.tasks["nop"]),
            "--print",
            "--logs",
            str(logs),
            "--base-image",
            "selfbench/debian-base:bookworm",
            "--toolchain-source",
            "uv=registry",
            "--extra-ca-certs",
            "/etc/ssl/certs/ca-certificates.crt",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert first.returncode == 0, first.stderr
    assert "verifying it first" in first.stderr
    second = print_script(runs.tasks["nop"], "--logs", str(logs))
    assert "fail_to_pass.sh" in second
    green = subprocess.run(
        [sys.executable, "-m", "runner", "debug", str(runs.dirs["accepted"])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert green.returncode == 2
    assert "nothing is red" in green.stderr


def test_logs_follow_tails_a_running_verification(
    tmp_path: Path, verify_options: list[str]
) -> None:
    # A fresh setup step: the images are built while `logs --follow` watches.
    nonce = uuid.uuid4().hex[:10]
    task = bash_task(tmp_path, name="dbg-follow", setupCommand=f"sleep 3 && echo {nonce}")
    run_dir = tmp_path / "run"
    verify = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "verify",
            str(task.directory),
            "--run-dir",
            str(run_dir),
            "-q",
            *verify_options,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not run_dir.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        follow = subprocess.run(
            [sys.executable, "-m", "runner", "logs", str(run_dir), "--follow"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
            check=False,
        )
    finally:
        verify.wait(600)
    assert follow.returncode == 0, follow.stderr
    assert "the run ended" in follow.stderr
    assert re.search(r"^build/agent\.log: Step \d+/\d+ :", follow.stdout, re.M)
    assert "oracle/verifier.log: selfbench: reward" in follow.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "runner", "logs", str(run_dir), "--stage", "oracle", "--lines", "3"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    assert shown.startswith("== oracle passed")


EXTERNAL = re.compile(
    r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//|ftp:)|<script|<link|@import|url\(""", re.I
)


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
            check=True,
            capture_output=True,
        )
        path = shutil.which("chromium")
    assert path is not None
    return path


def in_chromium(
    browser: str, page: Path, shot: Path, size: str, *, dom_of: Path | None = None
) -> str:
    """A screenshot of `page` in headless Chromium at `size`, and the DOM of `dom_of` (default:
    the page) once its scripts ran."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--window-size={size}"]
    subprocess.run(
        [browser, *flags, f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return subprocess.run(
        [browser, *flags, "--dump-dom", (dom_of or page).as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


def test_report_html_for_every_kind_in_headless_chromium(runs: Runs, tmp_path: Path) -> None:
    browser = chromium()
    expected = {
        "accepted": ("accepted", []),
        "invalid": ("invalid", ["resources.cpus"]),
        "build": ("rejected", ["The failing build step", "setupCommand", "no-such-step.sh"]),
        "smoke": ("rejected", ["no-such-file"]),
        "nop": ("rejected", ["fail-to-pass tests already pass"]),
        "oracle": ("rejected", ["fail-to-pass tests still fail", "FAIL tests/test_new.sh"]),
    }
    for kind, (verdict, texts) in expected.items():
        page = runs.dirs[kind] / "report.html"
        source = page.read_text()
        assert EXTERNAL.search(source) is None, kind
        shot = tmp_path / f"{kind}.png"
        dom = in_chromium(browser, page, shot, "1280,1600")
        assert shot.stat().st_size > 10_000
        verdict_text = re.search(r'id="verdict">([^<]+)<', dom)
        assert verdict_text is not None and verdict_text.group(1).strip() == verdict, kind
        for stage in ("compile", "audit", "build", "smoke", "nop", "oracle", "determinism"):
            assert f'data-stage="{stage}"' in dom, (kind, stage)
        for text in texts:
            assert text in dom, (kind, text)


# Run in a copy of the page (the page itself has no script): where the failing assertion's text
# ends, in CSS pixels from the top of the page as a 1280x800 window first shows it.
MEASURE = """<script>
const box = document.getElementById("failure");
const walker = document.createTreeWalker(box || document.body, NodeFilter.SHOW_TEXT);
let bottom = -1;
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (node.textContent.includes(WANTED)) {
    const range = document.createRange();
    range.selectNodeContents(node);
    bottom = Math.ceil(range.getBoundingClientRect().bottom);
    break;
  }
}
document.body.setAttribute("data-assertion-bottom", String(bottom));
</script>"""


def test_a_red_report_html_shows_the_failing_assertion_on_its_first_screen(
    runs: Runs, tmp_path: Path
) -> None:
    """Opened in headless Chromium at 1280x800, a red oracle's report.html shows the failing
    test's output (the assertion) without scrolling, and links to the log it comes from."""
    browser = chromium()
    page = runs.dirs["oracle"] / "report.html"
    source = page.read_text()
    assert '<a href="oracle/logs/verifier/fail_to_pass.log">' in source
    measured = tmp_path / "measured.html"
    wanted = "FAIL tests/test_new.sh"
    measured.write_text(
        source.replace("</body>", MEASURE.replace("WANTED", json.dumps(wanted)) + "</body>")
    )
    dom = in_chromium(browser, page, tmp_path / "first-screen.png", "1280,800", dom_of=measured)
    found = re.search(r'data-assertion-bottom="(-?\d+)"', dom)
    assert found is not None, dom[-2000:]
    assert 0 < int(found.group(1)) <= 800, (found.group(1), dom[:3000])


def test_a_red_verify_on_a_terminal_shows_no_traceback_and_no_frame_stands_still(
    runs: Runs, tmp_path: Path, tmux: list[Tmux], verify_options: list[str]
) -> None:
    """`verify` of a red task on a terminal, as a person runs it (tmux): no frame of the live
    board stays unchanged for more than 5 s while it runs (each running stage's row keeps its
    clock, and a wait says what it waits for), and it ends on the verdict with no traceback."""
    options = " ".join(shlex.quote(o) for o in verify_options)
    command = (
        f"cd {ROOT} && {sys.executable} -m runner verify {runs.tasks['oracle']} {options} "
        f"--logs {tmp_path / 'logs'}; echo VERIFY-EXITED $?; sleep 600"
    )
    session = Tmux(f"red-{uuid.uuid4().hex[:8]}", command)
    tmux.append(session)
    last, since, longest = "", time.monotonic(), 0.0
    deadline = time.monotonic() + 600
    while True:
        screen, now = session.screen(), time.monotonic()
        if screen != last:
            longest = max(longest, now - since)
            last, since = screen, now
        if "VERIFY-EXITED" in screen:
            break
        assert now < deadline, screen
        time.sleep(0.2)
    assert "VERIFY-EXITED 1" in screen, screen
    assert "rejected" in screen and "fail-to-pass tests still fail" in screen, screen
    assert "Traceback" not in screen and "internal error" not in screen, screen
    assert longest <= 5.0, (longest, screen)
