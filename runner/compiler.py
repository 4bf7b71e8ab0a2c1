"""Compile an authored task into a Harbor bundle directory, and refresh one in place.

Writes go to a sibling temporary directory that replaces the target only when complete, so a
failure never leaves a half-written bundle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from runner.bundle import read_metadata
from runner.errors import InvalidTaskError
from runner.gitrepo import cached_archive, resolve_repository
from runner.render import (
    CONTEXT_DIRS,
    EXECUTABLES,
    MANIFEST,
    CompileOptions,
    RenderInput,
    render_bundle,
)
from runner.taskdir import AuthoredTask
from runner.toolchains import load_catalog

REPO_ARCHIVE = "repo.tar.gz"
# Immutable under validation repair (the seed), as recorded in task.toml [metadata].
IMMUTABLE_METADATA = {
    "difficulty": "difficulty",
    "repo": "repo",
    "baseCommit": "base_commit",
    "workdir": "workdir",
    "sourcePr": "source_pr",
    "sourceUrl": "source_url",
}


def render_input(task: AuthoredTask, options: CompileOptions) -> RenderInput:
    return RenderInput(
        definition=task.definition,
        instruction=task.instruction,
        test_patch=task.test_patch,
        gold_patch=task.gold_patch,
        tests=task.tests,
        gold=task.gold,
        digests=task.digests(),
        options=options,
    )


def _write_files(root: Path, files: dict[str, bytes]) -> None:
    for relative, content in sorted(files.items()):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.chmod(path, 0o755 if relative in EXECUTABLES else 0o644)


@contextlib.contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A temp dir beside `out`; on success it atomically takes `out`'s place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield staging
        os.chmod(staging, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / "bundle")
            os.replace(staging, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_output_dir(out: Path, task_id: str) -> None:
    """Refuse to replace a directory that is not a bundle of this task."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InvalidTaskError("output exists and is not a directory", path=str(out))
    if not any(out.iterdir()):
        return
    manifest = out / MANIFEST
    if not manifest.is_file():
        raise InvalidTaskError(
            "output directory is not empty and is not a selfbench bundle; refusing to replace it",
            path=str(out),
        )
    existing = json.loads(manifest.read_text()).get("taskId")
    if existing != task_id:
        raise InvalidTaskError(
            f"output holds the bundle of task {existing!r}, not {task_id!r}", path=str(out)
        )


def compile_task(
    task: AuthoredTask, *, repo: str | None, out: Path, options: CompileOptions
) -> Path:
    definition = task.definition
    check_output_dir(out, definition.task_id)
    repository = resolve_repository(
        repo, definition.repo, definition.base_commit, task_dir=task.directory
    )
    files = render_bundle(render_input(task, options), load_catalog())
    with _staged(out) as staging:
        _write_files(staging, files)
        archive = cached_archive(repository, definition.base_commit)
        for directory in CONTEXT_DIRS:
            shutil.copyfile(archive, staging / directory / REPO_ARCHIVE)
            os.chmod(staging / directory / REPO_ARCHIVE, 0o644)
    return out


def refresh_bundle(task: AuthoredTask, bundle: Path, options: CompileOptions) -> list[str]:
    """Rewrite every definition-derived file of `bundle`; returns the paths that changed."""
    metadata = read_metadata(bundle)
    definition = task.definition
    if metadata.get("selfbench_task_id") != definition.task_id:
        raise InvalidTaskError(
            f"bundle is task {metadata.get('selfbench_task_id')!r}, "
            f"not {definition.task_id!r}; refusing to refresh it",
            path=str(bundle),
        )
    values = definition.to_json_dict()
    for field, key in IMMUTABLE_METADATA.items():
        if key in metadata and metadata[key] != values[field]:
            raise InvalidTaskError(
                f"validation repair changed immutable definition field {field}",
                path=str(task.directory / "definition.json"),
                field=field,
            )
    instruction = bundle / "instruction.md"
    if instruction.is_file() and instruction.read_text() != task.instruction:
        raise InvalidTaskError(
            "validation repair changed immutable definition field prompt",
            path=str(task.directory),
            field="prompt",
        )
    files = render_bundle(render_input(task, options), load_catalog())
    changed = [
        name
        for name, content in sorted(files.items())
        if not (bundle / name).is_file() or (bundle / name).read_bytes() != content
    ]
    stale = [
        str(p.relative_to(bundle))
        for d in CONTEXT_DIRS
        for p in (bundle / d).rglob("*")
        if p.is_file() and p.name != REPO_ARCHIVE and str(p.relative_to(bundle)) not in files
    ]
    with _staged(bundle) as staging:
        for directory in CONTEXT_DIRS:
            (staging / directory).mkdir(parents=True)
            shutil.copyfile(bundle / directory / REPO_ARCHIVE, staging / directory / REPO_ARCHIVE)
        _write_files(staging, files)
    return changed + [f"{name} (removed)" for name in stale]
