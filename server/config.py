"""Typed settings: frozen dataclasses, loaded here and nowhere else.

Precedence, lowest first: the defaults below, an optional TOML file (``--config`` or
``LOOM_CONFIG``), environment variables, command-line flags. Environment variables name a
section and a field joined by a double underscore: ``LOOM_SERVER__PORT=50052``,
``LOOM_STORAGE__THREADWEAVER_STORE=cassandra``, ``LOOM_CASSANDRA__CONTACT_POINTS=a,b``.
Per-method policies come from TOML only::

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

from storage.settings import (
    BigtableSettings,
    CassandraSettings,
    DynamoDBSettings,
    SqliteSettings,
    SqsSettings,
    StorageSettings,
)

__all__ = [
    "AuthSettings",
    "BigtableSettings",
    "BreakerSettings",
    "CassandraSettings",
    "ConfigError",
    "DynamoDBSettings",
    "InboxSettings",
    "IteratorLevel",
    "IteratorSettings",
    "MethodPolicy",
    "ServerSettings",
    "Settings",
    "SqliteSettings",
    "SqsSettings",
    "StorageSettings",
    "SummarySettings",
    "ThreadWeaverSettings",
    "load_settings",
]


class ConfigError(ValueError):
    """A setting that cannot work (a missing file, a key that does not match): the message
    names the setting, and `loom serve` exits non-zero before listening."""


@dataclass(frozen=True, slots=True)
class MethodPolicy:
    """How one RPC method is bounded."""

    max_concurrency: int = 64
    """Calls of this method running at once."""
    max_waiting: int = 64
    """Calls allowed to wait for a slot; beyond that RESOURCE_EXHAUSTED at once."""
    max_wait_s: float = 0.5
    """Longest wait for a slot before RESOURCE_EXHAUSTED."""
    deadline_s: float = 5.0
    """Default deadline; a shorter client deadline wins."""
    scope: str = ""
    """Token scope the method requires when auth is on (empty: derived from its name,
    `server.runtime.auth.method_scope`)."""


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
    log_level: str = "info"
    """structlog level: debug, info, warning, error."""
    use_uvloop: bool = True
    """uvloop serves ~10 % more calls per core (ENGINES.md)."""
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
class ThreadWeaverSettings:
    """ThreadWeaver limits."""

    max_batch: int = 1000
    """Messages per WeaveMessages call."""
    max_resolve: int = 100
    """Threads per ResolveThreads call."""
    default_max_threads: int = 10_000
    """Spam guard: member threads above which a unified thread is oversized."""
    max_closure: int = 10_000
    """Unified threads a merge closure may hold before the read is refused."""


@dataclass(frozen=True, slots=True)
class SummarySettings:
    """Summary: when an exact recipient set becomes a sketch, and how hard a write retries."""

    exact_threshold: int = 250
    """Recipients per status kept as an exact id set (Remind: 99 % of messages have <= 250).
    Stored in each new summary; existing summaries keep the threshold they were created with."""
    exact_byte_budget: int = 16 * 1024
    """UTF-8 bytes of exact ids per status before promotion, whatever the count."""
    max_retries: int = 10
    """Optimistic-concurrency attempts per RecordDeliveryEvents before UNAVAILABLE."""
    retry_base_s: float = 0.002
    """First backoff after a lost conditional write; doubles per attempt, fully jittered."""
    retry_max_s: float = 0.1
    """Cap of one backoff."""


@dataclass(frozen=True, slots=True)
class InboxSettings:
    """Inbox: the trim cap, probabilistic trimming and the bounded fan-out stage."""

    max_entries: int = 5000
    """Threads kept per inbox (Yammer: 5,000 entries is ~75 KB and four years of activity)."""
    trim_probability: float = 0.02
    """Chance that one delivery to an inbox schedules an async trim of it (~1 per 50)."""
    trim_queue: int = 10_000
    """Distinct inboxes waiting for a trim; beyond that a trim request is dropped."""
    trim_workers: int = 2
    """Tasks trimming inboxes concurrently."""
    scan_limit: int = 20_000
    """Rows read per inbox at most (list, trim): a bound even on an overgrown inbox."""
    sync_fanout_max: int = 1000
    """Recipients up to which PostMessage delivers within the call; more go to the background."""
    fanout_workers: int = 2
    """Background fan-outs running at once."""
    fanout_queue: int = 64
    """Background fan-outs waiting for a worker; beyond that RESOURCE_EXHAUSTED."""
    fanout_chunk: int = 500
    """Inboxes per store call of a fan-out (a 300,000-recipient post is 300 calls)."""
    fanout_rate_per_s: float = 50_000.0
    """Deliveries per second of the whole background stage (0 = unpaced): leaves CPU for
    interactive calls; 300,000 inboxes still land in ~6 s."""
    max_recipients: int = 1_000_000
    """Recipient ids per PostMessage."""
    progress_interval_s: float = 0.5
    """Least time between two progress writes of one background fan-out."""
    stall_after_s: float = 30.0
    """A RUNNING delivery with no progress write for this long is reported FAILED."""
    default_page_size: int = 50
    """ListInbox page size when the request says 0."""


@dataclass(frozen=True, slots=True)
class IteratorLevel:
    """One level of the iterated hierarchy (``[[iterator.levels]]``, top level first)."""

    name: str = ""
    """What callers call it (``level`` in StartIteration), e.g. "file"."""
    table: str = ""
    """Its table."""
    id_column: str = ""
    """Its integer id column (or give ``id_columns``)."""
    id_columns: tuple[str, ...] = ()
    """A composite key, compared as a row value ``(a, b) > (?, ?)``; the last level only."""
    parent_column: str = ""
    """The column holding the parent's id (empty for the top level)."""
    where: str = ""
    """An SQL condition on this table's rows that count ("valid" rows: ``deleted = 0``)."""

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The id columns, whichever way they were given."""
        return self.id_columns or ((self.id_column,) if self.id_column else ())


DEFAULT_LEVELS = (
    IteratorLevel("enterprise", "enterprise", "id", where="deleted = 0"),
    IteratorLevel("user", "users", "id", parent_column="enterprise_id", where="deleted = 0"),
    IteratorLevel("file", "file", "id", parent_column="user_id", where="deleted = 0"),
    IteratorLevel("version", "file_version", "id", parent_column="file_id", where="deleted = 0"),
)
"""Box's hierarchy: enterprise -> user -> file -> version (`storage/sql/schema.py`)."""


@dataclass(frozen=True, slots=True)
class IteratorSettings:
    """Iterator: the source database, its hierarchy and the pipeline's knobs."""

    source_url: str = ""
    """SQLAlchemy async URL of the iterated database: ``sqlite+aiosqlite:///path``,
    ``postgresql+asyncpg://u:p@host/db``, ``mysql+aiomysql://u:p@host/db``. Empty: an embedded
    SQLite file ``iterator-source.sqlite3`` in the data directory with the default schema."""
    levels: tuple[IteratorLevel, ...] = DEFAULT_LEVELS
    """The hierarchy, top level first (``[[iterator.levels]]``)."""
    workers: int = 4
    """Worker tasks per server; every replica's workers share the queues."""
    large_range_threshold: int = 250_000
    """Rows of one parent after which the rest of it is split into ranges read in parallel."""
    steal_after_s: float = 5.0
    """A split range still running after this long is split again (work stealing)."""
    target_chunk_s: float = 0.05
    """Seconds one chunk read should take; each worker's LIMIT adapts to it."""
    min_chunk: int = 100
    """Smallest LIMIT of a chunk read."""
    max_chunk: int = 5000
    """Largest LIMIT of a chunk read (a chunk is one ledger item: bounded)."""
    initial_chunk: int = 1000
    """LIMIT of a worker's first read of a level."""
    visibility_timeout_s: float = 30.0
    """A taken work item not finished within this reappears for another worker."""
    hold_steps: int = 16
    """Steps a worker takes on one range while holding its work item (within a third of
    the visibility timeout) before handing the rest back to the queue."""
    fanout: int = 4
    """Children tasks one step creates for the parents it found (1..32): their children
    are read in parallel by different workers and replicas."""
    ack_timeout_s: int = 30
    """Default seconds a delivered chunk may stay unacknowledged (require_ack)."""
    max_stream_batch: int = 5000
    """Default most objects per StreamObjects message."""
    poll_interval_s: float = 0.05
    """Idle workers and streams look for new work this often."""
    check_interval_s: float = 0.25
    """How often each server checks its running jobs for completion."""
    pause_poll_s: float = 1.0
    """A paused job's work item is looked at again after this long."""
    source_probe_s: float = 1.0
    """While the source is down, how often it is probed (jobs resume when it answers)."""


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
    auth: AuthSettings = field(default_factory=AuthSettings)
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    threadweaver: ThreadWeaverSettings = field(default_factory=ThreadWeaverSettings)
    summary: SummarySettings = field(default_factory=SummarySettings)
    inbox: InboxSettings = field(default_factory=InboxSettings)
    iterator: IteratorSettings = field(default_factory=IteratorSettings)
    policies: Mapping[str, MethodPolicy] = field(default_factory=dict)
    """Per-method overrides keyed by full method name ``loom.v1.Service/Method``."""


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


def load_settings(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Settings:
    """Defaults < TOML file < ``LOOM_SECTION__FIELD`` environment < `overrides` (CLI flags)."""
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
        if section not in merged:
            raise ValueError(f"{key}: unknown settings section {section!r}")
        merged[section][name] = value
    for section, values in (overrides or {}).items():
        merged[section].update({k: v for k, v in values.items() if v is not None})
    built: dict[str, Any] = {
        name: _build(cls, merged[name], name) for name, cls in _sections().items()
    }
    return Settings(**built, policies=types.MappingProxyType(policies))
