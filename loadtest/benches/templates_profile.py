"""Where TemplateInduction's time goes: CPU per email by process, and a py-spy profile by stage.

``python -m loadtest.benches.templates_profile [--emails 20000] [--rate 50] [--cpu-batch N]
[--server-pythonpath PATHS] [--json OUT]``

One ``loom serve`` (SQLite, the throughput phase's tuned stages) takes the throughput
phase's stream through SubmitEmails, from this process, serialized ahead as the phase does.
Meanwhile ``py-spy record --nonblocking --subprocesses`` samples the server and its CPU
stage's processes at ``--rate`` Hz (low: a high rate distorts the pipeline). Reported:

- CPU seconds per 1,000 emails of the server process, its worker processes and this load
  generator, read from ``/proc`` from the first submission until the pipeline is idle
  (template formations still running then included);
- each process kind's samples by stage (the first matching frame of each stack, e.g. the
  parse, MinHash, stored-form encoding, formation and hand-offs in the workers; request
  validation, the pool's threads and the SQLite writer in the server process).

``--server-pythonpath`` runs another tree's server (a ``git worktree`` of a baseline) under
the same load, for a before/after pair.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import grpc
from loom.v1 import templates_pb2_grpc

from loadtest.corpora.synthetic_emails import ZipfStream
from loadtest.server import SERVER_PIDS, loom_server
from loadtest.traffic.templates_calls import (
    encode_batches,
    raw_submit,
    settle,
    submit_batches,
    to_proto,
    until_processed,
)
from loadtest.workloads.templates import _TUNED

__all__ = ["main"]

STAGES = (  # (stage, a substring of some frame): the first stage found in a stack wins
    ("formation", "form_row ("),
    ("encode stored form", "encode_cluster_email"),
    ("parse", "parse_structure"),
    ("MinHash", "minhash"),
    ("row key", "keys_for"),
    ("hand-off: result", "_sendback_result"),
    ("hand-off: call", "Queue.get (multiprocessing"),
    ("fingerprint, other", "fingerprint_"),
    ("SubmitEmails validation", "emails_from_proto"),
    ("Algorithm 2 checks", "_check_eligibility"),
    ("formation stage", "Formations.work"),
    ("pool: result thread", "_ExecutorManagerThread"),
    ("pool: feeder thread", "_feed"),
    ("SQLite writer", "_in_transaction"),
    ("SQLite readers", "_read_only"),
    ("RPC interceptor", "interceptor.py"),
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the server process and of its worker processes (forkserver's children)."""
    workers = [w for c in _children(pid) for w in _children(c)]
    return {"server": _cpu_s(pid), "workers": sum(_cpu_s(w) for w in workers)}


def _stages(raw: Path) -> dict[str, dict[str, int]]:
    """Samples per process kind (server / workers) and stage, from py-spy's raw output."""
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        depth = sum(f.startswith("process ") for f in frames)
        kind = "server" if depth == 1 else "workers" if depth >= 3 else "forkserver"
        stage = next((name for name, frame in STAGES if frame in stack), None)
        if stage is None:
            leaf = re.sub(r":\d+\)", ")", frames[-1])
            stage = "other: " + (leaf if "Runner.run" not in leaf else "event loop, in C")
        out[kind][stage] += int(count)
    return {kind: dict(c.most_common(16)) for kind, c in out.items()}


async def _profile(args: argparse.Namespace) -> dict[str, object]:
    emails = ZipfStream(alpha=1.1, templates=20_000, max_per_template=2_000).take(args.emails)
    protos = [to_proto(e.email_id, e.sender, e.recipient, e.subject, e.html) for e in emails]
    batches = encode_batches(protos, 200)
    tuned = {**_TUNED, "CPU_BATCH": str(args.cpu_batch or _TUNED["CPU_BATCH"])}
    env = {"LOOM_TEMPLATES__K_ANONYMITY": "5", "LOOM_SERVER__LOG_LEVEL": "warning"}
    env |= {f"LOOM_TEMPLATES__{k}": v for k, v in tuned.items()}
    if args.server_pythonpath:
        env["PYTHONPATH"] = args.server_pythonpath
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "profile.txt"
        async with loom_server(extra_args=["--templates-store", "sqlite"], env=env) as target:
            pid = SERVER_PIDS[target]
            options = [("grpc.max_send_message_length", 64 << 20)]
            async with grpc.aio.insecure_channel(target, options=options) as channel:
                stub = templates_pb2_grpc.TemplateInductionStub(channel)
                spy = await asyncio.create_subprocess_exec(
                    _py_spy(), "record", "--nonblocking", "--subprocesses", "-r", str(args.rate),
                    "-f", "raw", "-p", str(pid), "-o", str(raw),
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                )  # fmt: skip
                await asyncio.sleep(1.0)
                before, mine = _tree_cpu(pid), os.times()
                sending = asyncio.create_task(
                    submit_batches([raw_submit(channel)], batches, concurrency=4)
                )
                wall = await until_processed(stub, sending, len(protos))
                await sending
                stats = await settle(stub)
                after, mine_after = _tree_cpu(pid), os.times()
                spy.send_signal(signal.SIGINT)
                await spy.wait()
        stages = _stages(raw) if raw.exists() else {}
    per_k = 1000 / len(protos)
    client = mine_after.user + mine_after.system - mine.user - mine.system
    return {
        "emails": len(protos),
        "processed_per_s": round(stats.processed / wall, 1),
        "formations": stats.formations,
        "cpu_s_per_1000_emails": {
            "server_process": round((after["server"] - before["server"]) * per_k, 3),
            "worker_processes": round((after["workers"] - before["workers"]) * per_k, 3),
            "load_generator": round(client * per_k, 3),
        },
        "py_spy_samples_by_stage": stages,
    }


def _py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy") or "py-spy"


def main() -> None:
    """Runs one profiled stream and prints (and optionally writes) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emails", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples/s")
    parser.add_argument("--cpu-batch", type=int)
    parser.add_argument("--server-pythonpath")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(_profile(args))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
