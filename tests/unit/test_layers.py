"""The layering docs/ARCHITECTURE.md draws, checked on the import statements themselves.

- `storage/` never imports `server/` (arrows point down: server -> storage, never back);
- `server/` reaches storage only through its contract (`ports`, `errors`, `settings`,
  `factory`, the engine tables of `engines`, the shared `clock`, and the stores' schema
  versions: `versions`, `upgrades`), never an engine package;
- domain code (``server/<service>/``, its ``mount.py`` aside) never names an engine: which
  engine serves a port, and what that engine wants, is `storage.engines`' business, read by
  `server.config` and the mounts;
- no two modules of `loadtest/` import each other (directly or around a longer cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.engines import engine_names

ROOT = Path(__file__).resolve().parents[2]
STORAGE_CONTRACT = {
    "storage",
    "storage.ports",
    "storage.errors",
    "storage.settings",
    "storage.factory",
    "storage.engines",
    "storage.clock",
    "storage.slices",
    "storage.versions",
    "storage.upgrades",
}
ENGINE_CHOOSERS = {"storage.engines", "storage.factory"}
"""What only a mount (or `server.config`, `server.cli`) imports: choosing and opening engines."""


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


def _domain_modules() -> Iterator[tuple[str, Path]]:
    """Every module of every service package (one with a ``mount.py``), the mount aside."""
    services = {path.parent.name for path in (ROOT / "server").glob("*/mount.py")}
    for module, path in _modules("server"):
        parts = module.split(".")
        if len(parts) == 3 and parts[1] in services and parts[2] != "mount":
            yield module, path


def _engine_mentions(path: Path, engines: set[str]) -> list[str]:
    """Where code (not a docstring or comment) names an engine: a string that is an engine's
    name, or a name or attribute spelled as one (``settings.sqlite``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in prose and node.value.strip().lower() in engines:
                found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr.lower() in engines:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id.lower() in engines:
            found.append(f"{node.lineno}: {node.id}")
    return found


def test_domain_code_never_names_an_engine() -> None:
    """No service's domain code names an engine or imports the engine tables: per-engine
    behaviour is an engine default in `storage.engines`, applied when settings load."""
    engines = set(engine_names())
    offenders: dict[str, list[str]] = {}
    for module, path in _domain_modules():
        found = _engine_mentions(path, engines)
        found += sorted(
            n for n in _imports(path, module) if any(_within(n, c) for c in ENGINE_CHOOSERS)
        )
        if found:
            offenders[module] = found
    assert offenders == {}


def test_the_engine_rule_sees_an_engine_in_domain_code(tmp_path: Path) -> None:
    """The rule above catches what it is for: an engine-keyed table in domain code."""
    sample = tmp_path / "fanout.py"
    sample.write_text(
        '''"""Docstrings may say SQLite."""\n'''
        """DEFAULTS = {"sqlite": 1, "cassandra": 4}\n"""
        "path = settings.sqlite.data_dir\n",
        encoding="utf-8",
    )
    expected = ["2: 'sqlite'", "2: 'cassandra'", "3: .sqlite"]
    assert expected == _engine_mentions(sample, set(engine_names()))


def test_only_a_mount_reads_the_whole_settings() -> None:
    """`server.config` gathers every service's settings, so a service module importing it
    would be an arrow back up out of its package: handlers and domain code take their own
    section (and `MethodPolicy` from `server.runtime.policies`); only the mount, which wires
    the service from the whole `Settings`, imports it."""
    offenders = sorted(
        module
        for module, path in _domain_modules()
        if any(_within(n, "server.config") for n in _imports(path, module))
    )
    assert offenders == []
