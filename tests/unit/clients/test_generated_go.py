"""The committed Go stubs (clients/go/loomv1) match protos/ (run clients/go/generate.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GO_DIR = ROOT / "clients" / "go"


def test_generated_go_is_fresh(tmp_path: Path) -> None:
    """Regenerating with the pinned tools gives byte-identical .pb.go files."""
    if shutil.which("go") is None:
        pytest.fail("`go` is not on PATH: the Go client's stubs cannot be checked")
    subprocess.run(
        [str(GO_DIR / "generate.sh")],
        check=True,
        env={**os.environ, "LOOM_GO_OUT": str(tmp_path)},
        capture_output=True,
        timeout=600,
    )
    fresh = {p.name: p.read_bytes() for p in tmp_path.glob("*.pb.go")}
    committed = {p.name: p.read_bytes() for p in (GO_DIR / "loomv1").glob("*.pb.go")}
    assert fresh, "generate.sh produced nothing"
    stale = sorted(
        name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name)
    )
    assert not stale, f"stale Go stubs {stale}: run clients/go/generate.sh"
