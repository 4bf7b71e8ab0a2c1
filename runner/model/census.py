"""Per-test evidence and the census (pure).

Each test run of tests/test.sh leaves `/logs/verifier/evidence/<run>.json`: the tests its runner
reported (from the verifier's reporters, loaded from outside /app), how each ended, which
selector selected them, and whether the run counts as passed under the evidence rules (SWE-bench
5's): every fail-to-pass selector has tests that ran and passed; a skipped or missing fail-to-pass
test is a failure; pass-to-pass tests may skip but not fail or vanish; a run with no evidence, a
run that ended early, or one whose exit code disagrees with its report is never a pass. A runner
the verifier does not know leaves no evidence and is judged by its exit code.

The census is what the verification that accepts a task saw: the test ids of each selection at
the oracle (and the fail-to-pass ones that failed at nop). It is sealed into the bundle
(tests/expected-tests.json), so the same test.sh grades any later agent, under Harbor too, by the
same ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from runner.base.safeio import optional_regular

EVIDENCE_DIR = "evidence"  # under /logs/verifier: one document per test run
SUMMARY_FILE = "evidence.json"
POLICY_FILE = "policy.json"
MAX_EVIDENCE_BYTES = 64 * 1024 * 1024
CENSUS_SCHEMA_VERSION = 1

# Only "passed" passes a fail-to-pass test; a pass-to-pass test may also skip, fail expectedly
# (xfailed) or pass unexpectedly (xpassed), as it did at the oracle.
Outcome = Literal["passed", "failed", "skipped", "error", "xfailed", "xpassed"]
PASS_TO_PASS_OUTCOMES: tuple[Outcome, ...] = ("passed", "skipped", "xfailed", "xpassed")
Mode = Literal["per-test", "exit-code", "none"]
EXIT_CODE_ONLY = "exit-code evidence only"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="ignore"
    )


class TestResult(_Model):
    id: str
    outcome: Outcome
    file: str | None = None
    # The assertions that passed in it, where the runner counts them (jest's expect() calls).
    asserts: int | None = None


class SelectorEvidence(_Model):
    """What one selector selected in a run (`attributed`: the tests could be told apart by
    selector; otherwise only the selection as a whole is judged)."""

    selector: str
    attributed: bool = False
    strict: bool = False
    ran: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    error: int = 0
    xfailed: int = 0
    xpassed: int = 0
    tests: list[str] = Field(default_factory=list)
    # False when the selector selected nothing at all (a typo, a file that does not exist): `why`
    # says what the runner, or the tree, said. None: it selected something, or no one can tell.
    matched: bool | None = None
    why: str | None = None


class Counts(_Model):
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    error: int = 0
    xfailed: int = 0
    xpassed: int = 0


class StoppedAt(_Model):
    runner: str
    id: str


class RunEvidence(_Model):
    """/logs/verifier/evidence/<run>.json"""

    name: str
    kind: str
    exit_code: int
    mode: Mode
    runners: list[str] = Field(default_factory=list)
    sealed: bool = False
    complete: bool = False
    counts: Counts = Field(default_factory=Counts)
    tests: list[TestResult] = Field(default_factory=list)
    selectors: list[SelectorEvidence] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    passed: bool = False
    # The hack gate's runs: the first failed test, at which the verifier stopped the run.
    stopped: StoppedAt | None = None

    def ids(self, *outcomes: Outcome) -> list[str]:
        return [t.id for t in self.tests if not outcomes or t.outcome in outcomes]


class PolicyChange(_Model):
    """One path the agent's patch changed, and what the patch policy did with it."""

    path: str
    status: str  # git's: A, M, D, T
    verdict: Literal["keep", "undo", "held-out"]
    reason: str


class PolicyCheck(_Model):
    """One patch through the verifier's patch policy without tests (verifier.pl policy-check):
    whether it applies, how many of its changes the policy keeps, how many of its undone ones a
    trusted manifest would replace."""

    applied: bool
    kept: int
    restores: int
    changes: list[PolicyChange] = Field(default_factory=list)

    @property
    def leaves_nop_tree(self) -> bool:
        """It applies, and the policy undoes every change back to the post-setup tree."""
        return self.applied and self.kept == 0 and self.restores == 0


def parse_policy_check(raw: bytes) -> dict[str, PolicyCheck]:
    """policy-check's document: each patch's name to its check. A malformed document is an
    empty one (every patch then goes to a verifier of its own)."""
    try:
        document = json.loads(raw)
        if not isinstance(document, dict):
            return {}
        return {str(k): PolicyCheck.model_validate(v) for k, v in document.items()}
    except (ValueError, ValidationError):
        return {}


class SelectionCensus(_Model):
    mode: Mode
    runners: list[str] = Field(default_factory=list)
    tests: list[str] = Field(default_factory=list)
    selectors: dict[str, list[str]] = Field(default_factory=dict)
    # The tests that passed assertions at the oracle (where the runner counts them): each must
    # pass at least one again (an agent must not take the assertions away).
    asserts: dict[str, int] = Field(default_factory=dict)


class Census(_Model):
    """tests/expected-tests.json once sealed."""

    schema_version: Literal[1] = 1
    sealed: Literal[True] = True
    fail_to_pass: SelectionCensus
    pass_to_pass: SelectionCensus
    failed_at_nop: list[str] = Field(default_factory=list)
    run_id: str
    runner_version: str

    @property
    def exit_code_only(self) -> bool:
        return self.fail_to_pass.mode != "per-test"

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


class CensusError(ValueError):
    """The census cannot be made from these runs."""


def read_run(directory: Path, name: str) -> RunEvidence | None:
    """One run's evidence document from a verifier's copied-out logs (None: the run did not
    happen, or left no readable document)."""
    raw = optional_regular(directory / EVIDENCE_DIR / f"{name}.json", limit=MAX_EVIDENCE_BYTES)
    if raw is None:
        return None
    try:
        return RunEvidence.model_validate_json(raw)
    except ValidationError:
        return None


def read_policy(directory: Path, limit: int = 500) -> list[PolicyChange]:
    raw = optional_regular(directory / POLICY_FILE, limit=MAX_EVIDENCE_BYTES)
    if raw is None:
        return []
    try:
        document = json.loads(raw)
        changes = document.get("changes") if isinstance(document, dict) else None
        if not isinstance(changes, list):
            return []
        return [PolicyChange.model_validate(c) for c in changes[:limit]]
    except (ValueError, ValidationError):
        return []


def build_census(
    *,
    nop_fail_to_pass: RunEvidence | None,
    oracle_fail_to_pass: RunEvidence,
    oracle_pass_to_pass: RunEvidence | None,
    run_id: str,
    runner_version: str,
) -> Census:
    """The census of a verification whose nop and oracle passed."""
    f2p = oracle_fail_to_pass
    if f2p.mode == "per-test":
        passed = f2p.ids("passed")
        if not passed:
            raise CensusError("the oracle's fail-to-pass run reported no passing test")
        seen = set(passed)
        fail_to_pass = SelectionCensus(
            mode="per-test",
            runners=list(f2p.runners),
            tests=passed,
            selectors={
                s.selector: [t for t in s.tests if t in seen] for s in f2p.selectors if s.attributed
            },
            asserts={t.id: t.asserts for t in f2p.tests if t.outcome == "passed" and t.asserts},
        )
        failed_at_nop = (
            [t for t in nop_fail_to_pass.ids("failed", "error") if t in seen]
            if nop_fail_to_pass is not None and nop_fail_to_pass.mode == "per-test"
            else []
        )
    else:
        fail_to_pass = SelectionCensus(mode="exit-code")
        failed_at_nop = []
    p2p = oracle_pass_to_pass
    if p2p is None or p2p.mode == "none":
        pass_to_pass = SelectionCensus(mode="none")
    elif p2p.mode == "per-test":
        pass_to_pass = SelectionCensus(
            mode="per-test", runners=list(p2p.runners), tests=p2p.ids(*PASS_TO_PASS_OUTCOMES)
        )
    else:
        pass_to_pass = SelectionCensus(mode="exit-code")
    return Census(
        fail_to_pass=fail_to_pass,
        pass_to_pass=pass_to_pass,
        failed_at_nop=failed_at_nop,
        run_id=run_id,
        runner_version=runner_version,
    )


def read_census(raw: bytes | None) -> Census | None:
    """A sealed census, or None (absent, unsealed, or not one)."""
    if raw is None:
        return None
    try:
        return Census.model_validate_json(raw)
    except ValidationError:
        return None


# ---- what the report shows ---------------------------------------------------------------------


class SelectorSummary(_Model):
    kind: Literal["failToPass", "passToPass"]
    selector: str
    attributed: bool
    ran: int | None = None
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    error: int | None = None
    # False (with why) when the selector selected no test at all.
    matched: bool | None = None
    why: str | None = None


class RunSummary(_Model):
    name: str
    passed: bool
    exit_code: int
    complete: bool
    counts: Counts
    problems: list[str] = Field(default_factory=list)
    missing: int = 0


class EvidenceSummary(_Model):
    """A verifier run's evidence, for the report: the mode ("per-test", or "exit-code evidence
    only" for a runner the verifier does not know), per selector what ran, passed, failed and
    was skipped, and each run's problems."""

    mode: Mode
    runners: list[str] = Field(default_factory=list)
    sealed: bool = False
    note: str | None = None
    runs: list[RunSummary] = Field(default_factory=list)
    selectors: list[SelectorSummary] = Field(default_factory=list)


RUN_NAMES = ("fail_to_pass", "fail_to_pass_repeat", "pass_to_pass")


def summarize(directory: Path) -> EvidenceSummary | None:
    """The evidence of a verifier run from its copied-out logs (None: no test ran)."""
    runs = {name: read_run(directory, name) for name in RUN_NAMES}
    present = {name: run for name, run in runs.items() if run is not None}
    if not present:
        return None
    leading = next((r for r in present.values() if r.mode != "none"), next(iter(present.values())))
    summary = EvidenceSummary(
        mode=leading.mode,
        runners=list(leading.runners),
        sealed=leading.sealed,
        note=EXIT_CODE_ONLY if leading.mode == "exit-code" else None,
        runs=[
            RunSummary(
                name=name,
                passed=run.passed,
                exit_code=run.exit_code,
                complete=run.complete,
                counts=run.counts,
                problems=run.problems,
                missing=len(run.missing),
            )
            for name, run in present.items()
        ],
    )
    for name, kind in (("fail_to_pass", "failToPass"), ("pass_to_pass", "passToPass")):
        run = present.get(name)
        if run is None:
            continue
        for selector in run.selectors:
            summary.selectors.append(
                SelectorSummary(
                    kind=kind,  # type: ignore[arg-type]
                    selector=selector.selector,
                    attributed=selector.attributed,
                    ran=selector.ran if selector.attributed else None,
                    passed=selector.passed if selector.attributed else None,
                    failed=selector.failed if selector.attributed else None,
                    skipped=selector.skipped if selector.attributed else None,
                    error=selector.error if selector.attributed else None,
                    matched=selector.matched,
                    why=selector.why,
                )
            )
    return summary


@dataclass(frozen=True)
class Unmatched:
    """A selector that selected no test in some run of a verifier (a typo, a missing file)."""

    kind: Literal["failToPass", "passToPass"]
    selector: str
    why: str

    def sentence(self) -> str:
        which = "fail-to-pass" if self.kind == "failToPass" else "pass-to-pass"
        return f"{which} selector {self.selector} matched no test ({self.why})"


def unmatched_selectors(directory: Path) -> list[Unmatched]:
    """Every selector that some run of this verifier found selecting nothing, once each."""
    found: dict[tuple[str, str], Unmatched] = {}
    folder = directory / EVIDENCE_DIR
    names = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
    for name in names:
        kind: Literal["failToPass", "passToPass"] = (
            "passToPass" if name.startswith("pass_to_pass") else "failToPass"
        )
        run = read_run(directory, name)
        for selector in run.selectors if run is not None else []:
            if selector.matched is False and (kind, selector.selector) not in found:
                found[(kind, selector.selector)] = Unmatched(
                    kind=kind, selector=selector.selector, why=selector.why or "no test selected"
                )
    return list(found.values())


def first_problem(directory: Path, name: str) -> str | None:
    run = read_run(directory, name)
    return run.problems[0] if run is not None and run.problems else None


def ids_changed(directory: Path) -> list[str]:
    """Test ids the fail-to-pass run and its repeat disagree on (tests whose ids are not stable
    cannot be graded by a census)."""
    first, second = read_run(directory, "fail_to_pass"), read_run(directory, "fail_to_pass_repeat")
    if first is None or second is None or first.mode != "per-test" or second.mode != "per-test":
        return []
    a, b = set(first.ids()), set(second.ids())
    return sorted(a ^ b)


# ---- sealing -------------------------------------------------------------------------------------

CENSUS_PATH = "tests/expected-tests.json"
MANIFEST_PATH = ".selfbench-manifest.json"


def _link_or_copy(source: str, destination: str) -> None:
    import os
    import shutil

    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def seal(bundle: Path, census: Census, out: Path) -> Path:
    """The bundle with its census sealed in, at `out` (the bundle itself when it is already
    there; else a copy, its large files linked): tests/expected-tests.json, recorded in the
    manifest with its digest. Returns `out`."""
    import hashlib
    import shutil

    from runner.base.safeio import write_atomic

    if bundle.resolve() != out.resolve():
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(bundle, out, symlinks=True, copy_function=_link_or_copy)
    text = census.to_json()
    target = out / CENSUS_PATH
    target.unlink(missing_ok=True)  # a linked copy must not write through to the original
    write_atomic(target, text)
    manifest_path = out / MANIFEST_PATH
    raw = optional_regular(manifest_path, limit=MAX_EVIDENCE_BYTES)
    document = json.loads(raw) if raw else {}
    if not isinstance(document, dict):
        document = {}
    # The seal: every file of the bundle as the verification left it (grade compares it).
    document["seal"] = {"files": bundle_digests(out)}
    document["census"] = {
        "file": CENSUS_PATH,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "runId": census.run_id,
        "failToPass": census.fail_to_pass.mode,
        "passToPass": census.pass_to_pass.mode,
        "tests": len(census.fail_to_pass.tests) + len(census.pass_to_pass.tests),
    }
    manifest_path.unlink(missing_ok=True)
    write_atomic(manifest_path, json.dumps(document, indent=2) + "\n")
    return out


def bundle_digests(root: Path) -> dict[str, str]:
    """The sha256 of every file of a bundle but its manifest, by relative path; a link or a
    special file is recorded as such (a sealed bundle holds regular files only)."""
    import hashlib
    import os
    import stat

    digests: dict[str, str] = {}
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(Path(directory, d))]):
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            if relative == MANIFEST_PATH:
                continue
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                digests[relative] = "not a regular file"
                continue
            sha = hashlib.sha256()
            with path.open("rb") as handle:
                for chunk in iter(lambda: handle.read(1024 * 1024), b""):
                    sha.update(chunk)
            digests[relative] = sha.hexdigest()
    return digests


def seal_problem(root: Path) -> str | None:
    """Why a bundle does not match its seal (None when it does): no seal, or the first file
    changed, added or removed since the verification that sealed it."""
    raw = optional_regular(root / MANIFEST_PATH, limit=MAX_EVIDENCE_BYTES)
    try:
        document = json.loads(raw) if raw else None
    except ValueError:
        return f"{MANIFEST_PATH} is not JSON"
    seal = document.get("seal") if isinstance(document, dict) else None
    files = seal.get("files") if isinstance(seal, dict) else None
    if not isinstance(files, dict):
        return "it has no seal (no verification accepted it)"
    now = bundle_digests(root)
    for name in sorted(set(files) | set(now)):
        if name not in now:
            return f"{name} is gone since it was sealed"
        if name not in files:
            return f"{name} was added after it was sealed"
        if now[name] != files[name]:
            return f"{name} changed after it was sealed"
    return None
