"""Loom's load-test harness: workloads, open/closed-loop load, exact percentiles, reports.

Run ``python -m loadtest --help`` for the workloads; write one as
``loadtest/workloads/<name>.py`` (see :mod:`loadtest.harness`).
"""

__all__: list[str] = []
