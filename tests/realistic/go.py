"""Go projects shaped like real pull requests: a module with a vendored package, selected by
package; a module of several packages (one vendored) selected by `go test ./... -run`, where
the packages without the selected test say "no tests to run"; a workspace whose gold patch adds
a module to go.work."""

from __future__ import annotations

from tests.realistic.project import Project, shaped, steps

GO_OPTIONS = ["--toolchain-source", "go=registry"]

# ---- a go module with a vendored package -----------------------------------------------------

GO_VENDORED = Project(
    name="real-go",
    base={
        "go.mod": "module example.com/shapes\n\ngo 1.25\n\nrequire example.com/units v0.1.0\n",
        "vendor/modules.txt": "# example.com/units v0.1.0\n## explicit\nexample.com/units\n",
        "vendor/example.com/units/units.go": "package units\n\n"
        "func Scale(v, f float64) float64 { return v * f }\n",
        "area/area.go": 'package area\n\nimport "example.com/units"\n\n'
        "func Square(s float64) float64 { return units.Scale(s, s) }\n",
        "area/area_test.go": 'package area\n\nimport "testing"\n\nfunc TestSquare(t *testing.T) {\n'
        "\tif Square(2) != 4 {\n\t\tt.Fatal(Square(2))\n\t}\n}\n",
        "perimeter/perimeter.go": (
            "package perimeter\n\nfunc Square(s float64) float64 { return 0 }\n"
        ),
    },
    tests={
        "perimeter/perimeter_test.go": 'package perimeter\n\nimport "testing"\n\n'
        "func TestSquare(t *testing.T) {\n\tif Square(2) != 8 {\n\t\tt.Fatal(Square(2))\n\t}\n}\n\n"
        "func TestTable(t *testing.T) {\n\tfor _, s := range []float64{1, 3} {\n"
        '\t\tt.Run("side", func(t *testing.T) {\n\t\t\tif Square(s) != 4*s {\n'
        "\t\t\t\tt.Fatal(s)\n\t\t\t}\n\t\t})\n\t}\n}\n"
    },
    gold={
        "perimeter/perimeter.go": "package perimeter\n\n"
        + steps(20, "//")
        + "func Square(s float64) float64 { return 4 * s }\n"
    },
    broken_gold={
        "perimeter/perimeter.go": "package perimeter\n\n"
        + steps(20, "//")
        + "func Square(s float64) float64 { return 2 * s }\n"
    },
    failing={
        "env/env_test.go": 'package env\n\nimport (\n\t"os"\n\t"testing"\n)\n\n'
        'func TestEnv(t *testing.T) {\n\tif os.Getenv("SELFBENCH_NO_SUCH") == "" {\n'
        '\t\tt.Fatal("unset")\n\t}\n}\n'
    },
    failing_selector="./env",
    overrides={
        # Compiles the testing packages into the shared build cache once, at setup.
        "setupCommand": "go test -run '^$' ./...",
        "testCommand": "go test {tests}",
        "failToPass": ["./perimeter"],
        "passToPass": ["./area"],
        "testPaths": ["perimeter/perimeter_test.go"],
        "toolchains": ["go"],
    },
    options=GO_OPTIONS,
    runners=("go",),
)


# ---- several packages, one vendored, selected by -run across ./... ----------------------------

_MUL_BASE = (
    'package mul\n\nimport "example.com/digits"\n\n'
    "// Mul multiplies; Digits says how many decimal digits the product has.\n"
    "func Mul(a, b int) int { return a + b }\n\n"
    "func Digits(a, b int) int { return digits.Count(Mul(a, b)) }\n"
)
_MUL_FIXED = (
    'package mul\n\nimport "example.com/digits"\n\n'
    + steps(20, "//")
    + "func Mul(a, b int) int {\n\tproduct := 0\n\tfor i := 0; i < abs(b); i++ {\n"
    "\t\tproduct += a\n\t}\n\tif b < 0 {\n\t\treturn -product\n\t}\n\treturn product\n}\n\n"
    "func abs(n int) int {\n\tif n < 0 {\n\t\treturn -n\n\t}\n\treturn n\n}\n\n"
    "func Digits(a, b int) int { return digits.Count(Mul(a, b)) }\n"
)
GO_MULTI = Project(
    name="real-go-multi",
    base={
        "go.mod": "module example.com/calc\n\ngo 1.25\n\nrequire example.com/digits v1.2.0\n",
        "vendor/modules.txt": "# example.com/digits v1.2.0\n## explicit\nexample.com/digits\n",
        "vendor/example.com/digits/digits.go": "package digits\n\n"
        "// Count is the number of decimal digits of n.\nfunc Count(n int) int {\n"
        "\tif n < 0 {\n\t\tn = -n\n\t}\n\tcount := 1\n\tfor n >= 10 {\n\t\tn /= 10\n"
        "\t\tcount++\n\t}\n\treturn count\n}\n",
        "add/add.go": "package add\n\nfunc Add(a, b int) int { return a + b }\n",
        "add/add_test.go": 'package add\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n'
        "\tif Add(2, 3) != 5 {\n\t\tt.Fatal(Add(2, 3))\n\t}\n}\n",
        "mul/mul.go": _MUL_BASE,
        "cmd/calc/main.go": 'package main\n\nimport (\n\t"fmt"\n\n\t"example.com/calc/add"\n'
        '\t"example.com/calc/mul"\n)\n\n'
        "func main() { fmt.Println(add.Add(1, 2), mul.Mul(2, 3)) }\n",
    },
    tests={
        "mul/mul_test.go": 'package mul\n\nimport "testing"\n\n'
        "func TestMul(t *testing.T) {\n\tif Mul(2, 3) != 6 {\n\t\tt.Fatal(Mul(2, 3))\n\t}\n}\n\n"
        "func TestMulTable(t *testing.T) {\n\tfor _, c := range []struct{ a, b, want int }{"
        "{-2, 3, -6}, {4, -5, -20}} {\n"
        '\t\tt.Run("case", func(t *testing.T) {\n\t\t\tif got := Mul(c.a, c.b); got != c.want {\n'
        "\t\t\t\tt.Fatal(got)\n\t\t\t}\n\t\t})\n\t}\n}\n\n"
        "func TestMulDigits(t *testing.T) {\n\tif Digits(40, 25) != 4 {\n"
        "\t\tt.Fatal(Digits(40, 25))\n\t}\n}\n"
    },
    gold={"mul/mul.go": _MUL_FIXED},
    broken_gold={"mul/mul.go": _MUL_FIXED.replace("return -product", "return product")},
    failing={
        "env/env_test.go": 'package env\n\nimport (\n\t"os"\n\t"testing"\n)\n\n'
        'func TestEnv(t *testing.T) {\n\tif os.Getenv("SELFBENCH_NO_SUCH") == "" {\n'
        '\t\tt.Fatal("unset")\n\t}\n}\n'
    },
    failing_selector="TestEnv",
    # One -run pattern for the whole selection: the nop-red variant's names both tests.
    nop_red_pass_to_pass=["TestAdd|TestEnv"],
    overrides={
        "setupCommand": "go test -run '^$' ./...",
        "testCommand": "go test ./... -run {tests}",
        "failToPass": ["TestMul"],
        "passToPass": ["TestAdd"],
        "testPaths": ["mul/mul_test.go"],
        "toolchains": ["go"],
    },
    options=GO_OPTIONS,
    runners=("go",),
)

# ---- a workspace: the gold patch adds a module to go.work --------------------------------------

_GREET = (
    'package greet\n\nimport "strings"\n\n'
    '// Hello greets name.\nfunc Hello(name string) string { return "hello " + '
    "strings.TrimSpace(name) }\n"
)
GO_WORK = Project(
    name="real-go-work",
    base={
        "go.work": "go 1.25\n\nuse ./app\n",
        "app/go.mod": "module example.com/app\n\ngo 1.25\n",
        "app/greet/greet.go": _GREET,
        "app/greet/greet_test.go": 'package greet\n\nimport "testing"\n\n'
        'func TestHello(t *testing.T) {\n\tif Hello(" go ") != "hello go" {\n'
        '\t\tt.Fatal(Hello(" go "))\n\t}\n}\n',
        "app/farewell/bye.go": "package farewell\n\n"
        'func Bye(name string) string { return "bye " + name }\n',
        "app/farewell/bye_test.go": 'package farewell\n\nimport "testing"\n\n'
        'func TestBye(t *testing.T) {\n\tif Bye("go") != "bye go" {\n'
        '\t\tt.Fatal(Bye("go"))\n\t}\n}\n',
    },
    tests={
        "app/greet/shout_test.go": 'package greet\n\nimport "testing"\n\n'
        'func TestShout(t *testing.T) {\n\tif Shout("go") != "HELLO GO!" {\n'
        '\t\tt.Fatal(Shout("go"))\n\t}\n}\n'
    },
    gold={
        "go.work": "go 1.25\n\nuse (\n\t./app\n\t./textcase\n)\n",
        "textcase/go.mod": "module example.com/textcase\n\ngo 1.25\n",
        "textcase/upper.go": "package textcase\n\n"
        + steps(20, "//")
        + 'import "strings"\n\n// Upper is s in capitals.\n'
        "func Upper(s string) string { return strings.ToUpper(s) }\n",
        "app/go.mod": "module example.com/app\n\ngo 1.25\n\nrequire example.com/textcase v0.0.0\n",
        "app/greet/shout.go": 'package greet\n\nimport "example.com/textcase"\n\n'
        'func Shout(name string) string { return textcase.Upper(Hello(name)) + "!" }\n',
    },
    broken_gold={
        "app/greet/shout.go": "package greet\n\n"
        + steps(20, "//")
        + 'func Shout(name string) string { return Hello(name) + "!" }\n'
    },
    failing={
        "app/env/env_test.go": 'package env\n\nimport (\n\t"os"\n\t"testing"\n)\n\n'
        'func TestEnv(t *testing.T) {\n\tif os.Getenv("SELFBENCH_NO_SUCH") == "" {\n'
        '\t\tt.Fatal("unset")\n\t}\n}\n'
    },
    failing_selector="./app/env",
    overrides={
        "setupCommand": "go test -run '^$' ./app/...",
        "testCommand": "go test {tests}",
        "failToPass": ["./app/greet"],
        "passToPass": ["./app/farewell"],
        "testPaths": ["app/greet/shout_test.go"],
        "toolchains": ["go"],
    },
    options=GO_OPTIONS,
    runners=("go",),
    gold_manifests=("go.work", "textcase/go.mod", "app/go.mod"),
)


# What test_real_projects.py runs of this family (tests/realistic/python.py says how).
PROJECTS = (
    shaped(GO_VENDORED, "go-vendored", forged=True),
    shaped(GO_MULTI, "go-multi-package-run"),
)
MANIFEST_PROJECTS = (shaped(GO_WORK, "go-work"),)
