"""A throwaway PKI for TLS tests: a CA, server and client certificates, and JWT key pairs."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_PEM = serialization.Encoding.PEM


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _public_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass
class Issued:
    """A certificate and its private key, as PEM, written to `cert_file` / `key_file`."""

    cert: bytes
    key: bytes
    cert_file: Path
    key_file: Path


class Authority:
    """A self-signed CA that issues server and client certificates into `directory`."""

    def __init__(self, directory: Path, name: str = "Loom Test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        self._name = subject
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
            .public_bytes(_PEM)
        )
        self.cert_file = directory / f"{name.replace(' ', '-').lower()}.pem"
        self.cert_file.write_bytes(self.cert)

    def issue(self, name: str, *, server: bool) -> Issued:
        """A leaf certificate for 127.0.0.1 / localhost (server) or a client named `name`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256()).public_bytes(_PEM)
        issued = Issued(
            cert, _key_pem(key), self.directory / f"{name}.crt", self.directory / f"{name}.key"
        )
        issued.cert_file.write_bytes(cert)
        issued.key_file.write_bytes(issued.key)
        return issued


@dataclass
class KeyPair:
    """A JWT signing key (private PEM file) and its verifying public key (PEM file)."""

    private_file: Path
    public_file: Path


def jwt_key_pair(directory: Path, kind: str) -> KeyPair:
    """An RSA (RS256) or P-256 EC (ES256) key pair written to `directory`."""
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if kind == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
    pair = KeyPair(directory / f"jwt-{kind}.key", directory / f"jwt-{kind}.pub")
    pair.private_file.write_bytes(_key_pem(key))
    pair.public_file.write_bytes(_public_pem(key))
    return pair
