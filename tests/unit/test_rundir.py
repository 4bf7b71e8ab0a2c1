"""runner.log: everything the runner logs, capped like every other log of a run."""

from __future__ import annotations

import logging
from pathlib import Path

from runner.run.rundir import RUN_LOG, run_log


def test_runner_log_keeps_its_head_and_tail_within_the_limit(tmp_path: Path) -> None:
    """A build that printed 1 GB made a 3.68 GB runner.log (each line went to the debug log)."""
    log = logging.getLogger("runner.test")
    with run_log(tmp_path, limit=64 * 1024):
        log.info("the first line")
        for index in range(20000):
            log.debug("build output line %d %s", index, "x" * 80)
        log.info("the last line")
    text = (tmp_path / RUN_LOG).read_text()
    assert len(text.encode()) < 64 * 1024 + 200
    assert "the first line" in text and text.rstrip().endswith("the last line")
    assert "bytes cut from the middle of this log" in text
