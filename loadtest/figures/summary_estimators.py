"""In-process figures of the Summary workload: error and bytes vs DataSketches, CPU, determinism.

Accuracy is a property of the estimator, not of the server, so it is computed here on the
domain object the server stores (``MessageSummary``), exactly as
``loadtest.benches.summary_accuracy`` does: each run records fresh random recipient ids in 10K
batches and reads the count at every checkpoint, so one run up to 1M yields one sample at
every n. In the same run the same ids go into:

* Loom v1 — the summary format before CPC (linear-counting bitmap + HLL registers, still
  decoded and grown for old rows): the "before" of the bytes figure;
* Apache DataSketches **CPC** and **HLL_4** at several lgK each, used as a single writer
  would use them (updated in arrival order, HIP estimator, bytes from ``serialize`` /
  ``serialize_compact``).

"At equal mean error": lgK moves a sketch's error by √2 per step, so a competitor is compared
at the lgK whose measured mean |error| is closest to Loom's, and its bytes are also scaled to
Loom's error exactly (bytes * (its error / Loom's error)², since bytes ∝ k and error ∝ 1/√k
once the sketch is dense, i.e. from ~10K recipients up). Loom's bytes are one status's share
of the stored row (the whole encoded summary with the two other statuses empty).

Stored bytes of a realistic summary (n DELIVERED, n/2 of them READ, n/10 others FAILED) sit
next to what Remind's exact encoding would store (36-character UUIDs in three sets).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import datasketches

from server.summary.limits import DYNAMODB_ITEM_LIMIT_BYTES
from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary
from server.summary.recipients import SketchParams

__all__ = [
    "Competitor",
    "ErrorRow",
    "PairedRow",
    "SizeRow",
    "accuracy_table",
    "cpu_per_event",
    "determinism",
    "equal_error_bytes",
    "paired_cpc",
    "size_table",
]

UUID_BYTES = 36
CPC_LG_KS = (11, 12, 13, 14)
HLL4_LG_KS = (12, 13, 14, 15)
V1_PARAMS = SketchParams(cpc_lg_k=0)
_BATCH = 10_000
_D, _R, _F = DeliveryStatus.DELIVERED, DeliveryStatus.READ, DeliveryStatus.FAILED


@dataclass(frozen=True, slots=True)
class Competitor:
    """Mean |relative error| and mean bytes of one DataSketches sketch at one lgK and n."""

    lg_k: int
    mean_err: float
    bytes: float


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """Relative error and bytes of count at one n, over every run."""

    n: int
    runs: int
    loom_mean: float
    loom_max: float
    loom_rms: float
    loom_bytes: float
    v1_mean: float
    v1_bytes: float
    cpc: list[Competitor] = field(default_factory=list)
    hll4: list[Competitor] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SizeRow:
    """Stored bytes of a realistic 3-status summary, vs the seed's exact UUID sets."""

    n: int
    loom_bytes: int
    v1_bytes: int
    exact_uuid_bytes: int
    exact_exceeds_item_limit: bool


Sample = dict[str, tuple[float, float]]  # sketch name -> (relative error, bytes)


def _one_run(seed: int, sizes: Sequence[int]) -> dict[int, Sample]:
    """Every sketch's (relative error, bytes) at each checkpoint, on one random id set."""
    prefix = f"{random.Random(seed).getrandbits(64):016x}"
    loom, v1 = MessageSummary(), MessageSummary(V1_PARAMS)
    cpcs = {k: datasketches.cpc_sketch(k) for k in CPC_LG_KS}
    hlls = {k: datasketches.hll_sketch(k, datasketches.tgt_hll_type.HLL_4) for k in HLL4_LG_KS}
    out: dict[int, Sample] = {}
    done = 0
    for target in sorted(sizes):
        while done < target:
            stop = min(target, done + _BATCH)
            ids = [f"{prefix}-{i}" for i in range(done, stop)]
            batch = [DeliveryEvent(i, _D) for i in ids]
            loom.record(batch)
            v1.record(batch)
            for sketch in (*cpcs.values(), *hlls.values()):
                update = sketch.update
                for i in ids:
                    update(i)
            done = stop
        sample: Sample = {}
        for name, summary in (("loom", loom), ("v1", v1)):
            view = summary.view()
            sample[name] = (view.statuses[_D].count / target - 1.0, view.encoded_size_bytes)
        for k, c in cpcs.items():
            sample[f"cpc{k}"] = (c.get_estimate() / target - 1.0, len(c.serialize()))
        for k, h in hlls.items():
            sample[f"hll4_{k}"] = (h.get_estimate() / target - 1.0, len(h.serialize_compact()))
        out[target] = sample
    return out


def accuracy_table(sizes: Sequence[int], runs: int, seed: int) -> list[ErrorRow]:
    """Mean / max |relative error| and mean bytes per n for every sketch, over `runs` sets."""
    samples = [_one_run(seed + r, sizes) for r in range(runs)]
    rows = []
    for n in sorted(sizes):

        def errs(name: str, n: int = n) -> list[float]:
            return [s[n][name][0] for s in samples]

        def size(name: str, n: int = n) -> float:
            return statistics.fmean(s[n][name][1] for s in samples)

        loom = errs("loom")
        rows.append(
            ErrorRow(
                n=n,
                runs=runs,
                loom_mean=statistics.fmean(map(abs, loom)),
                loom_max=max(map(abs, loom)),
                loom_rms=math.sqrt(statistics.fmean(e * e for e in loom)),
                loom_bytes=size("loom"),
                v1_mean=statistics.fmean(map(abs, errs("v1"))),
                v1_bytes=size("v1"),
                cpc=[
                    Competitor(k, statistics.fmean(map(abs, errs(f"cpc{k}"))), size(f"cpc{k}"))
                    for k in CPC_LG_KS
                ],
                hll4=[
                    Competitor(k, statistics.fmean(map(abs, errs(f"hll4_{k}"))), size(f"hll4_{k}"))
                    for k in HLL4_LG_KS
                ],
            )
        )
    return rows


def equal_error_bytes(
    loom_err: float, competitors: Sequence[Competitor], n: int
) -> tuple[Competitor, float] | None:
    """The competitor lgK whose mean error is nearest Loom's, and the competitor's bytes at
    exactly Loom's error: each lgK's bytes * (its error / Loom's)², geometric mean over the
    lgKs where the sketch is dense (n >= 4k, where bytes ∝ k and error ∝ 1/√k; pooling
    them divides the noise of 20-run error means by up to ~2), the nearest lgK alone below. None where Loom is exact (n <= 250)
    or a competitor measured no error at all."""
    if loom_err <= 0 or any(c.mean_err <= 0 for c in competitors):
        return None
    nearest = min(competitors, key=lambda c: abs(math.log(c.mean_err / loom_err)))
    dense = [c for c in competitors if n >= 4 << c.lg_k] or [nearest]
    scaled = [c.bytes * (c.mean_err / loom_err) ** 2 for c in dense]
    return nearest, statistics.geometric_mean(scaled)


def size_table(sizes: Sequence[int], seed: int) -> list[SizeRow]:
    """Encoded bytes of one realistic summary at each n (built incrementally), v2 and v1."""
    prefix = f"{random.Random(seed).getrandbits(64):016x}"
    summary, v1 = MessageSummary(), MessageSummary(V1_PARAMS)
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
            v1.record(events)
            done = stop
        # Remind's row: delivered + read + failed UUID sets (the same n + n/2 + n/10 ids).
        exact = UUID_BYTES * (target + len(range(0, target, 2)) + len(range(0, target, 10)))
        rows.append(
            SizeRow(
                n=target,
                loom_bytes=len(summary.encode()),
                v1_bytes=len(v1.encode()),
                exact_uuid_bytes=exact,
                exact_exceeds_item_limit=exact > DYNAMODB_ITEM_LIMIT_BYTES,
            )
        )
    return rows


def cpu_per_event(n: int = 50_000, batch: int = 1_000, seed: int = 7) -> dict[str, float]:
    """µs of CPU per recorded event for what one RecordDeliveryEvents does to a summary that
    already holds `n` recipients: decode the row, record a batch of new ids, encode."""
    prefix = f"{random.Random(seed).getrandbits(64):016x}"
    warm = [DeliveryEvent(f"{prefix}-{i}", _D) for i in range(n)]
    fresh = [[DeliveryEvent(f"{prefix}-x{b}-{i}", _D) for i in range(batch)] for b in range(20)]
    out: dict[str, float] = {}
    for name, params in (("loom", SketchParams()), ("v1", V1_PARAMS)):
        row = MessageSummary.from_events(warm, params).encode()
        started = time.process_time()
        for events in fresh:
            summary = MessageSummary.decode(row)
            summary.record(events)
            summary.encode()
        out[f"{name}_us_per_event"] = (time.process_time() - started) / (20 * batch) * 1e6
    ids = [e.recipient_id for events in fresh for e in events]
    for k in (13,):
        sketch = datasketches.cpc_sketch(k)
        started = time.process_time()
        for i in ids:
            sketch.update(i)
        out[f"cpc{k}_update_us_per_event"] = (time.process_time() - started) / len(ids) * 1e6
    return out


def determinism(n: int = 20_000, seed: int = 9) -> dict[str, bool]:
    """Whether the same ids recorded in two orders (and once replayed) give identical bytes."""
    ids = [f"d{seed}-{i}" for i in range(n)]
    shuffled = random.Random(seed).sample(ids, n)

    def loom(order: list[str]) -> bytes:
        summary = MessageSummary()
        for start in range(0, n, 3_000):
            summary.record([DeliveryEvent(i, _D) for i in order[start : start + 3_000]])
        summary.record([DeliveryEvent(i, _D) for i in order[:1_000]])
        return summary.encode()

    def cpc(order: list[str]) -> bytes:
        sketch = datasketches.cpc_sketch(13)
        for i in order:
            sketch.update(i)
        return bytes(sketch.serialize())

    def hll4(order: list[str]) -> bytes:
        sketch = datasketches.hll_sketch(14, datasketches.tgt_hll_type.HLL_4)
        for i in order:
            sketch.update(i)
        return bytes(sketch.serialize_compact())

    return {
        "loom_v2": loom(ids) == loom(shuffled),
        "cpc_serialized_as_updated": cpc(ids) == cpc(shuffled),
        "hll4_serialized_as_updated": hll4(ids) == hll4(shuffled),
    }


@dataclass(frozen=True, slots=True)
class PairedRow:
    """Loom's sketch vs DataSketches CPC (HIP) at the same lgK on the same ids, many runs."""

    n: int
    runs: int
    loom_mean: float
    cpc_hip_mean: float
    loom_bytes: float
    cpc_hip_bytes: float

    @property
    def bytes_ratio_at_equal_error(self) -> float:
        """Loom's bytes over CPC's once CPC is sized to Loom's error (bytes ∝ 1/error²)."""
        return (self.loom_bytes / self.cpc_hip_bytes) * (self.loom_mean / self.cpc_hip_mean) ** 2


def paired_cpc(sizes: Sequence[int], runs: int, seed: int, lg_k: int = 13) -> list[PairedRow]:
    """The equal-error byte ratio measured tightly: Loom's stored sketch is the canonical
    (union-normalised) CPC of the same coupons a plain CPC sketch holds, so both are fed the
    same ids and only their estimators differ (ICON vs HIP): their errors are paired, and
    many runs are cheap because no summary is re-encoded per batch. That Loom stores exactly
    this canonical sketch is checked on the first runs (a mismatch raises)."""
    errs: dict[int, tuple[list[float], list[float], list[int], list[int]]] = {
        n: ([], [], [], []) for n in sizes
    }
    for r in range(runs):
        prefix = f"{random.Random(seed + r).getrandbits(64):016x}"
        plain = datasketches.cpc_sketch(lg_k)
        loom = MessageSummary(SketchParams(cpc_lg_k=lg_k)) if r < 2 else None
        done = 0
        for n in sorted(sizes):
            ids = [f"{prefix}-{i}" for i in range(done, n)]
            for i in ids:
                plain.update(i)
            union = datasketches.cpc_union(lg_k)
            union.update(plain)
            canonical = union.get_result()
            if loom is not None:
                for start in range(0, len(ids), _BATCH):
                    loom.record([DeliveryEvent(i, _D) for i in ids[start : start + _BATCH]])
                if canonical.serialize() not in loom.encode():
                    raise AssertionError("Loom's stored sketch is not the canonical CPC")
            done = n
            loom_err, hip_err, loom_bytes, hip_bytes = errs[n]
            loom_err.append(abs(canonical.get_estimate() / n - 1.0))
            hip_err.append(abs(plain.get_estimate() / n - 1.0))
            loom_bytes.append(len(canonical.serialize()) + _LOOM_OVERHEAD)
            hip_bytes.append(len(plain.serialize()))
    return [
        PairedRow(
            n=n,
            runs=runs,
            loom_mean=statistics.fmean(e[0]),
            cpc_hip_mean=statistics.fmean(e[1]),
            loom_bytes=statistics.fmean(e[2]),
            cpc_hip_bytes=statistics.fmean(e[3]),
        )
        for n, e in sorted(errs.items())
    ]


_LOOM_OVERHEAD = 15 + 3 + 4 + 2 * 2
"""Bytes a one-status v2 row adds around the sketch (stored uncompressed: zstd does not shrink
it): header with CRC (15), a tier byte per status (3), the sketch's u32 length (4), the two
empty exact sets' u16 counts (2 x 2)."""
