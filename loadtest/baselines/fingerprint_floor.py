"""TemplateInduction's throughput floor: parse + fingerprint alone, no server.

The end-to-end SubmitEmails rate is reported as a fraction of this one, measured in the
same run on the same emails with the same function the server's CPU stage runs, in a
process pool of the server's size: what is left over is the server's own cost.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from server.templates.model import EmailIn
from server.templates.schemes import SchemeParams
from server.templates.work import fingerprint_batch

__all__ = ["cpu_floor"]


def cpu_floor(
    items: Sequence[tuple[str, str]], workers: int, batch: int, params: SchemeParams
) -> float:
    """Emails/s of parse + fingerprint alone, same process count and batch as the server.

    `items` are (sender, html); no recipient, so no stored form is built: the floor is the
    paper's fingerprint and the scheme's keys only.
    """
    emails = [EmailIn("", sender, "", "", html, 0) for sender, html in items]
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        list(pool.map(fingerprint_batch, [emails[:batch]] * workers, [params] * workers))  # warm
        chunks = [emails[i : i + batch] for i in range(0, len(emails), batch)]
        t0 = time.perf_counter()
        for _ in pool.map(fingerprint_batch, chunks, [params] * len(chunks)):
            pass
        return len(items) / (time.perf_counter() - t0)
