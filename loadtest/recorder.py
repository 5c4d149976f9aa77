"""Exact latency recording: every sample kept, percentiles by nearest rank.

Load-test runs here are at most a few million operations, so storing each latency as a
float64 (8 bytes) costs tens of MB at worst and buys exact percentiles — no histogram
bucketing error to argue about when a p999 is compared against a baseline.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["PERCENTILES", "LatencyRecorder", "PhaseStats", "nearest_rank"]

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p999", 99.9),
)


def nearest_rank(sorted_samples: npt.NDArray[np.float64], pct: float) -> float:
    """The smallest sample with at least ``pct`` % of samples ≤ it (NaN when empty).

    Nearest rank always returns a latency that was actually observed, which is what an
    operator expects "p99 = 412 ms" to mean; it equals numpy's ``inverted_cdf`` method.
    """
    n = len(sorted_samples)
    if n == 0:
        return math.nan
    # Round before ceil: 99.9 / 100 * 1000 is 999.0000000000001 in binary floating point,
    # which would turn the p999 of 1,000 samples into the maximum.
    rank = max(1, math.ceil(round(pct * n / 100.0, 9)))
    return float(sorted_samples[min(rank, n) - 1])


@dataclass(frozen=True, slots=True)
class PhaseStats:
    """What one phase measured; latencies in milliseconds, NaN when nothing succeeded."""

    ok: int
    """Operations that returned normally (the latency samples)."""
    errors: dict[str, int]
    """Failed operations by gRPC status code name (or exception class name)."""
    dropped: int
    """Fixed-rate arrivals never issued because the in-flight bound was reached."""
    wall_s: float
    """Wall time from the first scheduled start to the last completion."""
    min_ms: float
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @property
    def throughput(self) -> float:
        """Successful operations per second of wall time."""
        return self.ok / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def error_count(self) -> int:
        """All failed operations, whatever the code."""
        return sum(self.errors.values())

    def metric(self, name: str) -> float:
        """A metric by short name: p50, p95, p99, p999, min, mean, max, throughput, ok."""
        if name == "throughput":
            return self.throughput
        if name in ("ok", "dropped", "error_count"):
            return float(getattr(self, name))
        value = getattr(self, f"{name.removesuffix('_ms')}_ms", None)
        if not isinstance(value, float):
            raise KeyError(f"unknown metric {name!r}")
        return value

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form, throughput included."""
        return {
            "ok": self.ok,
            "errors": dict(self.errors),
            "dropped": self.dropped,
            "wall_s": self.wall_s,
            "throughput_ops_s": self.throughput,
            "min_ms": self.min_ms,
            "mean_ms": self.mean_ms,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "p999_ms": self.p999_ms,
            "max_ms": self.max_ms,
        }


@dataclass(slots=True)
class LatencyRecorder:
    """Collects latencies (seconds), error codes and drops for one phase."""

    _samples: array[float] = field(default_factory=lambda: array("d"))
    errors: Counter[str] = field(default_factory=Counter)
    dropped: int = 0

    def record(self, latency_s: float) -> None:
        """One successful operation."""
        self._samples.append(latency_s)

    def record_error(self, code: str) -> None:
        """One failed operation; failures are counted, not timed into the percentiles."""
        self.errors[code] += 1

    def record_drop(self) -> None:
        """One arrival the open-loop scheduler could not issue."""
        self.dropped += 1

    def __len__(self) -> int:
        return len(self._samples)

    def samples_ms(self) -> npt.NDArray[np.float64]:
        """All successful latencies in milliseconds, sorted ascending (a copy)."""
        arr = np.frombuffer(self._samples, dtype=np.float64).copy() * 1000.0
        arr.sort()
        return arr

    def stats(self, wall_s: float) -> PhaseStats:
        """Summarise everything recorded so far."""
        ms = self.samples_ms()
        empty = len(ms) == 0
        pcts = {name: nearest_rank(ms, p) for name, p in PERCENTILES}
        return PhaseStats(
            ok=len(ms),
            errors=dict(sorted(self.errors.items())),
            dropped=self.dropped,
            wall_s=wall_s,
            min_ms=math.nan if empty else float(ms[0]),
            mean_ms=math.nan if empty else float(ms.mean()),
            p50_ms=pcts["p50"],
            p95_ms=pcts["p95"],
            p99_ms=pcts["p99"],
            p999_ms=pcts["p999"],
            max_ms=math.nan if empty else float(ms[-1]),
        )
