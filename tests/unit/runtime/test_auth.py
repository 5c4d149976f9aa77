"""Bearer tokens and scopes (server/runtime/auth.py), without a server."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from server import registry
from server.config import AuthSettings, ConfigError
from server.runtime.auth import Authenticator, method_scope, mint_token
from server.runtime.errors import PermissionDenied, Unauthenticated
from tests.pki import jwt_key_pair

SECRET = b"s" * 40


@pytest.fixture
def settings(tmp_path: Path) -> AuthSettings:
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    return AuthSettings(jwt_secret_file=str(path))


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def _now() -> int:
    return int(time.time())


def signed(claims: dict[str, object], key: bytes = SECRET) -> str:
    base: dict[str, object] = {"aud": "loom", "exp": int(time.time()) + 60}
    return jwt.encode({**base, **claims}, key, "HS256")


class TestMethodScope:
    @pytest.mark.parametrize(
        ("method", "scope"),
        [
            ("loom.v1.Inbox/GetUnreadCount", "inbox:read"),
            ("loom.v1.Inbox/ListInbox", "inbox:read"),
            ("loom.v1.Inbox/PostMessage", "inbox:write"),
            ("loom.v1.Inbox/MarkThreads", "inbox:write"),
            ("loom.v1.ThreadWeaver/ResolveThreads", "threadweaver:read"),
            ("loom.v1.ThreadWeaver/WeaveMessages", "threadweaver:write"),
            ("loom.v1.Summary/RecordDeliveryEvents", "summary:write"),
            ("loom.v1.Iterator/StartIteration", "iterator:admin"),
            ("loom.v1.Iterator/StreamObjects", "iterator:read"),
            ("loom.v1.TemplateInduction/AnnotateEmail", "templates:read"),
            ("loom.v1.TemplateInduction/SubmitEmails", "templates:write"),
        ],
    )
    def test_derived_from_the_method_name(self, method: str, scope: str) -> None:
        """Reads need read, job control admin, everything else write; the prefix is the
        service's short name in the registry, as the server resolves every policy."""
        assert registry.default_policies()[method].scope == scope

    def test_without_a_prefix_the_proto_name_is_used(self) -> None:
        """A method no policy names (none today) still needs a scope of its own service."""
        assert method_scope("loom.v1.Future/GetThing") == "future:read"
        assert method_scope("loom.v1.Future/GetThing", prefix="fut") == "fut:read"

    def test_a_declared_scope_wins(self) -> None:
        """A policy's scope overrides the derivation."""
        assert method_scope("loom.v1.Inbox/GetUnreadCount", "inbox:admin") == "inbox:admin"


class TestAuthenticator:
    def test_a_token_with_the_scope_passes(self, settings: AuthSettings) -> None:
        """A verified token granting the scope is accepted."""
        Authenticator(settings).check(bearer(signed({"scope": "inbox:read"})), "inbox:read")

    @pytest.mark.parametrize(
        ("granted", "required", "ok"),
        [
            ("inbox:write", "inbox:read", True),
            ("inbox:admin", "inbox:write", True),
            ("inbox:*", "inbox:admin", True),
            ("inbox:read", "inbox:write", False),
            ("summary:admin", "inbox:read", False),
            ("inbox:read summary:write", "summary:read", True),
        ],
    )
    def test_levels_imply_those_below_for_the_same_service(
        self, settings: AuthSettings, granted: str, required: str, ok: bool
    ) -> None:
        """admin ⊇ write ⊇ read within a service; never across services."""
        auth = Authenticator(settings)
        token = bearer(signed({"scope": granted}))
        if ok:
            auth.check(token, required)
        else:
            with pytest.raises(PermissionDenied, match=required):
                auth.check(token, required)

    @pytest.mark.parametrize(
        ("metadata", "message"),
        [
            (lambda: [], "missing bearer token"),
            (lambda: [("authorization", "Basic dXNlcjpwdw==")], "Bearer"),
            (lambda: bearer("not.a.jwt"), "does not verify"),
            (lambda: bearer(signed({"scope": "inbox:read"}, key=b"x" * 40)), "does not verify"),
            (lambda: bearer(signed({"scope": "inbox:read", "exp": _now() - 3600})), "expired"),
            (lambda: bearer(signed({"scope": "inbox:read", "nbf": _now() + 3600})), "nbf"),
            (lambda: bearer(signed({"scope": "inbox:read", "aud": "someone-else"})), "audience"),
            (lambda: bearer(jwt.encode({"aud": "loom", "scope": "inbox:read"}, SECRET)), "'exp'"),
        ],
        ids=["none", "basic", "garbage", "wrong-key", "expired", "not-yet", "wrong-aud", "no-exp"],
    )
    def test_bad_credentials_are_unauthenticated(
        self,
        settings: AuthSettings,
        metadata: Callable[[], list[tuple[str, str]]],
        message: str,
    ) -> None:
        """No token, another scheme, a bad signature, exp, nbf, aud: UNAUTHENTICATED.

        Tokens are signed when the test runs (not at collection), so their times are fresh.
        """
        with pytest.raises(Unauthenticated, match=message):
            Authenticator(settings).check(metadata(), "inbox:read")

    def test_clock_skew_within_the_leeway_is_tolerated(self, settings: AuthSettings) -> None:
        """A token that expired 10 s ago still passes with the default 30 s leeway."""
        token = signed({"scope": "inbox:read", "exp": int(time.time()) - 10})
        Authenticator(settings).check(bearer(token), "inbox:read")

    def test_issuer_is_checked_when_configured(self, settings: AuthSettings) -> None:
        """With auth.issuer set, a token from elsewhere is refused."""
        auth = Authenticator(replace(settings, issuer="https://idp.example"))
        with pytest.raises(Unauthenticated, match="issuer"):
            auth.check(bearer(signed({"scope": "inbox:read", "iss": "evil"})), "inbox:read")

    def test_health_and_reflection_are_open_by_default(self, settings: AuthSettings) -> None:
        """Probes and tools need no token; Loom services do."""
        auth = Authenticator(settings)
        assert auth.is_open("grpc.health.v1.Health")
        assert auth.is_open("grpc.reflection.v1.ServerReflection")
        assert not auth.is_open("loom.v1.Inbox")

    @pytest.mark.parametrize("kind", ["rsa", "ec"])
    def test_asymmetric_issuers(self, tmp_path: Path, kind: str) -> None:
        """RS256 / ES256: verified with the public key; a token from another key fails."""
        pair = jwt_key_pair(tmp_path, kind)
        settings = AuthSettings(jwt_public_key_file=str(pair.public_file))
        token = mint_token(settings, ["summary:read"], 60, private_key_file=str(pair.private_file))
        auth = Authenticator(settings)
        auth.check(bearer(token), "summary:read")
        (tmp_path / "other").mkdir()
        other = jwt_key_pair(tmp_path / "other", kind)
        forged = mint_token(
            settings, ["summary:read"], 60, private_key_file=str(other.private_file)
        )
        with pytest.raises(Unauthenticated):
            auth.check(bearer(forged), "summary:read")

    def test_a_missing_key_file_is_a_configuration_error(self, settings: AuthSettings) -> None:
        """Start-up stops with the setting's name when the key file cannot be read."""
        with pytest.raises(ConfigError, match=r"auth\.jwt_secret_file: cannot read"):
            Authenticator(replace(settings, jwt_secret_file="/nonexistent/secret"))

    def test_a_short_secret_is_a_configuration_error(self, tmp_path: Path) -> None:
        """An HS256 secret under 32 bytes is refused at start-up."""
        short = tmp_path / "short"
        short.write_bytes(b"tooshort")
        with pytest.raises(ConfigError, match=r"auth\.jwt_secret_file: an HS256 secret"):
            Authenticator(AuthSettings(jwt_secret_file=str(short)))

    def test_minted_tokens_round_trip(self, settings: AuthSettings) -> None:
        """`loom token`'s tokens carry the scopes, audience and a bounded lifetime."""
        token = mint_token(settings, ["inbox:read", "inbox:write"], 120)
        claims = jwt.decode(token, SECRET, algorithms=["HS256"], audience="loom")
        assert claims["scope"] == "inbox:read inbox:write"
        assert claims["exp"] - claims["iat"] == 120
        Authenticator(settings).check(bearer(token), "inbox:write")


class TestKeysLoomCannotVerifyWith:
    @pytest.mark.parametrize(
        ("key", "named"),
        [
            (lambda: ec.generate_private_key(ec.SECP384R1()), "curve secp384r1 (P-384)"),
            (lambda: ec.generate_private_key(ec.SECP521R1()), "curve secp521r1 (P-521)"),
            (lambda: ec.generate_private_key(ec.SECP256K1()), "curve secp256k1"),
            (ed25519.Ed25519PrivateKey.generate, "an Ed25519 key"),
            (lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024), "1024-bit"),
        ],
        ids=["p384", "p521", "secp256k1", "ed25519", "rsa-1024"],
    )
    def test_are_refused_at_start_up(
        self, tmp_path: Path, key: Callable[[], Any], named: str
    ) -> None:
        """PyJWT loads them and fails (or warns) on every call; Loom refuses them up front."""
        path = tmp_path / "key.pub"
        path.write_bytes(
            key()
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        with pytest.raises(ConfigError, match=r"^auth\.jwt_public_key_file: ") as caught:
            Authenticator(AuthSettings(jwt_public_key_file=str(path)))
        assert named in str(caught.value)

    def test_loom_token_refuses_a_private_key_the_server_would_refuse(self, tmp_path: Path) -> None:
        """`loom token --private-key` with a P-384 key names the problem instead of minting
        an ES256 token no server verifies (PyJWT's InvalidKeyError)."""
        path = tmp_path / "p384.key"
        path.write_bytes(
            ec.generate_private_key(ec.SECP384R1()).private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        settings = AuthSettings(jwt_public_key_file=str(path))
        with pytest.raises(ConfigError, match=r"P-384\) is not supported"):
            mint_token(settings, ["inbox:read"], 60, private_key_file=str(path))


class TestDateClaims:
    @pytest.mark.parametrize(
        ("claim", "value", "message"),
        [
            ("exp", 10**400, "not a date"),
            ("exp", 10**20, "not a date"),
            ("exp", "9999999999", "not a number"),
            ("nbf", "0", "not a number"),
            ("nbf", -1, "not a date"),
            ("nbf", True, "not a number"),
            ("iat", False, "not a number"),
            ("iat", -5.5, "not a date"),
        ],
        ids=["exp-10e400", "exp-past-9999", "exp-str", "nbf-str", "nbf-neg", "nbf-true",
             "iat-false", "iat-neg"],
    )  # fmt: skip
    def test_a_signed_token_whose_dates_are_not_dates_is_unauthenticated(
        self, settings: AuthSettings, claim: str, value: object, message: str
    ) -> None:
        """PyJWT lets these through with int(); Loom wants JSON numbers between 1970 and
        9999 (10**400 once escaped as OverflowError, i.e. UNKNOWN)."""
        token = signed({"scope": "inbox:read", claim: value})
        with pytest.raises(Unauthenticated, match=f"{claim!r} is {message}"):
            Authenticator(settings).check(bearer(token), "inbox:read")

    def test_fractional_dates_are_dates(self, settings: AuthSettings) -> None:
        """RFC 7519 NumericDates may carry fractions of a second."""
        token = signed({"scope": "inbox:read", "exp": time.time() + 60.5, "nbf": 1.5})
        Authenticator(settings).check(bearer(token), "inbox:read")
