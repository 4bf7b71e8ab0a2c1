"""The input boundary (pure): character rules, path rules, bounds and lengths for everything
that is rendered into a Dockerfile, a script, a path or a container setting.

Every check returns a message (or raises ValueError with one) that names the rule, so the
caller can attach the file and field. Nothing here reads files or runs commands.
"""

from __future__ import annotations

import ipaddress
import math
import posixpath
import re
import unicodedata

# ---- bounds (one place) ----------------------------------------------------------------------

MAX_TASK_ID = 128  # a directory name, an image repository and Harbor's `selfbench/<id>`
MAX_SHORT_TEXT = 4096  # repo, workdir, a selector, a path, a URL
MAX_COMMAND = 64 * 1024  # setupCommand, smokeCommand
MAX_TEST_COMMAND = 16 * 1024
MAX_PROMPT = 256 * 1024
MAX_LIST = 10_000  # selectors, test paths
MAX_ENV_VARS = 256
MAX_ENV_KEY = 256
MAX_ENV_VALUE = 32 * 1024
MAX_JSON_DEPTH = 64

MAX_TIMEOUT_SECONDS = 7 * 24 * 3600  # a week: more is a mistake, not a task
MAX_CPUS = 1024.0
MIN_CPUS = 0.01  # Docker's smallest CPU quota; a NanoCpus of 0 would mean "unlimited"
MIN_MEMORY_MB = 6  # Docker refuses a memory limit below 6 MB
MAX_MEMORY_MB = 4 * 1024 * 1024  # 4 TiB
MAX_STORAGE_MB = 64 * 1024 * 1024  # 64 TiB
MAX_SOURCE_PR = 2**31 - 1
MIN_PIDS_LIMIT = 32
MAX_PIDS_LIMIT = 4_194_304  # the kernel's pid_max ceiling
# A log's cap (--max-log-size, a request's maxLogBytes), and the flakiness probe's runs.
MIN_LOG_BYTES = 64 * 1024
MAX_LOG_BYTES = 1024**4
MAX_REPEAT = 10

# Files of an authored task, and the task as a whole.
MAX_DEFINITION_BYTES = 1024 * 1024
MAX_INSTRUCTION_BYTES = MAX_PROMPT
# Real pull requests' patches are kilobytes to a few megabytes; 20 MiB is ample and keeps the
# audit of the largest accepted patch in a few seconds (a 50 MB one took 28 s).
MAX_PATCH_BYTES = 20 * 1024 * 1024
MAX_TASK_BYTES = 24 * 1024 * 1024  # definition, instruction and both patches together

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SHA = re.compile(r"[0-9a-fA-F]{40}")

# Code points HFS+ ignores when comparing names: `.g\u200cit` is `.git` there (git's own
# verify_path rejects these spellings for the same reason, CVE-2014-9390).
_HFS_IGNORABLE = frozenset(
    "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u206a\u206b\u206c\u206d\u206e\u206f\ufeff"
)
_GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")


# ---- characters ------------------------------------------------------------------------------


def control_character(value: str, *, allow_newlines: bool = False) -> str | None:
    """The first forbidden character, described, or None.

    Forbidden: NUL and every other C0/C1 control character (tab and newline only where
    `allow_newlines`), DEL, Unicode line/paragraph separators, and lone surrogates (bytes that
    were not UTF-8)."""
    for index, char in enumerate(value):
        code = ord(char)
        if allow_newlines and char in "\n\t":
            continue
        if code < 0x20 or code == 0x7F or 0x80 <= code <= 0x9F or char in "\u2028\u2029":
            name = {0: "NUL", 9: "tab", 10: "newline", 13: "carriage return"}.get(code)
            label = name or f"U+{code:04X}"
            return f"contains a control character ({label}) at offset {index}"
        if 0xD800 <= code <= 0xDFFF:
            return f"is not valid UTF-8 (undecodable byte at offset {index})"
    return None


def check_text(
    value: str,
    *,
    max_length: int,
    allow_newlines: bool = False,
    allow_empty: bool = False,
) -> str | None:
    """A message when `value` breaks the text rules, else None."""
    if not allow_empty and not value.strip():
        return "must not be empty or blank"
    if len(value) > max_length:
        return f"is too long ({len(value)} characters; at most {max_length})"
    return control_character(value, allow_newlines=allow_newlines)


def require_text(
    value: str, *, max_length: int, allow_newlines: bool = False, allow_empty: bool = False
) -> str:
    """pydantic-validator form of check_text."""
    message = check_text(
        value, max_length=max_length, allow_newlines=allow_newlines, allow_empty=allow_empty
    )
    if message:
        raise ValueError(message)
    return value


# ---- paths -----------------------------------------------------------------------------------


def is_git_dir_name(component: str) -> bool:
    """`.git` in every spelling a filesystem may fold onto it: any case, trailing dots or
    spaces (NTFS), HFS+-ignorable code points, the 8.3 short name `git~1`, an NTFS stream."""
    folded = "".join(c for c in component if c not in _HFS_IGNORABLE)
    folded = unicodedata.normalize("NFC", folded).lower().rstrip(". ")
    return folded in (".git", "git~1") or folded.startswith(".git:")


def normalize_repo_path(path: str, *, base: str = ".") -> str:
    """`base/path` as a normalized repository-relative path ("." for the root).

    Raises ValueError naming the rule: absolute, escaping, `.git`, control characters,
    backslashes, or too long."""
    for value in (path, base):
        message = check_text(value, max_length=MAX_SHORT_TEXT)
        if message:
            raise ValueError(f"path {message}")
        if "\\" in value:
            raise ValueError("path must use forward slashes (contains a backslash)")
        if value.startswith("/"):
            raise ValueError(f"task path escapes repository: {value} is absolute")
    joined = posixpath.normpath(posixpath.join("/repo", base, path))
    if not (joined == "/repo" or joined.startswith("/repo/")):
        raise ValueError(f"task path escapes repository: {path}")
    relative = posixpath.relpath(joined, "/repo")
    for component in relative.split("/"):
        if is_git_dir_name(component):
            raise ValueError(f"path {path!r} is inside the repository's .git directory")
    return relative


def path_problem(path: str, *, base: str = ".") -> str | None:
    try:
        normalize_repo_path(path, base=base)
    except ValueError as exc:
        return str(exc)
    return None


def covers(parent: str, child: str) -> bool:
    """True when normalized path `parent` is `child` or one of its directories."""
    return parent in (".", child) or child.startswith(parent + "/")


def glob_escape(path: str) -> str:
    """A literal path as a git wildmatch pattern (for `git apply --exclude`): `app/[id].ts`
    would otherwise match `app/i.ts` and not itself."""
    return _GLOB_SPECIAL.sub(r"\\\1", path)


# ---- numbers ---------------------------------------------------------------------------------


def finite_number(value: float, *, low: float, high: float, low_inclusive: bool = False) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    if value < low or (value == low and not low_inclusive):
        raise ValueError(f"must be greater than {low:g}" if not low_inclusive else f">= {low:g}")
    if value > high:
        raise ValueError(f"must be at most {high:g}")
    return value


# ---- names -----------------------------------------------------------------------------------


def check_env_key(key: str) -> str | None:
    if not ENV_KEY.fullmatch(key):
        shown = key if len(key) <= 40 else key[:40] + "…"
        return (
            f"variable name {shown!r} is not a valid name ([A-Za-z_][A-Za-z0-9_]*: no spaces, "
            "no '=', not empty)"
        )
    if len(key) > MAX_ENV_KEY:
        return f"variable name is too long ({len(key)} characters; at most {MAX_ENV_KEY})"
    return None


def check_task_id(task_id: str) -> str | None:
    if len(task_id) > MAX_TASK_ID:
        return f"is too long ({len(task_id)} characters; at most {MAX_TASK_ID})"
    if not TASK_ID.fullmatch(task_id):
        return "must match ^[A-Za-z0-9][A-Za-z0-9._-]*$"
    if ".." in task_id:
        return "must not contain '..' (Harbor rejects such task names)"
    return None


def image_slug(task_id: str) -> str:
    """A Docker repository component for any task id (lower case, [a-z0-9-], bounded)."""
    slug = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:64].strip("-")
    return slug or "task"


def safe_dir_name(task_id: str) -> str:
    """A single path component for any string (run directories named after a task id that
    may come from a forged bundle): never empty, `.`/`..`, a separator or too long."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id)[:MAX_TASK_ID].strip(".")
    return cleaned or "task"


def host_problem(host: str) -> str | None:
    """An `--agent-allowed-host` entry as Harbor 0.26 accepts it: a host name (optionally
    `*.`-prefixed), an IP address or a CIDR range; no URL, port, path or control character."""
    message = check_text(host, max_length=253)
    if message:
        return f"host {message}"
    value = host.strip().lower().rstrip(".")
    if "/" in value or ":" in value:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError:
            return f"{host!r} is not a host name, IP address or CIDR range (no URLs or ports)"
        return None
    labels = value.removeprefix("*.").split(".")
    label = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
    if not all(label.fullmatch(part) for part in labels):
        return f"{host!r} is not a host name, IP address or CIDR range"
    return None
