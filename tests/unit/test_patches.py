"""Patch analysis through unidiff: touched paths, changed lines, manifests, path safety."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.base.validation import glob_escape, is_git_dir_name, normalize_repo_path, path_problem
from runner.compile.patches import is_manifest, parse_patch, patch_problems, repository_path
from tests.helpers import diff_of, git, make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path, _ = make_repo(
        tmp_path / "repo",
        {
            "a.txt": "a\n",
            "b.sh": "echo b\n",
            "bin.dat": b"x\x00y",
            "del.txt": "gone\n",
            "keep.txt": "1\n2\n3\n",
        },
    )
    return path


def test_every_kind_of_change_is_a_touched_file(repo: Path) -> None:
    git(repo, "mv", "a.txt", "c.txt")
    (repo / "b.sh").chmod(0o644)
    (repo / "bin.dat").write_bytes(b"x\x00z")
    (repo / "del.txt").unlink()
    (repo / "sp ace.txt").write_text("new\n")
    (repo / "caf\u00e9.txt").write_text("accent\n")
    (repo / "keep.txt").write_text("1\nTWO\n3\n")
    raw = diff_of(repo, {})
    info = parse_patch(raw)
    assert set(info.files) == {
        "a.txt",
        "c.txt",
        "b.sh",
        "bin.dat",
        "del.txt",
        "sp ace.txt",
        "caf\u00e9.txt",
        "keep.txt",
    }
    by_path = {c.path: c for c in info.changes}
    assert by_path["bin.dat"].binary
    assert by_path["del.txt"].new_path is None and by_path["del.txt"].removed_lines == 1
    assert by_path["c.txt"].old_path == "a.txt"
    assert by_path["b.sh"].changed_lines == 0
    assert by_path["keep.txt"].added_lines == 1 and by_path["keep.txt"].removed_lines == 1
    # +new, +accent, -gone, +TWO/-2
    assert info.changed_lines == 5
    assert info.subpatch(info.changes) == raw


def test_header_lines_are_not_counted() -> None:
    raw = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-+++ x\n+--- y\n keep\n"
    assert parse_patch(raw).changed_lines == 2


def test_manifest_subpatch_is_exact(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "r", {"package.json": "{}\n", "src/a.ts": "a\n"})
    raw = diff_of(
        repo,
        {"package.json": '{"x": 1}\n', "src/a.ts": "b\n", "sub/requirements-dev.txt": "pytest\n"},
    )
    info = parse_patch(raw)
    manifests = info.manifest_changes()
    assert sorted(c.path for c in manifests) == ["package.json", "sub/requirements-dev.txt"]
    sub = info.subpatch(manifests)
    assert b"src/a.ts" not in sub
    assert parse_patch(sub).files == ("package.json", "sub/requirements-dev.txt")


@pytest.mark.parametrize(
    "name",
    [
        "package.json",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "bun.lock",
        "bun.lockb",
        "pnpm-lock.yaml",
        "yarn.lock",
        "deno.lock",
        "pyproject.toml",
        "uv.lock",
        "poetry.lock",
        "Pipfile",
        "Pipfile.lock",
        "go.mod",
        "go.sum",
        "Cargo.toml",
        "Cargo.lock",
        "requirements.txt",
        "requirements-dev.txt",
        "a/b/requirements_test.txt",
        # The names the compile side's own list had lost (the helper's policy has them).
        "setup.py",
        "setup.cfg",
        "pdm.lock",
        "go.work",
        "requirements.in",
        "requirements-dev.in",
        "constraints.txt",
        "pkg/pylock.toml",
    ],
)
def test_manifest_names(name: str) -> None:
    assert is_manifest(name)


@pytest.mark.parametrize(
    "name", ["package.jsonx", "src/main.go", "requirements.py", "README", "setup.pyc"]
)
def test_not_manifests(name: str) -> None:
    assert not is_manifest(name)


@pytest.mark.parametrize(
    ("path", "base", "escapes"),
    [
        ("a/b", ".", False),
        (".", ".", False),
        ("a/../b", ".", False),
        ("..", ".", True),
        ("a/../../b", ".", True),
        ("/etc", ".", True),
        ("x", "/abs", True),
        ("../x", "sub", False),
        ("../../x", "sub", True),
    ],
)
def test_escapes_repository(path: str, base: str, escapes: bool) -> None:
    problem = path_problem(path, base=base)
    assert (problem is not None and "escapes repository" in problem) is escapes


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        (".git", True),
        (".git/config", True),
        ("a/.git/x", True),
        (".GIT/config", True),
        ("a/.Git/x", True),
        ("git~1/config", True),
        ("GIT~1", True),
        (".git./x", True),
        (".git /x", True),
        (".g\u200cit/config", True),
        (".git::$INDEX_ALLOCATION/x", True),
        (".github/x", False),
        ("a/.gitignore", False),
        ("git/x", False),
    ],
)
def test_git_dir_in_every_spelling(path: str, inside: bool) -> None:
    assert any(is_git_dir_name(c) for c in path.split("/")) is inside
    problem = path_problem(path)
    assert (problem is not None and ".git directory" in problem) is inside


@pytest.mark.parametrize(
    ("path", "normal"),
    [("./tests/x", "tests/x"), ("tests//x", "tests/x"), ("tests/x/", "tests/x"), ("a/./b", "a/b")],
)
def test_paths_normalize(path: str, normal: str) -> None:
    assert normalize_repo_path(path) == normal


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("a\nb", "control character (newline)"),
        ("a\x00b", "control character (NUL)"),
        ("a\\b", "backslash"),
        ("", "empty"),
        ("x" * 5000, "too long"),
        ("caf\udce9", "not valid UTF-8"),
    ],
)
def test_path_character_rules(path: str, message: str) -> None:
    problem = path_problem(path)
    assert problem is not None and message in problem


def test_glob_escape_makes_literal_patterns() -> None:
    assert glob_escape("app/[id]/page.ts") == "app/\\[id\\]/page.ts"
    assert glob_escape("a*b?c") == "a\\*b\\?c"
    assert glob_escape("plain/path.py") == "plain/path.py"


def test_repository_path() -> None:
    assert repository_path(".", "tests/a.py") == "tests/a.py"
    assert repository_path("pkg", "tests/a.py") == "pkg/tests/a.py"
    assert repository_path("pkg", "../other/t.py") == "other/t.py"


def section(body: str) -> bytes:
    return body.encode()


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (
            "diff --git a/x b/x\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
            "+++ b/x\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
            "symlink target '/etc/passwd' leaves the repository",
        ),
        (
            "diff --git a/d/x b/d/x\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
            "+++ b/d/x\n@@ -0,0 +1 @@\n+../../..\n\\ No newline at end of file\n",
            "symlink target '../../..' leaves the repository",
        ),
        (
            "diff --git a/sub b/sub\nnew file mode 160000\nindex 0000000..1111111\n--- /dev/null\n"
            "+++ b/sub\n@@ -0,0 +1 @@\n+Subproject commit " + "1" * 40 + "\n",
            "submodules (gitlinks, mode 160000) are not supported",
        ),
        (
            "diff --git a/a b/a\nsimilarity index 100%\nrename from a\nrename to ../../etc/x\n",
            "task path escapes repository: ../../etc/x",
        ),
        (
            "diff --git a/a b/a\nsimilarity index 100%\ncopy from /etc/passwd\ncopy to a2\n",
            "task path escapes repository: /etc/passwd is absolute",
        ),
        ("diff --git a/.GIT/config b/.GIT/config\n--- a/.GIT/config\n+++ b/.GIT/config\n", ".git"),
        ("diff --git a/f b/f\n", "changes nothing"),
        ("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ garbage @@\n+x\n", "changes nothing"),
        ("diff --git a/f b/f\n\x89PNG\x00\x01random", "changes nothing"),
        ("diff --git a/f b/f\nBinary files a/f and b/f differ\n", "binary change without data"),
        (
            "diff --git a/tests//x b/tests//x\n--- a/tests//x\n+++ b/tests//x\n"
            "@@ -1 +1 @@\n-a\n+b\n",
            "not in normal form (tests/x)",
        ),
        (
            "diff --git a/f b/f\nold mode 100644\nnew mode 100777\n",
            "unsupported file mode 100777",
        ),
    ],
)
def test_unsafe_or_empty_sections_are_refused(raw: str, problem: str) -> None:
    problems = patch_problems(parse_patch(raw.encode("utf-8", "surrogateescape")))
    assert any(problem in p for p in problems), problems


def test_real_changes_pass_the_rules(repo: Path) -> None:
    git(repo, "mv", "a.txt", "c.txt")
    (repo / "b.sh").chmod(0o755)
    (repo / "bin.dat").write_bytes(b"x\x00z")
    (repo / "link").symlink_to("keep.txt")
    (repo / "empty.txt").write_text("")
    raw = diff_of(repo, {})
    assert patch_problems(parse_patch(raw)) == []


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            "@@ -1,3 +1,3 @@\n-a\n+b\n",
            "hunk 1 (@@ -1,3 +1,3 @@) declares 3 old and 3 new lines but holds 1 and 1",
        ),
        # Longer than its header: git applies the first lines and drops the rest unread.
        (
            "@@ -1 +1 @@\n-a\n+b\n+c\n+d\n",
            "line 7 of the section ('+c') lies after hunk 1 outside what any hunk header counts",
        ),
        (
            "@@ -1 +1 @@\n-a\n+b\n+c\n@@ -9 +9 @@\n-q\n+r\n",
            "line 7 of the section ('+c') lies after hunk 1 outside what any hunk header counts",
        ),
        (
            "@@ -1,2 +1,2 @@\n-a\n+b\n c\n@@ -5,0 +5,2 @@\n+x\n",
            "hunk 2 (@@ -5,0 +5,2 @@) declares 0 old and 2 new lines but holds 0 and 1",
        ),
    ],
)
def test_hunks_that_disagree_with_their_headers_are_named(body: str, problem: str) -> None:
    raw = f"diff --git a/f b/f\n--- a/f\n+++ b/f\n{body}".encode()
    (change,) = parse_patch(raw).changes
    assert change.hunk_problems == (problem,)
    assert change.path == "f"


def test_hunks_that_agree_have_no_problem() -> None:
    raw = (
        b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n\n"
        b"@@ -10 +10,2 @@\n-x\n+y\n+z\n\\ No newline at end of file\n"
    )
    (change,) = parse_patch(raw).changes
    assert change.hunk_problems == ()
    assert (change.hunks, change.added_lines, change.removed_lines) == (2, 3, 2)


def test_a_patch_that_does_not_apply_names_its_hunk_and_how_to_see_it(tmp_path: Path) -> None:
    """The audit's message for a refused patch: the file, the hunk that did not match (its
    number and header), what git looked for, and the command that shows every hunk."""
    from runner.compile.repocheck import apply_failure, check_repository

    base = "".join(f"line {n}\n" for n in range(1, 41))
    repo, commit = make_repo(tmp_path / "repo", {"lib.py": base, "t.py": "x = 1\n"})
    changed = base.replace("line 3\n", "line three\n").replace("line 30\n", "line thirty\n")
    gold = diff_of(repo, {"lib.py": changed})
    # The base moves on under the patch: its second hunk no longer matches.
    git(repo, "checkout", "-q", commit)
    (repo / "lib.py").write_text(base.replace("line 30\n", "line 30 (edited)\n"))
    git(repo, "commit", "-qam", "moved on")
    moved = git(repo, "rev-parse", "HEAD").strip()
    facts = check_repository(
        repo / ".git",
        moved,
        workdir=".",
        test_patch=diff_of(repo, {"t.py": "x = 2\n"}),
        gold_patch=gold,
    )
    (problem,) = facts.apply_problems
    assert problem.startswith(
        "gold.patch does not apply to baseCommit: hunk 2 of 2 in lib.py (@@ -27,7 +27,7 @@"
    )
    assert "git looked for: line 27 / line 28 / line 29" in problem
    assert problem.endswith(
        f"in a checkout of baseCommit ({moved[:12]}): git apply --check -v gold.patch"
    )
    # The held-out tests on top of the gold patch, as the oracle applies them.
    clash = diff_of(repo, {"lib.py": base.replace("line 3\n", "line III\n")})
    on_gold = diff_of(repo, {"lib.py": changed.replace("line 30\n", "line 30 (edited)\n")})
    facts = check_repository(
        repo / ".git", moved, workdir=".", test_patch=clash, gold_patch=on_gold
    )
    (problem,) = facts.apply_problems
    assert problem.startswith(
        "test.patch does not apply on top of gold.patch: hunk 1 of 2 in lib.py"
    )
    assert problem.endswith("git apply gold.patch && git apply --check -v test.patch")
    # git's own words when it names no hunk (the file is not there at all).
    assert apply_failure("error: nope.py: No such file or directory\n", gold) == (
        "error: nope.py: No such file or directory"
    )
