"""How every wrapped RPC is invoked: defaults, one deadline across retries, error translation.

Each per-service wrapper is a `ServiceClient` whose methods are one line: they pass the raw
stub's multi-callable to `_unary` or `_stream` (or, for a stream that resumes from a token of
its last message, `_resuming_stream`). Keeping the mechanics here means timeouts, metadata,
retries and `LoomError` behave identically for all RPCs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from ._errors import LoomError
from ._retry import NO_RETRY, RetryPolicy

__all__ = ["CallDefaults", "Metadata", "ServiceClient"]

Metadata = Sequence[tuple[str, str | bytes]]
"""gRPC metadata: ``(key, value)`` pairs; binary values go under keys ending in ``-bin``."""

Req_contra = TypeVar("Req_contra", bound=Message, contravariant=True)
Res_co = TypeVar("Res_co", bound=Message, covariant=True)
R = TypeVar("R", bound=Message)
Q = TypeVar("Q", bound=Message)


class _UnaryMethod(Protocol[Req_contra, Res_co]):
    def __call__(
        self, request: Req_contra, *, timeout: float | None, metadata: Metadata
    ) -> Awaitable[Res_co]: ...


class _StreamMethod(Protocol[Req_contra, Res_co]):
    def __call__(
        self, request: Req_contra, *, timeout: float | None, metadata: Metadata
    ) -> AsyncIterator[Res_co]: ...


@dataclass(frozen=True, slots=True)
class CallDefaults:
    """What a call uses when it does not say otherwise (set once, by `LoomClient`)."""

    timeout: float | None = 10.0
    """Seconds until the deadline of the whole call, retries included; None: no deadline."""
    metadata: tuple[tuple[str, str | bytes], ...] = ()
    """Sent with every call, before the call's own metadata."""
    retry: RetryPolicy = NO_RETRY
    """Retry policy of calls that pass none."""
    stream_timeout: float | None = None
    """Deadline of server-streaming calls that pass none: a stream may rightly run for long."""


class ServiceClient:
    """Base of the per-service wrappers: runs one RPC under `CallDefaults`."""

    __slots__ = ("_defaults",)

    def __init__(self, defaults: CallDefaults) -> None:
        self._defaults = defaults

    async def _unary(
        self,
        method: _UnaryMethod[Q, R],
        request: Q,
        timeout: float | None,
        metadata: Metadata,
        retry: RetryPolicy | None,
    ) -> R:
        policy = retry or self._defaults.retry
        deadline = self._deadline(timeout)
        call_metadata = (*self._defaults.metadata, *metadata)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await method(request, timeout=_remaining(deadline), metadata=call_metadata)
            except grpc.aio.AioRpcError as exc:
                pause = _pause(policy, exc.code(), attempt, deadline)
                if pause is None:
                    raise LoomError.from_rpc_error(exc) from exc
            await asyncio.sleep(pause)

    async def _stream(
        self,
        method: _StreamMethod[Q, R],
        request: Q,
        timeout: float | None,
        metadata: Metadata,
        retry: RetryPolicy | None,
    ) -> AsyncIterator[R]:
        """Yields the stream's messages; retries only while nothing has been received yet."""
        policy = retry or self._defaults.retry
        seconds = self._defaults.stream_timeout if timeout is None else timeout
        deadline = None if seconds is None else time.monotonic() + seconds
        call_metadata = (*self._defaults.metadata, *metadata)
        attempt = 0
        while True:
            attempt += 1
            received = False
            call = method(request, timeout=_remaining(deadline), metadata=call_metadata)
            try:
                async for item in call:
                    received = True
                    yield item
                return
            except grpc.aio.AioRpcError as exc:
                pause = None if received else _pause(policy, exc.code(), attempt, deadline)
                if pause is None:
                    raise LoomError.from_rpc_error(exc) from exc
            finally:
                cancel = getattr(call, "cancel", None)
                if cancel is not None:  # stop the server's work when the caller stops early
                    cancel()
            await asyncio.sleep(pause)

    async def _resuming_stream(
        self,
        method: _StreamMethod[Q, R],
        *,
        resume_from: Callable[[str], Q],
        token: str,
        token_of: Callable[[R], str],
        timeout: float | None,
        metadata: Metadata,
        policy: RetryPolicy,
    ) -> AsyncIterator[R]:
        """Yields the stream's messages, reconnecting with the last token after a failure.

        The first call sends ``resume_from(token)``; after a failure whose code `policy`
        retries, the next one sends ``resume_from(t)`` where ``t`` is the last non-empty
        ``token_of(message)`` yielded (`token` while none has been). `policy.max_attempts`
        counts as for a unary call, the failed call and its reconnects, from the last message
        received: it gives up when that many calls in a row failed with no message between
        them. Each pause is the policy's jittered backoff, never past the deadline
        (`timeout`, or the client's `stream_timeout`, covers the whole stream, reconnects
        included). Any other failure is raised as `LoomError`; a stream the server ends
        normally ends here.
        """
        seconds = self._defaults.stream_timeout if timeout is None else timeout
        deadline = None if seconds is None else time.monotonic() + seconds
        call_metadata = (*self._defaults.metadata, *metadata)
        failures = 0
        while True:
            call = method(resume_from(token), timeout=_remaining(deadline), metadata=call_metadata)
            try:
                async for item in call:
                    failures = 0
                    token = token_of(item) or token
                    yield item
                return
            except grpc.aio.AioRpcError as exc:
                failures += 1
                pause = _pause(policy, exc.code(), failures, deadline)
                if pause is None:
                    raise LoomError.from_rpc_error(exc) from exc
            finally:
                cancel = getattr(call, "cancel", None)
                if cancel is not None:  # stop the server's work when the caller stops early
                    cancel()
            await asyncio.sleep(pause)

    def _deadline(self, timeout: float | None) -> float | None:
        seconds = self._defaults.timeout if timeout is None else timeout
        return None if seconds is None else time.monotonic() + seconds


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _pause(
    policy: RetryPolicy, code: grpc.StatusCode, attempt: int, deadline: float | None
) -> float | None:
    """Seconds to wait before the next attempt, or None to give up now."""
    if not policy.should_retry(code, attempt):
        return None
    pause = policy.backoff_s(attempt)
    if deadline is not None and time.monotonic() + pause >= deadline:
        return None  # the retry could not start before the deadline: report the real failure
    return pause
