"""A local runner for the repository's GitHub Actions workflow and composite action, enough to
run `.github/workflows/selfbench.yml` end to end on this machine (act needs GitHub's images and
network, which this machine has not).

It does what the Actions runner does with the features the workflow uses, and refuses any other:
jobs in `needs` order with their `if` (a job whose needs did not all succeed is skipped unless
its condition calls `always()`), a job's matrix from `fromJSON(...)` with one run of its steps per
leg (a failed leg fails the job, `fail-fast: false`), `run` steps in `bash -e -o pipefail` with
`env` and `GITHUB_OUTPUT`/`GITHUB_STEP_SUMMARY`, step and job outputs, `uses: ./` (the composite
action, its inputs and outputs), and the artifact actions as a directory per artifact. The
checkout and setup-python actions do nothing: the job runs in the repository, with the Python
and the commands on PATH the caller gives. `${{ }}` reads contexts and compares strings; an
expression or `uses` it does not know raises, so a workflow that outgrows it fails the test
rather than passing untried.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
TOKEN = re.compile(r"\s*(&&|\|\||==|!=|\(|\)|!|'[^']*'|[A-Za-z_][\w.-]*(?:\(\))?)")
NO_OPS = ("actions/checkout@", "actions/setup-python@")


class UnsupportedError(Exception):
    """The workflow uses something this runner does not do."""


def lookup(path: str, contexts: dict[str, Any]) -> Any:
    value: Any = contexts
    for part in path.split("."):
        if not isinstance(value, dict):
            raise UnsupportedError(f"cannot read {path}")
        if part not in value:
            # GitHub reads a missing property as null (an empty string where text is wanted).
            return ""
        value = value[part]
    return value


def evaluate(expression: str, contexts: dict[str, Any]) -> Any:
    """`fromJSON(x)`, a context path, a string literal, `always()`, `!`, `==`, `!=`, `&&`, `||`."""
    call = re.fullmatch(r"fromJSON\((.*)\)", expression)
    if call:
        return json.loads(str(evaluate(call.group(1), contexts)))
    tokens: list[str] = []
    rest = expression
    while rest.strip():
        match = TOKEN.match(rest)
        if match is None:
            raise UnsupportedError(f"expression {expression!r}")
        tokens.append(match.group(1))
        rest = rest[match.end() :]
    python: list[str] = []
    values: dict[str, Any] = {}
    for token in tokens:
        if token in ("&&", "||"):
            python.append(" and " if token == "&&" else " or ")
        elif token == "!":
            python.append(" not ")
        elif token in ("==", "!=", "(", ")"):
            python.append(token)
        elif token == "always()":
            python.append("True")
        elif token.startswith("'"):
            python.append(repr(token[1:-1]))
        elif token in ("true", "false"):
            python.append(str(token == "true"))
        else:
            name = f"v{len(values)}"
            values[name] = lookup(token, contexts)
            python.append(name)
    # Only the tokens above reach eval: names are bound to values, literals are repr()s.
    return eval("".join(python), {"__builtins__": {}}, values)


def holds(condition: str, contexts: dict[str, Any]) -> bool:
    """A job's or step's `if` (`success()` is what the caller already knows)."""
    return condition == "success()" or bool(
        evaluate(condition.replace("success()", "true"), contexts)
    )


def text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def substitute(value: Any, contexts: dict[str, Any]) -> Any:
    if not isinstance(value, str):
        return value
    whole = EXPRESSION.fullmatch(value.strip())
    if whole:
        return evaluate(whole.group(1), contexts)
    return EXPRESSION.sub(lambda m: text(evaluate(m.group(1), contexts)), value)


@dataclass
class Runner:
    """One workflow run: the repository it runs in, the environment its steps get (PATH with
    the stand-ins the caller made), and where artifacts and the runner's scratch go."""

    repo: Path
    env: dict[str, str]
    scratch: Path
    event: dict[str, Any] = field(default_factory=dict)
    summaries: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)

    @property
    def artifacts(self) -> Path:
        return self.scratch / "artifacts"

    def run_workflow(self, workflow: Path) -> dict[str, dict[str, Any]]:
        """Every job's result and outputs, by job id."""
        document = yaml.safe_load(workflow.read_text())
        jobs: dict[str, dict[str, Any]] = document["jobs"]
        done: dict[str, dict[str, Any]] = {}
        while len(done) < len(jobs):
            for job_id, job in jobs.items():
                needs = job.get("needs", [])
                needs = [needs] if isinstance(needs, str) else needs
                if job_id in done or not all(n in done for n in needs):
                    continue
                done[job_id] = self._job(job_id, job, {n: done[n] for n in needs})
        return done

    def _job(self, job_id: str, job: dict[str, Any], needs: dict[str, Any]) -> dict[str, Any]:
        contexts: dict[str, Any] = {
            "github": {"event": self.event, "job": job_id, "run_attempt": "1"},
            "needs": needs,
        }
        condition = str(job.get("if", "success()"))
        needs_ok = all(n["result"] == "success" for n in needs.values())
        if "always()" not in condition and not needs_ok:
            return {"result": "skipped", "outputs": {}}
        if condition != "success()" and not evaluate(
            condition.replace("success()", "true"), contexts
        ):
            return {"result": "skipped", "outputs": {}}
        matrix = job.get("strategy", {}).get("matrix")
        legs = [{}] if matrix is None else list(substitute(matrix, contexts)["include"])
        result, outputs = "success", {}
        for leg in legs:
            leg_contexts = {**contexts, "matrix": leg}
            steps_ok, steps = self._steps(job["steps"], leg_contexts, self.repo)
            if not steps_ok:
                result = "failure"
            for name, value in job.get("outputs", {}).items():
                outputs[name] = text(substitute(value, {**leg_contexts, "steps": steps}))
        return {"result": result, "outputs": outputs}

    def _steps(
        self, steps: list[dict[str, Any]], contexts: dict[str, Any], action_path: Path
    ) -> tuple[bool, dict[str, Any]]:
        results: dict[str, Any] = {}
        ok = True
        for step in steps:
            here = {**contexts, "steps": results}
            here["github"] = {**contexts["github"], "action_path": str(action_path)}
            condition = str(step.get("if", "success()"))
            if "always()" not in condition and not ok:
                continue
            if condition != "success()" and not evaluate(
                condition.replace("success()", "true"), here
            ):
                continue
            outputs: dict[str, str] = {}
            if "run" in step:
                passed, outputs = self._run(step, here)
            else:
                passed, outputs = self._uses(step, here)
            ok = ok and passed
            if "id" in step:
                results[step["id"]] = {
                    "outputs": outputs,
                    "outcome": "success" if passed else "failure",
                }
        return ok, results

    def _run(self, step: dict[str, Any], contexts: dict[str, Any]) -> tuple[bool, dict[str, str]]:
        shell = step.get("shell", "bash")
        if shell != "bash":
            raise UnsupportedError(f"shell {shell}")
        work = self.scratch / "step"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        output, summary, script = work / "output", work / "summary", work / "script.sh"
        added_path = work / "path"
        for made in (output, summary, added_path):
            made.touch()
        script.write_text(substitute(step["run"], contexts))
        env = {
            **self.env,
            **{k: text(substitute(v, contexts)) for k, v in step.get("env", {}).items()},
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_PATH": str(added_path),
            "GITHUB_ACTIONS": "true",
            "RUNNER_TEMP": str(self.scratch / "temp"),
        }
        (self.scratch / "temp").mkdir(exist_ok=True)
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", str(script)],
            cwd=self.repo,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        self.logs.append(done.stdout + done.stderr)
        self.summaries.append(summary.read_text())
        for directory in added_path.read_text().splitlines():
            self.env["PATH"] = f"{directory}{os.pathsep}{self.env['PATH']}"
        outputs = {}
        for line in output.read_text().splitlines():
            name, _, value = line.partition("=")
            outputs[name] = value
        return done.returncode == 0, outputs

    def _uses(self, step: dict[str, Any], contexts: dict[str, Any]) -> tuple[bool, dict[str, str]]:
        uses = str(step["uses"])
        given = {k: text(substitute(v, contexts)) for k, v in step.get("with", {}).items()}
        if uses.startswith(NO_OPS):
            return True, {}
        if uses.startswith("actions/upload-artifact@"):
            source = Path(given["path"])
            if source.exists():
                shutil.copytree(source, self.artifacts / given["name"])
            return True, {}
        if uses.startswith("actions/download-artifact@"):
            target = self.repo / given["path"]
            pattern = re.escape(given["pattern"]).replace(r"\*", ".*")
            for artifact in sorted(self.artifacts.glob("*")):
                if re.fullmatch(pattern, artifact.name):
                    shutil.copytree(artifact, target / artifact.name)
            return True, {}
        if uses == "./":
            return self._composite(self.repo / "action.yml", given, contexts)
        raise UnsupportedError(f"uses: {uses}")

    def _composite(
        self, action: Path, given: dict[str, str], contexts: dict[str, Any]
    ) -> tuple[bool, dict[str, str]]:
        document = yaml.safe_load(action.read_text())
        inputs = {
            name: given.get(name, text(spec.get("default", "")))
            for name, spec in document.get("inputs", {}).items()
        }
        unknown = set(given) - set(inputs)
        if unknown:
            raise UnsupportedError(f"inputs the action does not declare: {sorted(unknown)}")
        here = {**contexts, "inputs": inputs}
        ok, steps = self._steps(document["runs"]["steps"], here, action.parent)
        outputs = {
            name: text(substitute(spec["value"], {**here, "steps": steps}))
            for name, spec in document.get("outputs", {}).items()
        }
        return ok, outputs


def stand_in(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text(script)
    path.chmod(0o755)


def environ(bin_dir: Path) -> dict[str, str]:
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", "/root"),
    }
