"""`storage.ports` is one import surface over one module per port.

Callers write ``from storage.ports import X`` whatever port X belongs to, so moving a record
between port modules never touches a caller; these tests pin that surface.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from pathlib import Path

import storage.ports

ROOT = Path(__file__).resolve().parents[3]
PORT_MODULES = sorted(m.name for m in pkgutil.iter_modules(storage.ports.__path__))


def test_the_package_exports_every_name_of_every_port_module() -> None:
    """`storage.ports.__all__` is exactly the union of its modules' `__all__`."""
    names: set[str] = set()
    for name in PORT_MODULES:
        names.update(importlib.import_module(f"storage.ports.{name}").__all__)
    assert sorted(names) == sorted(storage.ports.__all__)


def test_one_module_per_port() -> None:
    """The port modules, by name: adding a port is a deliberate change to this list."""
    expected = [
        "erasures",
        "inbox",
        "inbox_changes",
        "iteration_source",
        "jobs",
        "summaries",
        "templates",
        "threads",
        "work_queue",
    ]
    assert expected == PORT_MODULES


def test_nothing_outside_the_package_imports_a_port_module() -> None:
    """Every caller imports from `storage.ports` itself, never from `storage.ports.<module>`."""
    offenders: list[str] = []
    for folder in ("server", "storage", "loadtest", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent == ROOT / "storage" / "ports":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "storage.ports."
                ):
                    offenders.append(f"{path.relative_to(ROOT)}: {node.module}")
                elif isinstance(node, ast.Import):
                    offenders += [
                        f"{path.relative_to(ROOT)}: {a.name}"
                        for a in node.names
                        if a.name.startswith("storage.ports.")
                    ]
    assert offenders == []


def test_records_of_three_fields_or_more_are_built_by_name() -> None:
    """A record with three fields or more is keyword-only: ``TaskRecord(task_id=…, …)``, never
    twelve positional arguments whose order a reader must count (pairs such as ThreadKey
    stay positional)."""
    positional = sorted(
        name
        for name in storage.ports.__all__
        if dataclasses.is_dataclass(record := getattr(storage.ports, name))
        and len(dataclasses.fields(record)) >= 3
        and not all(f.kw_only for f in dataclasses.fields(record))
    )
    assert positional == []
