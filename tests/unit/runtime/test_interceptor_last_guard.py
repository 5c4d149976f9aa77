"""The interceptor's last guard: an exception no layer mapped never reaches a caller as is.

grpc answers anything that escapes a handler (or the interceptor itself) with UNKNOWN and
"Unexpected <class '…'>: <message>" — a Python class name and internals in the caller's
hands, and no log line. The guard turns every such exception into INTERNAL "internal error
(request id …)", logs the call's one line with the traceback, and counts it in
``loom_rpc_unmapped_errors_total``.

No Loom input reaches an unmapped exception any more (that is the point), so the servicer
here is a test double that raises on purpose: a real grpc.aio server on loopback with the
real `RpcInterceptor` and `Metrics` (exposition served over HTTP and parsed as Prometheus
parses it). No engine is involved; the interceptor is pure runtime logic.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, MutableMapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
from google.protobuf import empty_pb2

from server.config import AuthSettings
from server.runtime.auth import Authenticator
from server.runtime.errors import NotFound
from server.runtime.interceptor import RpcInterceptor
from server.runtime.metrics import Metrics
from server.runtime.policies import PolicyTable
from tests.serving import scrape_metrics

SERVICE = "loom.test.Faulty"
SECRET_DETAIL = "ledger row 7f3a went negative"
"""In every planted exception's message: it must reach the log's traceback, never a caller."""
LEAKS = ("<class", "Error", "Exception", "Traceback", "Unexpected", SECRET_DETAIL)

Empty = empty_pb2.Empty


class _Faulty:
    """A servicer double: each method fails the way a future bug might."""

    async def explode(self, request: Empty, context: grpc.aio.ServicerContext) -> Empty:
        raise ZeroDivisionError(SECRET_DETAIL)

    async def explode_mid_stream(
        self, request: Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Empty]:
        yield Empty()
        raise KeyError(SECRET_DETAIL)

    async def missing(self, request: Empty, context: grpc.aio.ServicerContext) -> Empty:
        raise NotFound("no such thing")

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(behavior: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                behavior, Empty.FromString, Empty.SerializeToString
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Explode": unary(self.explode),
                "Missing": unary(self.missing),
                "ExplodeMidStream": grpc.unary_stream_rpc_method_handler(
                    self.explode_mid_stream, Empty.FromString, Empty.SerializeToString
                ),
            },
        )


class _BrokenAuthenticator(Authenticator):
    """The token check failing with an exception it did not translate (as PyJWT's
    InvalidKeyError and the cache's OverflowError once escaped it)."""

    def check(self, metadata: Any, required: str) -> None:
        raise OverflowError(SECRET_DETAIL)


@dataclass
class _Served:
    channel: grpc.aio.Channel
    metrics_port: int

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return scrape_metrics(self.metrics_port)

    async def sample(self, name: str, **labels: str) -> float:
        samples = await asyncio.to_thread(self.scrape)
        return samples.get((name, frozenset(labels.items())), 0.0)


@asynccontextmanager
async def _serving(auth: Authenticator | None = None) -> AsyncIterator[_Served]:
    metrics = Metrics()
    server = grpc.aio.server(interceptors=[RpcInterceptor(PolicyTable({}), auth, metrics)])
    server.add_generic_rpc_handlers((_Faulty().handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    metrics_port = metrics.serve("127.0.0.1", 0)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield _Served(channel, metrics_port)
    finally:
        await server.stop(None)
        metrics.close()


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every log event while the test runs, with the request id bound and tracebacks
    rendered as the JSON renderer would write them."""
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.format_exc_info,
    ]
    with structlog.testing.capture_logs(processors=processors) as entries:
        yield entries


def _request_id() -> tuple[str, Sequence[tuple[str, str]]]:
    rid = f"guard-{uuid.uuid4().hex[:12]}"
    return rid, (("x-request-id", rid),)


async def _unary(channel: grpc.aio.Channel, method: str, rid_metadata: Any) -> grpc.aio.AioRpcError:
    call = channel.unary_unary(
        f"/{SERVICE}/{method}",
        request_serializer=Empty.SerializeToString,
        response_deserializer=Empty.FromString,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(Empty(), metadata=rid_metadata, timeout=10)
    return caught.value


async def _collect(stream: AsyncIterator[Empty], into: list[Empty]) -> None:
    async for item in stream:
        into.append(item)


def _assert_generic_internal(error: grpc.aio.AioRpcError, rid: str) -> None:
    assert error.code() is grpc.StatusCode.INTERNAL
    assert error.details() == f"internal error (request id {rid})"
    assert not [leak for leak in LEAKS if leak in (error.details() or "")]
    assert ("x-request-id", rid) in tuple(error.trailing_metadata() or ())


def _assert_one_error_line(
    logs: list[MutableMapping[str, Any]], rid: str, method: str, exception: str
) -> None:
    lines = [e for e in logs if e.get("event") == "rpc" and e.get("request_id") == rid]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line["log_level"] == "error"
    assert line["status"] == "INTERNAL"
    assert line["method"] == f"{SERVICE}/{method}"
    trace = str(line["exception"])
    assert trace.startswith("Traceback (most recent call last):")
    assert f"{exception}: " in trace
    assert SECRET_DETAIL in trace  # the operator gets everything the caller must not


class TestLastGuard:
    async def test_a_handler_exception_is_internal_logged_and_counted(
        self, logs: list[MutableMapping[str, Any]]
    ) -> None:
        """A unary handler's ZeroDivisionError: generic INTERNAL with the request id, one
        error line with the traceback, one count under the method and the class."""
        async with _serving() as served:
            rid, metadata = _request_id()
            error = await _unary(served.channel, "Explode", metadata)
            _assert_generic_internal(error, rid)
            _assert_one_error_line(logs, rid, "Explode", "ZeroDivisionError")
            method = f"{SERVICE}/Explode"
            unmapped = "loom_rpc_unmapped_errors_total"
            assert await served.sample(unmapped, method=method, exception="ZeroDivisionError") == 1
            requests = "loom_rpc_requests_total"
            assert await served.sample(requests, method=method, code="INTERNAL") == 1

    async def test_a_stream_failing_after_its_first_item(
        self, logs: list[MutableMapping[str, Any]]
    ) -> None:
        """A server stream that raises after answering once: the caller has its item, then
        the same generic INTERNAL; the log line and the count as for a unary call."""
        async with _serving() as served:
            rid, metadata = _request_id()
            call = served.channel.unary_stream(
                f"/{SERVICE}/ExplodeMidStream",
                request_serializer=Empty.SerializeToString,
                response_deserializer=Empty.FromString,
            )
            received: list[Empty] = []
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _collect(call(Empty(), metadata=metadata, timeout=10), received)
            assert received == [Empty()]
            _assert_generic_internal(caught.value, rid)
            _assert_one_error_line(logs, rid, "ExplodeMidStream", "KeyError")
            method = f"{SERVICE}/ExplodeMidStream"
            count = await served.sample(
                "loom_rpc_unmapped_errors_total", method=method, exception="KeyError"
            )
            assert count == 1

    async def test_the_token_check_is_guarded_too(
        self, tmp_path: Path, logs: list[MutableMapping[str, Any]]
    ) -> None:
        """An exception out of the auth check (before the request is parsed) took grpc's
        UNKNOWN path with no log line; it is now the same generic INTERNAL, logged, counted."""
        secret = tmp_path / "secret"
        secret.write_bytes(b"s" * 40)
        auth = _BrokenAuthenticator(AuthSettings(jwt_secret_file=str(secret)))
        async with _serving(auth) as served:
            rid, metadata = _request_id()
            error = await _unary(served.channel, "Explode", metadata)
            _assert_generic_internal(error, rid)
            _assert_one_error_line(logs, rid, "Explode", "OverflowError")
            count = await served.sample(
                "loom_rpc_unmapped_errors_total",
                method=f"{SERVICE}/Explode",
                exception="OverflowError",
            )
            assert count == 1

    async def test_a_mapped_error_is_not_counted_as_unmapped(
        self, logs: list[MutableMapping[str, Any]]
    ) -> None:
        """NotFound keeps its own code and message, logs no traceback and counts nothing."""
        async with _serving() as served:
            rid, metadata = _request_id()
            error = await _unary(served.channel, "Missing", metadata)
            assert error.code() is grpc.StatusCode.NOT_FOUND
            assert error.details() == "no such thing"
            lines = [e for e in logs if e.get("request_id") == rid]
            assert [(e["status"], "exception" in e) for e in lines] == [("NOT_FOUND", False)]
            samples = await asyncio.to_thread(served.scrape)
            assert not [k for k in samples if k[0] == "loom_rpc_unmapped_errors_total"]
