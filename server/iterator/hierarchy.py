"""The configured hierarchy, checked three times: on its own, against the live catalog,
then by running each level's reads once.

A typo in ``[[iterator.levels]]`` must stop start-up with a message naming the setting,
not surface as an SQL error in the middle of every job. Names are compared the way the
reads will send them: PostgreSQL finds a quoted mixed-case name (``"Artist"``) only by its
exact spelling, so ``table = "artist"`` is an error there (saying which name does exist),
while SQLite, and MySQL's columns, ignore case. The catalog cannot judge a ``where``: only
the database can, so every statement shape of every level runs once, returning no rows.

The index check only warns: a missing ``(parent, id)`` index makes every keyset read a
scan, which an operator should hear about, but a database without it is still iterable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from server.iterator.settings import IteratorLevel
from server.runtime.errors import EngineRejected
from storage.ports import IterationSource, SchemaFacts, SourceLevel

__all__ = ["HierarchyError", "check_levels", "check_reads", "check_schema", "source_levels"]

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
        SourceLevel(
            name=lv.name,
            table=lv.table,
            id_columns=lv.key_columns,
            parent_column=lv.parent_column,
            where=lv.where,
        )
        for lv in levels
    ]


def _resolve(name: str, present: Iterable[str], fold: bool) -> tuple[str | None, list[str]]:
    """The catalog's spelling of `name` as the database will resolve it (None when it will
    not), and the names that differ from it only in case (what the user may have meant)."""
    names = set(present)
    if name in names:
        return name, []
    same = sorted(p for p in names if p.lower() == name.lower())
    if fold and same:
        return same[0], []
    return None, same


def _did_you_mean(same: list[str], what: str) -> str:
    if not same:
        return ""
    quoted = " or ".join(f'"{n}"' for n in same)
    return f"; did you mean {quoted}? (this database compares {what} names case-sensitively)"


def check_schema(levels: Sequence[IteratorLevel], facts: SchemaFacts) -> list[str]:
    """Raises HierarchyError for tables or columns the reads would not find; returns
    warnings (a missing ``(parent, id)`` index)."""
    problems: list[str] = []
    warnings: list[str] = []
    for i, level in enumerate(levels):
        where = f"iterator.levels[{i}]"
        table, same = _resolve(level.table, facts.tables, facts.tables_fold_case)
        if table is None:
            problems.append(
                f"{where}.table: table {level.table!r} does not exist in the source"
                + _did_you_mean(same, "table")
            )
            continue
        columns = facts.columns.get(table, frozenset())
        wanted = [("id_column", c) for c in level.key_columns]
        if level.parent_column:
            wanted.insert(0, ("parent_column", level.parent_column))
        order: list[str] = []
        for setting, column in wanted:
            found, same = _resolve(column, columns, facts.columns_fold_case)
            if found is None:
                problems.append(
                    f"{where}.{setting}: column {column!r} does not exist in {table!r}"
                    + _did_you_mean(same, "column")
                )
            order.append(found or column)

        def norm(names: Iterable[str]) -> tuple[str, ...]:
            return tuple(n.lower() if facts.columns_fold_case else n for n in names)

        indexes = facts.indexes.get(table, ())
        if not any(norm(ix[: len(order)]) == norm(order) for ix in indexes):
            warnings.append(
                f"{where}: no index on {table}({', '.join(order)}): every keyset "
                "read of this level will scan"
            )
    if problems:
        raise HierarchyError("; ".join(problems))
    return warnings


async def check_reads(levels: Sequence[IteratorLevel], source: IterationSource) -> None:
    """Runs every level's reads once (no rows); raises HierarchyError naming the level's
    ``where`` and quoting the database when the database refuses one. Call it after
    `check_schema`: the names are right by then, so what fails is the condition. `source` is
    the guarded one (`server.runtime.guard`): a refusal arrives as `EngineRejected`."""
    problems = []
    for i, level in enumerate(levels):
        try:
            await source.check_read(i)
        except EngineRejected as exc:
            if level.where:
                problems.append(
                    f"iterator.levels[{i}].where = {level.where!r} fails on the source: "
                    f"{exc.reason}"
                )
            else:
                problems.append(f"iterator.levels[{i}]: its read fails on the source: {exc.reason}")
    if problems:
        raise HierarchyError("; ".join(problems))
