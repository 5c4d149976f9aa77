"""Random but well-formed requests for every RPC, built from the descriptors by hypothesis.

Where `test_malformed_requests.py` sends bytes that do not decode, this sends messages that do:
strings empty, huge, unicode or holding NUL; numbers at their type's extremes; enums out of
range; repeated fields from empty to past every documented limit; nested messages and
timestamps anywhere. The methods come from reflection, so a new RPC is fuzzed the day it
is added. Against a real `loom serve` on the embedded engine:

- every answer is OK or a client-error code a caller can act on — never UNKNOWN, never
  INTERNAL, never a Python class name in the details;
- the server stays SERVING throughout;
- writes acknowledged before the fuzzing still read back afterwards.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import grpc
import loom.v1
import pytest
import pytest_asyncio
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loom.v1 import common_pb2, inbox_pb2, inbox_pb2_grpc, threadweaver_pb2, threadweaver_pb2_grpc

from tests.serving import loom_process

CLIENT_ERRORS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
LEAKS = ("<class", "Traceback", "Error parsing", "Exception")
INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}
PAST_LIMITS = (0, 1, 101, 251, 501, 1001, 1100, 10_001)
"""Repeated-field sizes around and past every documented limit (100, 250, 500, 1,000, 10,000)."""


def _strings(small: bool) -> st.SearchStrategy[str]:
    if small:  # an element repeated past a limit: keep the whole request in memory bounds
        return st.text(max_size=8)
    return st.one_of(
        st.just(""),
        st.text(max_size=24),
        st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=16),
        st.sampled_from(["\x00", "a\x00b", "🧵" * 200, "x" * 513, "y" * 70_000, " ", "<a@b.c>"]),
    )


def _scalar(field: FieldDescriptor, small: bool) -> st.SearchStrategy[Any]:
    cpp = field.cpp_type
    if field.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        return _strings(small)
    if cpp in INT_RANGES:
        low, high = INT_RANGES[cpp]
        return st.one_of(st.integers(low, high), st.sampled_from([low, high, 0, -1 if low else 1]))
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return st.booleans()
    if cpp in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        return st.integers(-3, 12)  # proto3 enums are open: out-of-range numbers are valid wire
    raise AssertionError(f"unhandled field type of {field.full_name}")


def message_strategy(
    descriptor: Descriptor, depth: int = 0, *, small: bool = False
) -> st.SearchStrategy[Any]:
    """A strategy of messages of `descriptor`, each field set or left unset.

    `small` messages (elements repeated past a limit) hold short strings and short lists, so
    10,001 copies stay a few megabytes.
    """
    cls = message_factory.GetMessageClass(descriptor)
    if descriptor.full_name == Timestamp.DESCRIPTOR.full_name:
        return st.builds(
            lambda s, n: Timestamp(seconds=s, nanos=n),
            st.integers(-(2**40), 2**40),
            st.integers(-(2**31), 2**31 - 1),
        )
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None:
            if depth >= 3:
                continue
            one: st.SearchStrategy[Any] = message_strategy(
                field.message_type, depth + 1, small=small
            )
            element = message_strategy(field.message_type, depth + 1, small=True)
        else:
            one = _scalar(field, small)
            element = _scalar(field, small=True)
        if field.is_repeated:
            many = st.lists(one, max_size=4)
            if not small:
                past = st.builds(lambda x, n: [x] * n, element, st.sampled_from(PAST_LIMITS))
                many = st.one_of(many, past)
            fields[field.name] = st.one_of(st.none(), many)
        else:
            fields[field.name] = st.one_of(st.none(), one)

    def build(values: dict[str, Any]) -> Any:
        message = cls()
        for name, value in values.items():
            if value is None:
                continue
            field = descriptor.fields_by_name[name]
            target = getattr(message, name)
            if field.is_repeated and field.message_type is None:
                target.extend(value)
            elif field.is_repeated:
                for item in value:
                    target.add().CopyFrom(item)
            elif field.message_type is not None:
                target.CopyFrom(value)
            else:
                setattr(message, name, value)
        return message

    return st.fixed_dictionaries(fields).map(build)


def loom_methods(channel: grpc.Channel) -> list[tuple[str, MethodDescriptor]]:
    """Every method of every Loom service reflection lists."""
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    replies = list(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = [
        s.name for s in replies[0].list_services_response.service if s.name.startswith("loom.")
    ]
    for module in pkgutil.iter_modules(loom.v1.__path__):  # the contract's descriptors
        if module.name.endswith("_pb2"):
            importlib.import_module(f"loom.v1.{module.name}")
    pool = descriptor_pool.Default()
    return [
        (f"/{name}/{m.name}", m) for name in names for m in pool.FindServiceByName(name).methods
    ]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def target(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """`loom serve` on the embedded engine (a real process); it must drain on SIGTERM."""
    async with loom_process(tmp_path_factory.mktemp("fuzz")) as server:
        yield server.target
    assert server.process.returncode == 0, server.stderr()


def serving(channel: grpc.Channel) -> bool:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def test_random_well_formed_requests_get_ordinary_answers(target: str) -> None:
    """Every RPC, fuzzed: client-error answers only, the server SERVING, earlier writes kept."""
    with grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
    ) as channel:
        weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
        inbox = inbox_pb2_grpc.InboxStub(channel)
        woven = threadweaver_pb2.WovenMessage(
            gid="fz-g", thread_id="fz-t", rfc_message_id="<fz@x>", sent_at=Timestamp(seconds=9)
        )
        before = weaver.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=woven))
        inbox.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id="fz", message_id=5, sender_inbox_id="fz-s", recipient_inbox_ids=["fz-r"]
            )
        )
        methods = loom_methods(channel)
        assert len(methods) >= 20
        seen: Counter[str] = Counter()
        bad: list[str] = []

        @st.composite
        def calls(draw: st.DrawFn) -> tuple[str, MethodDescriptor, Any]:
            path, method = draw(st.sampled_from(methods))
            return path, method, draw(message_strategy(method.input_type))

        @settings(
            max_examples=1000,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(calls())
        def one(call: tuple[str, MethodDescriptor, Any]) -> None:
            path, method, request = call
            code, details = _invoke(channel, path, method, request)
            seen[code.name] += 1
            streaming_wait = method.server_streaming and code is grpc.StatusCode.DEADLINE_EXCEEDED
            if (code not in CLIENT_ERRORS and not streaming_wait) or any(
                leak in details for leak in LEAKS
            ):
                bad.append(f"{path}: {code.name} {details[:200]}")

        one()
        print(f"\nfuzzed calls by status: {dict(seen)}")
        assert bad == []
        assert serving(channel)
        again = weaver.ResolveThreads(
            threadweaver_pb2.ResolveThreadsRequest(
                threads=[common_pb2.ThreadRef(gid="fz-g", thread_id="fz-t")]
            )
        )
        assert again.threads[0].unified_thread_id == before.unified_thread_id
        listed = inbox.ListInbox(inbox_pb2.ListInboxRequest(inbox_id="fz-r"))
        assert [(e.thread_id, e.last_message_id) for e in listed.entries] == [("fz", 5)]


def _invoke(
    channel: grpc.Channel, path: str, method: MethodDescriptor, request: Any
) -> tuple[grpc.StatusCode, str]:
    serialize = type(request).SerializeToString
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=serialize)(request, timeout=3)
            started = time.monotonic()
            for _ in stream:
                if time.monotonic() - started > 1:
                    break
            stream.cancel()
        else:
            channel.unary_unary(path, request_serializer=serialize)(request, timeout=20)
    except grpc.RpcError as error:
        code = error.code()
        if code is grpc.StatusCode.CANCELLED:
            return grpc.StatusCode.OK, ""  # our own cancel of a stream that was answering
        return code, str(error.details())
    return grpc.StatusCode.OK, ""
