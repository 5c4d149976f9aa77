"""Retries, deadlines, metadata and error translation of every wrapped call.

The RPCs here are small fakes of a grpc.aio multi-callable (the transport is not under
test: tests/e2e/test_clients.py drives a real server).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from loom.v1 import iterator_pb2, threadweaver_pb2
from loom_client import (
    NO_RETRY,
    CallDefaults,
    FieldViolation,
    IteratorClient,
    LoomError,
    RetryPolicy,
    ThreadWeaverClient,
)

FAST = RetryPolicy(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.002)
REPLY = threadweaver_pb2.WeaveMessageResponse(unified_thread_id="ut")


def rpc_error(
    code: grpc.StatusCode, details: str = "boom", trailing: tuple[tuple[str, str | bytes], ...] = ()
) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


@dataclass
class Unary:
    """A fake unary multi-callable: fails with `errors` in turn, then answers `reply`."""

    errors: list[grpc.aio.AioRpcError]
    calls: list[tuple[float | None, tuple[tuple[str, str | bytes], ...]]] = field(
        default_factory=list
    )

    async def __call__(
        self,
        request: object,
        *,
        timeout: float | None,  # noqa: ASYNC109 -- grpc's keyword
        metadata: tuple[tuple[str, str | bytes], ...],
    ) -> object:
        self.calls.append((timeout, tuple(metadata)))
        if self.errors:
            raise self.errors.pop(0)
        return REPLY


class FakeStub:
    def __init__(self, method: object) -> None:
        self.WeaveMessage = method
        self.StreamObjects = method


def weaver(method: object, **defaults: Any) -> ThreadWeaverClient:
    client = ThreadWeaverClient(grpc.aio.insecure_channel("127.0.0.1:1"), CallDefaults(**defaults))
    client._stub = FakeStub(method)  # type: ignore[assignment]
    return client


REQUEST = threadweaver_pb2.WeaveMessageRequest()


class TestRetryPolicy:
    def test_backoff_is_bounded_and_jittered(self) -> None:
        """Pause n is uniform in [0, min(max, initial * multiplier**(n-1))]."""
        policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=0.5, multiplier=2.0)
        rng = random.Random(7)
        pauses = [policy.backoff_s(5, rng) for _ in range(200)]
        assert all(0.0 <= p <= 0.5 for p in pauses)
        assert max(pauses) > 0.4
        assert all(0.0 <= policy.backoff_s(1, rng) <= 0.1 for _ in range(50))

    def test_deadline_exceeded_can_never_be_retryable(self) -> None:
        """A policy that would retry a spent deadline is refused at construction."""
        with pytest.raises(ValueError, match="DEADLINE_EXCEEDED"):
            RetryPolicy(retryable_codes=frozenset({grpc.StatusCode.DEADLINE_EXCEEDED}))

    def test_no_retry_is_the_default(self) -> None:
        """Retrying is opt-in."""
        assert CallDefaults().retry == NO_RETRY
        assert not NO_RETRY.should_retry(grpc.StatusCode.UNAVAILABLE, 1)


class TestUnaryRetries:
    async def test_unavailable_is_retried_until_success(self) -> None:
        """Transient UNAVAILABLE / RESOURCE_EXHAUSTED answers are retried."""
        fake = Unary(
            [rpc_error(grpc.StatusCode.UNAVAILABLE), rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED)]
        )
        assert await weaver(fake).weave_message(REQUEST, retry=FAST) == REPLY
        assert len(fake.calls) == 3

    async def test_client_default_policy_applies(self) -> None:
        """A policy given to the client is used by calls that pass none."""
        fake = Unary([rpc_error(grpc.StatusCode.UNAVAILABLE)])
        assert await weaver(fake, retry=FAST).weave_message(REQUEST) == REPLY

    async def test_without_a_policy_nothing_is_retried(self) -> None:
        """The default attempts once and raises LoomError from the grpc error."""
        fake = Unary([rpc_error(grpc.StatusCode.UNAVAILABLE, "down")])
        with pytest.raises(LoomError) as caught:
            await weaver(fake).weave_message(REQUEST)
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert caught.value.message == "down"
        assert isinstance(caught.value.__cause__, grpc.aio.AioRpcError)
        assert len(fake.calls) == 1

    @pytest.mark.parametrize(
        "code",
        [
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.INTERNAL,
        ],
        ids=lambda c: c.name,
    )
    async def test_other_codes_are_never_retried(self, code: grpc.StatusCode) -> None:
        """Only codes meaning "the work was not done" are retried."""
        fake = Unary([rpc_error(code)])
        with pytest.raises(LoomError):
            await weaver(fake).weave_message(REQUEST, retry=FAST)
        assert len(fake.calls) == 1

    async def test_attempts_are_bounded(self) -> None:
        """After max_attempts the last error is raised."""
        fake = Unary([rpc_error(grpc.StatusCode.UNAVAILABLE) for _ in range(10)])
        with pytest.raises(LoomError):
            await weaver(fake).weave_message(REQUEST, retry=FAST)
        assert len(fake.calls) == 4

    async def test_retries_share_one_deadline(self) -> None:
        """Each attempt gets what is left of the call's timeout, never a fresh one."""
        fake = Unary([rpc_error(grpc.StatusCode.UNAVAILABLE) for _ in range(2)])
        policy = RetryPolicy(
            max_attempts=5, initial_backoff_s=0.02, max_backoff_s=0.02, multiplier=1.0
        )
        await weaver(fake).weave_message(REQUEST, timeout=5.0, retry=policy)
        timeouts = [t for t, _ in fake.calls if t is not None]
        assert len(timeouts) == len(fake.calls)
        assert timeouts[0] <= 5.0
        assert timeouts == sorted(timeouts, reverse=True)

    async def test_no_retry_past_the_deadline(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A retry that could not start before the deadline is not attempted. The jitter is
        pinned to its bound (1 s): full jitter may draw a pause under the 50 ms left, and
        then the retry rightly starts (1 run in ~20 did, which made this test flaky)."""
        monkeypatch.setattr(random, "uniform", lambda low, high: high)
        fake = Unary([rpc_error(grpc.StatusCode.UNAVAILABLE) for _ in range(10)])
        slow = RetryPolicy(
            max_attempts=10, initial_backoff_s=1.0, max_backoff_s=1.0, multiplier=1.0
        )
        with pytest.raises(LoomError) as caught:
            await weaver(fake).weave_message(REQUEST, timeout=0.05, retry=slow)
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert len(fake.calls) == 1

    async def test_metadata_and_default_timeout(self) -> None:
        """Client metadata precedes the call's; the client's timeout applies by default."""
        fake = Unary([])
        client = weaver(fake, timeout=3.0, metadata=(("team", "a"),))
        await client.weave_message(REQUEST, metadata=[("x-request-id", "r1")])
        timeout, metadata = fake.calls[0]
        assert metadata == (("team", "a"), ("x-request-id", "r1"))
        assert timeout is not None
        assert 2.5 < timeout <= 3.0


@dataclass
class Stream:
    """A fake server-streaming multi-callable: per attempt, yields items then maybe fails."""

    attempts: list[tuple[list[iterator_pb2.ObjectBatch], grpc.aio.AioRpcError | None]]
    calls: int = 0

    def __call__(
        self,
        request: object,
        *,
        timeout: float | None,
        metadata: tuple[tuple[str, str | bytes], ...],
    ) -> object:
        items, error = self.attempts[self.calls]
        self.calls += 1

        async def generate() -> AsyncIterator[iterator_pb2.ObjectBatch]:
            for item in items:
                yield item
            if error is not None:
                raise error

        return generate()


def iterator_client(method: object) -> IteratorClient:
    client = IteratorClient(grpc.aio.insecure_channel("127.0.0.1:1"), CallDefaults())
    client._stub = FakeStub(method)  # type: ignore[assignment]
    return client


BATCH = iterator_pb2.ObjectBatch()
STREAM_REQUEST = iterator_pb2.StreamObjectsRequest(job_id="j")


class TestStreams:
    async def test_retried_before_the_first_message(self) -> None:
        """A stream that fails before yielding anything is restarted."""
        fake = Stream([([], rpc_error(grpc.StatusCode.UNAVAILABLE)), ([BATCH, BATCH], None)])
        got = [b async for b in iterator_client(fake).stream_objects(STREAM_REQUEST, retry=FAST)]
        assert got == [BATCH, BATCH]
        assert fake.calls == 2

    async def test_not_retried_after_a_message(self) -> None:
        """Once messages were delivered a failure is raised, never silently replayed."""
        fake = Stream([([BATCH], rpc_error(grpc.StatusCode.UNAVAILABLE)), ([BATCH], None)])
        got: list[iterator_pb2.ObjectBatch] = []

        async def drain() -> None:
            async for batch in iterator_client(fake).stream_objects(STREAM_REQUEST, retry=FAST):
                got.append(batch)

        with pytest.raises(LoomError) as caught:
            await drain()
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert got == [BATCH]
        assert fake.calls == 1


class TestLoomError:
    def test_field_violations_from_bad_request(self) -> None:
        """BadRequest details in grpc-status-details-bin become field_violations."""
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field="message.gid", description="must not be empty"
                ),
            ]
        )
        detail = any_pb2.Any()
        detail.Pack(bad)
        status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="bad", details=[detail])
        error = rpc_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "bad",
            (
                ("grpc-status-details-bin", status.SerializeToString()),
                ("x-request-id", "req-1"),
            ),
        )
        loom = LoomError.from_rpc_error(error)
        assert loom.code == grpc.StatusCode.INVALID_ARGUMENT
        assert loom.field_violations == (FieldViolation("message.gid", "must not be empty"),)
        assert loom.violations_by_field == {"message.gid": "must not be empty"}
        assert loom.request_id == "req-1"
        assert str(loom) == "INVALID_ARGUMENT: bad"

    def test_plain_errors_have_no_violations(self) -> None:
        """An error without rich details still translates."""
        loom = LoomError.from_rpc_error(rpc_error(grpc.StatusCode.NOT_FOUND, "no such thread"))
        assert loom.field_violations == ()
        assert loom.request_id is None
