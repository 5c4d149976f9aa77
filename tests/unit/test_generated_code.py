"""The committed generated Python matches protos/ (CI fails on a stale `make protos`).

The contract is protos/loom/v1/*.proto; its Python (loom/v1/*_pb2*.py and .pyi) lives once,
in the loom-client distribution (clients/python), which the server depends on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
GENERATED = ROOT / "clients" / "python"


def test_generated_python_is_fresh(tmp_path: Path) -> None:
    """Regenerating every .proto gives byte-identical _pb2/_grpc/.pyi files."""
    sources = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / "loom" / "v1").glob("*.proto"))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(PROTOS),
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            f"--mypy_grpc_out={tmp_path}",
            *sources,
        ],
        check=True,
        cwd=PROTOS,
        env=env,
        capture_output=True,
    )
    fresh = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*.py*")}
    assert fresh, "protoc generated nothing"
    committed = {
        p.relative_to(GENERATED): p.read_bytes()
        for p in (GENERATED / "loom" / "v1").glob("*_pb2*.py*")
    }
    stale = sorted(str(name) for name in fresh if committed.get(name) != fresh[name])
    extra = sorted(str(name) for name in committed if name not in fresh)
    assert not stale, f"stale generated files (run `make protos`): {stale}"
    assert not extra, f"generated files without a .proto: {extra}"


def test_generated_python_has_one_copy() -> None:
    """No generated Python is left beside the .proto files: a second copy would be what some
    imports find and what `make protos` no longer refreshes."""
    assert sorted(str(p.relative_to(ROOT)) for p in PROTOS.rglob("*_pb2*.py*")) == []
