"""The Iterator's source baseline: the raw keyset scan, no pipeline.

One loop of ``WHERE user_id = ? AND id > ? ORDER BY id LIMIT n`` per user of the scope,
measured in the same run as the pipeline: what the pipeline's objects/s is a fraction of.
"""

from __future__ import annotations

import time

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

__all__ = ["raw_scan"]


async def raw_scan(url: str, users: list[int], chunk: int) -> tuple[int, float]:
    """The baseline: one keyset loop per user, no pipeline. (rows, seconds)"""
    engine = create_async_engine(url)
    sql = text(
        "SELECT id FROM file WHERE user_id = :u AND id > :m AND deleted = 0 ORDER BY id LIMIT :n"
    )
    rows = 0
    started = time.perf_counter()
    async with engine.connect() as conn:
        for user in users:
            marker = -1
            while True:
                got = (await conn.execute(sql, {"u": user, "m": marker, "n": chunk})).all()
                rows += len(got)
                if len(got) < chunk:
                    break
                marker = got[-1][0]
    seconds = time.perf_counter() - started
    await engine.dispose()
    return rows, seconds
