"""What a finished verifier left behind (its /logs/verifier, copied out), read back once into
one VerifierEvidence: the reward and its details, each test run's evidence, what the patch policy
did and undid, each selector run alone, and the lines of a log worth quoting. Nothing else reads
a verifier's files."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from runner.base.errors import InvalidTaskError
from runner.base.safeio import optional_regular
from runner.model.evidence import (
    EVIDENCE_DIR,
    MAX_EVIDENCE_BYTES,
    POLICY_FILE,
    PolicyChange,
    RunEvidence,
    SelectorResult,
    VerifierEvidence,
    parse_policy,
    parse_run,
)
from runner.model.reward import (
    DETAILS_FILE,
    DISCARDED_FILE,
    PASS_TO_PASS_SELECTORS_FILE,
    REWARD_FILE,
    SELECTORS_FILE,
    Reward,
    RewardError,
    VerifierDetails,
    parse_details,
    parse_reward,
)

log = logging.getLogger(__name__)

# A verifier's documents are its own (root's, written outside the tests' reach), but a task's
# tests decide how many runs there are: bounded all the same.
MAX_RUNS = 64
MAX_REWARD_BYTES = 1024 * 1024
QUOTED_LOGS = ("fail_to_pass", "pass_to_pass")


def read_verifier(directory: Path) -> VerifierEvidence:
    """Everything a verifier left in `directory`, read once (an empty evidence when it left
    nothing: the verifier never ran)."""
    reward, details, problem, files = _reward(directory)
    return VerifierEvidence(
        reward=reward,
        details=details,
        reward_problem=problem,
        files=files,
        runs=_runs(directory),
        policy=tuple(_policy(directory)),
        discarded=tuple(_discarded(directory)),
        selectors=tuple(_selectors(directory)),
        pass_to_pass_selectors=tuple(_selectors(directory, name=PASS_TO_PASS_SELECTORS_FILE)),
        last_lines={name: last_line(directory / f"{name}.log") for name in QUOTED_LOGS},
    )


def _read(path: Path, limit: int) -> bytes | None:
    """A verifier's file, or None when it is absent or not a regular file within `limit`
    (said in the log: what the rules then see is a run that left nothing)."""
    try:
        return optional_regular(path, limit=limit)
    except InvalidTaskError as exc:
        log.warning("%s", exc.one_line())
        return None


def _reward(
    directory: Path,
) -> tuple[Reward | None, VerifierDetails | None, str | None, tuple[str, ...]]:
    try:
        raw = optional_regular(directory / REWARD_FILE, limit=MAX_REWARD_BYTES)
    except InvalidTaskError as exc:
        return None, None, exc.one_line(), ()
    if raw is None:
        return None, None, None, ()
    files = [str(directory / REWARD_FILE)]
    try:
        reward = parse_reward(raw)
    except RewardError as exc:
        return None, None, str(exc), tuple(files)
    details = None
    raw = _read(directory / DETAILS_FILE, MAX_REWARD_BYTES)
    if raw is not None:
        files.append(str(directory / DETAILS_FILE))
        try:
            details = parse_details(raw)
        except RewardError as exc:
            log.warning("%s: %s", directory / DETAILS_FILE, exc)
    return reward, details, None, tuple(files)


def _runs(directory: Path) -> dict[str, RunEvidence]:
    folder = directory / EVIDENCE_DIR
    if not folder.is_dir():
        return {}
    runs: dict[str, RunEvidence] = {}
    for path in sorted(folder.glob("*.json"))[:MAX_RUNS]:
        raw = _read(path, MAX_EVIDENCE_BYTES)
        run = parse_run(raw) if raw is not None else None
        if run is not None:
            runs[path.stem] = run
    return runs


def _policy(directory: Path) -> list[PolicyChange]:
    raw = _read(directory / POLICY_FILE, MAX_EVIDENCE_BYTES)
    return parse_policy(raw) if raw is not None else []


def _discarded(directory: Path, limit: int = 200) -> list[str]:
    """The harness paths test.sh undid (discarded.txt), at most `limit`."""
    try:
        with (directory / DISCARDED_FILE).open(encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for _, line in zip(range(limit), handle, strict=False)]
    except OSError:
        return []


def _selectors(
    directory: Path, limit: int = 64, name: str = SELECTORS_FILE
) -> list[SelectorResult]:
    """selectors.tsv: each fail-to-pass selector run alone and its exit code (or, by name, the
    pass-to-pass ones)."""
    results = []
    try:
        with (directory / name).open(encoding="utf-8", errors="replace") as handle:
            for _, line in zip(range(limit), handle, strict=False):
                code, _, selector = line.rstrip("\n").partition("\t")
                if code.lstrip("-").isdigit() and selector:
                    results.append(SelectorResult(selector=selector, exit_code=int(code)))
    except OSError:
        pass
    return results


def last_meaningful(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in tail_lines(path) if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


_ERRORISH = re.compile(
    r"error|exception|traceback|refused|could not|cannot|not found|no such|denied|timed? ?out",
    re.IGNORECASE,
)


def last_line(path: Path) -> str:
    """The line worth quoting from a failed test command's log: the last error-looking line of
    its last 20 lines (a runner's summary such as "FAIL tests/x" often comes after the cause),
    else the last line; never the runner's own markers."""
    lines = [
        " ".join(line.split())
        for line in tail_lines(path, size=16 * 1024)
        if line.strip() and not line.startswith("[selfbench:")
    ][-20:]
    for line in reversed(lines):
        if _ERRORISH.search(line):
            return line
    return lines[-1] if lines else ""


def log_text(path: Path, size: int = 32 * 1024 * 1024) -> str:
    """A log the runner wrote (capped at the run's max log bytes, its head and tail), as text:
    at most its last `size` bytes; empty when it cannot be read."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - size))
            return handle.read(size).decode("utf-8", "replace")
    except OSError:
        return ""


def tail_lines(path: Path, size: int = 64 * 1024) -> list[str]:
    return log_text(path, size).splitlines()
