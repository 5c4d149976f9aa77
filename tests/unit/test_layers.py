"""The layering DESIGN.md asks for, checked on the import statements themselves.

- `storage/` never imports `server/` (arrows point down: server -> storage, never back);
- `server/` reaches storage only through its contract (`ports`, `errors`, `settings`,
  `factory`, and the shared `clock`), never an engine package;
- no two modules of `loadtest/` import each other (directly or around a longer cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORAGE_CONTRACT = {
    "storage",
    "storage.ports",
    "storage.errors",
    "storage.settings",
    "storage.factory",
    "storage.clock",
}


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        yield ".".join(parts), path


def _imports(path: Path, module: str) -> set[str]:
    """Every module `path` imports, type-checking-only imports included (absolute names)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.rsplit(".", node.level)[0]
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_storage_never_imports_server() -> None:
    """No module under storage/ imports anything from server/."""
    offenders = {
        module: sorted(n for n in _imports(path, module) if _within(n, "server"))
        for module, path in _modules("storage")
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_server_reaches_storage_only_through_its_contract() -> None:
    """server/ imports storage.ports / errors / settings / factory / clock, never an adapter."""
    offenders: dict[str, list[str]] = {}
    for module, path in _modules("server"):
        bad = sorted(
            n
            for n in _imports(path, module)
            if _within(n, "storage")
            and n not in STORAGE_CONTRACT
            and not any(n.startswith(c + ".") for c in STORAGE_CONTRACT - {"storage"})
        )
        if bad:
            offenders[module] = bad
    assert offenders == {}


@pytest.mark.parametrize("package", ["loadtest", "server", "storage"])
def test_no_import_cycles(package: str) -> None:
    """The package's module graph is acyclic (modules that import each other are one concept)."""
    modules = dict(_modules(package))
    graph = {
        m: {
            n
            for n in _imports(p, m)
            if n in modules and n != m and modules[n].name != "__init__.py"
        }
        for m, p in modules.items()
    }
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []
