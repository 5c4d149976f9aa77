"""Which engines a ThreadWeaver load run can store on, and the environment that points a
``loom serve`` at one (fresh tables per run, engine addresses from ``.engines/env``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from storage.engines import THREAD_STORES

__all__ = ["STORES", "parse_stores", "store_env"]

STORES = THREAD_STORES.names
"""The ThreadStore's engines (`storage.engines`), the embedded one first."""


def store_env(store: str, run_id: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Environment for a ``loom serve`` on ``store``: fresh tables, engine from ``environ``.

    Engine addresses come from what ``scripts/engines/up.sh`` exported (``.engines/env``);
    a missing one is an error here rather than a server that hangs connecting to nothing.
    """
    if store == "sqlite":
        return {}
    if store == "bigtable":
        if not environ.get("BIGTABLE_EMULATOR_HOST"):
            raise ValueError("bigtable: BIGTABLE_EMULATOR_HOST is unset (source .engines/env)")
        return {
            "BIGTABLE_EMULATOR_HOST": environ["BIGTABLE_EMULATOR_HOST"],
            "LOOM_BIGTABLE__CREATE_TABLES": "true",
            "LOOM_BIGTABLE__TABLE_PREFIX": f"lt{run_id}-",
        }
    if store == "cassandra":
        points = environ.get("LOOM_TEST_CASSANDRA_CONTACT_POINTS")
        if not points:
            raise ValueError(
                "cassandra: LOOM_TEST_CASSANDRA_CONTACT_POINTS is unset (source .engines/env)"
            )
        return {
            "LOOM_CASSANDRA__CONTACT_POINTS": points,
            "LOOM_CASSANDRA__PORT": environ.get("LOOM_TEST_CASSANDRA_PORT", "9042"),
            "LOOM_CASSANDRA__KEYSPACE": f"loadtest_{run_id}",
            "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
        }
    raise ValueError(f"unknown store {store!r}; expected one of {', '.join(STORES)}")


def parse_stores(text: str) -> list[str]:
    stores = [s.strip() for s in text.split(",") if s.strip()]
    for s in stores:
        if s not in STORES:
            raise argparse.ArgumentTypeError(f"unknown store {s!r}; choose from {STORES}")
    if len(set(stores)) != len(stores) or not stores:
        raise argparse.ArgumentTypeError("give each store once")
    return stores
