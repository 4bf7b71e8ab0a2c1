"""A bash runner script, judged by exit codes: the fallback for custom commands."""

from __future__ import annotations

from tests.helpers import LIB_BASE, LIB_GOLD, RUNNER_SH
from tests.realistic.project import Project, shaped

# ---- a bash runner script (exit-code evidence) -----------------------------------------------

BASH_RUNNER = Project(
    name="real-bash",
    base={
        "lib.sh": LIB_BASE,
        "tests/run.sh": RUNNER_SH,
        "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
    },
    tests={"tests/test_new.sh": '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n'},
    gold={"lib.sh": LIB_GOLD},
    broken_gold={"lib.sh": LIB_GOLD.replace('shout() { shout_0 "$@"; }', 'shout() { echo "$@"; }')},
    failing={"tests/test_env.sh": '[ -n "${SELFBENCH_NO_SUCH:-}" ]\n'},
    failing_selector="tests/test_env.sh",
    overrides={
        "testCommand": "bash tests/run.sh {tests}",
        "failToPass": ["tests/test_new.sh"],
        "passToPass": ["tests/test_old.sh"],
        "testPaths": ["tests/test_new.sh"],
    },
    failed_words="FAIL tests/",
    evidence="exit-code",
)


# What test_real_projects.py runs of this family (tests/realistic/python.py says how).
PROJECTS = (shaped(BASH_RUNNER, "exit-code-bash", forged=True),)
MANIFEST_PROJECTS: tuple[Project, ...] = ()
