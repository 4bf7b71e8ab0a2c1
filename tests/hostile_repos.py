"""Repositories whose own git configuration names commands: every setting git would run from a
repository it works in, each writing a marker file named after itself when it runs.

`arm(repo, markers)` sets them on a real repository (its config, an included file, its hooks
directory, its info/attributes, committed .gitattributes are the caller's part). A runner that
treats repositories as data leaves `markers` empty whatever it does with the repository.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

# Every hook git knows (githooks(5)): a runner that ran git inside the repository in any way
# that fires a hook leaves a marker.
HOOKS = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout",
    "post-merge", "pre-push", "pre-receive", "update", "proc-receive", "post-receive",
    "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite",
    "sendemail-validate", "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist",
    "p4-post-changelist", "p4-pre-submit", "post-index-change",
)  # fmt: skip


def _command(markers: Path, name: str) -> str:
    return f"sh -c 'touch {markers}/{name}; cat' #"


def _config(repo: Path, *args: str, file: Path | None = None) -> None:
    where = ["--file", str(file)] if file is not None else []
    subprocess.run(
        ["git", "config", *where, *args],
        cwd=repo,
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
    )


def git_dir(repo: Path) -> Path:
    out = subprocess.run(
        ["git", "rev-parse", "--absolute-git-dir"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return Path(out.stdout.strip())


def arm(repo: Path, markers: Path) -> list[str]:
    """Set every command-running setting on `repo`; returns the marker names they write."""
    markers.mkdir(parents=True, exist_ok=True)
    gd = git_dir(repo)
    names: list[str] = []

    def setting(key: str, name: str | None = None, *, file: Path | None = None) -> None:
        label = name or key.replace(".", "-")
        names.append(label)
        _config(repo, key, _command(markers, label), file=file)

    for key in (
        "core.fsmonitor",
        "core.pager",
        "core.editor",
        "core.sshCommand",
        "core.askPass",
        "core.gitProxy",
        "core.alternateRefsCommand",
        "credential.helper",
        "diff.external",
        "sequence.editor",
        "gpg.program",
        "uploadpack.packObjectsHook",
        "filter.evil.clean",
        "filter.evil.smudge",
        "filter.evil.process",
        "diff.evil.textconv",
        "diff.evil.command",
        "merge.evil.driver",
        "pager.log",
        "pager.diff",
        "alias.archive",
    ):
        setting(key)
    _config(repo, "filter.evil.required", "true")
    _config(repo, "gc.auto", "1")
    _config(repo, "core.untrackedCache", "true")
    # An included file carries more of the same (a runner that skips only the main file).
    included = gd / "evil-include.cfg"
    setting("core.fsmonitor", "include-core-fsmonitor", file=included)
    setting("filter.evil2.smudge", "include-filter-smudge", file=included)
    _config(repo, "include.path", str(included))
    _config(repo, "includeIf.gitdir:/.path", str(included))
    # Hooks: in the repository's hooks directory and in a hooksPath of its own.
    hooks_path = gd / "evil-hooks"
    for directory, prefix in ((gd / "hooks", "hook"), (hooks_path, "hooksPath")):
        directory.mkdir(exist_ok=True)
        for hook in HOOKS:
            script = directory / hook
            names.append(f"{prefix}-{hook}")
            script.write_text(f"#!/bin/sh\ntouch {markers}/{prefix}-{hook}\n")
            script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    _config(repo, "core.hooksPath", str(hooks_path))
    # Attributes outside the tree that name the drivers for every file.
    info = gd / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text("* filter=evil diff=evil merge=evil\n")
    return names
