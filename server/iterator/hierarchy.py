"""The configured hierarchy, checked twice: on its own, then against the live schema.

A typo in ``[[iterator.levels]]`` must stop start-up with a message naming the setting,
not surface as an SQL error in the middle of a job. The index check only warns: a missing
``(parent, id)`` index makes every keyset read a scan, which an operator should hear about,
but a database without it is still iterable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from server.config import IteratorLevel
from storage.ports import SchemaFacts, SourceLevel

__all__ = ["HierarchyError", "check_levels", "check_schema", "source_levels"]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


class HierarchyError(ValueError):
    """The hierarchy settings are wrong; the message names the setting."""


def check_levels(levels: Sequence[IteratorLevel]) -> None:  # noqa: PLR0912 - a flat list of checks
    """Raises HierarchyError for settings that cannot describe a hierarchy."""
    problems = []
    if not levels:
        problems.append("iterator.levels: at least one level is needed")
    seen: set[str] = set()
    for i, level in enumerate(levels):
        where = f"iterator.levels[{i}]"
        if not _NAME.match(level.name):
            problems.append(f"{where}.name: {level.name!r} must match {_NAME.pattern}")
        elif level.name in seen:
            problems.append(f"{where}.name: {level.name!r} is used twice")
        seen.add(level.name)
        if level.id_column and level.id_columns:
            problems.append(f"{where}: give id_column or id_columns, not both")
        cols = level.key_columns
        if not cols:
            problems.append(f"{where}.id_column: must not be empty")
        if len(cols) > 1 and i != len(levels) - 1:
            problems.append(
                f"{where}.id_columns: a composite key is only supported on the last level "
                "(children name their parent by one integer column)"
            )
        for name, value in (("table", level.table), *(("id_columns", c) for c in cols)):
            if not _IDENT.match(value):
                problems.append(f"{where}.{name}: {value!r} is not a plain SQL identifier")
        if i == 0 and level.parent_column:
            problems.append(f"{where}.parent_column: the top level has no parent")
        if i > 0 and not _IDENT.match(level.parent_column):
            problems.append(f"{where}.parent_column: {level.parent_column!r} is required")
        if ";" in level.where:
            problems.append(f"{where}.where: one condition, no ';'")
    if problems:
        raise HierarchyError("; ".join(problems))


def source_levels(levels: Sequence[IteratorLevel]) -> list[SourceLevel]:
    """The adapter's view of the levels."""
    return [
        SourceLevel(lv.name, lv.table, lv.key_columns, lv.parent_column, lv.where) for lv in levels
    ]


def check_schema(levels: Sequence[IteratorLevel], facts: SchemaFacts) -> list[str]:
    """Raises HierarchyError for tables or columns the database lacks; returns warnings
    (a missing ``(parent, id)`` index)."""
    problems: list[str] = []
    warnings: list[str] = []
    for i, level in enumerate(levels):
        where = f"iterator.levels[{i}]"
        columns = facts.columns.get(level.table)
        if columns is None:
            problems.append(f"{where}.table: table {level.table!r} does not exist in the source")
            continue
        wanted = [("id_column", c) for c in level.key_columns]
        if level.parent_column:
            wanted.append(("parent_column", level.parent_column))
        for setting, column in wanted:
            if column.lower() not in columns:
                problems.append(
                    f"{where}.{setting}: column {column!r} does not exist in {level.table!r}"
                )
        order = tuple(
            c.lower() for c in ([level.parent_column] if level.parent_column else [])
        ) + tuple(c.lower() for c in level.key_columns)
        indexes = facts.indexes.get(level.table, ())
        if not any(ix[: len(order)] == order for ix in indexes):
            warnings.append(
                f"{where}: no index on {level.table}({', '.join(order)}): every keyset "
                "read of this level will scan"
            )
    if problems:
        raise HierarchyError("; ".join(problems))
    return warnings
