"""Measure: how often a forger that reads the written held-out file finds the real test among its
canaries, against a blind pick (docs/gates.md, "What is still open").

For each real-shaped project (tests/realistic) and a number of seeds, the canaries are derived as
the compiler derives them and written as the verifier writes them; each test's group (the test
and its copies, as a forger groups them by their bodies) is read back, and each heuristic picks
one member. A heuristic never sees which member is the test; the centre of a group (the member
nearest to the others) is left out of the pick once the group has three members or more, since
the pivot, a canary, sits there. Prints per project and heuristic the ratio of hits to a blind
pick's, and the chance that a forger picks the test of every group of a task (its ratio too).

Usage: python scripts/canary_forgers.py [--seeds N] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from tests import realistic  # noqa: E402
from tests.realistic import Project  # noqa: E402
from tests.unit.test_canaries import canaries_of, held, written  # noqa: E402

PROJECTS = (
    "UV_MONOREPO", "PIP_UNITTEST", "SETUPTOOLS", "PDM", "JEST", "VITEST", "MOCHA", "NODE_TEST",
    "BUN", "GO_VENDORED", "GO_MULTI", "GO_WORK",
)  # fmt: skip
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_CHANGE = re.compile(r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[\d.]+) -> ")


@dataclass
class Member:
    name: str
    values: list[str]
    test: bool


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name) if w.lower() != "test"]


def _apart(a: Member, b: Member) -> int:
    """Words of the names added, dropped or replaced, plus values that differ."""
    x, y = _words(a.name), _words(b.name)
    row = list(range(len(y) + 1))
    for i, p in enumerate(x, 1):
        last, row[0] = row[0], i
        for j, q in enumerate(y, 1):
            last, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, last + (p != q))
    return row[-1] + sum(v != w for v, w in zip(a.values, b.values, strict=False))


def _one_move(a: str, b: str) -> bool:
    """Whether `b` is one move of `a` as copies are made: a number by 1 to 5, a string by one
    word (or a letter)."""
    try:
        return 0 < abs(float(a) - float(b)) <= 5
    except ValueError:
        pass
    words_a: list[str] = re.findall(r"\w+", a)
    words_b: list[str] = re.findall(r"\w+", b)
    if len(words_a) == len(words_b):
        return sum(x != y for x, y in zip(words_a, words_b, strict=True)) == 1
    return abs(len(a) - len(b)) <= 1


Score = Callable[[Member, Member, Counter[str]], float]
HEURISTICS: dict[str, Score] = {
    "the shortest name": lambda m, centre, counts: -len(_words(m.name)),
    "the centre's name less a word": lambda m, centre, counts: float(
        len(_words(m.name)) == len(_words(centre.name)) - 1
        and set(_words(m.name)) <= set(_words(centre.name))
    ),
    "a name word spelled once": lambda m, centre, counts: sum(
        counts[w] == 1 for w in _words(m.name)
    ),
    "a value not one move of the centre's": lambda m, centre, counts: float(
        not all(_one_move(c, v) for c, v in zip(centre.values, m.values, strict=False))
    ),
}


def groups_of(project: Project, seed: str) -> tuple[list[list[Member]], Counter[str]]:
    overrides = project.overrides
    (path, raw), *_ = project.tests.items()
    text = raw.decode() if isinstance(raw, bytes) else raw or ""
    found = canaries_of(
        overrides["testCommand"], list(overrides["failToPass"]), held(path, text),
        workdir=overrides.get("workdir", "."), seed=seed,
    )  # fmt: skip
    counts = Counter(w.lower() for w in _WORD.findall(written(found, path, text)))
    by_test: dict[str, list[Member]] = {}
    for canary in found.canaries:
        pairs = _CHANGE.findall(canary.mutation)
        news = re.findall(r" -> ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[\d.]+)", canary.mutation)
        group = by_test.setdefault(canary.of, [Member(canary.of, list(pairs), True)])
        group.append(Member(canary.name, news, False))
    return list(by_test.values()), counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    chosen = [n for n in PROJECTS if not args.only or n in args.only.split(",")]
    print("| project | heuristic | per group (x blind) | whole task | blind task |")
    print("|---|---|---:|---:|---:|")
    for name in chosen:
        project = getattr(realistic, name)
        samples = [groups_of(project, f"{name}-{seed}") for seed in range(args.seeds)]
        for label, score in HEURISTICS.items():
            hits = blind = task = task_blind = 0.0
            for groups, counts in samples:
                whole = whole_blind = 1.0
                for members in groups:
                    centre = min(members, key=lambda m: sum(_apart(m, o) for o in members))
                    rest = [m for m in members if len(members) < 3 or m is not centre]
                    scores = [score(m, centre, counts) for m in rest]
                    top = [m for m, s in zip(rest, scores, strict=True) if s == max(scores)]
                    hit = sum(m.test for m in top) / len(top)
                    hits, blind = hits + hit, blind + 1 / len(rest)
                    whole, whole_blind = whole * hit, whole_blind / len(rest)
                task, task_blind = task + whole, task_blind + whole_blind
            ratio = hits / blind if blind else float("nan")
            n = len(samples)
            print(f"| {name} | {label} | {ratio:.2f} | {task / n:.3f} | {task_blind / n:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
