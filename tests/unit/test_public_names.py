"""Every module says what it exports: a top-level `__all__`, naming only what it defines.

`__all__` is what `from module import *` and mypy's strict re-export rules read, and what
a reader scans first to learn a module's surface. Generated protobuf code is exempt (it is
regenerated, never edited).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"server": REPO, "storage": REPO, "loadtest": REPO, "loom_client": REPO / "clients/python"}


def _modules() -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for package, base in ROOTS.items():
        for path in sorted((base / package).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            parts = path.relative_to(base).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found.append((name, path))
    return found


def _declared(path: Path) -> list[str] | None:
    """The literal `__all__` assigned at the top of the module, or None when there is none."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "__all__":
            return list(ast.literal_eval(value))
    return None


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_module_declares_all_and_defines_every_name(module: str, path: Path) -> None:
    """A literal `__all__` exists, has no repeats, and each name resolves on import."""
    names = _declared(path)
    assert names is not None, f"{path.relative_to(REPO)} has no top-level __all__"
    assert len(names) == len(set(names)), f"{module}.__all__ repeats a name"
    loaded = importlib.import_module(module)
    missing = [n for n in names if not hasattr(loaded, n)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"
