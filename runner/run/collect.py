"""What a finished verifier left behind, read back: which paths the patch policy undid, what
each selector did alone, the reward, and the lines of a log worth quoting."""

from __future__ import annotations

import re
from pathlib import Path

from runner.model.report import (
    SelectorResult,
)
from runner.model.reward import (
    DISCARDED_FILE,
    SELECTORS_FILE,
)


def discarded(directory: Path, limit: int = 200) -> list[str]:
    """The harness paths test.sh undid (discarded.txt), at most `limit`."""
    try:
        with (directory / DISCARDED_FILE).open(encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for _, line in zip(range(limit), handle, strict=False)]
    except OSError:
        return []


def selectors(directory: Path, limit: int = 64, name: str = SELECTORS_FILE) -> list[SelectorResult]:
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


def tail_lines(path: Path, size: int = 64 * 1024) -> list[str]:
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            end = handle.tell()
            handle.seek(max(0, end - size))
            data = handle.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()
