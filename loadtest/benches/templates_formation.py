"""What one template formation costs, in-process: first formations of the throughput stream.

``python -m loadtest.benches.templates_formation [--emails 10000] [--reps 5]
[--baseline-pythonpath PATHS] [--json OUT]``

The throughput phase's stream (alpha = 1.1, bodies N(10 KB, 2 KB)) is fingerprinted with the
worker's own function (`fingerprint_for_store`), its emails grouped by row key, and every
row of at least `FIRST_AT` emails formed once from its first `FIRST_UP_TO` (at most)
emails, as the server's first formations run (they land at 11 to 47 emails in a throughput
run). Reported, each as CPU seconds per 1,000 emails of the stream and the best of
``--reps`` repetitions (caches cleared between them):

- the floor: fingerprinting the same emails (parse, MinHash, row key, stored form);
- formation: `form_row` over those rows;
- their ratio, and a digest of every formed template's stored form, so two trees can be
  shown to form the same templates byte for byte;
- the stream replayed as a server forms it: each row formed once it reaches k recipients
  and re-formed each time its recipients grow by `GROWTH` (and by k), with the templates
  and settled ids of its formation before (`Formations`' carry-over of field rules), as
  CPU seconds per 1,000 emails and as a ratio to the floor, with the count of formations
  that formed field rules. No `reform_interval_s` coalescing: every growth re-forms.

``--baseline-pythonpath`` measures another tree (a ``git worktree`` of the baseline, first
on the path; its children run in that first directory, since ``-m`` puts the working
directory ahead of ``PYTHONPATH``) beside this one: one repetition per child process, the
trees alternating, and each tree's medians reported (the machine's speed drifts by a
quarter between minutes, so the ratio of formation to the floor measured in the same
repetition is the figure to compare).
"""

from __future__ import annotations

import argparse
import collections
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

__all__ = ["main"]

FIRST_AT = 11
"""Fewest emails a row holds at its first formation in a throughput run."""
FIRST_UP_TO = 30
"""Emails a replayed first formation reads at most."""
_K = 5
_NOW_MS = 1_800_000_000_000


def _clear_caches() -> None:
    """Empties the template code's `functools` caches: each repetition starts cold."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("server.templates"):
            continue
        for value in vars(module).values():
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


def _replay(
    items: list[Any], stored: list[Any], params: Any, form_row: Any, udcas: Any
) -> tuple[float, int, int]:
    """CPU seconds of every formation of the stream in order, formations, rule formations."""
    from server.templates.extraction import MAX_FORM_EMAILS
    from server.templates.rows import GROWTH

    rows: dict[bytes, list[bytes]] = collections.defaultdict(list)
    users: dict[bytes, set[str]] = collections.defaultdict(set)
    formed_at: dict[bytes, int] = {}
    previous: dict[bytes, Any] = {}
    settled: dict[bytes, dict[str, int]] = {}
    ruled = [0]
    original = udcas.form_field_rules

    def counted(*args: Any, **kwargs: Any) -> Any:  # the rules' formations, counted
        ruled[0] += 1
        return original(*args, **kwargs)

    udcas.form_field_rules = counted
    cpu, formations = 0.0, 0
    try:
        for s, item in zip(stored, items, strict=True):
            if s is None:
                continue
            key = s.keys[0]
            rows[key].append(s.payload)
            users[key].add(item[1])
            n, last = len(users[key]), formed_at.get(key)
            if n < _K or (last is not None and n < max(last + _K, GROWTH * last)):
                continue
            start = time.process_time()
            result = form_row(
                key, rows[key], _K, _NOW_MS, params, previous.get(key, ()),
                settled.get(key, {}),
            )  # fmt: skip
            cpu += time.process_time() - start
            formations += 1
            formed_at[key] = n
            if result.templates:
                previous[key] = result.templates
                # a tree before the count of emails read: its templates' own counts
                settled[key] = getattr(result, "read", None) or {
                    t.template_id: min(t.email_count, MAX_FORM_EMAILS) for t in result.templates
                }
    finally:
        udcas.form_field_rules = original
    return cpu, formations, ruled[0]


def measure(emails: int, reps: int) -> dict[str, Any]:
    """This interpreter's figures (its `sys.path` decides which tree's code runs)."""
    from loadtest.corpora.synthetic_emails import ZipfStream
    from server.templates import udcas
    from server.templates.schemes import SchemeParams
    from server.templates.work import fingerprint_for_store, form_row

    stream = ZipfStream(alpha=1.1, templates=20_000, max_per_template=2_000).take(emails)
    items = [
        (e.sender, e.recipient, e.subject, e.html, _NOW_MS - emails + i)
        for i, e in enumerate(stream)
    ]
    params = SchemeParams()
    floor = formation = float("inf")
    replay: tuple[float, int, int] = (float("inf"), 0, 0)
    digest = ""
    formed = rows_formed = 0
    for _ in range(reps):
        _clear_caches()
        gc.collect()
        start = time.process_time()
        stored = fingerprint_for_store(items, params, b"k" * 32)
        floor = min(floor, time.process_time() - start)
        rows: dict[bytes, list[bytes]] = collections.defaultdict(list)
        for s in stored:
            if s is not None:
                rows[s.keys[0]].append(s.payload)
        jobs = [(key, got[:FIRST_UP_TO]) for key, got in rows.items() if len(got) >= FIRST_AT]
        _clear_caches()
        gc.collect()
        h = hashlib.sha256()
        formed = 0
        start = time.process_time()
        for key, payloads in jobs:
            result = form_row(key, payloads, _K, _NOW_MS, params)
            formed += len(result.templates)
            h.update(result.encoded)
        formation = min(formation, time.process_time() - start)
        digest, rows_formed = h.hexdigest()[:16], len(jobs)
        _clear_caches()
        gc.collect()
        got_replay = _replay(items, stored, params, form_row, udcas)
        if got_replay[0] < replay[0]:
            replay = got_replay
    per_k = 1000 / emails
    return {
        "emails": emails,
        "rows_formed": rows_formed,
        "templates": formed,
        "floor_cpu_s_per_1000": round(floor * per_k, 4),
        "formation_cpu_s_per_1000": round(formation * per_k, 4),
        "formation_ms_each": round(formation * 1000 / max(rows_formed, 1), 2),
        "formation_over_floor": round(formation / floor, 3),
        "replay_cpu_s_per_1000": round(replay[0] * per_k, 4),
        "replay_over_floor": round(replay[0] / floor, 3),
        "replay_formations": replay[1],
        "replay_rule_formations": replay[2],
        "digest": digest,
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One tree's repetitions: the median of each figure, every run's ratio beside it."""
    keys = (
        "floor_cpu_s_per_1000",
        "formation_cpu_s_per_1000",
        "formation_over_floor",
        "replay_cpu_s_per_1000",
        "replay_over_floor",
    )
    present = [k for k in keys if k in runs[0]]  # an older tree's bench has fewer
    out = {**runs[0], **{k: statistics.median(r[k] for r in runs) for k in present}}
    out["formation_over_floor_runs"] = [r["formation_over_floor"] for r in runs]
    out["digests"] = sorted({r["digest"] for r in runs})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="loadtest.benches.templates_formation")
    parser.add_argument("--emails", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--baseline-pythonpath", help="another tree's PYTHONPATH, measured too")
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.emails < 100 or args.reps < 1:
        parser.error("--emails must be >= 100 and --reps >= 1")
    if args.child:
        print(json.dumps(measure(args.emails, args.reps)))
        return
    if not args.baseline_pythonpath:
        out: dict[str, Any] = {"current": measure(args.emails, args.reps)}
    else:  # one repetition per child, the trees alternating: a busy neighbour hits both
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
        paths = {"baseline": args.baseline_pythonpath, "current": os.environ.get("PYTHONPATH")}
        for _ in range(args.reps):
            for side, path in paths.items():
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                env |= {"PYTHONPATH": path} if path else {}
                cmd = [sys.executable, "-m", "loadtest.benches.templates_formation", "--child"]
                cmd += ["--emails", str(args.emails), "--reps", "1"]
                # `-m` puts the working directory first on the path: the baseline runs in
                # its tree's first directory, this tree where this process runs
                got = subprocess.run(
                    cmd,
                    cwd=path.split(os.pathsep)[0] if side == "baseline" and path else None,
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=3600,
                )
                runs[side].append(json.loads(got.stdout.strip().splitlines()[-1]))
        out = {side: _summary(got) for side, got in runs.items()}
        out["same_templates"] = out["baseline"]["digest"] == out["current"]["digest"]
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
