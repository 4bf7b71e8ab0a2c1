"""Judgement (pure): the seeds' pass criteria per gate, the verdict, and reasons that say what
happened. Every gate's rule is in this package, one module per gate, and nowhere else:

- images: the build and smoke gates;
- trials: nop, oracle (their reward; the selectors that must fail or pass alone), determinism;
- probe: the flakiness probe;
- hack: the hack gate (every canned exploit earns 0);
- grade: a graded patch;
- verdict: the verdict from the stages' statuses, and the marks an interrupt or an internal
  error leaves on them (judge_report: the whole run's judgement, which the report copies).

The runner knows when it stopped something itself (a deadline, the storage watchdog) and reads
what the limits did from the container's cgroup (base), so a fork bomb held by the pids limit
is never reported as an out-of-memory kill, nor the runner's own kill as one.
"""

from runner.judge.base import (
    Judgement,
    errored,
    failed,
    limit_notes,
    limits_data,
    passed,
    storage_reason,
    with_limit_notes,
)
from runner.judge.grade import (
    grade_detail,
    judge_grade,
    some_of,
    undone_words,
)
from runner.judge.hack import (
    ExploitEvidence,
    ExploitVerdict,
    judge_exploit,
    judge_hack,
    runner_proof,
)
from runner.judge.images import (
    judge_build,
    judge_smoke,
)
from runner.judge.probe import (
    graded_alike,
    judge_probe,
    passing_canaries,
    probe_outcome,
    selector_rates,
)
from runner.judge.trials import (
    TrialEvidence,
    evaluate_gate,
    judge_determinism,
    judge_selectors,
    judge_trial,
    network_sign,
    tests_failed,
)
from runner.judge.verdict import (
    Mark,
    RunJudgement,
    StageView,
    decide_verdict,
    interrupt_marks,
    judge_internal_error,
    judge_report,
    judge_run,
    verdict_reason,
)

__all__ = [
    "ExploitEvidence",
    "ExploitVerdict",
    "Judgement",
    "Mark",
    "RunJudgement",
    "StageView",
    "TrialEvidence",
    "decide_verdict",
    "errored",
    "evaluate_gate",
    "failed",
    "grade_detail",
    "graded_alike",
    "interrupt_marks",
    "judge_build",
    "judge_determinism",
    "judge_exploit",
    "judge_grade",
    "judge_hack",
    "judge_internal_error",
    "judge_probe",
    "judge_report",
    "judge_run",
    "judge_selectors",
    "judge_smoke",
    "judge_trial",
    "limit_notes",
    "limits_data",
    "network_sign",
    "passed",
    "passing_canaries",
    "probe_outcome",
    "runner_proof",
    "selector_rates",
    "some_of",
    "storage_reason",
    "tests_failed",
    "undone_words",
    "verdict_reason",
    "with_limit_notes",
]
