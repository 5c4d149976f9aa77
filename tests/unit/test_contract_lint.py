"""`buf lint` passes on protos/: every service, method, message and field is documented."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PROTOS = Path(__file__).resolve().parents[2] / "protos"
TOOLS_BIN = Path.home() / ".cache" / "loom" / "bin"


def test_buf_lint_passes() -> None:
    """buf's STANDARD and COMMENTS rules hold for the whole contract."""
    buf = shutil.which("buf") or shutil.which("buf", path=str(TOOLS_BIN))
    assert buf, "buf is not installed: run scripts/tools/install.sh (make tools)"
    result = subprocess.run(
        [buf, "lint"], cwd=PROTOS, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
