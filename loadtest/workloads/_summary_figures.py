"""In-process figures of the Summary workload: accuracy vs a HyperLogLog, and stored bytes.

Accuracy is a property of the estimator, not of the server, so it is computed here on the
domain object the server stores (``MessageSummary``), exactly as ``loadtest.benches.summary_accuracy`` does: each
run records fresh random recipient ids in 10K batches and reads the count at every checkpoint,
so one run up to 1M yields one sample at every n. The same ids go, in the same run, into
datasketch's ``HyperLogLog`` (p = 14: 16,384 one-byte registers, at least the size of one
stored Loom status) hashed by 32-bit MurmurHash3 with an unrelated seed — the off-the-shelf
alternative a reader would reach for.

Stored bytes are measured on a realistic summary (n DELIVERED, n/2 of them READ, n/10 others
FAILED) next to what Remind's exact encoding would store: the same recipients as 36-character
UUID strings in three sets, which overflows DynamoDB's 400 KB item beyond ~8,000 recipients.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import mmh3
from datasketch import HyperLogLog

from server.summary.limits import DYNAMODB_ITEM_LIMIT_BYTES
from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary

__all__ = ["ErrorRow", "SizeRow", "accuracy_table", "size_table"]

HLL_P = 14
UUID_BYTES = 36
_BATCH = 10_000
_D, _R, _F = DeliveryStatus.DELIVERED, DeliveryStatus.READ, DeliveryStatus.FAILED


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """Relative error of count at one n, Loom vs HLL, over every run."""

    n: int
    runs: int
    loom_mean: float
    loom_max: float
    loom_rms: float
    hll_mean: float
    hll_max: float
    loom_bytes_max: int
    hll_bytes: int


@dataclass(frozen=True, slots=True)
class SizeRow:
    """Stored bytes of a realistic 3-status summary, vs the seed's exact UUID sets."""

    n: int
    loom_bytes: int
    exact_uuid_bytes: int
    exact_exceeds_item_limit: bool


def _hll_hash(data: bytes) -> int:
    return int(mmh3.hash(data, seed=0x5EED, signed=False))


def _one_run(seed: int, sizes: Sequence[int]) -> dict[int, tuple[float, float, int]]:
    """(loom relative error, HLL relative error, loom encoded bytes) at each checkpoint."""
    prefix = f"{random.Random(seed).getrandbits(64):016x}"
    summary = MessageSummary()
    hll = HyperLogLog(p=HLL_P, hashfunc=_hll_hash)
    out: dict[int, tuple[float, float, int]] = {}
    done = 0
    for target in sorted(sizes):
        while done < target:
            stop = min(target, done + _BATCH)
            ids = [f"{prefix}-{i}" for i in range(done, stop)]
            summary.record([DeliveryEvent(i, _D) for i in ids])
            for i in ids:
                hll.update(i.encode())
            done = stop
        view = summary.view()
        out[target] = (
            view.statuses[_D].count / target - 1.0,
            float(hll.count()) / target - 1.0,
            view.encoded_size_bytes,
        )
    return out


def accuracy_table(sizes: Sequence[int], runs: int, seed: int) -> list[ErrorRow]:
    """Mean / max |relative error| per n for Loom and the HLL, over `runs` random sets."""
    samples = [_one_run(seed + r, sizes) for r in range(runs)]
    hll_bytes = int(HyperLogLog(p=HLL_P).bytesize())
    rows = []
    for n in sorted(sizes):
        loom = [s[n][0] for s in samples]
        hll = [s[n][1] for s in samples]
        rows.append(
            ErrorRow(
                n=n,
                runs=runs,
                loom_mean=statistics.fmean(map(abs, loom)),
                loom_max=max(map(abs, loom)),
                loom_rms=math.sqrt(statistics.fmean(e * e for e in loom)),
                hll_mean=statistics.fmean(map(abs, hll)),
                hll_max=max(map(abs, hll)),
                loom_bytes_max=max(s[n][2] for s in samples),
                hll_bytes=hll_bytes,
            )
        )
    return rows


def size_table(sizes: Sequence[int], seed: int) -> list[SizeRow]:
    """Encoded bytes of one realistic summary at each n (built incrementally)."""
    prefix = f"{random.Random(seed).getrandbits(64):016x}"
    summary = MessageSummary()
    rows = []
    done = 0
    for target in sorted(sizes):
        while done < target:
            stop = min(target, done + _BATCH)
            events = [DeliveryEvent(f"{prefix}-{i}", _D) for i in range(done, stop)]
            span = range(done, stop)
            events += [DeliveryEvent(f"{prefix}-{i}", _R) for i in span if i % 2 == 0]
            events += [DeliveryEvent(f"{prefix}-f{i}", _F) for i in span if i % 10 == 0]
            summary.record(events)
            done = stop
        # Remind's row: delivered + read + failed UUID sets (the same n + n/2 + n/10 ids).
        exact = UUID_BYTES * (target + len(range(0, target, 2)) + len(range(0, target, 10)))
        rows.append(
            SizeRow(
                n=target,
                loom_bytes=len(summary.encode()),
                exact_uuid_bytes=exact,
                exact_exceeds_item_limit=exact > DYNAMODB_ITEM_LIMIT_BYTES,
            )
        )
    return rows
