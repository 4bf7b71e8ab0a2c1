"""The build-stream parser on streams recorded from a real engine (tests/data/build-streams,
classic builder of Docker 20.10), plus the cases a recording cannot show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.engine.buildlog import BuildStream, is_task_step

STREAMS = Path(__file__).resolve().parents[1] / "data" / "build-streams"


def replay(name: str) -> tuple[BuildStream, list[str]]:
    stream = BuildStream()
    lines: list[str] = []
    for raw in (STREAMS / f"{name}.jsonl").read_text().splitlines():
        chunk: dict[str, Any] = json.loads(raw)
        lines.extend(stream.feed(chunk))
    lines.extend(stream.finish())
    return stream, lines


def test_cold_success() -> None:
    stream, lines = replay("success-cold")
    assert stream.succeeded and stream.failure() == ""
    assert stream.image_id is not None and stream.image_id.startswith("sha256:")
    assert (stream.step_number, stream.total_steps) == (3, 3)
    assert stream.step == "RUN echo two"
    assert stream.cached_steps == 0
    # Lines split across chunks come out whole.
    assert 'Step 2/3 : RUN echo one && printf "partial-no-newline"' in lines
    assert any(line.startswith("partial-no-newline") for line in lines)
    assert len(stream.running) == 2


def test_cached_success_counts_cache_hits() -> None:
    stream, _ = replay("success-cached")
    assert stream.succeeded
    assert stream.cached_steps == 2
    assert stream.running == []


def test_failure_names_the_step_its_exit_code_and_the_last_good_layer() -> None:
    stream, lines = replay("failure")
    assert not stream.succeeded
    assert stream.step == "RUN echo about to fail && exit 3"
    assert stream.exit_code == 3
    assert stream.failure().endswith("returned a non-zero code: 3")
    assert stream.last_layer == "c70defaa8b5d"
    assert "about to fail" in stream.tail
    assert lines[-1].startswith("ERROR: The command")


def test_a_stream_that_ends_without_an_image_id_is_a_failure() -> None:
    stream = BuildStream()
    stream.feed({"stream": "Step 1/1 : FROM x\n"})
    assert not stream.succeeded
    assert stream.failure() == "build stream ended without an image id"


def test_an_error_after_an_image_id_is_still_a_failure() -> None:
    stream = BuildStream()
    stream.feed({"aux": {"ID": "sha256:abc"}})
    stream.feed({"error": "tagging failed"})
    assert not stream.succeeded
    assert stream.failure() == "tagging failed"
    assert stream.exit_code is None


def test_hostile_chunks_do_not_break_the_parser() -> None:
    stream = BuildStream()
    for chunk in (
        {"stream": None},
        {"aux": "not a mapping"},
        {"errorDetail": "text"},
        {"errorDetail": {"code": "x", "message": 5}},
        {"stream": "x" * 100_000},
    ):
        stream.feed(chunk)
    assert not stream.succeeded
    assert len(stream.tail) <= 200


def test_task_steps() -> None:
    marker = ("/opt/selfbench-environment/setup.sh",)
    assert is_task_step("RUN chmod 0755 /opt/selfbench-environment/setup.sh && x", marker)
    assert not is_task_step("RUN bash /opt/selfbench-toolchains/uv.sh", marker)
    assert not is_task_step(None, marker)
