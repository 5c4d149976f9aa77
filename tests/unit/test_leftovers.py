"""`make test`'s leftover check (`tests/leftovers.py`): a Python process carrying the run's
marker and still alive fails the check and is killed; one without the marker is not its
business."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tests.leftovers import main

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

_SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _sleeper(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(_SLEEP, env={**os.environ, **env})


class TestLeftovers:
    def test_a_marked_process_left_alive_fails_and_is_killed(self) -> None:
        """The marked sleeper outlives the wait: exit 1, and it is SIGKILLed."""
        run = uuid.uuid4().hex
        left = _sleeper({"LOOMTEST_RUN": run})
        try:
            code = main([f"LOOMTEST_RUN={run}", "--wait-s", "0.5"])
            assert code == 1
            assert left.wait(timeout=20) == -9
        finally:
            left.kill()
            left.wait()

    def test_an_unmarked_process_passes(self) -> None:
        """Another run's (or nobody's) process is not counted: exit 0, and it keeps running."""
        other = _sleeper({"LOOMTEST_RUN": "another-run"})
        try:
            assert main([f"LOOMTEST_RUN={uuid.uuid4().hex}", "--wait-s", "0"]) == 0
            assert other.poll() is None
        finally:
            other.kill()
            other.wait()
