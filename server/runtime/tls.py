"""TLS for the gRPC port: PEM files, optional mutual TLS, reloaded on SIGHUP.

Everything is checked before the server starts, so a misconfiguration is one clear error
naming the setting (a missing file, a key that does not match its certificate, a CA bundle
that does not parse) and never a half-started server that fails its first handshake.

Certificates rotate without a restart: SIGHUP marks them stale, and grpc asks
`CertificateReloader.fetch` before each new handshake; the files are read and checked again
then, and a bad new set is logged and ignored (the old one keeps serving). Connections
already open are untouched.
"""

from __future__ import annotations

import ipaddress
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from server.config import ConfigError, ServerSettings
from server.runtime.logs import get_logger

__all__ = ["CertificateReloader", "check_tls", "is_loopback", "server_credentials"]

_log = get_logger("tls")


@dataclass(frozen=True, slots=True)
class _Pems:
    key: bytes
    chain: bytes
    client_ca: bytes | None


def _read(path: str, setting: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"server.{setting}: cannot read {path!r}: {exc.strerror}") from exc
    if b"-----BEGIN" not in data:
        raise ConfigError(f"server.{setting}: {path!r} is not PEM")
    return data


def _load(settings: ServerSettings) -> _Pems:
    """Reads and cross-checks the PEM files named by `settings`."""
    if not settings.tls_cert_file or not settings.tls_key_file:
        missing = "tls_key_file" if settings.tls_cert_file else "tls_cert_file"
        raise ConfigError(f"server.{missing}: TLS needs both tls_cert_file and tls_key_file")
    chain = _read(settings.tls_cert_file, "tls_cert_file")
    key = _read(settings.tls_key_file, "tls_key_file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise ConfigError(
                "server.tls_key_file: the private key does not match tls_cert_file"
            ) from exc
        raise ConfigError(f"server.tls_cert_file / tls_key_file: unusable: {exc}") from exc
    client_ca = None
    if settings.tls_client_ca_file:
        client_ca = _read(settings.tls_client_ca_file, "tls_client_ca_file")
        try:
            context.load_verify_locations(cafile=settings.tls_client_ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(f"server.tls_client_ca_file: unusable CA bundle: {exc}") from exc
    return _Pems(key, chain, client_ca)


def _configuration(pems: _Pems) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(pems.key, pems.chain)], pems.client_ca)


class CertificateReloader:
    """Serves the current certificates to grpc; `request_reload` (SIGHUP) re-reads them."""

    def __init__(self, settings: ServerSettings) -> None:
        self._settings = settings
        self._pems = _load(settings)
        self._stale = threading.Event()

    @property
    def mutual(self) -> bool:
        """Whether clients must present a certificate."""
        return self._pems.client_ca is not None

    def initial(self) -> grpc.ServerCertificateConfiguration:
        """The configuration the server starts with."""
        return _configuration(self._pems)

    def request_reload(self) -> None:
        """Marks the certificates stale; the next handshake reads the files again."""
        self._stale.set()

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """grpc's per-handshake callback: a new configuration after a reload, else None."""
        if not self._stale.is_set():
            return None
        self._stale.clear()
        try:
            pems = _load(self._settings)
        except ConfigError as exc:
            _log.error("tls reload failed; keeping the current certificates", error=str(exc))
            return None
        if pems == self._pems:
            return None
        self._pems = pems
        _log.info("tls certificates reloaded")
        return _configuration(pems)


def check_tls(settings: ServerSettings) -> None:
    """Raises `ConfigError` when the TLS settings cannot work (no gRPC object is made)."""
    if settings.tls_cert_file or settings.tls_key_file or settings.tls_client_ca_file:
        _load(settings)


def server_credentials(
    settings: ServerSettings,
) -> tuple[grpc.ServerCredentials, CertificateReloader] | None:
    """TLS credentials for the port (None: plaintext, no TLS setting given)."""
    if not (settings.tls_cert_file or settings.tls_key_file or settings.tls_client_ca_file):
        return None
    reloader = CertificateReloader(settings)
    credentials = grpc.dynamic_ssl_server_credentials(
        reloader.initial(), reloader.fetch, require_client_authentication=reloader.mutual
    )
    return credentials, reloader


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
