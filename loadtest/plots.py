"""PNG rendering of a report with matplotlib's Agg backend (no display needed).

Latency is drawn on log axes: a p999 a hundred times the median is the interesting part
and a linear axis would flatten everything else into one pixel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib as mpl
import numpy as np

from loadtest.recorder import PERCENTILES

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from loadtest.report import Phase, Report

mpl.use("Agg")
import matplotlib.pyplot as plt  # after mpl.use: the backend must be chosen first

__all__ = ["render_png"]

_MAX_CDF_POINTS = 5000


def render_png(report: Report, path: Path) -> None:
    """Percentile bars + latency CDF per phase (when there are phases), then one panel per
    extra line plot."""
    phases = [p for p in report.phases.values() if len(p.samples_ms) > 0]
    head = 2 if phases else 0
    panels = max(1, head + len(report.plots))
    fig, axes = plt.subplots(panels, 1, figsize=(9, 4 * panels), squeeze=False)
    if phases:
        _percentiles_and_cdf(report.workload, phases, axes[0][0], axes[1][0])

    for lp, row in zip(report.plots, axes[head:], strict=True):
        ax = row[0]
        for label, ys in lp.series.items():
            ax.plot(lp.xs, ys, marker="o", markersize=3, label=label)
        ax.set_xscale("log" if lp.logx else "linear")
        ax.set_yscale("log" if lp.logy else "linear")
        ax.set_xlabel(lp.xlabel)
        ax.set_ylabel(lp.ylabel)
        ax.set_title(lp.name)
        ax.legend(fontsize="small")
        ax.grid(visible=True, which="both", alpha=0.3)

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _percentiles_and_cdf(workload: str, phases: list[Phase], ax_pct: Axes, ax_cdf: Axes) -> None:
    width = 0.8 / len(phases)
    xs = np.arange(len(PERCENTILES))
    for k, p in enumerate(phases):
        values = [p.stats.metric(name) for name, _ in PERCENTILES]
        ax_pct.bar(xs + k * width, values, width, label=p.name)
    ax_pct.set_xticks(xs + width * (len(phases) - 1) / 2, [n for n, _ in PERCENTILES])
    ax_pct.set_yscale("log")
    ax_pct.set_ylabel("latency (ms)")
    ax_pct.set_title(f"{workload}: latency percentiles")
    ax_pct.legend(fontsize="small")

    for p in phases:
        samples = p.samples_ms
        idx = np.unique(np.linspace(0, len(samples) - 1, _MAX_CDF_POINTS).astype(int))
        ax_cdf.step(samples[idx], (idx + 1) / len(samples), where="post", label=p.name)
    ax_cdf.set_xscale("log")
    ax_cdf.set_xlabel("latency (ms)")
    ax_cdf.set_ylabel("fraction of operations ≤ x")
    ax_cdf.set_title("latency CDF")
    ax_cdf.legend(fontsize="small")
    ax_cdf.grid(visible=True, which="both", alpha=0.3)
