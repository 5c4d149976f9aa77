"""Bearer tokens under attack, and keys Loom cannot verify with, against a real `loom serve`.

Three `loom serve` processes, one per kind of key (HS256 secret, RS256 RSA-2048, ES256
P-256), take the corpus of `tests/e2e/token_attacks.py`: forged, garbage and malformed
tokens, ``alg: none``, algorithm confusion, ``kid``/``jku``/``x5u``/``jwk``/``x5c`` tricks,
critical headers, and correctly signed tokens whose ``exp``/``nbf``/``iat`` are no dates
(10**400, 1e400, strings, booleans, objects…). Every one must be answered
UNAUTHENTICATED, with nothing from Python in the details, and write exactly one rpc log
line — once, two of them answered UNKNOWN "Unexpected <class '…'>" and logged nothing.

A public key of a kind Loom does not verify with (EC curves other than P-256, EdDSA, DSA,
key agreement keys, RSA under 2048 bits) must stop start-up, naming the setting: PyJWT
accepts a P-384 key at load time and then fails every ES256 call.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa, x25519
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from tests.e2e.token_attacks import ATTACKS, RS, Attack, Keys, bearer, claims, es, hs, jws, rs
from tests.serving import Served, eventually, loom_process, run_loom

LEAKS = ("<class", "Error", "Exception", "Traceback", "Unexpected", "jwt", "Overflow")


class _Recorder(BaseHTTPRequestHandler):
    """The attacker's web server: records every request (a verifier must never ask)."""

    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: this is a test fixture, not a server anyone reads."""


@dataclass
class _AttackerSite:
    url: str
    hits: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def attacker_site() -> Iterator[_AttackerSite]:
    hits: list[str] = []
    handler = type("Recorder", (_Recorder,), {"hits": hits})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield _AttackerSite(f"http://127.0.0.1:{httpd.server_address[1]}", hits)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def keys(attacker_site: _AttackerSite) -> Keys:
    return Keys(
        secret=b"k" * 48,
        rsa=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec=ec.generate_private_key(ec.SECP256R1()),
        attacker_rsa=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        attacker_ec=ec.generate_private_key(ec.SECP256R1()),
        attacker_url=attacker_site.url,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def servers(
    keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, Served]]:
    """``hs``, ``rs`` and ``es``: one `loom serve` per kind of key, on the embedded engine."""
    tmp = tmp_path_factory.mktemp("token-attacks")
    (tmp / "jwt.secret").write_bytes(keys.secret)
    (tmp / "rsa.pub").write_bytes(Keys.public_pem(keys.rsa))
    (tmp / "ec.pub").write_bytes(Keys.public_pem(keys.ec))
    settings = {
        "hs": ("LOOM_AUTH__JWT_SECRET_FILE", "jwt.secret"),
        "rs": ("LOOM_AUTH__JWT_PUBLIC_KEY_FILE", "rsa.pub"),
        "es": ("LOOM_AUTH__JWT_PUBLIC_KEY_FILE", "ec.pub"),
    }
    async with AsyncExitStack() as stack:
        started: dict[str, Served] = {}
        for kind, (variable, file) in settings.items():
            env = {variable: str(tmp / file)}
            started[kind] = await stack.enter_async_context(loom_process(tmp, env=env))
        yield started


async def _call(served: Served, authorization: str, request_id: str) -> grpc.aio.AioRpcError | None:
    """Inbox/GetUnreadCount with `authorization`; the error, or None when it passed."""
    metadata = (("authorization", authorization), ("x-request-id", request_id))
    async with grpc.aio.insecure_channel(served.target) as channel:
        try:
            await inbox_pb2_grpc.InboxStub(channel).GetUnreadCount(
                inbox_pb2.GetUnreadCountRequest(inbox_id="auditor"), metadata=metadata, timeout=10
            )
        except grpc.aio.AioRpcError as error:
            return error
    return None


async def _rpc_lines(served: Served, request_id: str) -> list[dict[str, object]]:
    """The call's rpc log lines, once at least one is written (each is one write())."""

    async def lines() -> list[dict[str, object]]:
        return [
            line
            for line in served.log_lines()
            if line.get("event") == "rpc" and line.get("request_id") == request_id
        ]

    return await eventually(lines, bool, timeout_s=10.0)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
async def test_every_attack_is_unauthenticated_with_one_log_line(
    attack: Attack, keys: Keys, servers: dict[str, Served]
) -> None:
    """UNAUTHENTICATED with a plain reason, and exactly one rpc log line for the call."""
    served = servers[attack.server]
    request_id = f"attack-{uuid.uuid4().hex[:12]}"
    error = await _call(served, attack.authorization(keys), request_id)
    assert error is not None, "the attack was accepted"
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED, (error.code(), error.details())
    details = error.details() or ""
    assert not [leak for leak in LEAKS if leak in details], details
    lines = await _rpc_lines(served, request_id)
    assert [(line["status"], line["method"]) for line in lines] == [
        ("UNAUTHENTICATED", "loom.v1.Inbox/GetUnreadCount")
    ]


@pytest.mark.parametrize(
    ("kind", "sign"),
    [("hs", lambda k: hs(k.secret)), ("rs", lambda k: rs(k.rsa)), ("es", lambda k: es(k.ec))],
    ids=["hs256", "rs256", "es256"],
)
async def test_the_genuine_token_passes(
    kind: str, sign: Callable[[Keys], Any], keys: Keys, servers: dict[str, Served]
) -> None:
    """The control: the corpus's own good token is accepted, so each attack differs from an
    accepted token only by its attack."""
    header = {"alg": {"hs": "HS256", "rs": "RS256", "es": "ES256"}[kind], "typ": "JWT"}
    authorization = bearer(lambda k: jws(header, claims(), sign(k)))(keys)
    assert await _call(servers[kind], authorization, f"genuine-{uuid.uuid4().hex}") is None


async def test_urls_in_a_token_are_never_fetched(
    keys: Keys, servers: dict[str, Served], attacker_site: _AttackerSite
) -> None:
    """``jku`` and ``x5u`` point at the attacker's server; Loom never asks it for a key."""
    for header in ({"jku": f"{keys.attacker_url}/jwks.json"}, {"x5u": f"{keys.attacker_url}/c"}):
        token = jws({**RS, **header}, claims(), rs(keys.attacker_rsa))
        error = await _call(servers["rs"], f"Bearer {token}", f"url-{uuid.uuid4().hex}")
        assert error is not None
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert attacker_site.hits == []


async def test_metadata_past_the_transport_limit_never_reaches_loom(
    keys: Keys, servers: dict[str, Served]
) -> None:
    """A 20 KiB token is past the server's metadata limit (16 KiB): the transport refuses it
    RESOURCE_EXHAUSTED before any Loom code runs (so no Loom log line), and the server goes
    on serving genuine tokens. Below the limit a forged token reaches Loom and is
    UNAUTHENTICATED, every time (grpc's soft limit, which refused 8-16 KiB at random, is
    raised to the same 16 KiB)."""
    for size in (6_500, 8_000, 10_000):  # tokens of ~8.8, 10.8 and 13.5 KB
        big = jws({"alg": "HS256"}, claims(pad="A" * size), hs(b"w" * 48))
        for attempt in range(20):
            refused = await _call(servers["hs"], f"Bearer {big}", f"big-{size}-{attempt}")
            assert refused is not None
            assert refused.code() is grpc.StatusCode.UNAUTHENTICATED
    served = servers["hs"]
    request_id = f"huge-{uuid.uuid4().hex}"
    token = jws({"alg": "HS256"}, claims(pad="A" * 20_000), hs(b"w" * 48))
    error = await _call(served, f"Bearer {token}", request_id)
    assert error is not None
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (
        await _call(served, f"Bearer {jws({'alg': 'HS256'}, claims(), hs(keys.secret))}", "ok")
        is None
    )
    assert not [line for line in served.log_lines() if line.get("request_id") == request_id]


def _pem(public_key: Any) -> bytes:
    return bytes(
        public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


UNSUPPORTED_KEYS: dict[str, tuple[Callable[[], Any], str]] = {
    "ec-p384": (lambda: ec.generate_private_key(ec.SECP384R1()), "secp384r1 (P-384)"),
    "ec-p521": (lambda: ec.generate_private_key(ec.SECP521R1()), "secp521r1 (P-521)"),
    "ec-secp256k1": (lambda: ec.generate_private_key(ec.SECP256K1()), "secp256k1"),
    "ed25519": (ed25519.Ed25519PrivateKey.generate, "an Ed25519 key"),
    "ed448": (ed448.Ed448PrivateKey.generate, "an Ed448 key"),
    "dsa": (lambda: dsa.generate_private_key(key_size=2048), "a DSA key"),
    "x25519": (x25519.X25519PrivateKey.generate, "an X25519 key"),
    "rsa-1024": (
        lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024),
        "a 1024-bit RSA key is too short",
    ),
}
"""Keys PyJWT would load but Loom refuses: (a private key to take the public half of, what
the refusal names)."""


@pytest.mark.parametrize("kind", list(UNSUPPORTED_KEYS))
async def test_an_unsupported_public_key_stops_start_up(kind: str, tmp_path: Path) -> None:
    """Exit 2, the setting and the key named, before anything serves."""
    generate, named = UNSUPPORTED_KEYS[kind]
    key_file = tmp_path / f"{kind}.pub"
    key_file.write_bytes(_pem(generate().public_key()))
    env = {"LOOM_AUTH__JWT_PUBLIC_KEY_FILE": str(key_file)}
    done = await asyncio.to_thread(
        run_loom, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), env=env
    )
    assert done.returncode == 2, done.stderr
    assert "loom: cannot start: auth.jwt_public_key_file: " in done.stderr
    assert named in done.stderr
    assert "is not supported" in done.stderr or "too short" in done.stderr
    assert '"event": "serving"' not in done.stderr
