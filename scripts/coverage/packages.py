"""Branch coverage per package, from coverage.py's JSON report (`make test` prints it).

    python scripts/coverage/packages.py coverage.json

A package is a folder of `server/` or `storage/` (`server/inbox`, `storage/sqlite`); the
modules directly in `server/` or `storage/` are one row each as `server/*.py`. The figure is
coverage.py's own: (lines run + branches taken) / (lines + branches).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import PurePosixPath


def package_of(path: str) -> str:
    """`server/inbox/service.py` -> `server/inbox`; `server/app.py` -> `server/*.py`."""
    parts = PurePosixPath(path).parts
    return "/".join(parts[:2]) if len(parts) > 2 else f"{parts[0]}/*.py"


def table(report: dict[str, object]) -> list[tuple[str, int, int, float]]:
    """(package, lines, branches, percent covered) rows, in path order."""
    files = report["files"]
    assert isinstance(files, dict)
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for path, data in files.items():
        summary = data["summary"]
        row = sums[package_of(path)]
        row[0] += summary["num_statements"]
        row[1] += summary["covered_lines"]
        row[2] += summary.get("num_branches", 0)
        row[3] += summary.get("covered_branches", 0)
    rows = []
    for package, (lines, run, branches, taken) in sorted(sums.items()):
        total = lines + branches
        rows.append((package, lines, branches, 100.0 * (run + taken) / total if total else 100.0))
    return rows


def main(argv: list[str]) -> int:
    """Prints the per-package table and the total as a Markdown table."""
    with open(argv[1], encoding="utf-8") as f:
        report = json.load(f)
    print("| package | lines | branches | covered |")
    print("|---|---:|---:|---:|")
    for package, lines, branches, percent in table(report):
        print(f"| `{package}` | {lines} | {branches} | {percent:.1f} % |")
    totals = report["totals"]
    print(
        f"| **total** | {totals['num_statements']} | {totals.get('num_branches', 0)} "
        f"| **{totals['percent_covered']:.1f} %** |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
