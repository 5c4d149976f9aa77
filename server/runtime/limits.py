"""HTTP/2 and connection limits of the listening server: grpc's channel arguments for them,
and the check that refuses unusable values before any port opens.

Each limit bounds what one peer can hold without ever completing a call (docs/operations/
health-and-metrics.md, "Connection limits"): streams per connection (the rapid-reset and
stream-flood classes), calls per process, a connection that never finishes its HTTP/2
preface, an idle connection, a connection's age, and how often a client may ping.
"""

from __future__ import annotations

from server.config import ConfigError, ServerSettings

__all__ = ["check_limits", "limit_options"]

_POSITIVE = (
    "max_streams_per_connection",
    "max_concurrent_rpcs",
    "handshake_timeout_s",
    "max_connection_idle_s",
    "max_connection_age_s",
    "keepalive_time_s",
    "keepalive_timeout_s",
)
_NOT_NEGATIVE = ("max_connection_age_grace_s", "keepalive_min_ping_interval_s")


def check_limits(server: ServerSettings) -> None:
    """Raises `ConfigError` naming the first limit that cannot work."""
    for name in _POSITIVE:
        if not getattr(server, name) > 0:
            raise ConfigError(f"server.{name}: must be > 0, not {getattr(server, name)!r}")
    for name in _NOT_NEGATIVE:
        if getattr(server, name) < 0:
            raise ConfigError(f"server.{name}: must be >= 0, not {getattr(server, name)!r}")
    if server.keepalive_max_ping_strikes < 0:
        raise ConfigError(
            f"server.keepalive_max_ping_strikes: must be >= 0 (0: never refuse), "
            f"not {server.keepalive_max_ping_strikes!r}"
        )
    if server.max_concurrent_rpcs < server.max_streams_per_connection:
        raise ConfigError(
            "server.max_concurrent_rpcs: must be >= server.max_streams_per_connection "
            f"({server.max_concurrent_rpcs} < {server.max_streams_per_connection})"
        )


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def limit_options(server: ServerSettings) -> list[tuple[str, int]]:
    """grpc channel arguments for the limits (`check_limits` first)."""
    check_limits(server)
    return [
        # Advertised in SETTINGS_MAX_CONCURRENT_STREAMS. grpc also counts a stream the peer
        # reset until the server has released it, so opening and resetting streams (rapid
        # reset) cannot hold more than this many calls per connection either.
        ("grpc.max_concurrent_streams", server.max_streams_per_connection),
        ("grpc.server_handshake_timeout_ms", _ms(server.handshake_timeout_s)),
        ("grpc.max_connection_idle_ms", _ms(server.max_connection_idle_s)),
        ("grpc.max_connection_age_ms", _ms(server.max_connection_age_s)),
        ("grpc.max_connection_age_grace_ms", round(server.max_connection_age_grace_s * 1000)),
        ("grpc.keepalive_time_ms", _ms(server.keepalive_time_s)),
        ("grpc.keepalive_timeout_ms", _ms(server.keepalive_timeout_s)),
        # Clients may ping an idle connection (a quiet WatchInbox's keepalive), but not
        # more often than this; a peer that does, `keepalive_max_ping_strikes` times, is sent
        # GOAWAY (too_many_pings).
        ("grpc.keepalive_permit_without_calls", 1),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            round(server.keepalive_min_ping_interval_s * 1000),
        ),
        ("grpc.http2.max_ping_strikes", server.keepalive_max_ping_strikes),
    ]
