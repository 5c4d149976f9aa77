"""TemplateInduction throughput before and after a change, each against its own floor.

``python -m loadtest.benches.templates_ab --baseline <git ref> [--rounds 2] [--json OUT]
[--same-client [--baseline-cpu-batch N]]``

Checks the baseline out into a temporary git worktree and runs the same workload phase,
``python -m loadtest templates --phases throughput``, from each tree in turn (baseline,
current, baseline, current, …: a busy neighbour hits both alike). Each run starts its own
``loom serve`` from its own tree (``PYTHONPATH`` puts that tree first) and measures its own
floor: the same emails through that tree's parse + fingerprint + keys in a process pool of
the server's size, no server. Each run's figure is its end-to-end SubmitEmails rate over its
own floor; each tree reports the median over its runs (a floor is a few seconds of work on
a shared machine, so single runs scatter), beside the medians of both rates.

With ``--same-client`` both sides run this tree's load test (its load generator and floor)
and only the server comes from the baseline tree, at ``--baseline-cpu-batch`` (the
baseline's own tuned batch; the floor uses it too): the server's change alone, apart from
the load generator's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]


def _pythonpath(tree: Path) -> str:
    return os.pathsep.join(str(tree / p) for p in ("", "protos", "clients/python"))


def _run(tree: Path, args: argparse.Namespace, *, baseline: bool) -> dict[str, object]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            sys.executable, "-m", "loadtest", "templates", "--phases", "throughput",
            "--emails", str(args.emails), "--repeats", "1", "--json", out.name,
        ]  # fmt: skip
        runner = tree
        if args.same_client:
            runner = ROOT
            if baseline:
                command += ["--server-pythonpath", _pythonpath(tree)]
                if args.baseline_cpu_batch:
                    command += ["--cpu-batch", str(args.baseline_cpu_batch)]
        env = {**os.environ, "PYTHONPATH": _pythonpath(runner)}
        subprocess.run(command, cwd=runner, env=env, check=True, stdout=subprocess.DEVNULL)
        report = json.loads(Path(out.name).read_text())
    figures = report["figures"]
    run = figures["end_to_end"][0]
    return {
        "floor_per_s": max(figures["cpu_floor_per_s"]),  # this tree's: one, or the bracket
        "processed_per_s": run["processed_per_s"],
        "dropped": run["dropped"],
        "ratio": figures["throughput_vs_floor"],
    }


def main() -> None:
    """Runs the rounds and prints (and optionally writes) the before/after figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git ref of the 'before' tree")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--emails", type=int, default=20_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--same-client", action="store_true", help="only the server comes from the baseline"
    )
    parser.add_argument(
        "--baseline-cpu-batch", type=int, help="with --same-client: the baseline server's batch"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loom-ab-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.baseline],
            check=True, capture_output=True,
        )  # fmt: skip
        try:
            runs: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
            for _ in range(args.rounds):
                runs["before"].append(_run(before, args, baseline=True))
                runs["after"].append(_run(ROOT, args, baseline=False))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                check=False, capture_output=True,
            )  # fmt: skip

    def median(name: str) -> dict[str, float]:
        return {
            field: statistics.median(float(r[field]) for r in runs[name])  # type: ignore[arg-type]
            for field in ("ratio", "processed_per_s", "floor_per_s", "dropped")
        }

    result = {
        "baseline": args.baseline,
        "same_client": args.same_client,
        "baseline_cpu_batch": args.baseline_cpu_batch,
        "emails": args.emails,
        "runs": runs,
        "before": median("before"),
        "after": median("after"),
    }
    print(
        json.dumps({k: result[k] for k in ("baseline", "same_client", "before", "after")}, indent=2)
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
