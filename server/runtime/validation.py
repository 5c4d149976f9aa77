"""Collecting field violations, so one response names every bad field at once."""

from __future__ import annotations

from collections.abc import Sized

from server.runtime.errors import FieldViolation, InvalidArgument

__all__ = ["Violations"]


class Violations:
    """Accumulates `FieldViolation`s; `raise_if_any()` turns them into one InvalidArgument.

    Validation reads better as a flat list of checks than as nested ifs, and users prefer
    to learn about every bad field in one round trip.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        """Records one violation."""
        self._items.append(FieldViolation(field, description))

    def check(self, ok: bool, field: str, description: str) -> bool:
        """Records a violation when `ok` is false; returns `ok`."""
        if not ok:
            self.add(field, description)
        return ok

    def identifier(self, field: str, value: str, *, max_bytes: int) -> bool:
        """An id must be non-empty, at most `max_bytes` of UTF-8 and free of NUL bytes."""
        if not value:
            self.add(field, "must not be empty")
            return False
        size = len(value.encode("utf-8"))
        if size > max_bytes:
            self.add(field, f"must be at most {max_bytes} bytes (got {size})")
            return False
        if "\x00" in value:
            self.add(field, "must not contain NUL characters")
            return False
        return True

    def count(self, field: str, items: Sized, *, minimum: int, maximum: int) -> bool:
        """A repeated field's length must lie in [minimum, maximum]."""
        n = len(items)
        if n < minimum or n > maximum:
            self.add(field, f"must hold {minimum}..{maximum} items (got {n})")
            return False
        return True

    def __bool__(self) -> bool:
        return bool(self._items)

    def raise_if_any(self) -> None:
        """Raises InvalidArgument listing every recorded violation."""
        if self._items:
            raise InvalidArgument(list(self._items))
