"""`evaluate`'s input: an agent's predictions, as SWE-bench writes them (JSON lines of
`instance_id`, `model_name_or_path`, `model_patch`) or as a directory of `<taskId>.patch` files.
Each patch is kept by its content under the evaluation's patches/ as it is read (never read
again from the input), and each prediction is named by its task and its model.

Bad input is named by FILE:LINE and field, one problem per line of input; what is good is still
read."""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from runner.base.errors import InvalidTaskError, Problem, UsageError, printable
from runner.base.safeio import os_error_text, read_regular, size_words, write_atomic
from runner.model.settings import MAX_AGENT_PATCH_BYTES

# A predictions file holds at most this many lines (a patch each, at most the agent patch
# limit): what a benchmark of thousands of tasks writes, not a stream without an end.
MAX_PREDICTIONS = 100_000
# A line holds a patch as JSON text: escaped, it may take twice its bytes.
MAX_LINE_BYTES = 2 * MAX_AGENT_PATCH_BYTES + 64 * 1024
PATCH_SUFFIX = ".patch"
_INSTANCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """One instance to grade: the task it names, the model that wrote it, its patch (kept by
    content under the evaluation's patches/, never read again from the input), and where it
    was read (FILE:LINE, or the patch file)."""

    instance_id: str
    model: str
    patch_sha256: str
    patch_bytes: int
    patch: Path
    where: str
    empty: bool = False  # nothing but whitespace: not run (SWE-bench counts it apart too)

    @property
    def name(self) -> tuple[str, str]:
        """What names a prediction: its task and its model (several models, or several samples
        of one, may predict the same task in one file)."""
        return (self.instance_id, self.model)


def result_key(bundle_digest: str, prediction: Prediction, options: Sequence[str] = ()) -> str:
    """The result's name: what was graded (the bundle's sealed content), with what patch, for
    which model, and how (grade's options: a result of `--reward-only` or of the canaries alone
    is not one of the defaults)."""
    parts = "\0".join([bundle_digest, prediction.patch_sha256, prediction.model, *options])
    return hashlib.sha256(parts.encode()).hexdigest()


def keep_patch(patches: Path, data: bytes) -> tuple[str, Path]:
    """`data` at patches/<sha256>.patch, written each time it is read: a file already there
    is never taken for it (whatever put it there)."""
    digest = hashlib.sha256(data).hexdigest()
    path = patches / f"{digest}{PATCH_SUFFIX}"
    write_atomic(path, data, durable=False)
    return digest, path


def _kept(instance: str, model: str, data: bytes, patches: Path, where: str) -> Prediction:
    """A prediction whose patch is kept by its digest under `patches`."""
    digest, path = keep_patch(patches, data)
    return Prediction(
        instance_id=instance,
        model=model,
        patch_sha256=digest,
        patch_bytes=len(data),
        patch=path,
        where=where,
        empty=not data.strip(),
    )


def _problem(where: str, field: str | None, message: str) -> Problem:
    # A file's name may hold bytes that are not UTF-8, or control characters: shown escaped.
    return Problem(file=printable(where), field=field, message=message)


def _text_problem(text: str) -> str | None:
    """Why `text` cannot name a model (None when it can)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (a lone surrogate)"
    if not text.isprintable():
        return "holds control or other unprintable characters"
    return None


def _prediction(document: object, where: str, patches: Path) -> Prediction | Problem:
    if not isinstance(document, dict):
        return _problem(where, None, "is not a JSON object")
    instance = document.get("instance_id")
    if not isinstance(instance, str) or not _INSTANCE_ID.fullmatch(instance):
        return _problem(where, "instance_id", "must be a task id ([A-Za-z0-9._-], at most 128)")
    model = document.get("model_name_or_path")
    model = "" if model is None else model
    if not isinstance(model, str) or len(model) > 256:
        return _problem(where, "model_name_or_path", "must be text of at most 256 characters")
    problem = _text_problem(model)
    if problem is not None:
        return _problem(where, "model_name_or_path", problem)
    patch = document.get("model_patch")
    if patch is None:
        patch = ""
    if not isinstance(patch, str):
        return _problem(where, "model_patch", "must be a string (the unified diff) or null")
    try:
        data = patch.encode("utf-8")
    except UnicodeEncodeError:
        return _problem(where, "model_patch", "is not valid Unicode text (a lone surrogate)")
    if len(data) > MAX_AGENT_PATCH_BYTES:
        return _problem(where, "model_patch", f"is larger than {size_words(MAX_AGENT_PATCH_BYTES)}")
    return _kept(instance, model, data, patches, where)


def _lines(handle: IO[bytes]) -> Iterator[bytes | None]:
    """The file's lines, each read at most MAX_LINE_BYTES at a time: None for a longer one
    (skipped to its end, never held whole)."""
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = handle.readline(MAX_LINE_BYTES + 1)
            yield None
        else:
            yield raw


def read_jsonl(path: Path, patches: Path) -> tuple[list[Prediction], list[Problem]]:
    """Every prediction of a JSON-lines file, and a problem for each line that is not one (a
    duplicate instance id names the line that gave it first)."""
    predictions: list[Prediction] = []
    problems: list[Problem] = []
    first: dict[tuple[str, str], str] = {}
    with _open_regular(path) as handle:
        for number, raw in enumerate(_lines(handle), start=1):
            where = f"{path}:{number}"
            if number > MAX_PREDICTIONS:
                problems.append(_problem(where, None, f"more than {MAX_PREDICTIONS} lines"))
                break
            if raw is None:
                problems.append(_problem(where, None, f"is longer than {MAX_LINE_BYTES} bytes"))
                continue
            if not raw.strip():
                continue
            try:
                document = json.loads(raw)
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                reason = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc)[:120]
                problems.append(_problem(where, None, f"is not JSON ({reason})"))
                continue
            item = _prediction(document, where, patches)
            if isinstance(item, Problem):
                problems.append(item)
            elif item.name in first:
                problems.append(
                    _problem(
                        where,
                        "instance_id",
                        f"is predicted twice by this model (first at {first[item.name]})",
                    )
                )
            else:
                first[item.name] = where
                predictions.append(item)
    return predictions, problems


def read_patch_directory(path: Path, patches: Path) -> tuple[list[Prediction], list[Problem]]:
    """Every `<taskId>.patch` of a directory (the model is the directory's name); hidden
    files are passed over, anything else is a problem."""
    predictions: list[Prediction] = []
    problems: list[Problem] = []
    model = printable(path.resolve().name)
    with os.scandir(path) as listing:
        names = list(itertools.islice(listing, MAX_PREDICTIONS + 1))
    if len(names) > MAX_PREDICTIONS:
        message = f"holds more than {MAX_PREDICTIONS} entries: none is read"
        return [], [_problem(str(path), None, message)]
    entries = sorted((e for e in names if not e.name.startswith(".")), key=lambda e: e.name)
    for entry in entries:
        where = str(Path(path, entry.name))
        instance = entry.name.removesuffix(PATCH_SUFFIX)
        if not entry.name.endswith(PATCH_SUFFIX) or not _INSTANCE_ID.fullmatch(instance):
            problems.append(_problem(where, None, "is not a <taskId>.patch file"))
            continue
        try:
            data = read_regular(Path(entry.path), limit=MAX_AGENT_PATCH_BYTES)
        except InvalidTaskError as exc:
            problems.append(_problem(where, None, exc.message))
            continue
        predictions.append(_kept(instance, model, data, patches, where))
    return predictions, problems


def read_predictions(path: Path, patches: Path) -> tuple[list[Prediction], list[Problem]]:
    """A JSON-lines file or a directory of patches. Raises UsageError when `path` is neither."""
    patches.mkdir(parents=True, exist_ok=True)
    try:
        if path.is_dir():
            return read_patch_directory(path, patches)
        return read_jsonl(path, patches)
    except OSError as exc:
        raise UsageError(os_error_text(exc), path=str(path), field="--predictions") from None


def _open_regular(path: Path) -> IO[bytes]:
    """`path` opened for reading only if it is a regular file (never a FIFO that blocks, a
    device, or a final link)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
