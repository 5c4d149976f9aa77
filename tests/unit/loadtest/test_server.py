"""The server-process helper, against a health-only stand-in for ``loom serve``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loadtest.harness import Harness
from loadtest.report import Report
from loadtest.server import ServerStartError, free_port, loom_server, wait_for_health

FAKE = [sys.executable, str(Path(__file__).with_name("fake_loom.py"))]


class TestLoomServer:
    async def test_starts_waits_for_health_and_stops_with_sigterm(self, tmp_path: Path) -> None:
        """The helper yields a SERVING address and the server drains on SIGTERM on exit."""
        log = tmp_path / "server.log"
        async with loom_server(data_dir=tmp_path / "d", command=FAKE, log_path=log) as target:
            assert target.startswith("127.0.0.1:")
            await wait_for_health(target, timeout_s=2)
        assert "fake loom draining" in log.read_text()
        assert (tmp_path / "d").is_dir()

    async def test_a_server_that_exits_fails_fast_with_its_log(self, tmp_path: Path) -> None:
        """If the server dies at start-up the error says so and quotes its output."""
        with pytest.raises(ServerStartError, match="refusing to start"):
            async with loom_server(
                command=FAKE, extra_args=["--fail"], log_path=tmp_path / "l.log"
            ):
                pytest.fail("must not yield")

    async def test_harness_uses_an_existing_target(self, tmp_path: Path) -> None:
        """With --target the harness health-checks that server instead of starting one."""
        async with loom_server(command=FAKE, log_path=tmp_path / "l.log") as running:
            harness = Harness(Report("t", ["loadtest"]), target=running)
            async with harness.server() as target:
                assert running == target

    async def test_unreachable_target_times_out(self) -> None:
        """Nothing listening: the health wait gives up with a clear error."""
        with pytest.raises(ServerStartError, match="not SERVING"):
            await wait_for_health(f"127.0.0.1:{free_port()}", timeout_s=0.3)
