"""Pieces the Inbox stage tests share: a trimmer that never trims, so what a fan-out or an
adoption writes is all an inbox holds."""

from __future__ import annotations

import random

from server.inbox.trimming import Trimmer
from storage.sqlite.inbox import SqliteInboxStore

__all__ = ["quiet_trimmer"]


def quiet_trimmer(store: SqliteInboxStore) -> Trimmer:
    """A trimmer that never schedules a trim (probability 0)."""
    return Trimmer(
        store,
        max_entries=5000,
        probability=0.0,
        queue_size=10,
        workers=1,
        scan_limit=20_000,
        rng=random.Random(1),
    )
