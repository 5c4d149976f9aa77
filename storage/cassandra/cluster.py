"""How Loom connects to a Cassandra cluster: the driver's `Cluster` built from the settings
(DC-aware token-aware routing, consistency levels, speculative executions, retries,
heartbeats, login and TLS), which statements may run twice, and the start-up checks that
turn a refused login, an untrusted certificate or an unknown data centre into a
`StorageMisconfigured` naming the setting.
"""

from __future__ import annotations

import re
import socket
import ssl
from typing import Any

from cassandra import AuthenticationFailed, ConsistencyLevel, WriteType
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import (
    ConstantReconnectionPolicy,
    ConstantSpeculativeExecutionPolicy,
    DCAwareRoundRobinPolicy,
    RetryPolicy,
    TokenAwarePolicy,
)
from cassandra.query import dict_factory

from storage.errors import StorageMisconfigured, describe
from storage.settings import CassandraSettings

__all__ = [
    "CONDITIONAL",
    "READ",
    "READS",
    "SCHEMA_AGREEMENT_S",
    "build_cluster",
    "check_datacentres",
    "idempotent",
    "live_hosts",
    "other_coordinator",
    "refused_setting",
    "replication_clause",
    "tls_context",
]

READS = "reads"
"""The execution profile of every SELECT: read consistency, speculative executions."""

SCHEMA_AGREEMENT_S = 60.0
"""How long a schema change waits for every node to agree on it. The driver waits inside
the statement, so a schema change's own bound is this plus one statement's: three nodes on
a loaded machine take seconds to agree on a new table, past `request_timeout_s`."""

READ = re.compile(r"\s*SELECT\b", re.IGNORECASE)
CONDITIONAL = re.compile(r"\bIF\s+(NOT\s+)?EXISTS\s*$|\bIF\s+\w+\s*(=|<|>|!=|IN\b)", re.IGNORECASE)
_INCREMENT = re.compile(r"\b(\w+)\s*=\s*\1\s*[-+]|=\s*\[[^]]*\]\s*\+", re.IGNORECASE)


def idempotent(cql: str) -> bool:
    """Whether running `cql` twice leaves what running it once does: not a conditional write
    (its second round would answer "not applied"), not a counter or list increment."""
    return CONDITIONAL.search(cql) is None and _INCREMENT.search(cql) is None


class _RetryOnce(RetryPolicy):  # type: ignore[misc]
    """The driver's policy, plus one retry through the next replica of a read or write that
    timed out at the coordinator (a replica it waited on was frozen or slow).

    Safe for every Loom statement: the plain writes are upserts with fixed values or
    explicit timestamps, and a conditional write sent again reads back whatever the first
    applied. Counter writes (Loom has none) are never retried.
    """

    def on_read_timeout(self, *args: Any, retry_num: int = 0, **kwargs: Any) -> Any:
        return (self.RETRY_NEXT_HOST, None) if retry_num == 0 else (self.RETHROW, None)

    def on_write_timeout(
        self, query: Any, *, write_type: Any = None, retry_num: int = 0, **info: Any
    ) -> Any:
        if retry_num == 0 and write_type != WriteType.COUNTER:
            return self.RETRY_NEXT_HOST, None
        return self.RETHROW, None


def _level(name: str) -> int:
    return int(getattr(ConsistencyLevel, name))


def build_cluster(settings: CassandraSettings, version: int, tls: ssl.SSLContext | None) -> Cluster:
    """A Cluster for one data centre: DC-aware and token-aware routing, the configured
    consistency levels, speculative executions for idempotent statements, dict rows."""
    speculation = (
        ConstantSpeculativeExecutionPolicy(
            settings.speculative_delay_s, settings.speculative_attempts
        )
        if settings.speculative_delay_s > 0 and settings.speculative_attempts > 0
        else None
    )

    def profile(consistency: str) -> ExecutionProfile:
        return ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(
                DCAwareRoundRobinPolicy(local_dc=settings.local_dc or None)
            ),
            retry_policy=_RetryOnce(),
            consistency_level=_level(consistency),
            serial_consistency_level=_level(settings.serial_consistency),  # every LWT's Paxos
            request_timeout=settings.request_timeout_s,
            row_factory=dict_factory,
            speculative_execution_policy=speculation,  # applied to idempotent statements only
        )

    auth = (
        PlainTextAuthProvider(username=settings.username, password=settings.password)
        if settings.username
        else None
    )
    return Cluster(
        contact_points=list(settings.contact_points),
        port=settings.port,
        protocol_version=version,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: profile(settings.write_consistency),
            READS: profile(settings.read_consistency),
        },
        auth_provider=auth,
        ssl_context=tls,
        connect_timeout=settings.request_timeout_s,
        # A node that stops answering (frozen, not dead: its sockets stay open) is marked
        # down after one unanswered probe instead of 30 s of timeouts, and routed around;
        # until then each statement's speculation and the conditional write's redirect do.
        idle_heartbeat_interval=settings.heartbeat_s,
        idle_heartbeat_timeout=settings.heartbeat_timeout_s,
        # A cluster of slow nodes may take a while to agree on a new table.
        max_schema_agreement_wait=SCHEMA_AGREEMENT_S,
        # Retry a lost node every second, not with the default exponential backoff (up to
        # 10 min): after an outage the breaker's probes should find the node back at once.
        reconnection_policy=ConstantReconnectionPolicy(1.0, max_attempts=None),
        # Small request/response pairs (an unread count) otherwise meet Nagle + delayed ACK:
        # the inbox load test showed a flat ~40 ms p99 at any rate without it.
        sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )


def tls_context(settings: CassandraSettings) -> ssl.SSLContext | None:
    """TLS to the cluster, verifying each node's certificate and address, when a CA is set."""
    if not settings.tls_ca_file:
        if settings.tls_cert_file:
            raise StorageMisconfigured(
                "cassandra.tls_cert_file", "a client certificate needs tls_ca_file set too"
            )
        return None
    try:
        context = ssl.create_default_context(cafile=settings.tls_ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise StorageMisconfigured("cassandra.tls_ca_file", describe(exc)) from exc
    if settings.tls_cert_file:
        try:
            context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise StorageMisconfigured("cassandra.tls_cert_file", describe(exc)) from exc
    return context


def refused_setting(settings: CassandraSettings, exc: BaseException) -> None:
    """Raises `StorageMisconfigured` when the nodes refused the connection for a reason that
    is a setting: the login, or a certificate on either side. Each node answers in its own
    words (one sends TLS's "certificate required" alert, another just closes the socket), so
    every node's answer is read, the most telling first."""
    found = getattr(exc, "errors", None)  # NoHostAvailable: {endpoint: cause}
    causes = list(found.values()) if isinstance(found, dict) and found else [exc]
    texts = [describe(cause) for cause in causes]
    for cause, text in zip(causes, texts, strict=True):
        if isinstance(cause, AuthenticationFailed) or "Authentication" in text:
            setting = "cassandra.password" if settings.username else "cassandra.username"
            who = f"role {settings.username!r}" if settings.username else "a login"
            raise StorageMisconfigured(setting, f"the cluster refused {who} ({text})") from exc
    for cause, text in zip(causes, texts, strict=True):
        if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
            raise StorageMisconfigured(
                "cassandra.tls_ca_file",
                f"the nodes' certificate is not trusted by this CA ({text})",
            ) from exc
    for text in texts:
        if "certificate required" in text.lower() or "bad certificate" in text.lower():
            raise StorageMisconfigured(
                "cassandra.tls_cert_file",
                f"the cluster refused this client's certificate ({text})",
            ) from exc
    if settings.tls_ca_file and all(isinstance(c, ssl.SSLEOFError) for c in causes):
        raise StorageMisconfigured(
            "cassandra.tls_cert_file" if not settings.tls_cert_file else "cassandra.tls_ca_file",
            "every node closed the TLS connection during the handshake: it wants a client "
            f"certificate it trusts, or no TLS at all ({texts[0]})",
        ) from exc


def check_datacentres(settings: CassandraSettings, cluster: Cluster) -> None:
    """`local_dc` and every data centre `replication` names must be the cluster's."""
    have = sorted({h.datacenter for h in cluster.metadata.all_hosts() if h.datacenter})
    if not have:
        return  # never reached the cluster: nothing to check against
    if settings.local_dc and settings.local_dc not in have:
        raise StorageMisconfigured(
            "cassandra.local_dc",
            f"{settings.local_dc!r} is not a data centre of the cluster (it has {have})",
        )
    for dc, replicas in settings.replication.items():
        if dc not in have:
            raise StorageMisconfigured(
                "cassandra.replication",
                f"{dc!r} is not a data centre of the cluster (it has {have})",
            )
        if replicas < 1:
            raise StorageMisconfigured(
                "cassandra.replication", f"{dc} = {replicas}: a data centre needs >= 1 replica"
            )


def replication_clause(settings: CassandraSettings) -> str:
    """The keyspace's replication clause: NetworkTopologyStrategy when data centres are
    named, SimpleStrategy otherwise."""
    if not settings.replication:
        return (
            "{'class': 'SimpleStrategy', 'replication_factor': "
            f"{int(settings.replication_factor)}}}"
        )
    for dc in settings.replication:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", dc):
            raise StorageMisconfigured("cassandra.replication", f"invalid data centre {dc!r}")
    pairs = ", ".join(f"'{dc}': {int(n)}" for dc, n in settings.replication.items())
    return f"{{'class': 'NetworkTopologyStrategy', {pairs}}}"


def _local_and_up(host: Any, local_dc: str) -> bool:
    """A node the driver does not think down, in the local data centre (any, when unset)."""
    return host.is_up is not False and (not local_dc or host.datacenter == local_dc)


def live_hosts(metadata: Any, local_dc: str) -> int:
    """The nodes of the local data centre (any, when unset) the driver thinks up."""
    return sum(1 for host in metadata.all_hosts() if _local_and_up(host, local_dc))


def other_coordinator(metadata: Any, local_dc: str, keyspace: str, bound: Any, silent: Any) -> Any:
    """A live replica of the statement's partition (any live host when it has no routing
    key) in the local data centre, other than `silent`; None lets the driver choose."""
    key = getattr(bound, "routing_key", None)
    hosts = metadata.get_replicas(keyspace, key) if key else metadata.all_hosts()
    silent_endpoint = getattr(silent, "endpoint", silent)
    for host in hosts:
        if (
            host is not silent
            and host.endpoint != silent_endpoint
            and _local_and_up(host, local_dc)
        ):
            return host
    return None
