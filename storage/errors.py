"""Errors every storage adapter raises, whatever its engine, and the one shape of translator.

Each adapter translates its driver's exceptions into these exactly once, at its boundary,
so the server never has to know a Cassandra, Bigtable or SQLite exception type.

    StorageError
    ├── StorageUnavailable   the engine cannot be reached, timed out or is overloaded
    ├── StorageCorrupt       stored data could not be decoded (a bug or a foreign writer)
    └── StorageRejected      the engine answered and refused the statement for good
                             (an undefined table or column, a syntax error)

Only `StorageUnavailable` is worth waiting out: a rejected statement fails the same way
every time it is sent, so whoever sent it gives up instead of retrying.

Every engine declares one `DriverErrors` (the exceptions its driver raises, and which kind
each is) and wraps each driver call in it, as httpx maps its transport's exceptions in one
place: ``with _errors("read"): ...`` raises the storage error *from* the driver's, whose
message names the engine, the operation and the cause — never an empty string.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

__all__ = [
    "DriverErrors",
    "StorageCorrupt",
    "StorageError",
    "StorageMisconfigured",
    "StorageRejected",
    "StorageUnavailable",
    "describe",
]


class StorageError(Exception):
    """Base of engine faults; the gRPC layer answers UNAVAILABLE."""


class StorageUnavailable(StorageError):
    """The engine is down, unreachable, timing out or refusing work."""


class StorageCorrupt(StorageError):
    """Stored bytes do not decode; never retried."""


class StorageRejected(StorageError):
    """The engine is up and refused the statement as written: a table or column it does not
    have, a syntax error (SQLSTATE class 42; SQLite's "no such column"). Retrying cannot
    help, and it says nothing about the engine's health (a circuit breaker counts it as an
    answer). The message is the database's own."""


class StorageMisconfigured(ValueError):
    """The engine answered at start-up and said a setting is wrong: a password it refuses, a
    certificate it does not trust, a data centre it does not have. Raised only while a store
    opens; like any `ValueError` from a store that refuses its settings, the server stops
    with exit 2 and this message, which begins with the setting's name
    (``cassandra.local_dc: ...``)."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


def describe(exc: BaseException) -> str:
    """What `exc` says went wrong, never empty: ``Class: text``, or the class alone when it
    carries no text (``str(TimeoutError())`` is "", and a caller must still learn why)."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _unavailable(_: BaseException) -> type[StorageError]:
    return StorageUnavailable


class DriverErrors:
    """One engine's translation of its driver's exceptions into `StorageError`s.

    `catches` are the exceptions a driver call may raise; `classify` picks the kind of each
    (default: `StorageUnavailable`) and `detail` its text (default: `describe`). Use it as
    ``with errors("what"):`` around driver calls, or call `error` where the exception
    arrives in a callback. A `StorageError` raised inside passes through unchanged, so
    nesting never translates twice.
    """

    __slots__ = ("_classify", "_detail", "catches", "engine")

    def __init__(
        self,
        engine: str,
        catches: tuple[type[BaseException], ...],
        *,
        classify: Callable[[BaseException], type[StorageError]] = _unavailable,
        detail: Callable[[BaseException], str] = describe,
    ) -> None:
        self.engine = engine
        self.catches = catches
        self._classify = classify
        self._detail = detail

    def error(self, exc: BaseException, what: str = "") -> StorageError:
        """The storage error for `exc`, raised by the driver during `what`; `exc` is its
        ``__cause__`` however it is raised (a callback sets it on a future), so a caller can
        still tell what the driver said."""
        if isinstance(exc, StorageError):
            return exc
        where = f"{self.engine} {what}" if what else self.engine
        error = self._classify(exc)(f"{where}: {self._detail(exc) or describe(exc)}")
        error.__cause__ = exc
        return error

    @contextlib.contextmanager
    def __call__(self, what: str) -> Iterator[None]:
        """Translates what the driver raises inside the block (``raise … from exc``)."""
        try:
            yield
        except StorageError:
            raise
        except self.catches as exc:
            raise self.error(exc, what) from exc
