"""The rendered Dockerfiles cut where the task's code runs (runner.plan.dockerfile): every task
step is a piece of its own, the runner's instructions around it rebuild exactly as written, ARGs
stay in scope, and the builder's step numbers map back to the whole file's."""

from __future__ import annotations

import pytest

from runner.plan.dockerfile import (
    Chunk,
    DockerfileError,
    LimitedRun,
    instructions,
    split,
)
from tests.unit.test_render import rendered_example

SETUP = "/opt/selfbench-environment/setup.sh"


def test_the_example_s_images_cut_at_setup_and_at_the_verifier_s_preparation() -> None:
    files = rendered_example()
    agent = split(files["environment/Dockerfile"].decode())
    verifier = split(files["tests/Dockerfile"].decode())
    kinds = [type(p).__name__ for p in agent.pieces]
    assert kinds == ["Chunk", "LimitedRun", "Chunk"]
    assert [type(p).__name__ for p in verifier.pieces] == [
        "Chunk",
        "LimitedRun",
        "Chunk",
        "LimitedRun",
        "Chunk",
    ]
    # The agent's and the verifier's text are one up to the setup step: one cache for both.
    assert agent.pieces[0] == verifier.pieces[0]
    assert agent.pieces[1] == verifier.pieces[1]
    setup = agent.pieces[1]
    assert isinstance(setup, LimitedRun)
    assert setup.argv[:2] == ("/bin/sh", "-c") and SETUP in setup.argv[2]
    assert "\\\n" not in setup.argv[2] and "touch /opt/selfbench-environment" in setup.argv[2]
    prepare = verifier.pieces[3]
    assert isinstance(prepare, LimitedRun) and "prepare-image" in prepare.argv[2]
    # Every instruction is in exactly one piece, in order.
    steps: list[int] = []
    for piece in verifier.pieces:
        if isinstance(piece, Chunk):
            steps += [i.step for i in piece.instructions]
        else:
            steps.append(piece.instruction.step)
    assert steps == list(range(1, verifier.total_steps + 1))


def test_a_later_chunk_is_built_from_its_parent_with_the_args_in_scope() -> None:
    text = (
        "# generated\nARG BASE_IMAGE=x\nFROM ${BASE_IMAGE}\nARG TOOL_SOURCE\n"
        "ARG MIRROR=none\nRUN echo $TOOL_SOURCE \\\n    # a comment inside\n    && true\n"
        f"RUN cd /app \\\n    && {SETUP}\nCOPY a.txt b/ /dest/\nRUN done\n"
    )
    stepped = split(text)
    first, step, last = stepped.pieces
    assert isinstance(first, Chunk) and isinstance(step, LimitedRun) and isinstance(last, Chunk)
    assert first.dockerfile("ignored").startswith("ARG BASE_IMAGE=x\nFROM ${BASE_IMAGE}\n")
    assert "# a comment" not in first.dockerfile(None)
    assert step.args == (("TOOL_SOURCE", None), ("MIRROR", "none"))
    assert step.argv == ("/bin/sh", "-c", f"cd /app     && {SETUP}")
    assert last.dockerfile("sha256:abc") == (
        "FROM sha256:abc\nARG TOOL_SOURCE\nARG MIRROR=none\nCOPY a.txt b/ /dest/\nRUN done\n"
    )
    assert last.sources() == ["a.txt", "b"]
    # The builder numbers the chunk's own Dockerfile: its FROM and ARG lines are not the task's.
    assert last.header_steps == 3
    assert last.step_of(1) is None and last.step_of(3) is None
    assert last.step_of(4) == last.instructions[0] and last.instructions[0].step == 7
    assert stepped.total_steps == 8


def test_a_json_form_task_step_keeps_its_argv() -> None:
    stepped = split(f'FROM x\nRUN ["{SETUP}", "--flag"]\n')
    step = stepped.pieces[1]
    assert isinstance(step, LimitedRun) and step.argv == (SETUP, "--flag")


def test_a_pattern_in_copy_sends_the_whole_context() -> None:
    chunk = split("FROM x\nCOPY *.sh /opt/\n").pieces[0]
    assert isinstance(chunk, Chunk) and chunk.sources() is None


@pytest.mark.parametrize(
    "text",
    [
        "FROM a\nFROM b\n",
        f"RUN {SETUP}\nFROM a\n",
        "FROM a\nRUN x \\\n",
        "FROM a\n&& nothing\n",
    ],
)
def test_a_dockerfile_of_another_shape_is_refused(text: str) -> None:
    with pytest.raises(DockerfileError):
        split(text)


def test_no_task_step_means_one_chunk() -> None:
    stepped = split("FROM x\nRUN apt-get update\n")
    assert not stepped.limited and len(stepped.pieces) == 1
    assert [i.keyword for i in instructions("from x\nrun y\n")] == ["FROM", "RUN"]
