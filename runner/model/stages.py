"""The report's stage names, in order (a module of its own: the CLI needs them at import time,
without the report's models)."""

STAGE_NAMES = ("compile", "audit", "build", "smoke", "nop", "oracle", "determinism", "hack")
DOCKER_STAGES = STAGE_NAMES[2:]
