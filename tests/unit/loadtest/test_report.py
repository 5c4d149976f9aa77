"""Reports (table, JSON, PNG, ratios) and the ``python -m loadtest`` entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.__main__ import main
from loadtest.plots import render_png
from loadtest.recorder import LatencyRecorder
from loadtest.registry import available, load
from loadtest.report import Report


def _report() -> Report:
    report = Report("demo", ["loadtest", "demo", "--rate", "5"])
    for name, base_ms in (("baseline-bfs", 100.0), ("GetUnifiedThread", 2.0)):
        rec = LatencyRecorder()
        for k in range(1, 201):
            rec.record(base_ms * (1 + k / 200) / 1000)
        rec.record_error("UNAVAILABLE")
        report.add_phase(name, rec.stats(wall_s=1.0), rec.samples_ms())
    report.add_figure("weave_messages_per_s", 1234.5)
    report.add_line_plot(
        "error vs n",
        [10, 100, 1000],
        {"linear counting": [0.1, 0.2, 0.3]},
        "n",
        "error %",
        logx=True,
    )
    return report


class TestReport:
    def test_ratio_against_a_baseline_in_the_same_run(self) -> None:
        """ratio(phase, baseline) is phase/baseline, and is kept for the JSON."""
        report = _report()
        assert report.ratio("GetUnifiedThread", "baseline-bfs", "p50") == pytest.approx(0.02)
        assert "GetUnifiedThread / baseline-bfs (p50)" in report.ratios

    def test_table_lists_phases_errors_and_figures(self) -> None:
        """The stdout table shows every phase, its error codes and the free-form figures."""
        table = _report().table()
        assert "baseline-bfs" in table
        assert "GetUnifiedThread" in table
        assert "UNAVAILABLE" in table
        assert "weave_messages_per_s = 1234.5" in table

    def test_json_carries_machine_facts_and_command(self, tmp_path: Path) -> None:
        """The JSON says where and how it was measured, so the figure can be rerun."""
        out = tmp_path / "r.json"
        report = _report()
        report.ratio("GetUnifiedThread", "baseline-bfs", "p99")
        report.write_json(out)
        doc = json.loads(out.read_text())
        assert doc["machine"]["cpu_count"] >= 1
        assert doc["machine"]["command"].endswith("-m loadtest demo --rate 5")
        assert doc["phases"]["baseline-bfs"]["ok"] == 200
        assert doc["phases"]["baseline-bfs"]["errors"] == {"UNAVAILABLE": 1}
        assert doc["plots"][0]["series"]["linear counting"] == [0.1, 0.2, 0.3]
        assert len(doc["ratios"]) == 1

    def test_png_is_written(self, tmp_path: Path) -> None:
        """The PNG (percentiles, CDF, extra line plot) renders headless."""
        out = tmp_path / "r.png"
        render_png(_report(), out)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_duplicate_phase_is_refused(self) -> None:
        """Recording a phase name twice would silently hide a result, so it raises."""
        report = _report()
        with pytest.raises(ValueError, match="already recorded"):
            report.add_phase("baseline-bfs", LatencyRecorder().stats(1.0))

    def test_line_plot_lengths_must_match(self) -> None:
        """A series that does not match its xs is a workload bug caught at once."""
        with pytest.raises(ValueError, match="points"):
            _report().add_line_plot("x", [1, 2], {"s": [1.0]}, "x", "y")


class TestCommandLine:
    def test_registry_discovers_workload_modules(self) -> None:
        """Workloads are found by file name, dashes on the command line."""
        assert "baseline-bfs" in available()
        assert callable(load("baseline-bfs").run)
        with pytest.raises(KeyError, match="available"):
            load("no-such-workload")

    def test_runs_a_workload_end_to_end(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`python -m loadtest baseline-bfs ... --json --png` prints a table and writes both."""
        args = [
            "baseline-bfs",
            "--users",
            "3",
            "--messages-per-discussion",
            "250",
            "--queries",
            "3",
            "--json",
            str(tmp_path / "o.json"),
            "--png",
            str(tmp_path / "o.png"),
        ]
        assert main(args) == 0
        assert "baseline-bfs" in capsys.readouterr().out
        doc = json.loads((tmp_path / "o.json").read_text())
        assert doc["phases"]["baseline-bfs"]["ok"] == 3
        assert (tmp_path / "o.png").exists()

    def test_unknown_workload_exits_2(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A misspelt workload name fails with usage listing the real ones."""
        assert main(["threadweavr"]) == 2
        assert "baseline-bfs" in capsys.readouterr().err
