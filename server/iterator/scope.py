"""What a StartIteration request asks for, validated against the configured hierarchy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.iterator.settings import IteratorLevel
from server.runtime.validation import Violations
from storage.ports import Key

__all__ = ["MAX_KEY", "Scope", "resolve_scope"]

MAX_KEY = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Scope:
    """A validated scope: a level, an inclusive key range on it, the emitted level."""

    level: int
    first: Key
    last: Key
    emit_level: int


def resolve_scope(  # noqa: PLR0911 - each invalid case stops here
    v: Violations,
    levels: Sequence[IteratorLevel],
    *,
    kind: str | None,
    level_name: str,
    first: Sequence[int],
    last: Sequence[int],
    field: str,
    emit_name: str,
) -> Scope | None:
    """The scope of a request; records violations and returns None when it is invalid.

    `kind` is the oneof case: ``enterprise_range`` / ``enterprise_id`` name the top level,
    ``user_id`` the second, ``level_scope`` any level by name.
    """
    names = [lv.name for lv in levels]
    if kind is None:
        v.add("scope", "set enterprise_range, enterprise_id, user_id or level_scope")
        return None
    if kind in ("enterprise_range", "enterprise_id"):
        index = 0
    elif kind == "user_id":
        index = 1
        if len(levels) < 2:
            v.add("user_id", "the configured hierarchy has a single level")
            return None
    elif level_name in names:
        index = names.index(level_name)
    else:
        v.add(f"{field}.level", f"not a level of the hierarchy (levels: {', '.join(names)})")
        return None
    width = len(levels[index].key_columns)
    last = last or first
    ok = v.check(
        len(first) == width, field, f"a key of level {names[index]!r} has {width} integer(s)"
    ) and v.check(len(last) == width, field, f"last key must have {width} integer(s)")
    if ok and tuple(first) > tuple(last):
        v.add(field, "first must not be after last")
        ok = False
    if not emit_name:
        v.add("level", f"must name the emitted level ({', '.join(names)})")
        return None
    if emit_name not in names:
        v.add("level", f"not a level of the hierarchy (levels: {', '.join(names)})")
        return None
    emit = names.index(emit_name)
    if emit < index:
        v.add("level", f"{emit_name!r} is above the scope's level {names[index]!r}")
        return None
    if not ok:
        return None
    return Scope(index, tuple(first), tuple(last), emit)
