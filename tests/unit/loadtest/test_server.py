"""The server-process helper, against the real ``loom serve``."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.harness import Harness
from loadtest.report import Report
from loadtest.server import ServerStartError, free_port, loom_server, wait_for_health


class TestLoomServer:
    async def test_starts_waits_for_health_and_stops_with_sigterm(self, tmp_path: Path) -> None:
        """The helper yields a SERVING address and the server drains on SIGTERM on exit."""
        log = tmp_path / "server.log"
        async with loom_server(data_dir=tmp_path / "d", log_path=log) as target:
            assert target.startswith("127.0.0.1:")
            await wait_for_health(target, timeout_s=2)
        assert '"event": "stopped"' in log.read_text()
        assert (tmp_path / "d").is_dir()

    async def test_a_server_that_exits_fails_fast_with_its_log(self, tmp_path: Path) -> None:
        """If the server dies at start-up the error says so and quotes its output."""
        with pytest.raises(ServerStartError, match="bad settings"):
            async with loom_server(
                extra_args=["--config", str(tmp_path / "missing.toml")], log_path=tmp_path / "l.log"
            ):
                pytest.fail("must not yield")

    async def test_harness_uses_an_existing_target(self, tmp_path: Path) -> None:
        """With --target the harness health-checks that server instead of starting one."""
        async with loom_server(log_path=tmp_path / "l.log") as running:
            harness = Harness(Report("t", ["loadtest"]), target=running)
            async with harness.server() as target:
                assert running == target

    async def test_unreachable_target_times_out(self) -> None:
        """Nothing listening: the health wait gives up with a clear error."""
        with pytest.raises(ServerStartError, match="not SERVING"):
            await wait_for_health(f"127.0.0.1:{free_port()}", timeout_s=0.3)
