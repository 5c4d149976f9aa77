"""Bearer-token authentication and per-method scopes, checked once per call.

A caller sends ``authorization: Bearer <JWT>`` metadata. The token must verify against the
configured key (HS256 shared secret, or an RS256/ES256 public key), carry the configured
``aud`` (and ``iss`` when set), be inside ``nbf``..``exp`` with a small leeway, and grant
the method's scope: otherwise UNAUTHENTICATED (no or bad token) or PERMISSION_DENIED (a good
token without the scope). Health and reflection stay open by default (probes and tools).

Scopes name a service and an access level, ``<service>:<access>`` with access ``read``,
``write`` or ``admin``. A method's scope is declared beside its handler (``MethodPolicy.scope``)
or, by default, derived from its name: reads (``Get…``, ``List…``, ``Stream…``,
``Resolve…``, ``Annotate…``) need ``read``, job control (``Start…``, ``Cancel…``,
``Pause…``, ``Resume…``, ``Update…``) needs ``admin``, anything else ``write``. A grant
implies the levels below it (admin ⊇ write ⊇ read) for the same service; ``<service>:*``
grants all three. Verified tokens are cached until they expire, so a busy caller pays for
one signature check, not one per call.

Every problem with a token is UNAUTHENTICATED, never anything else: PyJWT's token errors are
translated here, once, and so are the claims PyJWT lets through but Loom cannot use (see
`_expiry`). A key Loom cannot verify with is refused at start-up (`_algorithm`), because
PyJWT would accept it here and then fail every call with `InvalidKeyError`, a server fault
no caller can fix. That error is therefore left untranslated: it cannot happen with a key
that passed start-up, and if a future PyJWT raised it anyway, the interceptor's last guard
answers INTERNAL and logs the traceback for the operator.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa, x448, x25519

from server.config import AuthSettings, ConfigError
from server.runtime.errors import PermissionDenied, Unauthenticated

__all__ = ["Authenticator", "method_scope", "mint_token"]

_LEVELS = ("read", "write", "admin")
_READ_VERBS = ("Get", "List", "Stream", "Resolve", "Annotate")
_ADMIN_VERBS = ("Start", "Cancel", "Pause", "Resume", "Update")
_CACHE_SIZE = 4096
_MIN_RSA_BITS = 2048
"""NIST SP 800-131A has disallowed shorter RSA signature keys since 2013; PyJWT warns on every
verification below it."""
_LAST_DATE = 253_402_300_799
"""9999-12-31T23:59:59Z, the last second a NumericDate claim may name (see `_expiry`)."""
_DATE_CLAIMS = ("exp", "nbf", "iat")
_KEY_KINDS: tuple[tuple[type[Any], str], ...] = (
    (ed25519.Ed25519PublicKey, "an Ed25519 key"),
    (ed448.Ed448PublicKey, "an Ed448 key"),
    (dsa.DSAPublicKey, "a DSA key"),
    (x25519.X25519PublicKey, "an X25519 key (key agreement, not signatures)"),
    (x448.X448PublicKey, "an X448 key (key agreement, not signatures)"),
)
_NIST_CURVES = {
    "secp192r1": "P-192",
    "secp224r1": "P-224",
    "secp384r1": "P-384",
    "secp521r1": "P-521",
}


def method_scope(method: str, declared: str = "", prefix: str = "") -> str:
    """The scope `method` (``loom.v1.Service/Method``) requires: `declared` if set, else
    ``<prefix>:<level>``, the level from the method's verb. The prefix is the service's short
    name (`server.registry`); without one, the proto service's name in lower case."""
    if declared:
        return declared
    service, _, name = method.partition("/")
    prefix = prefix or service.rsplit(".", 1)[-1].lower()
    if name.startswith(_READ_VERBS):
        return f"{prefix}:read"
    if name.startswith(_ADMIN_VERBS):
        return f"{prefix}:admin"
    return f"{prefix}:write"


def _granted(required: str, scopes: frozenset[str]) -> bool:
    service, _, level = required.partition(":")
    if required in scopes or f"{service}:*" in scopes:
        return True
    if level not in _LEVELS:
        return False
    return any(f"{service}:{higher}" in scopes for higher in _LEVELS[_LEVELS.index(level) :])


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """RFC 8693 ``scope`` (space-separated string) or a ``scp`` list, whichever is present."""
    raw = claims.get("scope", claims.get("scp", ""))
    if isinstance(raw, str):
        return frozenset(raw.split())
    if isinstance(raw, list):
        return frozenset(str(s) for s in raw)
    return frozenset()


def _read_key(path: str, setting: str) -> bytes:
    try:
        data = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"auth.{setting}: cannot read {path!r}: {exc.strerror}") from exc
    if not data:
        raise ConfigError(f"auth.{setting}: {path!r} is empty")
    return data


@dataclass(frozen=True, slots=True)
class _Verified:
    scopes: frozenset[str]
    expires_at: float


class Authenticator:
    """Verifies bearer tokens for every call to a protected method."""

    __slots__ = ("_algorithms", "_cache", "_key", "_open", "_settings")

    def __init__(self, settings: AuthSettings) -> None:
        """Loads the key; a missing, empty or unusable key file is a start-up error."""
        self._settings = settings
        self._open = frozenset(settings.open_services)
        self._cache: OrderedDict[str, _Verified] = OrderedDict()
        if settings.jwt_public_key_file:
            self._key, self._algorithms = _public_key(
                _read_key(settings.jwt_public_key_file, "jwt_public_key_file")
            )
        else:
            self._key = _read_key(settings.jwt_secret_file, "jwt_secret_file")
            self._algorithms = ["HS256"]
            if len(self._key) < 32:
                raise ConfigError("auth.jwt_secret_file: an HS256 secret needs >= 32 bytes")

    def is_open(self, service: str) -> bool:
        """Whether `service` may be called without a token."""
        return service in self._open

    def check(self, metadata: Iterable[tuple[str, Any]], required: str) -> None:
        """Raises Unauthenticated / PermissionDenied unless the call may use `required`."""
        token = ""
        for key, value in metadata:
            if key == "authorization" and isinstance(value, str):
                scheme, _, token = value.partition(" ")
                if scheme.lower() != "bearer":
                    raise Unauthenticated("authorization must be 'Bearer <token>'")
                token = token.strip()
                break
        if not token:
            raise Unauthenticated("missing bearer token (authorization metadata)")
        verified = self._verify(token)
        if not _granted(required, verified.scopes):
            raise PermissionDenied(f"token lacks scope {required!r}")

    def _verify(self, token: str) -> _Verified:
        now = time.time()
        cached = self._cache.get(token)
        if cached is not None and now < cached.expires_at + self._settings.leeway_s:
            self._cache.move_to_end(token)
            return cached
        s = self._settings
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                audience=s.audience,
                issuer=s.issuer or None,
                leeway=s.leeway_s,
                options={"require": ["exp", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("token not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("token audience does not match") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("token issuer does not match") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"token lacks the {exc.claim!r} claim") from None
        except jwt.InvalidTokenError:
            raise Unauthenticated("token does not verify") from None
        verified = _Verified(_scopes(claims), _expiry(claims))
        self._cache[token] = verified
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return verified


def mint_token(
    settings: AuthSettings,
    scopes: Iterable[str],
    ttl_s: float,
    *,
    subject: str = "loom-cli",
    private_key_file: str = "",
) -> str:
    """A token the server configured by `settings` accepts (``loom token``).

    HS256 with the shared secret; RS256/ES256 need the issuer's private key file.
    """
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": subject,
        "aud": settings.audience,
        "iat": now,
        "nbf": now,
        "exp": now + int(ttl_s),
        "scope": " ".join(sorted(set(scopes))),
    }
    if settings.issuer:
        claims["iss"] = settings.issuer
    if private_key_file:
        pem = _read_key(private_key_file, "private_key_file")
        return jwt.encode(claims, pem, algorithm=_signing_algorithm(pem))
    if not settings.jwt_secret_file:
        raise ConfigError("minting needs auth.jwt_secret_file (HS256) or --private-key")
    return jwt.encode(claims, _read_key(settings.jwt_secret_file, "jwt_secret_file"), "HS256")


def _expiry(claims: Mapping[str, Any]) -> float:
    """`exp` as a float, once `exp`, `nbf` and `iat` are all NumericDates Loom can use.

    PyJWT checks these claims with ``int()``, so a validly signed token passes it with
    ``"exp": "1800000000"`` (a string), ``"nbf": true`` (1) or ``"exp": 10**400`` (an integer
    no float holds: this cache's ``float()`` raised OverflowError). RFC 7519 makes a
    NumericDate a JSON number of seconds since 1970; Loom also bounds it by the year 9999,
    so every accepted value is a real date and a finite float. Anything else is a token
    problem, UNAUTHENTICATED, however well signed.
    """
    for name in _DATE_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Unauthenticated(f"token claim {name!r} is not a number")
        if not 0 <= value <= _LAST_DATE:  # NaN fails both comparisons
            raise Unauthenticated(f"token claim {name!r} is not a date between 1970 and 9999")
    return float(claims["exp"])


def _algorithm(key: object, setting: str) -> str:
    """The one JWS algorithm Loom uses with `key`; `ConfigError` naming `setting` otherwise.

    RS256 for RSA of at least 2048 bits, ES256 for EC on P-256, nothing else. PyJWT loads
    any EC key for ES256 and only at verification finds that a P-384 or P-521 key does not
    fit it; a short RSA key verifies with a warning per call. Refusing both here stops
    start-up with the setting's name instead of failing (or weakening) every call.
    """
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        if key.key_size < _MIN_RSA_BITS:
            raise ConfigError(
                f"auth.{setting}: a {key.key_size}-bit RSA key is too short; RS256 needs "
                f">= {_MIN_RSA_BITS} bits"
            )
        return "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        if isinstance(key.curve, ec.SECP256R1):
            return "ES256"
        nist = _NIST_CURVES.get(key.curve.name)
        kind = f"an EC key on curve {key.curve.name}" + (f" ({nist})" if nist else "")
    else:
        found = (name for cls, name in _KEY_KINDS if isinstance(key, cls))
        kind = next(found, f"a key of type {type(key).__name__}")
    raise ConfigError(
        f"auth.{setting}: {kind} is not supported; use an RSA key of >= {_MIN_RSA_BITS} bits "
        "(RS256) or an EC key on P-256 (ES256)"
    )


def _public_key(pem: bytes) -> tuple[Any, list[str]]:
    """The key and the one algorithm it verifies: RS256 for RSA, ES256 for P-256 EC."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ConfigError("auth.jwt_public_key_file: not a PEM public key") from exc
    return key, [_algorithm(key, "jwt_public_key_file")]


def _signing_algorithm(pem: bytes) -> str:
    """The algorithm `loom token --private-key` signs with: the verifier's, by the same rule."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError("private key: not an unencrypted PEM private key") from exc
    return _algorithm(key, "private_key_file")
