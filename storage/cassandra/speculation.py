"""Server-side speculative retry: each Loom table's, set from `cassandra.speculative_retry`.

A coordinator reading at LOCAL_QUORUM asks as few replicas as the level needs and waits for
them. When one of those is frozen (not dead: gossip still says up), the coordinator asks
another replica only after the table's ``speculative_retry`` threshold. Cassandra's default,
``99p``, is the table's own 99th percentile, which the frozen replica's stalls drive up, so
the coordinator stops speculating just when it should (CASSANDRA-14293, which added
``MIN(99p,50ms)`` for this). The driver's speculation cannot help there: every coordinator
it tries may pick the frozen replica. Set on every table by `apply`, as the stores create
them (and on tables an earlier release created), once: a table already so is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from storage.errors import StorageError, StorageMisconfigured

__all__ = ["apply", "canonical", "checked", "refusals", "table_of", "with_policy"]

_TABLE = re.compile(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+\{ks\}\.(\w+)", re.IGNORECASE)
_POLICY = re.compile(r"[A-Za-z0-9.,() ]{1,40}")
"""What a speculative retry policy is made of (``99p``, ``50ms``, ``MIN(99p,50ms)``,
``ALWAYS``, ``NEVER``): it goes into CQL as a literal, so nothing else may be in it."""


def canonical(policy: str) -> str:
    """A policy as Cassandra may spell it back (case, spaces and ``PERCENTILE`` aside)."""
    text = re.sub(r"\s+", "", policy).lower().replace("percentile", "p")
    return re.sub(r"(\d+)\.0+(?=p|ms)", r"\1", text)


def table_of(ddl: str) -> str | None:
    """The table a ``CREATE TABLE IF NOT EXISTS {ks}.name`` statement makes, else None."""
    found = _TABLE.search(ddl)
    return found.group(1) if found else None


def checked(policy: str) -> str:
    """`policy`, when it is one ("" too: leave the tables' own); else start-up stops naming
    the setting, before any table is made."""
    if policy and not _POLICY.fullmatch(policy):
        raise StorageMisconfigured(
            "cassandra.speculative_retry", f"{policy!r} is not a speculative retry policy"
        )
    return policy


def with_policy(ddl: str, policy: str) -> str:
    """`ddl` creating a table with `policy` (`checked`) among its options (a new table then
    needs no ALTER); any other statement, or no policy, unchanged."""
    if not policy or table_of(ddl) is None:
        return ddl
    glue = " AND " if re.search(r"\)\s*WITH\s", ddl, re.IGNORECASE) else " WITH "
    return f"{ddl.rstrip().rstrip(';')}{glue}speculative_retry = '{policy}'"


async def apply(
    policy: str,
    keyspace: Any,
    tables: Sequence[str],
    execute_ddl: Callable[[str], Awaitable[None]],
) -> None:
    """Sets `policy` (`checked`) on each table `tables` (DDL) create whose own differs.

    `keyspace` is the driver's metadata of the keyspace. "" leaves every table's own. A
    policy the cluster refuses stops start-up naming the setting.
    """
    if not policy:
        return
    for ddl in tables:
        name = table_of(ddl)
        table = keyspace.tables.get(name) if keyspace is not None and name else None
        if table is None:
            continue
        if canonical(str(table.options.get("speculative_retry", ""))) == canonical(policy):
            continue
        with refusals(policy):
            await execute_ddl(
                f"ALTER TABLE {keyspace.name}.{name} WITH speculative_retry = '{policy}'"
            )


@contextmanager
def refusals(policy: str) -> Iterator[None]:
    """Turns the cluster's refusal of `policy` (in a CREATE or an ALTER) into a start-up
    error naming the setting; any other schema fault passes unchanged."""
    try:
        yield
    except StorageError as exc:
        if "speculative" not in str(exc).lower():
            raise
        raise StorageMisconfigured(
            "cassandra.speculative_retry", f"the cluster refused {policy!r} ({exc})"
        ) from exc
