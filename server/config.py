"""Typed settings: frozen dataclasses, loaded here and nowhere else.

Each service's settings live in its own ``server/<service>/settings.py`` and each engine's in
`storage.settings`; this module holds the server's own (listening, auth, breakers, per-method
policies), gathers them all into `Settings`, and loads it. Services import their settings from
their own package, never through this module.

Precedence, lowest first: the defaults of the dataclasses, the defaults of the engines the
settings choose (`storage.engines`: for instance the Inbox fan-out's pacing on its InboxStore
engine), an optional TOML file (``--config`` or ``LOOM_CONFIG``), environment variables,
command-line flags. What `load_settings` returns is final: an engine a port does not have is
refused here (naming the setting), and nothing is left for a mount to fill in.

Environment variables name a section and a field joined by a double underscore:
``LOOM_SERVER__PORT=50052``, ``LOOM_STORAGE__THREADWEAVER_STORE=cassandra``,
``LOOM_CASSANDRA__CONTACT_POINTS=a,b``. Per-method policies come from TOML only::

    [policies."loom.v1.ThreadWeaver/WeaveMessages"]
    max_concurrency = 4
    deadline_s = 20.0
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from server.inbox.settings import InboxSettings
from server.iterator.settings import IteratorSettings
from server.runtime.policies import MethodPolicy
from server.summary.settings import SummarySettings
from server.templates.settings import TemplatesSettings
from server.threadweaver.settings import ThreadWeaverSettings
from storage.engines import PORTS
from storage.settings import (
    BigtableSettings,
    CassandraSettings,
    DynamoDBSettings,
    ErasureSettings,
    SqliteSettings,
    SqsSettings,
    StorageSettings,
)

__all__ = [
    "AuthSettings",
    "BreakerSettings",
    "ConfigError",
    "ServerSettings",
    "Settings",
    "load_settings",
]


class ConfigError(ValueError):
    """A setting that cannot work (a missing file, a key that does not match): the message
    names the setting, and `loom serve` exits non-zero before listening."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The listening server."""

    host: str = "127.0.0.1"
    """Interface to bind; 0.0.0.0 inside a container."""
    port: int = 50051
    """TCP port."""
    grace_s: float = 10.0
    """Drain time for in-flight calls after SIGTERM."""
    max_message_bytes: int = 16 * 1024 * 1024
    """Largest request or response message."""
    max_pending_calls: int = 20_000
    """Calls grpc holds while the server's loop has not picked them up yet; past it grpc
    cancels new calls (CANCELLED). gRPC's own limit (3,000) cancelled streams when
    thousands of WatchInbox clients connected at once (a drained replica's, say); held
    calls cost memory only, and each still meets its method's bulkhead when picked up."""
    max_streams_per_connection: int = 1000
    """Concurrent HTTP/2 streams one connection may hold (SETTINGS_MAX_CONCURRENT_STREAMS);
    a stream past it is refused, and a stream the client reset counts until the server has
    released it (rapid reset). A client with more calls or watches than this on one
    connection queues them."""
    max_concurrent_rpcs: int = 20_000
    """Calls running in this process, every connection together; past it a new call
    answers RESOURCE_EXHAUSTED at once. Each WatchInbox stream is one."""
    handshake_timeout_s: float = 10.0
    """A new connection must finish TLS and send its HTTP/2 preface and SETTINGS within
    this, or it is closed (slowloris)."""
    max_connection_idle_s: float = 300.0
    """A connection with no call running this long is sent GOAWAY (a running WatchInbox
    stream keeps its connection busy)."""
    max_connection_age_s: float = 1800.0
    """A connection older than this (jittered by +-10 %) is sent GOAWAY: its client
    reconnects, spreading clients over replicas added since."""
    max_connection_age_grace_s: float = 60.0
    """How long calls still running on a connection past its age may go on before they are
    cut (UNAVAILABLE; WatchInbox clients resume from their last event)."""
    keepalive_time_s: float = 60.0
    """The server pings a connection silent this long, to find peers that are gone."""
    keepalive_timeout_s: float = 20.0
    """A peer that does not answer the server's ping within this is disconnected."""
    keepalive_min_ping_interval_s: float = 10.0
    """The shortest interval between a client's pings the server accepts (keepalive
    enforcement); each ping sooner is a strike."""
    keepalive_max_ping_strikes: int = 2
    """Strikes after which the connection is sent GOAWAY (too_many_pings); 0: never."""
    log_level: str = "info"
    """structlog level: debug, info, warning, error."""
    use_uvloop: bool = True
    """Run the event loop on uvloop (libuv) rather than asyncio's own; off to debug with the
    stdlib loop."""
    gc_gen0_threshold: int = 50_000
    """Allocations between young-generation collections (CPython's default, 700, makes the
    collector run constantly under large requests)."""
    gil_switch_interval_s: float = 0.0005
    """sys.setswitchinterval: how long a storage thread may hold the GIL before the event
    loop gets it back. Python's default 5 ms lets batch work in storage threads (fan-out
    chunks, weave batches) delay every waiting RPC by up to 5 ms per hand-off."""
    tls_cert_file: str = ""
    """PEM certificate chain of the server; with `tls_key_file`, the port serves TLS only."""
    tls_key_file: str = ""
    """PEM private key matching `tls_cert_file`."""
    tls_client_ca_file: str = ""
    """PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS)."""
    metrics_port: int = 0
    """Prometheus exposition on this port (0 = off); served on `metrics_host`."""
    metrics_host: str = "127.0.0.1"
    """Interface of the metrics endpoint (0.0.0.0 inside a container)."""
    workers: int = 1
    """Server processes sharing the port (`loom serve --workers N`): one per core."""
    reuse_port: bool = False
    """Bind with SO_REUSEPORT (set for every process of `--workers N`)."""


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Bearer-token (JWT) authentication; off unless a key file is configured."""

    jwt_secret_file: str = ""
    """File holding the HS256 shared secret (its bytes, surrounding whitespace stripped)."""
    jwt_public_key_file: str = ""
    """PEM public key verifying RS256 or ES256 tokens (an asymmetric issuer's)."""
    audience: str = "loom"
    """Required `aud` claim."""
    issuer: str = ""
    """Required `iss` claim, when set."""
    leeway_s: float = 30.0
    """Clock skew tolerated on `exp` and `nbf`."""
    open_services: tuple[str, ...] = (
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    )
    """Services callable without a token (probes and tools)."""

    @property
    def enabled(self) -> bool:
        """Whether calls must carry a token."""
        return bool(self.jwt_secret_file or self.jwt_public_key_file)


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """Circuit breakers toward each engine."""

    failure_threshold: int = 5
    """Consecutive engine faults that open the circuit."""
    reset_timeout_s: float = 2.0
    """Pause before half-open probes."""
    half_open_max_calls: int = 1
    """Probes allowed at once while half-open."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the server reads at start-up."""

    server: ServerSettings = field(default_factory=ServerSettings)
    sqlite: SqliteSettings = field(default_factory=SqliteSettings)
    bigtable: BigtableSettings = field(default_factory=BigtableSettings)
    cassandra: CassandraSettings = field(default_factory=CassandraSettings)
    dynamodb: DynamoDBSettings = field(default_factory=DynamoDBSettings)
    sqs: SqsSettings = field(default_factory=SqsSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    erasure: ErasureSettings = field(default_factory=ErasureSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    threadweaver: ThreadWeaverSettings = field(default_factory=ThreadWeaverSettings)
    summary: SummarySettings = field(default_factory=SummarySettings)
    inbox: InboxSettings = field(default_factory=InboxSettings)
    iterator: IteratorSettings = field(default_factory=IteratorSettings)
    templates: TemplatesSettings = field(default_factory=TemplatesSettings)
    policies: Mapping[str, MethodPolicy] = field(default_factory=dict)
    """Per-method overrides keyed by full method name ``loom.v1.Service/Method``."""


CLIENT_SECTIONS = frozenset({"probe"})
"""LOOM_<SECTION>__* variables read by client commands, not by the server: `loom probe`
runs inside the server's container, so its variables sit in the server's environment."""


D = TypeVar("D")


def _coerce(value: Any, hint: Any, where: str) -> Any:  # noqa: PLR0911 - one return per type
    """Turns a TOML or environment value into the field's declared type."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ValueError(f"{where}: {value!r} is not one of {allowed}")
        return value
    if origin is tuple and dataclasses.is_dataclass(typing.get_args(hint)[0]):
        # An array of tables (``[[iterator.levels]]``), or JSON in an environment variable.
        item_cls = typing.get_args(hint)[0]
        rows = json.loads(value) if isinstance(value, str) else value
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{where}: must be an array of tables")
        return tuple(_build(item_cls, row, f"{where}[{i}]") for i, row in enumerate(rows))
    if origin is Mapping:
        return _mapping(value, typing.get_args(hint)[1], where)
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(str(i).strip() for i in items if str(i).strip())
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ValueError(f"{where}: {value!r} is not a boolean")
    if hint in (int, float, str):
        try:
            return hint(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {value!r} is not a valid {hint.__name__}") from exc
    raise TypeError(f"{where}: unsupported setting type {hint!r}")  # pragma: no cover


def _mapping(value: Any, item: type, where: str) -> Mapping[str, Any]:
    """A TOML inline table (``{dc1 = 3}``), or ``dc1=3,dc2=3`` in an environment variable."""
    if isinstance(value, str):
        pairs = [p.partition("=") for p in value.split(",") if p.strip()]
        if any(not sep or not k.strip() for k, sep, _ in pairs):
            raise ValueError(f"{where}: {value!r} is not of the form name=value,name=value")
        value = {k.strip(): v.strip() for k, _, v in pairs}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a table such as {{dc1 = 3}}")
    return types.MappingProxyType(
        {str(k): _coerce(v, item, f"{where}.{k}") for k, v in value.items()}
    )


def _build(cls: type[D], values: Mapping[str, Any], where: str) -> D:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"{where}: unknown settings {sorted(unknown)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in values.items()}
    return cls(**kwargs)


def _sections() -> dict[str, type]:
    return {
        f.name: typing.get_type_hints(Settings)[f.name]
        for f in dataclasses.fields(Settings)
        if f.name != "policies"
    }


def _choose_engines(merged: dict[str, dict[str, Any]]) -> None:
    """Checks the engine every port's setting names (`UnsupportedEngine`, naming the setting,
    for one the port does not have) and slips that engine's defaults under whatever TOML,
    environment and flags set, so nothing is left to resolve once the engine is known."""
    sections = _sections()
    for port in PORTS:
        chosen = getattr(
            _build(sections[port.section], merged[port.section], port.section), port.field
        )
        for section, values in port.select(str(chosen)).defaults.items():
            merged[section] = {**values, **merged[section]}


def load_settings(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Settings:
    """Defaults < the chosen engines' defaults < TOML file < ``LOOM_SECTION__FIELD``
    environment < `overrides` (CLI flags): final settings, engines checked."""
    env = os.environ if env is None else env
    merged: dict[str, dict[str, Any]] = {name: {} for name in _sections()}
    policies: dict[str, MethodPolicy] = {}
    path = config_file or (Path(env["LOOM_CONFIG"]) if env.get("LOOM_CONFIG") else None)
    if path is not None:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for section, values in data.items():
            if section == "policies":
                for method, policy in values.items():
                    policies[method] = _build(MethodPolicy, policy, f"policies.{method}")
            elif section in merged:
                merged[section].update(values)
            else:
                raise ValueError(f"{path}: unknown section [{section}]")
    for key, value in env.items():
        if not key.startswith("LOOM_") or "__" not in key:
            continue
        section, _, name = key[len("LOOM_") :].lower().partition("__")
        if section in CLIENT_SECTIONS:
            continue  # read by a client command sharing the environment (`loom probe`)
        if section not in merged:
            raise ValueError(f"{key}: unknown settings section {section!r}")
        merged[section][name] = value
    for section, values in (overrides or {}).items():
        merged[section].update({k: v for k, v in values.items() if v is not None})
    _choose_engines(merged)
    built: dict[str, Any] = {
        name: _build(cls, merged[name], name) for name, cls in _sections().items()
    }
    return Settings(**built, policies=types.MappingProxyType(policies))
