"""The classic builder's JSON stream, parsed (pure): steps, cache hits, the last good layer,
the step container that is running, the image id, and the error.

A chunk with `error`/`errorDetail`, or a stream that ends without an image id, is a failed
build whatever the HTTP status (SWE-bench's harness learned this). Lines may arrive split across
chunks; they are reassembled before they are read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_SUCCESS = re.compile(r"^Successfully built ([0-9a-f]{12,64})\s*$")
_NONZERO = re.compile(r"returned a non-zero code: (\d+)")
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")
_RUNNING = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})\s*$")
MAX_TAIL = 200


@dataclass
class BuildStream:
    step: str | None = None
    step_number: int = 0
    total_steps: int = 0
    cached_steps: int = 0
    last_layer: str | None = None
    running: list[str] = field(default_factory=list)
    image_id: str | None = None
    error: str | None = None
    exit_code: int | None = None
    tail: list[str] = field(default_factory=list)
    _partial: str = ""

    def feed(self, chunk: Mapping[str, Any]) -> list[str]:
        """Read one decoded chunk; returns the complete log lines it finished."""
        lines: list[str] = []
        stream = chunk.get("stream")
        if isinstance(stream, str):
            text = self._partial + stream
            *complete, self._partial = text.split("\n")
            for line in complete:
                self._line(line.rstrip("\r"))
                lines.append(line.rstrip("\r"))
        aux = chunk.get("aux")
        if isinstance(aux, Mapping) and isinstance(aux.get("ID"), str):
            self.image_id = str(aux["ID"])
        if "error" in chunk or "errorDetail" in chunk:
            detail = chunk.get("errorDetail")
            detail = detail if isinstance(detail, Mapping) else {}
            message = str(chunk.get("error") or detail.get("message") or "build failed")
            self.error = message
            code = detail.get("code")
            if match := _NONZERO.search(message):
                code = int(match.group(1))
            self.exit_code = int(code) if isinstance(code, int) else None
            lines.append(f"ERROR: {message}")
        return lines

    def finish(self) -> list[str]:
        """The last line, when the stream ended without a newline."""
        if not self._partial:
            return []
        line, self._partial = self._partial, ""
        self._line(line)
        return [line]

    def _line(self, line: str) -> None:
        self.tail.append(line)
        del self.tail[:-MAX_TAIL]
        if match := _STEP.match(line):
            self.step_number = int(match.group(1))
            self.total_steps = int(match.group(2))
            self.step = match.group(3)
        elif match := _RUNNING.match(line):
            self.running.append(match.group(1))
        elif match := _LAYER.match(line):
            self.last_layer = match.group(1)
        elif line.strip() == "---> Using cache":
            self.cached_steps += 1
        elif match := _SUCCESS.match(line):
            self.image_id = self.image_id or match.group(1)

    @property
    def succeeded(self) -> bool:
        return self.error is None and self.image_id is not None

    def failure(self) -> str:
        if self.error is not None:
            return self.error
        if self.image_id is None:
            return "build stream ended without an image id"
        return ""


def is_task_step(step: str | None, task_steps: tuple[str, ...] | list[str]) -> bool:
    return bool(step) and any(marker in str(step) for marker in task_steps)
