"""How the harness reaches a server: plaintext, TLS or mutual TLS, with or without a token.

A server the harness starts itself is plaintext on loopback. ``--target`` may name an
operator's own deployment, which serves TLS (mutual when it wants client certificates) and
checks bearer JWTs; ``--tls-ca``, ``--tls-cert``/``--tls-key`` and ``--token`` (the same
names as ``python -m loom_client``) let the load measure that deployment as it runs, handshake
and token check included. :class:`ChannelSecurity` holds what those flags read, and every
channel a workload opens comes from :meth:`ChannelSecurity.channel`.

The token travels as ``authorization`` metadata added by :class:`BearerChannel`, a thin
wrapper over the real channel, rather than as gRPC call credentials or an interceptor: call
credentials are refused on a plaintext channel (a token over loopback plaintext is a real
development set-up) and run a Python plugin per call; a grpc.aio interceptor wraps every call
in a task of its own. The wrapper adds one tuple to each call's metadata and nothing else,
so what the harness measures stays the server's time, not its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc

__all__ = [
    "PLAINTEXT",
    "TOKEN_ENV",
    "BearerChannel",
    "ChannelSecurity",
    "SecurityError",
    "usage_problem",
]

TOKEN_ENV = "LOOM_TOKEN"
"""The environment variable ``--token`` defaults to (what ``python -m loom_client`` reads)."""

ChannelOptions = Sequence[tuple[str, Any]]


class SecurityError(ValueError):
    """A TLS or token flag that cannot be used: an unreadable file, an empty token."""


def usage_problem(tls_ca: str | None, tls_cert: str | None, tls_key: str | None) -> str | None:
    """What is wrong with this combination of TLS flags, or None when it can be used."""
    if bool(tls_cert) != bool(tls_key):
        return "--tls-cert and --tls-key go together (mutual TLS needs both)"
    if tls_cert and not tls_ca:
        return "--tls-cert/--tls-key need --tls-ca (TLS is on when --tls-ca is given)"
    return None


def _read(flag: str, path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SecurityError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    if not data.strip():
        raise SecurityError(f"{flag} {path}: the file is empty")
    return data


@dataclass(frozen=True, slots=True)
class ChannelSecurity:
    """TLS material and bearer token for the channels to ``--target`` (all off by default).

    Plain bytes and a string, so the value pickles: workloads that load from several client
    processes hand it to each of them.
    """

    root_certificates: bytes | None = None
    """``--tls-ca``: PEM CA bundle the server's certificate must chain to; TLS is on when set."""
    certificate_chain: bytes | None = None
    """``--tls-cert``: PEM client certificate, for a server that asks for one (mutual TLS)."""
    private_key: bytes | None = None
    """``--tls-key``: the client certificate's PEM private key."""
    token: str | None = None
    """``--token``: sent as ``authorization: Bearer <token>`` with every call."""

    @classmethod
    def load(
        cls,
        *,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        token: str | None = None,
    ) -> ChannelSecurity:
        """Reads the files the flags name; ``token`` is the value itself or ``@FILE``.

        Raises :class:`SecurityError` for an unreadable or empty file or token, and for the
        flag combinations :func:`usage_problem` refuses.
        """
        problem = usage_problem(tls_ca, tls_cert, tls_key)
        if problem is not None:
            raise SecurityError(problem)
        bearer = token
        if token is not None and token.startswith("@"):
            bearer = _read("--token", token[1:]).decode("utf-8", errors="replace")
        if bearer is not None:
            bearer = bearer.strip()
            if not bearer or any(c.isspace() for c in bearer):
                raise SecurityError("--token: a bearer token is one non-empty word")
        return cls(
            root_certificates=_read("--tls-ca", tls_ca) if tls_ca else None,
            certificate_chain=_read("--tls-cert", tls_cert) if tls_cert else None,
            private_key=_read("--tls-key", tls_key) if tls_key else None,
            token=bearer,
        )

    @property
    def tls(self) -> str:
        """``off``, ``server`` (TLS) or ``mutual`` (TLS with a client certificate)."""
        if self.root_certificates is None:
            return "off"
        return "mutual" if self.certificate_chain is not None else "server"

    def describe(self) -> dict[str, object]:
        """For the report: how the run connected, never the token or a key."""
        return {"tls": self.tls, "bearer_token": self.token is not None}

    def channel(self, target: str, options: ChannelOptions = ()) -> grpc.aio.Channel:
        """A new grpc.aio channel to ``target``: TLS when a CA was given, the token on every
        call when one was."""
        if self.root_certificates is None:
            inner = grpc.aio.insecure_channel(target, options=list(options))
        else:
            credentials = grpc.ssl_channel_credentials(
                self.root_certificates, self.private_key, self.certificate_chain
            )
            inner = grpc.aio.secure_channel(target, credentials, options=list(options))
        return inner if self.token is None else BearerChannel(inner, self.token)


PLAINTEXT = ChannelSecurity()
"""No TLS, no token: what a server the harness starts itself serves."""


class _WithMetadata:
    """A multi-callable whose calls carry ``extra`` before the caller's own metadata."""

    __slots__ = ("_extra", "_inner")

    def __init__(self, inner: Any, extra: tuple[tuple[str, str], ...]) -> None:
        self._inner = inner
        self._extra = extra

    def __call__(self, request: Any, *, metadata: Any = None, **kwargs: Any) -> Any:
        sent = self._extra if metadata is None else (*self._extra, *tuple(metadata))
        return self._inner(request, metadata=sent, **kwargs)


class BearerChannel(grpc.aio.Channel):  # type: ignore[misc]  # grpc is untyped (Any)
    """A grpc.aio channel whose every call carries ``authorization: Bearer <token>``."""

    __slots__ = ("_extra", "_inner")

    def __init__(self, inner: grpc.aio.Channel, token: str) -> None:
        self._inner = inner
        self._extra = (("authorization", f"Bearer {token}"),)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self._inner.close(None)

    async def close(self, grace: float | None = None) -> None:
        await self._inner.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._inner.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._inner.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._inner.channel_ready()

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _WithMetadata(self._inner.unary_unary(method, *args, **kwargs), self._extra)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _WithMetadata(self._inner.unary_stream(method, *args, **kwargs), self._extra)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _WithMetadata(self._inner.stream_unary(method, *args, **kwargs), self._extra)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _WithMetadata(self._inner.stream_stream(method, *args, **kwargs), self._extra)
