"""Rerunnable accuracy figures: ``python -m loadtest.benches.summary_accuracy --runs 20``.

Each run records fresh random recipient ids (a random 64-bit run prefix + a counter, hashed by
the production hash) as DELIVERED events through ``MessageSummary.record`` in 10K batches and
reads the summary's count at every checkpoint, so one run of 1M yields one sample at each of
1K, 10K, 50K, 100K and 1M. Prints mean |relative error|, RMS, bias and max per n, plus the
encoded size at the checkpoint. The unit tests run a few of these; the full 20-run table is
what docs/benchmarks.md and the load-test report quote.

Measured with format v2 (CPC lgK 13; 20 runs, seed 2024, 2-core VM at load ~6, 42.6 s)::

    n          mean |err|  RMS     bias     max |err|  encoded bytes (1 status)
    1,000      0.275 %     0.331 %  -0.085 %  0.700 %      870
    10,000     0.418 %     0.508 %  +0.158 %  0.970 %    3,590
    50,000     0.435 %     0.547 %  +0.259 %  1.276 %    4,982
    100,000    0.700 %     0.842 %  +0.058 %  1.854 %    5,022
    1,000,000  0.708 %     0.904 %  +0.097 %  2.228 %    4,974

(v1 — bitmap + HLL — measured 0.345 / 0.391 / 0.638 / 0.647 / 0.641 % at 3,166 / 9,392 /
11,265 / 9,039 / 6,848 bytes. At 100K and 1M this draw is high: 150 paired runs in
``python -m loadtest summary`` measured 0.55 % mean at 1M, against 0.61 % in theory.)
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary

__all__ = ["CHECKPOINTS", "main", "run_once"]

CHECKPOINTS = (1_000, 10_000, 50_000, 100_000, 1_000_000)


def run_once(seed: int, checkpoints: tuple[int, ...]) -> dict[int, tuple[float, int]]:
    """Relative error and encoded size at each checkpoint for one random recipient set."""
    prefix = f"{random.Random(seed).getrandbits(64):016x}"
    summary = MessageSummary()
    out: dict[int, tuple[float, int]] = {}
    done = 0
    for target in sorted(checkpoints):
        while done < target:
            stop = min(target, done + 10_000)
            summary.record(
                [
                    DeliveryEvent(f"{prefix}-{i}", DeliveryStatus.DELIVERED)
                    for i in range(done, stop)
                ]
            )
            done = stop
        view = summary.view()
        out[target] = (
            view.statuses[DeliveryStatus.DELIVERED].count / target - 1.0,
            view.encoded_size_bytes,
        )
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the accuracy table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", default=",".join(map(str, CHECKPOINTS)))
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    t0 = time.perf_counter()
    runs = [run_once(args.seed + r, sizes) for r in range(args.runs)]
    print(f"{args.runs} runs in {time.perf_counter() - t0:.1f} s")
    print("| n | mean abs err | RMS err | bias | max abs err | encoded bytes (1 status) |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        errs = [r[n][0] for r in runs]
        print(
            f"| {n:,} | {statistics.fmean(map(abs, errs)):.3%} "
            f"| {math.sqrt(statistics.fmean(e * e for e in errs)):.3%} "
            f"| {statistics.fmean(errs):+.3%} | {max(map(abs, errs)):.3%} "
            f"| {max(r[n][1] for r in runs):,} |"
        )


if __name__ == "__main__":
    main()
