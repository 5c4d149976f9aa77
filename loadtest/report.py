"""A load-test report: named phases, free-form figures, ratios, and where they came from.

The machines these runs happen on are noisy, so Loom never quotes a bare number: every
headline is a ratio against a baseline phase measured in the same run (``ratio``), and the
JSON carries the machine facts and exact command needed to rerun it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from loadtest.recorder import PhaseStats

__all__ = ["LinePlot", "Phase", "Report", "machine_facts"]


@dataclass(frozen=True, slots=True)
class Phase:
    """One measured phase: its stats and (for the CDF plot) its sorted latencies in ms."""

    name: str
    stats: PhaseStats
    samples_ms: npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LinePlot:
    """An extra chart a workload adds, e.g. relative error against recipient count."""

    name: str
    xs: list[float]
    series: dict[str, list[float]]
    xlabel: str
    ylabel: str
    logx: bool
    logy: bool


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def machine_facts(argv: list[str] | None = None) -> dict[str, object]:
    """Where and how this run happened, for the JSON report."""
    args = sys.argv if argv is None else argv
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "git_commit": _git_commit(),
        "command": shlex.join([sys.executable, "-m", "loadtest", *args[1:]]),
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


class Report:
    """Accumulates a workload's results; renders a table, JSON and a PNG."""

    def __init__(self, workload: str, argv: list[str] | None = None) -> None:
        self.workload = workload
        self.facts = machine_facts(argv)
        self.phases: dict[str, Phase] = {}
        self.figures: dict[str, object] = {}
        self.ratios: dict[str, float] = {}
        self.plots: list[LinePlot] = []
        self.params: dict[str, object] = {}

    def add_phase(
        self, name: str, stats: PhaseStats, samples_ms: npt.NDArray[np.float64] | None = None
    ) -> PhaseStats:
        """Record a phase (names are unique: a rerun under the same name is a bug)."""
        if name in self.phases:
            raise ValueError(f"phase {name!r} already recorded")
        samples = samples_ms if samples_ms is not None else np.empty(0, dtype=np.float64)
        self.phases[name] = Phase(name, stats, samples)
        return stats

    def phase(self, name: str) -> PhaseStats:
        """The stats of a recorded phase."""
        return self.phases[name].stats

    def add_figure(self, name: str, value: object) -> None:
        """A free-form fact, e.g. ``weave_messages_per_s`` or the corpus size."""
        self.figures[name] = value

    def ratio(self, phase: str, baseline: str, metric: str = "p50") -> float:
        """``phase``'s metric divided by ``baseline``'s, recorded in the report.

        For latencies a value < 1 means ``phase`` is faster; for ``throughput`` > 1 means it
        is. Both phases must have been measured in this run — that is the point.
        """
        value = self.phase(phase).metric(metric) / self.phase(baseline).metric(metric)
        self.ratios[f"{phase} / {baseline} ({metric})"] = value
        return value

    def add_line_plot(
        self,
        name: str,
        xs: Sequence[float],
        series: dict[str, list[float]],
        xlabel: str,
        ylabel: str,
        *,
        logx: bool = False,
        logy: bool = False,
    ) -> None:
        """An extra chart for the PNG (and its data for the JSON)."""
        for label, ys in series.items():
            if len(ys) != len(xs):
                raise ValueError(f"series {label!r} has {len(ys)} points for {len(xs)} xs")
        self.plots.append(LinePlot(name, list(xs), dict(series), xlabel, ylabel, logx, logy))

    def table(self) -> str:
        """A fixed-width table of every phase, then figures and ratios."""
        head = ("phase", "ok", "err", "drop", "ops/s", "p50", "p95", "p99", "p999", "max")
        rows: list[tuple[str, ...]] = [head]
        for p in self.phases.values():
            s = p.stats
            rows.append(
                (
                    p.name,
                    str(s.ok),
                    str(s.error_count),
                    str(s.dropped),
                    _fmt(s.throughput),
                    *(_fmt(v) for v in (s.p50_ms, s.p95_ms, s.p99_ms, s.p999_ms, s.max_ms)),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"== {self.workload} (latencies in ms) =="]
        for r in rows:
            cells = [r[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
            ]
            lines.append("  ".join(cells))
        errs = {p.name: p.stats.errors for p in self.phases.values() if p.stats.errors}
        lines.extend(f"errors {name}: {codes}" for name, codes in errs.items())
        lines.extend(f"{k} = {v}" for k, v in self.figures.items())
        lines.extend(f"{k} = {v:.4g}" for k, v in self.ratios.items())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """The JSON document: machine facts, parameters, phases, figures, ratios, plots."""
        return {
            "workload": self.workload,
            "machine": self.facts,
            "params": self.params,
            "phases": {n: p.stats.to_dict() for n, p in self.phases.items()},
            "figures": self.figures,
            "ratios": self.ratios,
            "plots": [
                {
                    "name": lp.name,
                    "x": lp.xs,
                    "series": lp.series,
                    "xlabel": lp.xlabel,
                    "ylabel": lp.ylabel,
                }
                for lp in self.plots
            ],
        }

    def write_json(self, path: Path) -> None:
        """Write ``to_dict()``; NaN becomes null so any JSON parser accepts the file."""
        text = json.dumps(_nan_to_none(self.to_dict()), indent=2, default=str)
        path.write_text(text + "\n", encoding="utf-8")


def _nan_to_none(obj: object) -> object:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj
