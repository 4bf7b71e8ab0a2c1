"""What tests/test.sh writes to /logs/verifier: the reward (0/1 metrics only, since Harbor
treats every numeric key of reward.json as a metric) and the details beside it (exit codes,
timings, what the limits did). The key names are spelled here once; the test.sh template
renders its JSON writers from these models.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

REWARD_FILE = "reward.json"
DETAILS_FILE = "details.json"
DISCARDED_FILE = "discarded.txt"
PASS_TO_PASS_SELECTORS_FILE = "pass_to_pass_selectors.tsv"  # the same, pass-to-pass
SELECTORS_FILE = "selectors.tsv"  # "<exit code>\t<selector>" per fail-to-pass selector run alone
MAX_REWARD_BYTES = 64 * 1024

Flag = Literal[0, 1]


class Reward(BaseModel):
    """/logs/verifier/reward.json"""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    reward: Flag
    patch_applied: Flag
    fail_to_pass: Flag
    pass_to_pass: Flag
    deterministic: Flag
    setup_completed: Flag


class VerifierDetails(BaseModel):
    """/logs/verifier/details.json. Exit codes are -1 for a command that did not run."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    fail_to_pass_exit_code: int = Field(ge=-1, le=255)
    fail_to_pass_repeat_exit_code: int = Field(ge=-1, le=255)
    pass_to_pass_exit_code: int = Field(ge=-1, le=255)
    fail_to_pass_ms: int = Field(ge=0)
    fail_to_pass_repeat_ms: int = Field(ge=0)
    pass_to_pass_ms: int = Field(ge=0)
    # From the verifier container's cgroup: how often the pids limit refused a fork, and how
    # many processes the kernel killed for memory (-1 when the cgroup files cannot be read).
    pids_limit_hits: int = Field(ge=-1)
    oom_kills: int = Field(ge=-1)
    # Logs test.sh cut to their head and tail because they exceeded the log size cap.
    truncated_logs: int = Field(ge=0)
    # Agent changes to the test harness that test.sh undid (listed in discarded.txt).
    discarded: int = Field(default=0, ge=0)

    def test_seconds(self) -> float:
        return (self.fail_to_pass_ms + self.fail_to_pass_repeat_ms + self.pass_to_pass_ms) / 1000


REWARD_KEYS: tuple[str, ...] = tuple(Reward.model_fields)
DETAIL_KEYS: tuple[str, ...] = tuple(VerifierDetails.model_fields)


class RewardError(ValueError):
    """reward.json or details.json is not what test.sh writes."""


def _load(raw: bytes, name: str) -> object:
    if len(raw) > MAX_REWARD_BYTES:
        raise RewardError(f"{name} is larger than {MAX_REWARD_BYTES} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RewardError(f"{name} is not JSON ({type(exc).__name__})") from None


def parse_reward(raw: bytes) -> Reward:
    try:
        return Reward.model_validate(_load(raw, REWARD_FILE))
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise RewardError(f"{REWARD_FILE}: {where}: {first['msg']}") from None


def parse_details(raw: bytes) -> VerifierDetails:
    try:
        return VerifierDetails.model_validate(_load(raw, DETAILS_FILE))
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise RewardError(f"{DETAILS_FILE}: {where}: {first['msg']}") from None
