"""Workload discovery: a workload is any module in ``loadtest/workloads/``.

Adding a service's workload means adding one file; nothing here changes. Modules are found
without importing them (``pkgutil``) and only the chosen one is imported, so one
workload's heavy or broken imports never stop another from running.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import cast

from loadtest import workloads
from loadtest.harness import Workload

__all__ = ["available", "load"]


def _module_name(workload: str) -> str:
    return workload.replace("-", "_")


def available() -> list[str]:
    """Workload names as typed on the command line (``baseline-bfs`` for ``baseline_bfs``)."""
    return sorted(
        m.name.replace("_", "-")
        for m in pkgutil.iter_modules(workloads.__path__)
        if not m.name.startswith("_")
    )


def load(workload: str) -> Workload:
    """Import the workload module; ``KeyError`` names the available ones if it is unknown."""
    if workload not in available():
        raise KeyError(f"unknown workload {workload!r}; available: {', '.join(available())}")
    module = importlib.import_module(f"{workloads.__name__}.{_module_name(workload)}")
    for attr in ("add_arguments", "run"):
        if not callable(getattr(module, attr, None)):
            raise TypeError(f"workload module {module.__name__} has no {attr}()")
    return cast("Workload", module)
