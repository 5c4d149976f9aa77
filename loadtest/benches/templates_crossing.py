"""The split's rule 4 (a side cutting across templates waits), chosen leaving one source out.

``python -m loadtest.benches.templates_crossing [--json OUT]``

The online service is replayed over the quality phase's real corpus (`templates_loso.replay`:
rows form at k recipients and re-form as they grow, fresh instances annotated) under each
`RATIOS` value of `GroupingParams.cut_ratio` (0: the rule off), with the sources' own
subjects and with one subject per sender: a service must hold under both, so both count.
For every source in turn, the value is chosen on the other twelve: the best worst
precision-or-recall over their figures in both subject modes, then the fewest true
templates never formed, then the service's default. Reported: every value's figures per
source and mode, each source's figures under the value chosen without it, the worst source,
and whether the service's default is what all thirteen choose. Deterministic; ~2 min.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from loadtest.benches.templates_loso import SourceFigures, fingerprinted, replay
from loadtest.corpora.email_corpus import build_corpus, real_templates
from server.templates.grouping import GroupingParams
from server.templates.schemes import SchemeParams

__all__ = ["MODES", "RATIOS", "choose", "main"]

RATIOS = (0.0, 1.0, 1.5, 2.0, 3.0)
"""The values of `cut_ratio` a fold chooses among (0: rule 4 off)."""
MODES = ("real", "sender")
_K = 5

Table = Mapping[float, Mapping[str, Mapping[str, SourceFigures]]]
"""ratio -> subject mode -> source -> figures."""


def choose(table: Table, left_out: str | None, default: float) -> float:
    """The ratio whose worst figure over every source but `left_out`, in every mode, is
    best (then the fewest unformed templates there, then `default`)."""

    def others(ratio: float) -> list[SourceFigures]:
        return [f for by in table[ratio].values() for s, f in by.items() if s != left_out]

    return max(
        table,
        key=lambda r: (
            min(f.floor for f in others(r)),
            -sum(f.unformed for f in others(r)),
            r == default,
        ),
    )


def measure() -> dict[str, Any]:
    """Every ratio's replay in both modes, the folds and the shipped default's place."""
    table: dict[float, dict[str, dict[str, SourceFigures]]] = {r: {} for r in RATIOS}
    for mode in MODES:
        corpus = build_corpus(real_templates(), subjects=mode)
        parsed = fingerprinted(corpus)
        for r in RATIOS:
            params = SchemeParams(grouping=GroupingParams(cut_ratio=r))
            table[r][mode] = replay(corpus, parsed, params, _K)
    default = GroupingParams().cut_ratio
    sources = sorted(table[RATIOS[0]][MODES[0]])
    chosen = {source: choose(table, source, default) for source in sources}
    folds: dict[str, dict[str, Any]] = {
        source: {
            "chosen": r,
            **{mode: dataclasses.asdict(table[r][mode][source]) for mode in MODES},
        }
        for source, r in chosen.items()
    }

    def floor(mode: str) -> Callable[[str], float]:
        return lambda s: table[chosen[s]][mode][s].floor

    worst = {mode: min(sources, key=floor(mode)) for mode in MODES}
    return {
        "ratios": {
            str(r): {
                mode: {s: dataclasses.asdict(f) for s, f in by.items()}
                for mode, by in table[r].items()
            }
            for r in RATIOS
        },
        "aims_met": {
            str(r): {mode: sum(f.meets_aims for f in by.values()) for mode, by in table[r].items()}
            for r in RATIOS
        },
        "folds": folds,
        "worst_left_out": {m: {"source": s, **folds[s][m]} for m, s in worst.items()},
        "chosen_on_all": choose(table, None, default),
        "default": default,
    }


def main(argv: list[str] | None = None) -> None:
    """Runs the choice; prints and optionally writes the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    report = measure()
    for r, modes in report["aims_met"].items():
        print(f"cut_ratio {r}: aims met {modes}")
    for source, fold in report["folds"].items():
        figures = "  ".join(
            f"{m} P {fold[m]['precision']:.3f} R {fold[m]['recall']:.3f}" for m in MODES
        )
        print(f"{source[:34]:34s} chose {fold['chosen']}  {figures}")
    print("worst left out:", report["worst_left_out"])
    print(f"chosen on all: {report['chosen_on_all']} (the service's default: {report['default']})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
