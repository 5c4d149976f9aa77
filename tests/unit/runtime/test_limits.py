"""The server's connection limits: grpc's arguments for them, and values refused at start."""

from __future__ import annotations

from dataclasses import replace

import pytest

from server.app import check_startup
from server.config import ConfigError, ServerSettings, Settings, load_settings
from server.runtime.limits import check_limits, limit_options


def test_the_defaults_become_grpc_arguments() -> None:
    options = dict(limit_options(ServerSettings()))
    assert options["grpc.max_concurrent_streams"] == 1000
    assert options["grpc.server_handshake_timeout_ms"] == 10_000
    assert options["grpc.max_connection_idle_ms"] == 300_000
    assert options["grpc.max_connection_age_ms"] == 1_800_000
    assert options["grpc.max_connection_age_grace_ms"] == 60_000
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 10_000
    assert options["grpc.http2.max_ping_strikes"] == 2


def test_settings_come_from_the_environment() -> None:
    env = {
        "LOOM_SERVER__MAX_STREAMS_PER_CONNECTION": "64",
        "LOOM_SERVER__HANDSHAKE_TIMEOUT_S": "2.5",
    }
    options = dict(limit_options(load_settings(env=env).server))
    assert options["grpc.max_concurrent_streams"] == 64
    assert options["grpc.server_handshake_timeout_ms"] == 2500


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_streams_per_connection", 0),
        ("max_concurrent_rpcs", -1),
        ("handshake_timeout_s", 0.0),
        ("max_connection_idle_s", -5.0),
        ("max_connection_age_s", 0.0),
        ("max_connection_age_grace_s", -1.0),
        ("keepalive_time_s", 0.0),
        ("keepalive_timeout_s", 0.0),
        ("keepalive_min_ping_interval_s", -1.0),
        ("keepalive_max_ping_strikes", -1),
    ],
)
def test_a_limit_that_cannot_work_is_refused_naming_it(field: str, value: float) -> None:
    server = replace(ServerSettings(), **{field: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=rf"server\.{field}\b"):
        check_limits(server)
    with pytest.raises(ConfigError, match=rf"server\.{field}\b"):
        check_startup(Settings(server=server))


def test_fewer_rpcs_per_process_than_streams_per_connection_is_refused() -> None:
    server = ServerSettings(max_streams_per_connection=100, max_concurrent_rpcs=50)
    with pytest.raises(ConfigError, match=r"server\.max_concurrent_rpcs"):
        check_limits(server)
