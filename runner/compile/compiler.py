"""Compile an authored task into a Harbor bundle directory, and refresh one in place.

Writes go to a sibling temporary directory that replaces the target only when complete, so a
failure never leaves a half-written bundle. An existing target is replaced only when it holds
nothing but this task's bundle: output is never destroyed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.base import validation as v
from runner.base.errors import InvalidInputError, InvalidTaskError, Problem
from runner.base.safeio import optional_regular, read_regular
from runner.compile.canaries import task_canaries
from runner.compile.coupling import candidates
from runner.compile.render import (
    CANARIES_FILE,
    CONTEXT_DIRS,
    RenderInput,
    executable_files,
    render_bundle,
    shell_scripts,
)
from runner.compile.repocheck import RepositoryFacts, SelectorCheck, check_repository
from runner.compile.repository import cached_archive, resolve_repository
from runner.compile.taskdir import DEFINITION, AuthoredTask, parse_json_object
from runner.model.harbor import read_task_toml
from runner.model.layout import MANIFEST_FILE
from runner.model.settings import CompileOptions
from runner.model.shell import expand_tests
from runner.model.task import TaskDefinition
from runner.model.toolchains import load_catalog
from runner.runners import selector_paths

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
# What a bundle directory may hold: anything else in an output directory is someone's data.
BUNDLE_PATTERNS = (
    "task.toml",
    "instruction.md",
    MANIFEST_FILE,
    "environment",
    "tests",
    "solution",
    "solution/solve.sh",
    "solution/gold.patch",
    "*/Dockerfile",
    "*/" + REPO_ARCHIVE,
    "*/setup.sh",
    "*/smoke.sh",
    "*/root-setup.sh",
    "tests/docker-compose.yaml",
    "*/toolchains",
    "*/toolchains/*.sh",
    "tests/test.sh",
    "tests/test.patch",
    "tests/dependency-setup.patch",
    "tests/selfbench-task.json",
    "tests/expected-tests.json",
    "tests/canaries.json",
    "tests/selfbench",
    "tests/selfbench/*",
)


@dataclass(frozen=True, kw_only=True)
class CompileResult:
    bundle: Path
    repository: RepositoryFacts


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


def _write_files(root: Path, files: Mapping[str, bytes]) -> None:
    executables = executable_files(files)
    for relative, content in sorted(files.items()):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.chmod(path, 0o755 if relative in executables else 0o644)


@contextlib.contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A temp dir beside `out`; on success it atomically takes `out`'s place."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise InvalidTaskError(
            f"cannot write the bundle here: {exc.strerror or exc}", path=str(out)
        ) from None
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


def foreign_entries(out: Path) -> list[str]:
    """Entries of `out` that no bundle holds (walks without following links)."""
    foreign: list[str] = []
    for directory, dirnames, filenames in os.walk(out):
        for name in [*dirnames, *filenames]:
            relative = (Path(directory) / name).relative_to(out).as_posix()
            if not any(fnmatch.fnmatchcase(relative, p) for p in BUNDLE_PATTERNS):
                foreign.append(relative)
        dirnames[:] = [
            d for d in dirnames if (Path(directory, d).relative_to(out).as_posix()) not in foreign
        ]
    return sorted(foreign)


def check_output_dir(out: Path, task_id: str) -> None:
    """Refuse to replace a directory that is not a bundle of this task and only that."""
    if out.is_symlink():
        raise InvalidTaskError("output is a symbolic link; refusing to replace it", path=str(out))
    if not out.exists():
        return
    if not out.is_dir():
        raise InvalidTaskError("output exists and is not a directory", path=str(out))
    if not any(out.iterdir()):
        return
    manifest = out / MANIFEST_FILE
    if not manifest.is_file() or manifest.is_symlink():
        raise InvalidTaskError(
            "output directory is not empty and is not a selfbench bundle; refusing to replace it",
            path=str(out),
        )
    try:
        existing = parse_json_object(read_regular(manifest, limit=1024 * 1024), manifest).get(
            "taskId"
        )
    except InvalidTaskError:
        raise InvalidTaskError(
            "output directory holds an unreadable bundle manifest; refusing to replace it",
            path=str(out),
        ) from None
    if existing != task_id:
        raise InvalidTaskError(
            f"output holds the bundle of task {str(existing)[:80]!r}, not {task_id!r}",
            path=str(out),
        )
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise InvalidTaskError(
            f"output directory holds files that are not part of a bundle ({shown}); "
            "refusing to replace it",
            path=str(out),
        )


# Which definition field a rendered script's syntax comes from.
_SCRIPT_FIELDS = {
    "setup.sh": "setupCommand",
    "smoke.sh": "environment.smokeCommand",
    "root-setup.sh": "environment.rootSetupCommand",
}


def _bash_syntax(source: bytes, *, command: bool = False) -> str | None:
    args = (
        ["bash", "-n", "-c", source.decode("utf-8", "surrogateescape")]
        if command
        else [
            "bash",
            "-n",
        ]
    )
    try:
        result = subprocess.run(
            args,
            input=None if command else source,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not be checked with bash -n ({exc})"
    if result.returncode == 0:
        return None
    lines = result.stderr.decode(errors="replace").strip().splitlines()
    return lines[0] if lines else f"bash -n exited {result.returncode}"


def check_scripts(task: AuthoredTask, files: Mapping[str, bytes]) -> None:
    """`bash -n` every rendered script and each expanded test command; a syntax error is
    reported against the definition field it came from."""
    definition_path = str(task.directory / DEFINITION)
    problems: list[Problem] = []
    seen: set[str] = set()
    for name in shell_scripts(files):
        base = name.rsplit("/", 1)[-1]
        field = _SCRIPT_FIELDS.get(base)
        if field in seen:
            continue
        error = _bash_syntax(files[name])
        if error is None:
            continue
        if field is None:
            raise RuntimeError(f"selfbench-runner rendered an invalid {name}: {error}")
        seen.add(field)
        problems.append(
            Problem(file=definition_path, field=field, message=f"is not valid bash: {error}")
        )
    definition = task.definition
    for selectors in (definition.fail_to_pass, definition.pass_to_pass):
        if not selectors:
            continue
        error = _bash_syntax(
            expand_tests(definition.test_command, selectors).encode(), command=True
        )
        if error is not None:
            problems.append(
                Problem(
                    file=definition_path, field="testCommand", message=f"is not valid bash: {error}"
                )
            )
            break
    if problems:
        raise InvalidInputError(problems)


def evidence_paths(definition: TaskDefinition) -> list[str]:
    contract = definition.environment
    return [v.normalize_repo_path(e.path) for e in contract.evidence] if contract else []


def selector_checks(definition: TaskDefinition) -> list[SelectorCheck]:
    """Every path-like selector, for check_repository."""
    checks: list[SelectorCheck] = []
    for field, selectors in (
        ("failToPass", definition.fail_to_pass),
        ("passToPass", definition.pass_to_pass),
    ):
        for index, path, names in selector_paths(
            definition.test_command, definition.workdir_path, list(selectors)
        ):
            label = f"{field}[{index}]: selector {selectors[index]!r}"
            checks.append(SelectorCheck(label=label, path=path, names=tuple(names)))
    return checks


def render_checked(task: AuthoredTask, options: CompileOptions) -> dict[str, bytes]:
    files = render_bundle(render_input(task, options), load_catalog())
    check_scripts(task, files)
    return files


def task_facts(task: AuthoredTask, repository: Path) -> RepositoryFacts:
    """What the base commit says about the task: its workdir, both patches applying, the
    evidence and selector paths, and the names the coupling evidence looks for."""
    definition = task.definition
    return check_repository(
        repository,
        definition.base_commit,
        workdir=definition.workdir_path,
        test_patch=task.test_patch,
        gold_patch=task.gold_patch,
        evidence=evidence_paths(definition),
        coupling_needles=candidates(task.tests, task.gold, task.instruction),
        selectors=selector_checks(definition),
    )


def compile_task(
    task: AuthoredTask, *, repo: str | None, out: Path, options: CompileOptions
) -> CompileResult:
    definition = task.definition
    check_output_dir(out, definition.task_id)
    files = render_checked(task, options)
    repository = resolve_repository(
        repo, definition.repo, definition.base_commit, task_dir=task.directory
    )
    facts = task_facts(task, repository)
    if not facts.apply_problems:
        files[CANARIES_FILE] = task_canaries(task, repository).to_json().encode()
    archive = cached_archive(repository, definition.base_commit)
    with _staged(out) as staging:
        _write_files(staging, files)
        for directory in CONTEXT_DIRS:
            shutil.copyfile(archive, staging / directory / REPO_ARCHIVE)
            os.chmod(staging / directory / REPO_ARCHIVE, 0o644)
    return CompileResult(bundle=out, repository=facts)


def refresh_bundle(task: AuthoredTask, bundle: Path, options: CompileOptions) -> list[str]:
    """Rewrite every definition-derived file of `bundle`; returns the paths that changed."""
    config = read_task_toml(bundle)
    metadata = config.metadata.model_dump(mode="json")
    definition = task.definition
    if config.task_id != definition.task_id:
        raise InvalidTaskError(
            f"bundle is task {config.task_id!r}, not {definition.task_id!r}; refusing to "
            "refresh it",
            path=str(bundle),
        )
    foreign = foreign_entries(bundle)
    if foreign:
        raise InvalidTaskError(
            f"bundle holds files that are not part of a bundle ({', '.join(foreign[:5])}); "
            "refusing to refresh it",
            path=str(bundle),
        )
    values = definition.to_json_dict()
    for field, key in IMMUTABLE_METADATA.items():
        if metadata[key] != values[field]:
            raise InvalidTaskError(
                f"validation repair changed immutable definition field {field}",
                path=str(task.directory / DEFINITION),
                field=field,
            )
    instruction = read_regular(bundle / "instruction.md", limit=1024 * 1024)
    if instruction != task.instruction.encode():
        raise InvalidTaskError(
            "validation repair changed immutable definition field prompt",
            path=str(task.directory),
            field="prompt",
        )
    files = render_checked(task, options)
    # The canaries came from the repository at compile time; a refresh has none at hand.
    kept = optional_regular(bundle / CANARIES_FILE, limit=64 * 1024 * 1024)
    if kept is not None:
        files[CANARIES_FILE] = kept
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
