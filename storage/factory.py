"""Settings -> storage adapters. The only module that knows every engine's package.

Distributed engines are imported lazily so the embedded default needs none of their
drivers to be reachable (and starts in milliseconds).
"""

from __future__ import annotations

from pathlib import Path

from server.config import Settings
from storage.ports import ThreadStore

__all__ = ["open_thread_store"]


async def open_thread_store(settings: Settings) -> ThreadStore:
    """The ThreadStore named by ``storage.threadweaver_store``."""
    engine = settings.storage.threadweaver_store
    if engine == "sqlite":
        from storage.sqlite.threads import SqliteThreadStore

        return await SqliteThreadStore.open(
            Path(settings.sqlite.data_dir) / "threadweaver.sqlite3",
            synchronous=settings.sqlite.synchronous,
            readers=settings.sqlite.readers,
        )
    raise ValueError(f"threadweaver_store={engine!r} is not supported")
