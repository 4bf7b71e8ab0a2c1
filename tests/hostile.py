"""A generated corpus of hostile inputs: authored task directories and forged compiled bundles
that break the task contract in every way seen so far (and the same ways on every field).

Each case makes itself under a directory it is given, next to one shared, real git repository,
and names the command-line path to run on. tests/unit/test_hostile.py runs `audit`, `compile`
and (for bundles) `verify --plan` on all of them and checks the input boundary's promises.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.helpers import LIB_BASE, LIB_GOLD, RUNNER_SH, definition, diff_of, make_repo

Kind = Literal["task", "bundle"]


@dataclass(frozen=True)
class Fixture:
    """The shared inputs every case starts from: a repository and a valid task's parts."""

    repo: Path
    commit: str
    test_patch: bytes
    gold_patch: bytes
    bundle: Path  # a valid compiled bundle of the same task

    def definition(self, **overrides: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "taskId": "hostile-task",
            "repo": str(self.repo),
            "baseCommit": self.commit,
            **overrides,
        }
        return definition(**fields)


@dataclass(frozen=True)
class Case:
    name: str
    category: str
    kind: Kind
    make: Callable[[Fixture, Path], Path]  # builds the case under a directory, returns target
    # A fragment the error output must contain (a regression for a bullet of the issue).
    expect: str | None = None
    # The exit code `audit` must give (1: a blocker, 2: invalid input), when it is decided.
    audit_code: int | None = None


def make_fixture(root: Path) -> Fixture:
    from runner.compile.compiler import compile_task
    from runner.compile.taskdir import load_authored_task
    from runner.model.settings import CompileOptions

    repo, commit = make_repo(
        root / "repo",
        {
            "lib.sh": LIB_BASE,
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
            "package.json": '{"name": "x"}\n',
        },
    )
    test_patch = diff_of(repo, {"tests/test_new.sh": '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n'})
    gold_patch = diff_of(repo, {"lib.sh": LIB_GOLD})
    task = root / "valid-task"
    write(
        task,
        definition(taskId="hostile-task", repo=str(repo), baseCommit=commit),
        test_patch,
        gold_patch,
    )
    bundle = compile_task(
        load_authored_task(task), repo=None, out=root / "valid-bundle", options=CompileOptions()
    ).bundle
    return Fixture(
        repo=repo, commit=commit, test_patch=test_patch, gold_patch=gold_patch, bundle=bundle
    )


def write(
    directory: Path,
    doc: dict[str, Any] | bytes,
    test_patch: bytes,
    gold_patch: bytes,
    instruction: bytes | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    raw = doc if isinstance(doc, bytes) else json.dumps(doc, indent=2).encode()
    (directory / "definition.json").write_bytes(raw)
    (directory / "test.patch").write_bytes(test_patch)
    (directory / "gold.patch").write_bytes(gold_patch)
    if instruction is not None:
        (directory / "instruction.md").write_bytes(instruction)
    return directory


# ---- values ----------------------------------------------------------------------------------

GENERIC: list[tuple[str, Any]] = [
    ("null", None),
    ("true", True),
    ("zero", 0),
    ("negative", -1),
    ("fraction", 1.5),
    ("huge-int", 10**20),
    ("enormous-int", 10**400),
    ("empty", ""),
    ("blank", "   "),
    ("newline", "a\nRUN touch /pwned"),
    ("carriage-return", "a\rb"),
    ("nul", "a\x00b"),
    ("escape", "a\x1b[31mred"),
    ("line-separator", "a\u2028b"),
    ("long-300", "a" * 300),
    ("long-70k", "b" * 70_000),
    ("list", ["x"]),
    ("object", {"a": 1}),
    ("subshell", "$(touch /tmp/pwned)"),
    ("backticks", "`touch /tmp/pwned`"),
    ("quotes", "'\"\\"),
    ("unicode", "caf\u00e9 \u4e2d"),
]

PATHS: list[tuple[str, Any]] = [
    ("dotdot", ".."),
    ("parent", "../outside"),
    ("deep-escape", "a/../../b"),
    ("absolute", "/etc"),
    ("git", ".git"),
    ("git-upper", ".GIT/config"),
    ("git-short", "git~1/config"),
    ("git-trailing-dot", ".git./x"),
    ("git-inside", "a/.git/hooks"),
    ("git-hfs", ".g\u200cit/config"),
    ("dot", "."),
    ("dot-slash", "./"),
    ("up-and-back", "tests/.."),
    ("double-slash", "tests//test_new.sh"),
    ("backslash", "tests\\test_new.sh"),
    ("glob", "tests/[id]*.sh"),
    ("missing-dir", "no/such/dir"),
    ("a-file", "lib.sh"),
]

SELECTORS: list[tuple[str, Any]] = [
    ("empty-list", []),
    ("blank-item", [" "]),
    ("nul-item", ["a\x00"]),
    ("newline-item", ["a\nb"]),
    ("quote-item", ["x'; touch /tmp/pwned; '"]),
    ("duplicates", ["tests/test_new.sh", "tests/test_new.sh"]),
    ("many", [f"t{i}" for i in range(10_001)]),
    ("option-like", ["--collect-only"]),
    ("non-string", [1, 2]),
    ("huge-item", ["x" * 5000]),
]


def _set(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node = doc
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return doc


FIELDS = (
    "schemaVersion",
    "difficulty",
    "taskId",
    "repo",
    "baseCommit",
    "workdir",
    "setupCommand",
    "testCommand",
    "failToPass",
    "passToPass",
    "testPaths",
    "toolchains",
    "sourcePr",
    "sourceUrl",
    "prompt",
    "timeouts.setupSeconds",
    "timeouts.agentSeconds",
    "timeouts.testsSeconds",
    "resources.cpus",
    "resources.memoryMb",
    "resources.storageMb",
    "environment.smokeCommand",
    "environment.environmentVariables",
)


FIELD_EXPECT = {
    ("taskId", "long-300"): "too long",
    ("workdir", "newline"): "newline",
    ("workdir", "nul"): "NUL",
    ("setupCommand", "nul"): "NUL",
    ("testPaths", "nul-item"): "NUL",
    ("failToPass", "nul-item"): "NUL",
    ("failToPass", "blank-item"): "must not be empty",
    ("timeouts.setupSeconds", "enormous-int"): "less than or equal",
    ("resources.cpus", "huge-int"): "at most 1024",
    ("resources.cpus", "tiny"): "at least 0.01",
    ("schemaVersion", "true"): "must be the integer 1",
    ("schemaVersion", "float"): "must be the integer 1",
    ("workdir", "git"): ".git directory",
    ("testPaths", "dot"): "covers the whole workdir",
    ("testPaths", "dot-slash"): "covers the whole workdir",
    ("testPaths", "up-and-back"): "covers the whole workdir",
    ("workdir", "a-file"): "is a file at baseCommit",
    ("workdir", "missing-dir"): "does not exist at baseCommit",
    ("environment.environmentVariables", "newline-key"): "not a valid name",
    ("environment.environmentVariables", "empty-key"): "not a valid name",
    ("environment.environmentVariables", "space-key"): "not a valid name",
    ("environment.environmentVariables", "equals-key"): "not a valid name",
    ("testCommand", "word-500k"): "too long",
}


PLACEHOLDER_MISPLACED = 'test command must expand "{tests}" as an unquoted shell argument list'
# `{tests}` anywhere but a command's own argument list (each is also a unit test in
# test_audit.py, which holds the list of contexts that stay allowed).
PLACEHOLDER_CONTEXTS: list[tuple[str, str]] = [
    ("bash-c", "bash -c 'bash tests/run.sh {tests}'"),
    ("double-quoted-substitution", 'echo "$("{tests}")"'),
    ("heredoc", "bash tests/run.sh <<EOF\n{tests}\nEOF"),
    ("quoted-heredoc", "bash <<'EOF'\nbash tests/run.sh {tests}\nEOF"),
    ("comment", "bash tests/run.sh tests # {tests}"),
    ("command-substitution", "bash tests/run.sh $(echo {tests})"),
    ("backticks", "bash tests/run.sh `echo {tests}`"),
    ("process-substitution", "bash tests/run.sh <(echo {tests})"),
    ("for-loop", "for t in {tests}; do bash tests/run.sh $t; done"),
    ("case", "case {tests} in *) bash tests/run.sh;; esac"),
    ("redirect", "bash tests/run.sh > {tests}"),
    ("export", "export T={tests}; bash tests/run.sh $T"),
    ("array", "T=({tests}); bash tests/run.sh ${T[@]}"),
    ("function", "f() { bash tests/run.sh {tests}; }"),
    ("glued", "bash tests/run.sh --only={tests}"),
    ("parameter", "bash tests/run.sh ${tests}"),
    ("ansi-c", "bash tests/run.sh $'{tests}'"),
    ("escaped", "bash tests/run.sh \\{tests}"),
    ("program", "{tests}"),
    ("eval", "eval bash tests/run.sh {tests}"),
    ("source", ". {tests}"),
    ("script", "bash {tests}"),
    ("env-program", "env CI=1 {tests}"),
    ("unterminated-quote", "bash tests/run.sh 'x {tests}"),
]


def _definition_case(field: str, label: str, value: Any) -> Case:
    def make(fx: Fixture, where: Path) -> Path:
        doc = _set(fx.definition(), field, value)
        return write(where / "task", doc, fx.test_patch, fx.gold_patch)

    return Case(f"{field}={label}", "field", "task", make, expect=FIELD_EXPECT.get((field, label)))


def field_cases() -> Iterator[Case]:
    for field in FIELDS:
        for label, value in GENERIC:
            yield _definition_case(field, label, value)
    for field in ("workdir", "testPaths"):
        for label, value in PATHS:
            yield _definition_case(field, label, [value] if field == "testPaths" else value)
    for field in ("failToPass", "passToPass"):
        for label, value in SELECTORS:
            yield _definition_case(field, label, value)
    specific: list[tuple[str, str, Any]] = [
        ("schemaVersion", "float", 1.0),
        ("schemaVersion", "string", "1"),
        ("schemaVersion", "two", 2),
        ("taskId", "slash", "a/b"),
        ("taskId", "dotdot", "a..b"),
        ("taskId", "leading-dot", ".a"),
        ("taskId", "long-129", "t" * 129),
        ("taskId", "dot", "."),
        ("toolchains", "unknown", ["java"]),
        ("toolchains", "many", ["uv"] * 20),
        ("resources.cpus", "infinity-literal", 1e309),
        ("resources.cpus", "tiny", 1e-300),
        ("timeouts.setupSeconds", "week-plus", 7 * 24 * 3600 + 1),
        ("testCommand", "quoted-placeholder", 'bash "{tests}"'),
        ("testCommand", "twice", "run {tests} {tests}"),
        ("testCommand", "syntax-error", "if {tests}"),
        ("testCommand", "newline-injection", "bash tests/run.sh {tests}\nRUN touch /pwned"),
        ("testCommand", "word-500k", "x" * 500_000 + " {tests}"),
        ("setupCommand", "syntax-error", "if then fi"),
        ("setupCommand", "unterminated", "echo 'oops"),
        ("setupCommand", "multiline", "set -e\necho one\necho two"),
        ("workdir", "quote", 'a"b'),
        ("testPaths", "nul-item", ["tests/a\x00b"]),
        ("environment.environmentVariables", "newline-key", {"A\nRUN touch /pwned": "1"}),
        ("environment.environmentVariables", "empty-key", {"": "1"}),
        ("environment.environmentVariables", "space-key", {"A B": "1"}),
        ("environment.environmentVariables", "equals-key", {"A=B": "1"}),
        ("environment.environmentVariables", "digit-key", {"1A": "1"}),
        ("environment.environmentVariables", "newline-value", {"A": "x\nRUN touch /pwned"}),
        ("environment.environmentVariables", "dollar-value", {"A": '$HOME ${PATH} \\ "'}),
        ("environment.environmentVariables", "many", {f"V{i}": "1" for i in range(300)}),
        ("environment", "unknown-keys", {"services": [], "x": {"y": [1, 2]}}),
        ("environment", "not-an-object", "smoke"),
    ]
    for field, label, value in specific:
        yield _definition_case(field, label, value)
    for label, command in PLACEHOLDER_CONTEXTS:
        case = _definition_case("testCommand", f"placeholder-{label}", command)
        yield Case(
            case.name,
            case.category,
            case.kind,
            case.make,
            expect=PLACEHOLDER_MISPLACED,
            audit_code=1,
        )
    for field in ("setupCommand", "testCommand", "failToPass"):
        snake = "".join("_" + c.lower() if c.isupper() else c for c in field)

        def make(fx: Fixture, where: Path, field: str = field, snake: str = snake) -> Path:
            doc = fx.definition()
            doc[snake] = doc.pop(field)
            return write(where / "task", doc, fx.test_patch, fx.gold_patch)

        yield Case(f"snake-case:{snake}", "field", "task", make, expect="the contract spells it")
    yield Case(
        "selector-in-both-lists",
        "field",
        "task",
        lambda fx, where: write(
            where / "task",
            fx.definition(failToPass=["t1"], passToPass=["t1"]),
            fx.test_patch,
            fx.gold_patch,
        ),
        expect="is in both failToPass and passToPass",
        audit_code=1,
    )
    yield Case(
        "testPaths-hold-the-gold-file",
        "field",
        "task",
        lambda fx, where: write(
            where / "task", fx.definition(testPaths=["lib.sh"]), fx.test_patch, fx.gold_patch
        ),
        expect="covers gold patch file lib.sh",
    )


# ---- the JSON document -----------------------------------------------------------------------


def document_cases() -> Iterator[Case]:
    valid = json.dumps(definition(taskId="x")).encode()
    raw_cases: list[tuple[str, bytes, str | None]] = [
        ("not-utf8", b'{"taskId": "\xff\xfe"}', "not UTF-8"),
        ("invalid-json", b'{"schemaVersion": 1,', "invalid JSON"),
        ("deep-nesting", b"[" * 100_000, "nested"),
        ("deep-objects", b'{"a":' * 5000 + b"1" + b"}" * 5000, "nested"),
        ("digits-4301", b'{"sourcePr": ' + b"9" * 4301 + b"}", "invalid JSON"),
        ("nan", b'{"resources": {"cpus": NaN}}', "NaN"),
        ("infinity", b'{"resources": {"cpus": Infinity}}', "Infinity"),
        ("duplicate-keys", b'{"taskId": "a", "taskId": "b"}', "appears twice"),
        ("top-level-list", b"[1, 2]", "must be a JSON object"),
        ("top-level-string", b'"task"', "must be a JSON object"),
        ("top-level-null", b"null", "must be a JSON object"),
        ("empty-file", b"", "invalid JSON"),
        ("bom", b"\xef\xbb\xbf" + valid, "invalid JSON"),
        ("two-megabytes", b'{"prompt": "' + b"p" * 2_000_000 + b'"}', "too large"),
        ("five-megabyte-word", b'{"testCommand": "' + b"w" * 5_000_000 + b' {tests}"}', None),
    ]
    for label, raw, expect in raw_cases:

        def make(fx: Fixture, where: Path, raw: bytes = raw) -> Path:
            return write(where / "task", raw, fx.test_patch, fx.gold_patch)

        yield Case(f"json:{label}", "document", "task", make, expect=expect)


# ---- files -----------------------------------------------------------------------------------


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    # A short-lived bound socket leaves its inode behind.
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
    finally:
        sock.close()


def _device(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # a /dev/null


FILE_KINDS: list[tuple[str, Callable[[Path], None], str]] = [
    ("symlink-passwd", lambda p: p.symlink_to("/etc/passwd"), "symbolic link"),
    ("symlink-environ", lambda p: p.symlink_to("/proc/self/environ"), "symbolic link"),
    ("symlink-zero", lambda p: p.symlink_to("/dev/zero"), "symbolic link"),
    ("dangling-symlink", lambda p: p.symlink_to("/nonexistent/x"), "symbolic link"),
    ("fifo", _fifo, "FIFO"),
    ("socket", _socket, "socket"),
    ("device", _device, "character device"),
    ("directory", lambda p: p.mkdir(), "directory"),
    ("missing", lambda p: None, "file not found"),
]


def file_cases() -> Iterator[Case]:
    for name in ("definition.json", "test.patch", "gold.patch", "instruction.md"):
        for label, make_kind, expect in FILE_KINDS:
            if name == "instruction.md" and label == "missing":
                continue  # optional: the prompt is used

            def make(
                fx: Fixture, where: Path, name: str = name, make_kind: Any = make_kind
            ) -> Path:
                task = write(where / "task", fx.definition(), fx.test_patch, fx.gold_patch)
                (task / name).unlink(missing_ok=True)
                make_kind(task / name)
                return task

            yield Case(f"{name}:{label}", "file", "task", make, expect=expect)
    for label, make_kind, _ in FILE_KINDS:
        if label == "missing":
            continue

        def make_dir(fx: Fixture, where: Path, make_kind: Any = make_kind) -> Path:
            where.mkdir(parents=True, exist_ok=True)
            target = where / "task"
            if make_kind is FILE_KINDS[7][1]:  # a directory is a valid task dir: make it empty
                target.mkdir()
            else:
                make_kind(target)
            return target

        yield Case(f"task-dir:{label}", "file", "task", make_dir)
    repo_expect = {
        "dev-null": "is a character device, not a git repository",
        "fifo": "is a FIFO, not a git repository",
        "socket": "is a socket, not a git repository",
        "plain-file": "is a file but not a git bundle",
    }

    def made(name: str, create: Callable[[Path], object]) -> Callable[[Path], str]:
        def make(where: Path) -> str:
            create(where / name)
            return str(where / name)

        return make

    repos: list[tuple[str, Callable[[Path], str]]] = [
        ("dev-null", lambda w: "/dev/null"),
        ("fifo", made("repo-fifo", _fifo)),
        ("socket", made("repo-sock", _socket)),
        ("plain-file", made("f", lambda p: p.write_text("x"))),
        ("not-a-repo", made("d", lambda p: p.mkdir())),
        ("missing", lambda w: str(w / "none")),
        ("proc", lambda w: "/proc/self"),
    ]
    for label, make_repo_path in repos:

        def make_repo_case(fx: Fixture, where: Path, make_repo_path: Any = make_repo_path) -> Path:
            where.mkdir(parents=True, exist_ok=True)
            doc = fx.definition(repo=make_repo_path(where))
            return write(where / "task", doc, fx.test_patch, fx.gold_patch)

        yield Case(f"repo:{label}", "file", "task", make_repo_case, expect=repo_expect.get(label))
    instructions: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("blank", b"  \n\n"),
        ("nul", b"Do it\x00"),
        ("escape", b"Do it \x1b[2J"),
        ("not-utf8", b"caf\xe9"),
        ("huge", b"x" * 300_000),
        ("crlf", b"Do it.\r\nPlease.\r\n"),
    ]
    for label, text in instructions:

        def make_instruction(fx: Fixture, where: Path, text: bytes = text) -> Path:
            return write(where / "task", fx.definition(), fx.test_patch, fx.gold_patch, text)

        yield Case(f"instruction:{label}", "file", "task", make_instruction)


# ---- patches ---------------------------------------------------------------------------------


def _section(name: str, body: str = "@@ -0,0 +1 @@\n+x\n", mode: str = "100644") -> str:
    return (
        f"diff --git a/{name} b/{name}\nnew file mode {mode}\n--- /dev/null\n+++ b/{name}\n{body}"
    )


def hostile_patches() -> list[tuple[str, bytes]]:
    rng = random.Random(8)
    text_cases = [
        ("not-git", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"),
        ("header-only", "diff --git a/x b/x\n"),
        ("no-hunks", "diff --git a/x b/x\n--- a/x\n+++ b/x\n"),
        ("bad-hunk-header", "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ nonsense @@\n+y\n"),
        ("truncated-hunk", "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n+b\n"),
        ("traversal", _section("../outside.txt")),
        ("deep-traversal", _section("a/../../etc/cron.d/x")),
        (
            "absolute",
            "diff --git a//etc/x b//etc/x\n--- a//etc/x\n+++ b//etc/x\n@@ -0,0 +1 @@\n+x\n",
        ),
        ("git-dir", _section(".git/hooks/post-checkout")),
        ("git-upper", _section(".GIT/config")),
        ("git-short-name", _section("git~1/config")),
        ("git-nested", _section("sub/.git/config")),
        (
            "quoted-newline-name",
            _section('"a\\nRUN touch /pwned"')
            .replace("diff --git a/", 'diff --git "a/')
            .replace(' b/"a', ' "b/a'),
        ),
        (
            "quoted-octal-name",
            'diff --git "a/caf\\303\\251" "b/caf\\303\\251"\nnew file mode 100644\n'
            '--- /dev/null\n+++ "b/caf\\303\\251"\n@@ -0,0 +1 @@\n+x\n',
        ),
        (
            "symlink-to-passwd",
            _section(
                "link", "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n", "120000"
            ),
        ),
        (
            "symlink-up",
            _section(
                "d/link", "@@ -0,0 +1 @@\n+../../..\n\\ No newline at end of file\n", "120000"
            ),
        ),
        (
            "gitlink",
            _section("sub", "@@ -0,0 +1 @@\n+Subproject commit " + "1" * 40 + "\n", "160000"),
        ),
        (
            "rename-out",
            "diff --git a/lib.sh b/lib.sh\nsimilarity index 100%\nrename from lib.sh\n"
            "rename to ../../escaped\n",
        ),
        (
            "copy-in",
            "diff --git a/x b/x\nsimilarity index 100%\ncopy from /etc/passwd\ncopy to x\n",
        ),
        ("binary-without-data", "diff --git a/x b/x\nBinary files a/x and b/x differ\n"),
        ("mode-777", "diff --git a/lib.sh b/lib.sh\nold mode 100644\nnew mode 100777\n"),
        (
            "double-slash",
            "diff --git a/tests//test_new.sh b/tests//test_new.sh\nnew file mode 100644\n"
            "--- /dev/null\n+++ b/tests//test_new.sh\n@@ -0,0 +1 @@\n+x\n",
        ),
        ("dot-slash", _section("./tests/test_new.sh")),
        (
            "does-not-apply",
            "diff --git a/lib.sh b/lib.sh\n--- a/lib.sh\n+++ b/lib.sh\n"
            "@@ -1,2 +1,2 @@\n #!/usr/bin/env bash\n-no such line\n+x\n",
        ),
        ("crlf", _section("crlf.txt").replace("\n", "\r\n")),
        ("many-sections", "".join(_section(f"f{i}.txt") for i in range(2000))),
    ]
    cases = [(label, text.encode("utf-8", "surrogateescape")) for label, text in text_cases]
    cases.append(("empty", b""))
    cases.append(("random-bytes", bytes(rng.randrange(256) for _ in range(4096))))
    cases.append(
        (
            "git-then-random",
            b"diff --git a/x b/x\n" + bytes(rng.randrange(256) for _ in range(4096)),
        )
    )
    cases.append(
        (
            "raw-non-utf8-name",
            b"diff --git a/caf\xe9 b/caf\xe9\nnew file mode 100644\n"
            b"--- /dev/null\n+++ b/caf\xe9\n@@ -0,0 +1 @@\n+x\n",
        )
    )
    cases.append(("too-large", b"diff --git a/x b/x\n" + b"+" * (64 * 1024 * 1024 + 1)))
    cases.append(("over-the-limit", b"diff --git a/x b/x\n" + b"+" * (20 * 1024 * 1024)))
    return cases


PATCH_EXPECT = {
    "raw-non-utf8-name": "not valid UTF-8",
    "header-only": "changes nothing",
    "no-hunks": "changes nothing",
    "bad-hunk-header": "changes nothing",
    "git-then-random": "changes nothing",
    "symlink-to-passwd": "symlink target '/etc/passwd' leaves the repository",
    "symlink-up": "symlink target '../../..' leaves the repository",
    "gitlink": "submodules (gitlinks, mode 160000) are not supported",
    "rename-out": "escapes repository",
    "copy-in": "escapes repository",
    "git-upper": ".git directory",
    "git-short-name": ".git directory",
    "quoted-newline-name": "newline",
    "does-not-apply": "does not apply to baseCommit",
    "too-large": "too large",
    "over-the-limit": "is too large (20971539 bytes; the limit is 20 MiB)",
}


# Sections `git apply` takes but a task may not carry: added to a valid patch, each is a static
# audit blocker (exit 1) naming the patch and the section.
ODDITIES: list[tuple[str, str, str, str]] = [
    # (label, the section's path, the section, what the blocker says after naming it)
    (
        "hunk-longer-than-header",
        "notes.txt",
        "diff --git a/notes.txt b/notes.txt\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/notes.txt\n@@ -0,0 +1 @@\n+shown\n+never applied\n",
        "line 7 of the section ('+never applied') lies after hunk 1 outside what any hunk "
        "header counts",
    ),
    (
        "hunk-shorter-than-header",
        "notes.txt",
        "diff --git a/notes.txt b/notes.txt\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/notes.txt\n@@ -0,0 +1,4 @@\n+one\n",
        "hunk 1 (@@ -0,0 +1,4 @@) declares 0 old and 4 new lines but holds 0 and 1",
    ),
    (
        "gitmodules",
        ".gitmodules",
        _section(".gitmodules", '@@ -0,0 +1,2 @@\n+[submodule "x"]\n+\tpath = x\n'),
        ".gitmodules configures submodules",
    ),
    (
        "gitattributes-filter",
        ".gitattributes",
        _section(".gitattributes", "@@ -0,0 +1 @@\n+*.sh filter=evil\n"),
        "line 1 sets filter=evil",
    ),
    (
        "nested-gitattributes-diff-merge",
        "tests/.gitattributes",
        _section("tests/.gitattributes", "@@ -0,0 +1,2 @@\n+# drivers\n+*.txt diff=x merge=y\n"),
        "line 2 sets diff=x, merge=y",
    ),
    ("dash-path", "-rf", _section("-rf"), "path '-rf' starts with '-'"),
    ("colon-path", ":(top)x", _section(":(top)x"), "path ':(top)x' starts with ':'"),
    (
        "semicolon-path",
        "a;touch x.txt",
        _section("a;touch x.txt"),
        "path 'a;touch x.txt' holds the shell metacharacter ';'",
    ),
    (
        "substitution-path",
        "a$(id).txt",
        _section("a$(id).txt"),
        "path 'a$(id).txt' holds the shell metacharacter '$('",
    ),
    (
        "backtick-path",
        "a`id`.txt",
        _section("a`id`.txt"),
        "path 'a`id`.txt' holds the shell metacharacter '`'",
    ),
    (
        "glob-path",
        "tests/*.sh",
        _section("tests/*.sh"),
        "path 'tests/*.sh' holds the shell metacharacter '*'",
    ),
]


def patch_cases() -> Iterator[Case]:
    for which in ("test", "gold"):
        for label, path, section, says in ODDITIES:

            def make_odd(
                fx: Fixture, where: Path, which: str = which, section: str = section
            ) -> Path:
                test = fx.test_patch + section.encode() if which == "test" else fx.test_patch
                gold = fx.gold_patch + section.encode() if which == "gold" else fx.gold_patch
                return write(where / "task", fx.definition(), test, gold)

            yield Case(
                f"{which}.patch:oddity-{label}",
                "patch",
                "task",
                make_odd,
                expect=f"{which}.patch: section 2 ({path}): {says}",
                audit_code=1,
            )
        for label, raw in hostile_patches():

            def make(fx: Fixture, where: Path, which: str = which, raw: bytes = raw) -> Path:
                test = raw if which == "test" else fx.test_patch
                gold = raw if which == "gold" else fx.gold_patch
                return write(where / "task", fx.definition(), test, gold)

            yield Case(
                f"{which}.patch:{label}", "patch", "task", make, expect=PATCH_EXPECT.get(label)
            )

    def too_large_together(fx: Fixture, where: Path) -> Path:
        """Each patch under its limit, the task over its own."""
        padding = "".join(f"+{'x' * 99}\n" for _ in range(13 * 1024 * 1024 // 101))
        big = "diff --git a/pad.txt b/pad.txt\nnew file mode 100644\n--- /dev/null\n"
        section = f"{big}+++ b/pad.txt\n@@ -0,0 +1,{13 * 1024 * 1024 // 101} @@\n{padding}"
        return write(
            where / "task",
            fx.definition(),
            fx.test_patch + section.encode(),
            fx.gold_patch + section.replace("pad.txt", "pad2.txt").encode(),
        )

    yield Case(
        "patches-too-large-together",
        "patch",
        "task",
        too_large_together,
        expect="task files are too large together",
        audit_code=2,
    )

    def overlap(fx: Fixture, where: Path) -> Path:
        return write(where / "task", fx.definition(), fx.test_patch, fx.gold_patch + fx.test_patch)

    yield Case("gold-and-tests-overlap", "patch", "task", overlap)

    def manifest_injection(fx: Fixture, where: Path) -> Path:
        gold = fx.gold_patch + (
            b'diff --git "a/x\\nRUN touch /pwned/package.json" '
            b'"b/x\\nRUN touch /pwned/package.json"\n'
            b"new file mode 100644\n--- /dev/null\n"
            b'+++ "b/x\\nRUN touch /pwned/package.json"\n@@ -0,0 +1 @@\n+{}\n'
        )
        return write(where / "task", fx.definition(), fx.test_patch, gold)

    yield Case(
        "gold-manifest-path-with-newline", "patch", "task", manifest_injection, expect="newline"
    )


# ---- forged bundles --------------------------------------------------------------------------


def _bundle(fx: Fixture, where: Path) -> Path:
    target = where / "bundle"
    shutil.copytree(fx.bundle, target, symlinks=True)
    return target


def _toml_edit(old: str, new: str) -> Callable[[Fixture, Path], Path]:
    def make(fx: Fixture, where: Path) -> Path:
        bundle = _bundle(fx, where)
        text = (bundle / "task.toml").read_text()
        assert old in text, old
        (bundle / "task.toml").write_text(text.replace(old, new, 1))
        return bundle

    return make


def bundle_cases() -> Iterator[Case]:
    edits: list[tuple[str, str, str, str | None]] = [
        ("memory-lots", "memory_mb = 512", 'memory_mb = "lots"', "valid integer"),
        ("memory-huge", "memory_mb = 512", "memory_mb = 9223372036854775807", None),
        ("cpus-inf", "cpus = 1", "cpus = inf", "finite"),
        ("cpus-nan", "cpus = 1", "cpus = nan", "finite"),
        ("cpus-negative", "cpus = 1", "cpus = -2", None),
        ("cpus-string", "cpus = 1", 'cpus = "many"', None),
        ("timeout-inf", "timeout_sec = 120.0", "timeout_sec = inf", "finite"),
        ("timeout-string", "timeout_sec = 120.0", 'timeout_sec = "soon"', None),
        ("timeout-huge", "timeout_sec = 120.0", "timeout_sec = 1e300", None),
        ("build-timeout-negative", "build_timeout_sec = 720.0", "build_timeout_sec = -1.0", None),
        ("storage-zero", "storage_mb = 4096", "storage_mb = 0", None),
        (
            "task-id-absolute",
            'selfbench_task_id = "hostile-task"',
            'selfbench_task_id = "/etc"',
            None,
        ),
        (
            "task-id-traversal",
            'selfbench_task_id = "hostile-task"',
            'selfbench_task_id = "../../escape"',
            None,
        ),
        (
            "task-id-newline",
            'selfbench_task_id = "hostile-task"',
            'selfbench_task_id = "a\\nb"',
            None,
        ),
        (
            "task-id-long",
            'selfbench_task_id = "hostile-task"',
            f'selfbench_task_id = "{"t" * 300}"',
            None,
        ),
        ("task-name-mismatch", 'name = "selfbench/hostile-task"', 'name = "selfbench/other"', None),
        ("task-name-traversal", 'name = "selfbench/hostile-task"', 'name = "../../x"', None),
        ("unknown-key", "[environment]\n", '[environment]\ndocker_image = "evil:latest"\n', None),
        (
            "network-host",
            'network_mode = "public"\n\n[verifier]',
            'network_mode = "host"\n\n[verifier]',
            None,
        ),
        ("agent-root", 'user = "agent"', 'user = "root"', None),
        ("schema-version", 'schema_version = "1.4"', 'schema_version = "9"', None),
        ("artifacts", '"/opt/selfbench/agent.patch",\n]', '"/etc/shadow",\n]', None),
        ("toolchain-unknown", '"uv",\n]\ncompiler', '"java",\n]\ncompiler', None),
        ("workdir-escape", 'workdir = "."', 'workdir = "../.."', None),
        ("collect-nul", 'command = "git', 'command = "\\u0000git', None),
        ("base-commit-bad", 'base_commit = "', 'base_commit = "zz', None),
        (
            "verifier-env-differs",
            '[verifier.environment]\nnetwork_mode = "public"\nbuild_timeout_sec = 720.0\ncpus = 1',
            '[verifier.environment]\nnetwork_mode = "public"\nbuild_timeout_sec = 720.0\ncpus = 2',
            None,
        ),
        ("invalid-toml", "[task]", "[task", "invalid TOML"),
        ("duplicate-table", "[task]", "[agent]\ntimeout_sec = 1.0\n[task]", "invalid TOML"),
    ]
    for label, old, new, expect in edits:
        yield Case(f"bundle:{label}", "bundle", "bundle", _toml_edit(old, new), expect=expect)

    def replace(path: str, kind: Callable[[Path], object]) -> Callable[[Fixture, Path], Path]:
        def make(fx: Fixture, where: Path) -> Path:
            bundle = _bundle(fx, where)
            target = bundle / path
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
            kind(target)
            return bundle

        return make

    for path in (
        "task.toml",
        "environment/Dockerfile",
        "tests/test.sh",
        "solution/solve.sh",
        "instruction.md",
    ):
        for label, kind, _ in FILE_KINDS:
            if path == "task.toml" and label == "missing":
                continue  # then it is not a bundle but an authored task
            yield Case(f"bundle:{path}:{label}", "bundle", "bundle", replace(path, kind))
    for label, kind, _ in FILE_KINDS[:7]:
        yield Case(
            f"bundle:context-entry:{label}", "bundle", "bundle", replace("environment/extra", kind)
        )
    yield Case(
        "bundle:environment-is-a-file",
        "bundle",
        "bundle",
        replace("environment", lambda p: p.write_text("x")),
    )

    def not_utf8(fx: Fixture, where: Path) -> Path:
        bundle = _bundle(fx, where)
        (bundle / "task.toml").write_bytes(b"\xff\xfe" + (bundle / "task.toml").read_bytes())
        return bundle

    yield Case("bundle:task.toml-not-utf8", "bundle", "bundle", not_utf8)

    def huge(fx: Fixture, where: Path) -> Path:
        bundle = _bundle(fx, where)
        with (bundle / "task.toml").open("a") as handle:
            handle.write("# " + "x" * 300_000 + "\n")
        return bundle

    yield Case("bundle:task.toml-huge", "bundle", "bundle", huge, expect="too large")

    def huge_patch(name: str) -> Callable[[Fixture, Path], Path]:
        def make(fx: Fixture, where: Path) -> Path:
            bundle = _bundle(fx, where)
            with (bundle / name).open("ab") as handle:
                handle.truncate(20 * 1024 * 1024 + 1)  # sparse: costs nothing to make
            return bundle

        return make

    for name in ("solution/gold.patch", "tests/test.patch"):
        yield Case(
            f"bundle:{name}-over-the-limit",
            "bundle",
            "bundle",
            huge_patch(name),
            expect="the limit is 20 MiB",
        )


def all_cases() -> list[Case]:
    cases = [
        *field_cases(),
        *document_cases(),
        *file_cases(),
        *patch_cases(),
        *bundle_cases(),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases
