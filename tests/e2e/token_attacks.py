"""An auditor's corpus of JWT attacks, built by hand (never by PyJWT, the library under test).

Each `Attack` names the server it targets — ``hs`` (HS256 shared secret), ``rs`` (RS256
public key) or ``es`` (ES256, P-256 public key) — and builds the ``authorization`` value at
call time, so every time claim is fresh and the one thing wrong with the token is the attack.
Tokens that claim to be signed by the issuer really are (the issuer's own mistakes and the
auditor's overflow cases); forged ones are signed with what the trick claims the key is (an
empty secret for ``kid: /dev/null``, the public key's PEM for algorithm confusion, the
attacker's own key behind a ``jku``/``jwk``), as an attacker would.

Every attack here must be answered UNAUTHENTICATED with one rpc log line.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

Signer = Callable[[bytes], bytes]
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


@dataclass(frozen=True)
class Keys:
    """The servers' keys, the attacker's keys, and the attacker's web server."""

    secret: bytes
    rsa: RSAPrivateKey
    ec: EllipticCurvePrivateKey
    attacker_rsa: RSAPrivateKey
    attacker_ec: EllipticCurvePrivateKey
    attacker_url: str
    """Where the attacker serves its JWKS and certificates (a recorder: must stay unasked)."""

    @staticmethod
    def public_pem(key: RSAPrivateKey | EllipticCurvePrivateKey) -> bytes:
        return key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @staticmethod
    def public_der(key: RSAPrivateKey | EllipticCurvePrivateKey) -> bytes:
        return key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclass(frozen=True)
class Attack:
    """One attack: an id, the server kind it targets, and its ``authorization`` value."""

    id: str
    server: str
    authorization: Callable[[Keys], str]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs(key: bytes) -> Signer:
    return lambda message: hmac.new(key, message, hashlib.sha256).digest()


def rs(key: RSAPrivateKey) -> Signer:
    return lambda message: key.sign(message, padding.PKCS1v15(), hashes.SHA256())


def es(key: EllipticCurvePrivateKey) -> Signer:
    """ES256 as JWS wants it: raw r || s, 32 bytes each (not DER)."""

    def sign(message: bytes) -> bytes:
        r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    return sign


def es_der(key: EllipticCurvePrivateKey) -> Signer:
    """A valid ECDSA signature in DER, which JWS does not use."""
    return lambda message: key.sign(message, ec.ECDSA(hashes.SHA256()))


def claims(**changes: Any) -> dict[str, Any]:
    """Claims the servers accept for Inbox/GetUnreadCount, with `changes` applied."""
    now = int(time.time())
    good: dict[str, Any] = {
        "sub": "auditor",
        "aud": "loom",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "scope": "inbox:read",
    }
    return {**good, **changes}


def raw_claims(name: str, raw: str) -> bytes:
    """The good claims with `name` set to JSON text no Python value dumps as (1e400, NaN,
    a 4,400-digit integer)."""
    rest = json.dumps({k: v for k, v in claims().items() if k != name})
    return f'{rest[:-1]}, "{name}": {raw}}}'.encode()


def jws(
    header: dict[str, Any] | bytes, payload: dict[str, Any] | bytes, sign: Signer | bytes
) -> str:
    """The compact serialization: header.payload.signature, each segment base64url."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    p = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    signing_input = f"{b64(h)}.{b64(p)}".encode()
    signature = sign if isinstance(sign, bytes) else sign(signing_input)
    return f"{signing_input.decode()}.{b64(signature)}"


def bearer(token: Callable[[Keys], str]) -> Callable[[Keys], str]:
    return lambda k: f"Bearer {token(k)}"


def unsigned(alg: str) -> Callable[[Keys], str]:
    """A token with header `alg` (a spelling of none) and no signature."""
    return lambda _k: jws({"alg": alg}, claims(), b"")


def _jwk(key: RSAPrivateKey) -> dict[str, str]:
    numbers = key.public_key().public_numbers()

    def encode(n: int) -> str:
        return b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))

    return {"kty": "RSA", "e": encode(numbers.e), "n": encode(numbers.n), "kid": "attacker"}


def _self_signed(key: RSAPrivateKey) -> str:
    """The attacker's certificate for an ``x5c`` header (standard base64 DER)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "idp.example")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()


NUMERIC_DATES: dict[str, Callable[[], str]] = {
    "10e400-int": lambda: "1" + "0" * 400,
    "1e400-float": lambda: "1e400",
    "minus-1e400": lambda: "-1e400",
    "1e300-float": lambda: "1e300",
    "past-year-9999": lambda: "100000000000000000000",
    "4400-digits": lambda: "9" * 4400,
    "negative": lambda: "-1",
    "nan": lambda: "NaN",
    "infinity": lambda: "Infinity",
    "numeric-string": lambda: json.dumps(str(int(time.time()) + 300)),
    "empty-string": lambda: '""',
    "true": lambda: "true",
    "false": lambda: "false",
    "null": lambda: "null",
    "object": lambda: '{"seconds": 1800000000}',
    "array": lambda: f"[{int(time.time()) + 300}]",
}
"""Values of exp / nbf / iat in a correctly signed token (JSON text, as sent)."""


HS = {"alg": "HS256", "typ": "JWT"}
RS = {"alg": "RS256", "typ": "JWT"}
ES = {"alg": "ES256", "typ": "JWT"}


def _numeric(name: str, label: str, raw: Callable[[], str]) -> Attack:
    return Attack(
        f"{name}-{label}",
        "hs",
        bearer(lambda k: jws(HS, raw_claims(name, raw()), hs(k.secret))),
    )


def _garbage(size: int) -> bytes:
    return os.urandom(size)


ATTACKS: list[Attack] = [
    # --- the authorization value itself
    Attack("scheme-basic", "hs", lambda k: "Basic YXVkaXRvcjpodW50ZXIy"),
    Attack("scheme-token", "hs", lambda k: "Token abc.def.ghi"),
    Attack("bearer-without-token", "hs", lambda k: "Bearer"),
    Attack("bearer-blank", "hs", lambda k: "Bearer    "),
    Attack("bearer-two-tokens", "hs", lambda k: f"Bearer {jws(HS, claims(), hs(k.secret))} x"),
    # --- garbage, labelled with every algorithm
    Attack("not-a-jwt", "hs", lambda k: "Bearer not-a-jwt"),
    Attack("two-segments", "hs", lambda k: "Bearer eyJhbGciOiJIUzI1NiJ9.e30"),
    Attack("jwe-shaped", "hs", lambda k: "Bearer a.b.c.d.e"),
    Attack("only-dots", "hs", lambda k: "Bearer .."),
    Attack("random-segments", "hs", bearer(lambda k: ".".join(b64(_garbage(40)) for _ in "abc"))),
    Attack("hs256-garbage-signature", "hs", bearer(lambda k: jws(HS, claims(), _garbage(32)))),
    Attack("hs256-empty-signature", "hs", bearer(lambda k: jws(HS, claims(), b""))),
    Attack("hs256-wrong-secret", "hs", bearer(lambda k: jws(HS, claims(), hs(b"w" * 48)))),
    Attack("rs256-garbage-on-rs", "rs", bearer(lambda k: jws(RS, claims(), _garbage(256)))),
    Attack("rs256-zero-signature", "rs", bearer(lambda k: jws(RS, claims(), bytes(256)))),
    Attack(
        "rs256-signature-past-modulus", "rs", bearer(lambda k: jws(RS, claims(), b"\xff" * 256))
    ),
    Attack("rs256-short-signature", "rs", bearer(lambda k: jws(RS, claims(), _garbage(255)))),
    Attack("rs256-one-byte-signature", "rs", bearer(lambda k: jws(RS, claims(), b"\x01"))),
    Attack("rs256-attacker-key", "rs", bearer(lambda k: jws(RS, claims(), rs(k.attacker_rsa)))),
    Attack("es256-garbage-on-es", "es", bearer(lambda k: jws(ES, claims(), _garbage(64)))),
    Attack("es256-psychic-zero-signature", "es", bearer(lambda k: jws(ES, claims(), bytes(64)))),
    Attack(
        "es256-r-s-equal-order",
        "es",
        bearer(lambda k: jws(ES, claims(), P256_ORDER.to_bytes(32, "big") * 2)),
    ),
    Attack("es256-63-byte-signature", "es", bearer(lambda k: jws(ES, claims(), _garbage(63)))),
    Attack("es256-96-byte-signature", "es", bearer(lambda k: jws(ES, claims(), _garbage(96)))),
    Attack("es256-empty-signature", "es", bearer(lambda k: jws(ES, claims(), b""))),
    Attack("es256-der-signature", "es", bearer(lambda k: jws(ES, claims(), es_der(k.attacker_ec)))),
    Attack("es256-attacker-key", "es", bearer(lambda k: jws(ES, claims(), es(k.attacker_ec)))),
    Attack("es256-garbage-on-rs", "rs", bearer(lambda k: jws(ES, claims(), _garbage(64)))),
    Attack("es256-garbage-on-hs", "hs", bearer(lambda k: jws(ES, claims(), _garbage(64)))),
    Attack("rs256-garbage-on-es", "es", bearer(lambda k: jws(RS, claims(), _garbage(256)))),
    Attack("hs256-garbage-on-es", "es", bearer(lambda k: jws(HS, claims(), _garbage(32)))),
    Attack(
        "es384-label-on-es", "es", bearer(lambda k: jws({"alg": "ES384"}, claims(), _garbage(96)))
    ),
    Attack(
        "es256k-label-on-es", "es", bearer(lambda k: jws({"alg": "ES256K"}, claims(), _garbage(64)))
    ),
    Attack(
        "ps256-label-on-rs", "rs", bearer(lambda k: jws({"alg": "PS256"}, claims(), _garbage(256)))
    ),
    Attack(
        "eddsa-label-on-es", "es", bearer(lambda k: jws({"alg": "EdDSA"}, claims(), _garbage(64)))
    ),
    # --- alg: none and friends
    *(
        Attack(f"alg-{name}-{server}", server, bearer(unsigned(name)))
        for name in ("none", "None", "NONE", "nOnE")
        for server in ("hs", "rs", "es")
    ),
    Attack(
        "alg-none-keeping-signature",
        "hs",
        bearer(lambda k: jws({"alg": "none"}, claims(), hs(k.secret))),
    ),
    Attack("alg-missing", "hs", bearer(lambda k: jws({"typ": "JWT"}, claims(), hs(k.secret)))),
    Attack("alg-empty", "hs", bearer(lambda k: jws({"alg": ""}, claims(), hs(k.secret)))),
    Attack("alg-null", "hs", bearer(lambda k: jws({"alg": None}, claims(), hs(k.secret)))),
    Attack("alg-list", "hs", bearer(lambda k: jws({"alg": ["HS256"]}, claims(), hs(k.secret)))),
    Attack(
        "alg-object", "hs", bearer(lambda k: jws({"alg": {"HS256": True}}, claims(), hs(k.secret)))
    ),
    Attack(
        "alg-hs512-label", "hs", bearer(lambda k: jws({"alg": "HS512"}, claims(), hs(k.secret)))
    ),
    # --- algorithm confusion: HMAC keyed with the verifier's public key
    Attack(
        "confusion-hs256-rsa-pem",
        "rs",
        bearer(lambda k: jws(HS, claims(), hs(Keys.public_pem(k.rsa)))),
    ),
    Attack(
        "confusion-hs256-rsa-pem-stripped",
        "rs",
        bearer(lambda k: jws(HS, claims(), hs(Keys.public_pem(k.rsa).strip()))),
    ),
    Attack(
        "confusion-hs256-rsa-der",
        "rs",
        bearer(lambda k: jws(HS, claims(), hs(Keys.public_der(k.rsa)))),
    ),
    Attack(
        "confusion-hs256-ec-pem",
        "es",
        bearer(lambda k: jws(HS, claims(), hs(Keys.public_pem(k.ec)))),
    ),
    Attack(
        "confusion-rs256-label-hmac-signature",
        "rs",
        bearer(lambda k: jws(RS, claims(), hs(Keys.public_pem(k.rsa)))),
    ),
    # --- kid / jku / x5u / jwk / x5c: keys the token names or carries
    Attack(
        "kid-dev-null-empty-secret",
        "hs",
        bearer(lambda k: jws({**HS, "kid": "../../../../../../dev/null"}, claims(), hs(b""))),
    ),
    Attack(
        "kid-sql-injection",
        "hs",
        bearer(
            lambda k: jws(
                {**HS, "kid": "x' UNION SELECT 'attacker-key' -- "}, claims(), hs(b"attacker-key")
            )
        ),
    ),
    Attack(
        "kid-non-string-signed",
        "hs",
        bearer(lambda k: jws({**HS, "kid": 42}, claims(), hs(k.secret))),
    ),
    Attack(
        "kid-object-signed",
        "hs",
        bearer(lambda k: jws({**HS, "kid": {"$ne": ""}}, claims(), hs(k.secret))),
    ),
    Attack(
        "jku-attacker-jwks",
        "rs",
        bearer(
            lambda k: jws(
                {**RS, "jku": f"{k.attacker_url}/jwks.json", "kid": "attacker"},
                claims(),
                rs(k.attacker_rsa),
            )
        ),
    ),
    Attack(
        "x5u-attacker-certificate",
        "rs",
        bearer(
            lambda k: jws({**RS, "x5u": f"{k.attacker_url}/cert.pem"}, claims(), rs(k.attacker_rsa))
        ),
    ),
    Attack(
        "jwk-embedded-attacker-key",
        "rs",
        bearer(lambda k: jws({**RS, "jwk": _jwk(k.attacker_rsa)}, claims(), rs(k.attacker_rsa))),
    ),
    Attack(
        "x5c-embedded-attacker-certificate",
        "rs",
        bearer(
            lambda k: jws(
                {**RS, "x5c": [_self_signed(k.attacker_rsa)]}, claims(), rs(k.attacker_rsa)
            )
        ),
    ),
    # --- crit: extensions the verifier must understand or refuse (RFC 7515 4.1.11); signed
    Attack(
        "crit-unknown-extension",
        "hs",
        bearer(
            lambda k: jws({**HS, "crit": ["urn:x:ext"], "urn:x:ext": 1}, claims(), hs(k.secret))
        ),
    ),
    Attack(
        "crit-registered-claim",
        "hs",
        bearer(lambda k: jws({**HS, "crit": ["exp"]}, claims(), hs(k.secret))),
    ),
    Attack(
        "crit-missing-parameter",
        "hs",
        bearer(lambda k: jws({**HS, "crit": ["urn:x:gone"]}, claims(), hs(k.secret))),
    ),
    Attack(
        "crit-empty-list", "hs", bearer(lambda k: jws({**HS, "crit": []}, claims(), hs(k.secret)))
    ),
    Attack(
        "crit-not-a-list",
        "hs",
        bearer(lambda k: jws({**HS, "crit": "b64"}, claims(), hs(k.secret))),
    ),
    Attack(
        "crit-non-string", "hs", bearer(lambda k: jws({**HS, "crit": [7]}, claims(), hs(k.secret)))
    ),
    Attack(
        "crit-b64-false-unencoded-payload",
        "hs",
        bearer(lambda k: jws({**HS, "crit": ["b64"], "b64": False}, claims(), hs(k.secret))),
    ),
    Attack(
        "b64-false-without-crit",
        "hs",
        bearer(lambda k: jws({**HS, "b64": False}, claims(), hs(k.secret))),
    ),
    # --- segments that are not base64url, not UTF-8, not JSON, not objects
    Attack("segments-not-base64", "hs", lambda k: "Bearer !!!!.$$$$.%%%%"),
    Attack("segments-standard-alphabet", "hs", lambda k: "Bearer eyJhbGciOiJIUzI1NiJ9.+/+/.+/+/"),
    Attack("segment-length-mod-4-is-1", "hs", lambda k: "Bearer eyJhbGciOiJIUzI1NiJ9.e.AAAA"),
    Attack("segment-padding-inside", "hs", lambda k: "Bearer eyJhbGci=OiJIUzI1NiJ9.e30=.AA=A"),
    Attack(
        "header-not-utf8",
        "hs",
        bearer(lambda k: jws(b'\xff\xfe{"alg":"HS256"}', claims(), hs(k.secret))),
    ),
    Attack(
        "payload-not-utf8-signed",
        "hs",
        bearer(lambda k: jws(HS, b'{"aud":"\xc3\x28"}', hs(k.secret))),
    ),
    Attack(
        "header-not-json", "hs", bearer(lambda k: jws(b'{"alg":"HS256"', claims(), hs(k.secret)))
    ),
    Attack("header-a-list", "hs", bearer(lambda k: jws(b'["HS256"]', claims(), hs(k.secret)))),
    Attack("payload-not-json-signed", "hs", bearer(lambda k: jws(HS, b"{", hs(k.secret)))),
    Attack("payload-a-list-signed", "hs", bearer(lambda k: jws(HS, b"[1, 2]", hs(k.secret)))),
    Attack("payload-null-signed", "hs", bearer(lambda k: jws(HS, b"null", hs(k.secret)))),
    Attack("payload-empty-signed", "hs", bearer(lambda k: jws(HS, b"", hs(k.secret)))),
    Attack(
        "header-nested-2000-deep",
        "hs",
        bearer(lambda k: jws(b"[" * 2000 + b"]" * 2000, claims(), b"x")),
    ),
    Attack(
        "payload-nested-2000-deep-signed",
        "hs",
        bearer(lambda k: jws(HS, raw_claims("aud", "[" * 2000 + "]" * 2000), hs(k.secret))),
    ),
    # --- oversized, but within what the transport accepts (< 8 KiB of metadata)
    Attack(
        "oversized-forged-header-and-payload",
        "hs",
        bearer(lambda k: jws({**HS, "pad": "A" * 2500}, claims(pad="B" * 2500), _garbage(32))),
    ),
    Attack(
        "oversized-forged-rs256",
        "rs",
        bearer(lambda k: jws({**RS, "pad": "A" * 2500}, claims(pad="B" * 2500), _garbage(256))),
    ),
    # --- the other claims PyJWT reads (aud), signed
    Attack("aud-number-signed", "hs", bearer(lambda k: jws(HS, claims(aud=123), hs(k.secret)))),
    Attack(
        "aud-list-with-number-signed",
        "hs",
        bearer(lambda k: jws(HS, claims(aud=["loom", 1]), hs(k.secret))),
    ),
    Attack(
        "aud-object-signed",
        "hs",
        bearer(lambda k: jws(HS, claims(aud={"loom": True}), hs(k.secret))),
    ),
    Attack("aud-empty-signed", "hs", bearer(lambda k: jws(HS, claims(aud=""), hs(k.secret)))),
    Attack("sub-number-signed", "hs", bearer(lambda k: jws(HS, claims(sub=7), hs(k.secret)))),
    # --- exp / nbf / iat: the auditor's overflow and every other non-date, correctly signed
    *(
        _numeric(name, label, raw)
        for name in ("exp", "nbf", "iat")
        for label, raw in NUMERIC_DATES.items()
    ),
    Attack(
        "exp-10e400-int-rs256",
        "rs",
        bearer(lambda k: jws(RS, raw_claims("exp", "1" + "0" * 400), rs(k.rsa))),
    ),
    Attack(
        "exp-10e400-int-es256",
        "es",
        bearer(lambda k: jws(ES, raw_claims("exp", "1" + "0" * 400), es(k.ec))),
    ),
]
