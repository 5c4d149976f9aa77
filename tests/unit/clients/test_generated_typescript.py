"""The committed TypeScript stubs (clients/typescript/src/gen) match protos/ and compile strict.

Run clients/typescript/generate.sh (or `npm run generate` there) after any .proto change.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TS_DIR = ROOT / "clients" / "typescript"
BUF = Path(os.environ.get("LOOM_CACHE_DIR", Path.home() / ".cache" / "loom")) / "bin" / "buf"
TSC = TS_DIR / "node_modules" / ".bin" / "tsc"


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*.ts")}


def test_generated_typescript_is_fresh(tmp_path: Path) -> None:
    """Regenerating with the pinned buf and ts-proto gives byte-identical .ts files."""
    if not BUF.exists():
        pytest.fail(f"buf is not installed at {BUF}: run `make tools`")
    if not (TS_DIR / "node_modules" / ".bin" / "protoc-gen-ts_proto").exists():
        pytest.fail("ts-proto is not installed: run `cd clients/typescript && npm ci`")
    out = tmp_path / "gen"
    generated = subprocess.run(
        [str(TS_DIR / "generate.sh")],
        env={**os.environ, "LOOM_TS_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert generated.returncode == 0, generated.stderr
    fresh, committed = tree(out), tree(TS_DIR / "src" / "gen")
    assert fresh, "generate.sh produced nothing"
    stale = sorted(
        name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name)
    )
    assert not stale, f"stale TypeScript stubs {stale}: run clients/typescript/generate.sh"


def test_typescript_client_compiles_strict() -> None:
    """`tsc --noEmit` with tsconfig.json's `strict: true` passes on the stubs and the example."""
    if not TSC.exists():
        pytest.fail("TypeScript is not installed: run `cd clients/typescript && npm ci`")
    config = json.loads((TS_DIR / "tsconfig.json").read_text())
    assert config["compilerOptions"]["strict"] is True
    checked = subprocess.run(
        [str(TSC), "--noEmit", "-p", "tsconfig.json"],
        cwd=TS_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
