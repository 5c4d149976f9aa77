"""Hostile bytes: every method the server offers answers a clear status, never UNKNOWN.

The methods are discovered, not listed: reflection names every service the server offers and
the descriptor pool gives each one's methods and request type, so a new RPC is covered the
day it is added. Each gets a fixed corpus of payloads that are not a valid message (corrupt
wire format, a length prefix past the end, invalid UTF-8 in a string field) and seeded
random bytes. What a caller must see: INVALID_ARGUMENT "request is not a valid <type>" for
bytes that cannot decode, some ordinary status for random bytes that happen to decode, never
UNKNOWN or INTERNAL, no Python class names in the details, and a server still SERVING.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from tests.engines import settings_for
from tests.serving import Running, running_server

MAX_MESSAGE_BYTES = 256 * 1024
FORBIDDEN = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
LEAKS = ("<class", "Error parsing", "Traceback", "DecodeError")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _bad_utf8(message: Descriptor, depth: int = 0) -> bytes | None:
    """Bytes of `message` whose first reachable string field holds invalid UTF-8."""
    for field in message.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            return _len_field(field.number, b"ok\xc3\x28")
    if depth < 4:
        for field in message.fields:
            if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
                inner = _bad_utf8(field.message_type, depth + 1)
                if inner is not None:
                    return _len_field(field.number, inner)
    return None


def undecodable(method: MethodDescriptor) -> dict[str, bytes]:
    """Payloads no parser may accept as `method`'s request type."""
    corpus = {
        "truncated varint": b"\x08\x80\x80",
        "length past the end": b"\x0a\x7fabc",
        "unterminated group": b"\x0b",
    }
    bad = _bad_utf8(method.input_type)
    if bad is not None:
        corpus["invalid UTF-8 in a string field"] = bad
    parse = message_factory.GetMessageClass(method.input_type).FromString
    for label, payload in corpus.items():  # the corpus itself is checked, not assumed
        try:
            parse(payload)
        except DecodeError:
            continue
        pytest.fail(f"{label} decodes as {method.input_type.full_name}")
    return corpus


def random_payloads(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(1, 96)) for _ in range(6)]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """Every service on the embedded engine, with a small message limit to test it cheaply."""
    base = settings_for("sqlite", Path(tmp_path_factory.mktemp("malformed")))
    settings = replace(base, server=replace(base.server, max_message_bytes=MAX_MESSAGE_BYTES))
    async with running_server(settings) as running:
        yield running


async def offered_methods(channel: grpc.aio.Channel) -> list[tuple[str, MethodDescriptor]]:
    """(full path, descriptor) of every method of every service reflection lists."""
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    names: list[str] = []
    async for reply in call(iter([reflection_pb2.ServerReflectionRequest(list_services="")])):
        names = [s.name for s in reply.list_services_response.service]
    pool = descriptor_pool.Default()
    methods = []
    for name in names:
        # v1 reflection is v1alpha's messages under another name (server/runtime/reflection.py)
        described = name.replace("grpc.reflection.v1.", "grpc.reflection.v1alpha.")
        for method in pool.FindServiceByName(described).methods:
            methods.append((f"/{name}/{method.name}", method))
    return methods


async def call_raw(
    channel: grpc.aio.Channel, path: str, method: MethodDescriptor, payload: bytes
) -> grpc.aio.AioRpcError | None:
    """Sends `payload` as the request bytes; the error it gets, or None when it succeeds."""
    try:
        if method.client_streaming:
            async for _ in channel.stream_stream(path)(iter([payload]), timeout=10):
                pass
        elif method.server_streaming:
            call = channel.unary_stream(path)(payload, timeout=10)
            async for _ in call:
                break  # a stream that started fine is an answer; do not wait for its end
            call.cancel()
        else:
            await channel.unary_unary(path)(payload, timeout=10)
    except grpc.aio.AioRpcError as error:
        return error
    return None


async def test_reflection_v1_lists_every_service(server: Running) -> None:
    """Tools that ask grpc.reflection.v1 (ghz, grpcui) see every Loom service."""
    paths = {path.split("/")[1] for path, _ in await offered_methods(server.channel)}
    assert {
        "loom.v1.ThreadWeaver",
        "loom.v1.Iterator",
        "loom.v1.TemplateInduction",
        "loom.v1.Inbox",
        "loom.v1.Summary",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= paths


async def test_undecodable_bytes_are_invalid_argument_everywhere(server: Running) -> None:
    """Bytes that cannot decode: INVALID_ARGUMENT naming the type, on every method."""
    methods = await offered_methods(server.channel)
    seen: Counter[str] = Counter()
    wrong: list[str] = []
    for path, method in methods:
        for label, payload in undecodable(method).items():
            error = await call_raw(server.channel, path, method, payload)
            code = error.code() if error else grpc.StatusCode.OK
            seen[code.name] += 1
            expected = f"request is not a valid {method.input_type.full_name}"
            if code is not grpc.StatusCode.INVALID_ARGUMENT or not (
                error and (error.details() or "").startswith(expected)
            ):
                wrong.append(f"{path} ({label}): {code.name} {error.details() if error else ''}")
    print(
        f"\nundecodable payloads: {sum(seen.values())} calls over {len(methods)} methods: {dict(seen)}"
    )
    assert wrong == []
    assert len(methods) >= 25


async def test_random_bytes_never_get_unknown_or_internal(server: Running) -> None:
    """Seeded random bytes (some decode by chance): any ordinary status, never a crash."""
    methods = await offered_methods(server.channel)
    seen: Counter[str] = Counter()
    bad: list[str] = []
    for i, (path, method) in enumerate(methods):
        for payload in random_payloads(seed=i):
            error = await call_raw(server.channel, path, method, payload)
            code = error.code() if error else grpc.StatusCode.OK
            seen[code.name] += 1
            details = (error.details() or "") if error else ""
            if code in FORBIDDEN or any(leak in details for leak in LEAKS):
                bad.append(f"{path} {payload!r}: {code.name} {details}")
    print(f"\nrandom payloads: {sum(seen.values())} calls: {dict(seen)}")
    assert bad == []
    health = health_pb2_grpc.HealthStub(server.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_request_over_the_size_limit_is_resource_exhausted(server: Running) -> None:
    """More bytes than max_message_bytes: RESOURCE_EXHAUSTED, for unary and streaming calls."""
    methods = [m for m in await offered_methods(server.channel) if m[0].startswith("/loom.")]
    payload = _len_field(1, b"x" * MAX_MESSAGE_BYTES)
    codes = {
        path: await call_raw(server.channel, path, method, payload) for path, method in methods
    }
    assert {p: e.code() if e else None for p, e in codes.items()} == {
        p: grpc.StatusCode.RESOURCE_EXHAUSTED for p in codes
    }
