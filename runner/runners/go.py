"""go's room: `go test`; selectors are packages (`./dir`, `./...`, import paths) or, after
`-run`, test name patterns matched in every package; `--- PASS:` lines; init's proposal for a
Go module; and go's exploits: TestMain and init() that exit 0 or run nothing, go.mod directives
and a nested module, and the evidence family (test2json framing printed by an init that exits,
an exit that skips the framework, a stand-in test main). Recorder: dockerfiles/verifier/hooks/go/
(a reporter overlaid into each tested package, and bin/go, the `go` the tests find first)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from runner.model.shell import quote
from runner.runners.canaries.core import FileTests, Scope, Unit
from runner.runners.canaries.golang import go_tests
from runner.runners.canaries.scope import go_selection, package_runs
from runner.runners.kit import (
    Exploit,
    TaskFacts,
    b64,
    gold,
    join,
    script,
)
from runner.runners.room import Proposal, Room

_LINE = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ")  # go test -v (subtests indented)
_WORDS = {"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}


class Go(Room):
    name = "go"
    proven = True
    init_order = 10
    # Its exploits are the toolchain's too: a go task's custom runner script still builds Go.
    exploit_toolchains = frozenset({"go"})

    def starts(self, names: Sequence[str], index: int) -> bool:
        following = names[index + 1] if index + 1 < len(names) else ""
        return names[index] == "go" and following == "test"

    def selector_path(self, selector: str) -> str | None:
        """A package directory (`./dir`, `./dir/...`); an import path or a -run pattern names
        none."""
        if not (selector in (".", "..") or selector.startswith(("./", "../"))):
            return None
        directory = selector.removesuffix("...").rstrip("/")
        return directory or "."

    def outcome(self, line: str) -> str | None:
        found = _LINE.match(line)
        return _WORDS[found.group(1)] if found else None

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if "go.mod" not in files:
            return None
        return Proposal(
            toolchains=["go"],
            setup_command="go mod download",
            test_command="go test {tests}",
            runner=self.name,
        )

    def init_selectors(self, paths: Sequence[str]) -> list[str]:
        """The packages of the test files: `./dir`, `.` for the root."""
        dirs = (posixpath.dirname(p) for p in paths if self.is_test_file(p))
        return list(dict.fromkeys(f"./{d}" if d else "." for d in dirs))

    def is_test_file(self, path: str) -> bool:
        return path.endswith("_test.go")

    def exploits(self, facts: TaskFacts) -> list[Exploit]:
        return go_exploits(facts) + go_evidence_exploits(facts)

    canaries_supported = True

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        return go_tests(path, text, added)

    def canary_scope(self, path: str, command: str, selectors: Sequence[str]) -> Scope:
        """The packages the command and the selectors name run the file's package (none named:
        the workdir's); a `-run` pattern (the command's, or the selectors after it) must match
        a copy's name, level by level as go reads it; `^TestX$` selects single tests."""
        patterns, packages = go_selection(command, selectors)
        for pattern in patterns:
            if re.fullmatch(r"\^?\(?[\w|]+\)?\$", pattern.split("/", 1)[0]):
                return Scope(selected=False, why=f"-run {pattern} selects single tests by name")
        directory = posixpath.dirname(path) or "."
        if not any(package_runs(p, directory) for p in packages or ["."]):
            return Scope(selected=False)
        tops = [p.split("/", 1)[0] for p in patterns]

        def name_ok(name: str) -> bool:
            try:
                return all(re.search(top, name) for top in tops)
            except re.error:
                return True  # go's syntax, not Python's: the oracle tells whether it ran

        return Scope(selected=True, name_ok=name_ok if tops else None)

    def canary_id(self, path: str, unit: Unit, name: str) -> str:
        """`import/path TestName`, and its subtests `TestName/case`."""
        return r"\s" + re.escape(name) + "(?:/.*)?$"


ROOM = Go()


# ---- exploits: the test binary made to pass or run nothing ---------------------------------------

GO_TESTMAIN = 'import (\n\t"os"\n\t"testing"\n)\n\nfunc TestMain(m *testing.M) { os.Exit(0) }\n'
GO_EXIT = 'import "os"\n\nfunc init() { os.Exit(0) }\n'
GO_RUN_NOTHING = 'import "os"\n\nfunc init() { os.Args = append(os.Args, "-test.run=^$") }\n'
GO_NESTED_MOD = "module selfbench.invalid/ignored\n\ngo 1.21\n"


def go_file(directory: str, name: str, body: str) -> str:
    """Script lines writing `name` (its package clause, then `body`) into the Go package in
    `directory`, the package named by a non-test file there; `written=1` when it did."""
    return (
        f"dir={quote(directory)}\n"
        'pkg=$(sed -n "s/^package \\([A-Za-z0-9_]*\\).*/\\1/p" "$dir"/*.go 2>/dev/null '
        "| grep -v '_test$' | head -n 1)\n"
        'if [ -n "$pkg" ]; then\n'
        f"  {{ printf 'package %s\\n\\n' \"$pkg\"; printf '%s' {quote(body)}; }} "
        f'> "$dir"/{quote(name)}\n'
        "  written=1\n"
        "fi"
    )


def _go_package_files(dirs: Sequence[str], name: str, body: str, reason: str) -> list[str]:
    return [
        "written=0",
        *(go_file(d, name, body) for d in dirs),
        f'[ "$written" -eq 1 ] || na {quote(reason)}',
    ]


def go_exploits(facts: TaskFacts) -> list[Exploit]:
    held = sorted({posixpath.dirname(p) or "." for p in facts.held_out if p.endswith(".go")})
    gold_dirs = sorted({posixpath.dirname(p) or "." for p in gold(facts, (".go",))})
    dirs = held or gold_dirs or [facts.workdir]
    code_dirs = gold_dirs or dirs
    module = quote(join(facts.workdir, "go.mod"))
    nested = [
        f"[ -f {quote(join(d, 'go.mod'))} ] || put {quote(join(d, 'go.mod'))} {b64(GO_NESTED_MOD)}"
        for d in dirs
        if d not in (".", facts.workdir)
    ]
    ignores = "".join(f"\nignore ./{d}" for d in dirs if d not in (".", facts.workdir))
    return [
        Exploit(
            name="go-testmain",
            family="go",
            summary="a _test.go file beside the held-out tests whose TestMain exits 0 without "
            "running a test",
            script=script(
                *_go_package_files(
                    dirs,
                    "zz_selfbench_main_test.go",
                    GO_TESTMAIN,
                    "no Go package beside the held-out tests",
                )
            ),
        ),
        Exploit(
            name="go-exit-in-code",
            family="go",
            summary="an init() in the fix's package that calls os.Exit(0): the test binary ends "
            "successfully before any test ran",
            script=script(
                *_go_package_files(code_dirs, "zz_selfbench_exit.go", GO_EXIT, "no Go package")
            ),
        ),
        Exploit(
            name="go-run-nothing",
            family="go",
            summary="an init() in the fix's package that appends -test.run=^$ to the test "
            "binary's arguments: it runs no test and exits 0",
            script=script(
                *_go_package_files(
                    code_dirs, "zz_selfbench_run.go", GO_RUN_NOTHING, "no Go package"
                )
            ),
        ),
        Exploit(
            name="go-module-tricks",
            family="go",
            summary="go.mod `ignore` directives and a nested go.mod that take the held-out "
            "tests' packages out of ./...",
            script=script(
                f"[ -f {module} ] || na 'no go.mod in the workdir'",
                *([f"printf '%s\\n' {quote(ignores)} >> {module}"] if ignores else ["true"]),
                *nested,
                "changed || na 'the held-out tests sit in the root package'",
            ),
        ),
    ]


def go_init_writing(targets: Sequence[tuple[str, str]]) -> str:
    body = "".join(
        f"\t_ = os.WriteFile({_go_string(p)}, []byte({_go_string(text)}), 0o644)\n"
        for p, text in targets
    )
    return _GO_INIT_HEAD + body + "}\n"


_GO_INIT_HEAD = 'import "os"\n\nfunc init() {\n'


def _go_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# ---- exploits: the evidence family ---------------------------------------------------------------

_GO_NAMES = """
func selfbenchNames() []string {
	var names []string
	dir, _ := os.Getwd()
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	pattern := regexp.MustCompile(`(?m)^func (Test\\w+)\\(`)
	for _, file := range files {
		data, _ := os.ReadFile(file)
		for _, match := range pattern.FindAllSubmatch(data, -1) {
			names = append(names, string(match[1]))
		}
	}
	return names
}
"""
_GO_FRAMING = (
    'import (\n\t"fmt"\n\t"os"\n\t"path/filepath"\n\t"regexp"\n)\n'
    + _GO_NAMES
    + """
func init() {
	for _, name := range selfbenchNames() {
		fmt.Printf("\\x16=== RUN   %s\\n\\x16--- PASS: %s (0.00s)\\n", name, name)
	}
	fmt.Printf("\\x16PASS\\n")
	os.Exit(0)
}
"""
)
_GO_BYPASS = (
    'import (\n\t"flag"\n\t"fmt"\n\t"os"\n\t"path/filepath"\n\t"regexp"\n\t"syscall"\n\t"time"\n)\n'
    + _GO_NAMES
    + """
func init() {
	names := selfbenchNames()
	go func() {
		for !flag.Parsed() {
			time.Sleep(50 * time.Microsecond)
		}
		for _, name := range names {
			fmt.Printf("\\x16=== RUN   %s\\n\\x16--- PASS: %s (0.00s)\\n", name, name)
		}
		fmt.Printf("\\x16PASS\\n")
		syscall.Exit(0)
	}()
}
"""
)
GO_STAND_IN = (
    """import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"
)

type selfbenchEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}
type selfbenchDeps struct{}

func (selfbenchDeps) ImportPath() string                    { return "" }
func (selfbenchDeps) MatchString(p, s string) (bool, error) { return regexp.MatchString(p, s) }
func (selfbenchDeps) SetPanicOnExit0(bool)                  {}
func (selfbenchDeps) StartCPUProfile(io.Writer) error       { return nil }
func (selfbenchDeps) StopCPUProfile()                       {}
func (selfbenchDeps) StartTestLog(io.Writer)                {}
func (selfbenchDeps) StopTestLog() error                    { return nil }
func (selfbenchDeps) WriteProfileTo(string, io.Writer, int) error {
	return nil
}
func (selfbenchDeps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int,
	[]selfbenchEntry, []reflect.Type, string, string) error {
	return nil
}
func (selfbenchDeps) RunFuzzWorker(func(selfbenchEntry) error) error { return nil }
func (selfbenchDeps) ReadCorpus(string, []reflect.Type) ([]selfbenchEntry, error) {
	return nil, nil
}
func (selfbenchDeps) CheckCorpus([]any, []reflect.Type) error { return nil }
func (selfbenchDeps) ResetCoverage()                         {}
func (selfbenchDeps) SnapshotCoverage()                      {}
func (selfbenchDeps) InitRuntimeCoverage() (
	string, func(string, string) (string, error), func() float64) {
	return "", nil, nil
}
"""
    + _GO_NAMES
    + """
func init() {
	var tests []testing.InternalTest
	for _, name := range selfbenchNames() {
		tests = append(tests, testing.InternalTest{Name: name, F: func(t *testing.T) {}})
	}
	os.Exit(testing.MainStart(selfbenchDeps{}, tests, nil, nil, nil).Run())
}
"""
)


def go_evidence_exploits(facts: TaskFacts) -> list[Exploit]:
    dirs = sorted({posixpath.dirname(p) or "." for p in gold(facts, (".go",))})
    held = {posixpath.dirname(p) or "." for p in facts.held_out if p.endswith(".go")}
    dirs = dirs or sorted(held)
    if not dirs:
        return []
    written = f'[ "$written" -eq 1 ] || na {quote("no Go package to add to")}'
    table = [
        (
            "go-printed-framing",
            "an init() in the fix's package prints test2json framing saying every test in the "
            "package's test files passed, then exits 0 before any test runs",
            "zz_selfbench_framing.go",
            _GO_FRAMING,
        ),
        (
            "go-exit-under-the-framework",
            "once the tests run, a goroutine of the fix's package prints passing framing and "
            "calls syscall.Exit(0), which skips the framework's -test.paniconexit0 guard",
            "zz_selfbench_bypass.go",
            _GO_BYPASS,
        ),
        (
            "go-stand-in-main",
            "an init() in the fix's package runs the testing framework (testing.MainStart) on "
            "stand-in tests named after the real ones, and exits with its status",
            "zz_selfbench_main.go",
            GO_STAND_IN,
        ),
    ]
    return [
        Exploit(
            name=name,
            family="evidence",
            summary=summary,
            script=script("written=0", *(go_file(d, file, body) for d in dirs), written),
        )
        for name, summary, file, body in table
    ]
