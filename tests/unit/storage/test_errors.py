"""The one shape of driver-error translator every adapter declares (`storage.errors`)."""

from __future__ import annotations

import pytest

from storage.errors import (
    DriverErrors,
    StorageCorrupt,
    StorageError,
    StorageRejected,
    StorageUnavailable,
    describe,
)


class DriverFault(Exception):
    """Stands in for a driver's own exception class."""


def _kind(exc: BaseException) -> type[StorageError]:
    return StorageRejected if "syntax" in str(exc) else StorageUnavailable


ERRORS = DriverErrors("engine", (DriverFault, TimeoutError), classify=_kind)


class TestDescribe:
    def test_an_exception_with_text_is_its_class_and_text(self) -> None:
        """Class first, so a caller can tell a timeout from a refusal at a glance."""
        assert describe(DriverFault("connection\n  refused")) == "DriverFault: connection refused"

    def test_an_exception_without_text_is_its_class(self) -> None:
        """``str(TimeoutError())`` is empty; the description never is."""
        assert describe(TimeoutError()) == "TimeoutError"


class TestDriverErrors:
    def test_a_driver_error_becomes_the_kind_it_classifies_as_naming_engine_and_operation(
        self,
    ) -> None:
        """The storage error is raised from the driver's, with engine, operation and cause."""
        with pytest.raises(StorageUnavailable) as err, ERRORS("read"):
            raise DriverFault("connection refused")
        assert str(err.value) == "engine read: DriverFault: connection refused"
        assert isinstance(err.value.__cause__, DriverFault)
        with pytest.raises(StorageRejected) as refused, ERRORS("write"):
            raise DriverFault("syntax error")
        assert str(refused.value) == "engine write: DriverFault: syntax error"

    def test_a_driver_error_without_text_is_named_by_its_class(self) -> None:
        """A bare TimeoutError still says what happened."""
        with pytest.raises(StorageUnavailable) as err, ERRORS("read"):
            raise TimeoutError
        assert str(err.value) == "engine read: TimeoutError"

    def test_a_storage_error_passes_through_unchanged(self) -> None:
        """Nesting, or an adapter's own StorageCorrupt, never translates twice."""
        corrupt = StorageCorrupt("engine: bad bytes")
        with pytest.raises(StorageCorrupt) as err, ERRORS("read"), ERRORS("outer"):
            raise corrupt
        assert err.value is corrupt
        assert ERRORS.error(corrupt, "read") is corrupt

    def test_what_the_driver_does_not_raise_is_not_translated(self) -> None:
        """A bug (not one of the driver's exceptions) reaches the caller as itself."""
        with pytest.raises(KeyError), ERRORS("read"):
            raise KeyError("x")

    def test_error_translates_an_exception_that_arrives_in_a_callback(self) -> None:
        """Futures completed on a driver thread are failed with the translated error."""
        error = ERRORS.error(DriverFault("overloaded"), "query")
        assert isinstance(error, StorageUnavailable)
        assert str(error) == "engine query: DriverFault: overloaded"
