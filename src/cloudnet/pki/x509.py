"""The cloud's certificate authority and the certificates it signs, with `cryptography` (nothing hand-rolled).

One CA per cloud (in the server's state dir, or given): it signs the API listener's server certificate and one
client certificate per joined host (CN and DNS SAN = the host's name, clientAuth only). Keys are ECDSA P-256:
generated in a millisecond, and TLS handshakes with them are cheap.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
HOST_DAYS = 365
SERVER_DAYS = 365
# A host name a certificate can carry as a DNS name (and an agent's `--host`): letters, digits, '.', '-', '_'.
HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62})$")

Key = ec.EllipticCurvePrivateKey


class PkiError(RuntimeError):
    """A certificate or key that cannot be read, or does not fit (the message says which file and why)."""


def new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: Key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())  # fmt: skip


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER certificate, lowercase hex (what a join token pins, as kubeadm's discovery hash)."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` 0600 (created so: never readable by others, even for an instant), replacing it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def parse_cert(pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise PkiError(f"not a PEM certificate: {exc}") from None


def load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise PkiError(f"cannot read certificate {path}: {exc}") from None


def load_key(path: Path) -> Key:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise PkiError(f"cannot read key {path}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{path}: cloudnet's keys are ECDSA (P-256), not {type(key).__name__}")
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)  # a key readable by others is no secret: tighten it rather than refuse to start
    return key


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey, days: int
             ) -> x509.CertificateBuilder:  # fmt: skip
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # (hosts' clocks differ a little)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
    )


def _leaf_usage() -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                         data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
                         encipher_only=False, decipher_only=False)  # fmt: skip


@dataclass(frozen=True)
class Authority:
    """The CA: its certificate and key."""

    cert: x509.Certificate
    key: Key

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.cert)

    @property
    def pem(self) -> bytes:
        return cert_pem(self.cert)

    def _leaf(self, subject: x509.Name, public: ec.EllipticCurvePublicKey, days: int) -> x509.CertificateBuilder:
        ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        return (
            _builder(subject, self.cert.subject, public, days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_leaf_usage(), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        )

    def server_cert(self, names: list[str], key: Key, client: bool = False) -> x509.Certificate:
        """A serverAuth certificate for the API listener (`client`: clientAuth too, as OVN's databases need: their
        host's own tools connect with it): DNS names and IP addresses as SANs."""
        return self._serving(names, key.public_key(), client)

    def member_cert(self, host: str, address: str, csr: x509.CertificateSigningRequest) -> x509.Certificate:
        """A certificate for the key of `csr` of a member of OVN's clustered databases on `host` at `address`:
        serverAuth (its databases serve) and clientAuth (its Raft peers and tools connect with it), naming the host
        and the member's address, whatever the request asks for."""
        return self._serving([host, address], _requested_key(csr), client=True)

    def _serving(self, names: list[str], public: ec.EllipticCurvePublicKey, client: bool) -> x509.Certificate:
        sans: list[x509.GeneralName] = []
        for name in dict.fromkeys(names):
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        builder = self._leaf(_name(names[0] if names else "cloudnet"), public, SERVER_DAYS)
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        return builder.sign(self.key, hashes.SHA256())

    def host_cert(self, host: str, csr: x509.CertificateSigningRequest) -> x509.Certificate:
        """A clientAuth certificate for `host`, for the key of `csr`: whatever subject the request asks for, the
        certificate names `host` (the name the join token was issued for) and nothing else."""
        builder = self._leaf(_name(host), _requested_key(csr), HOST_DAYS)
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        return builder.sign(self.key, hashes.SHA256())


def _requested_key(csr: x509.CertificateSigningRequest) -> ec.EllipticCurvePublicKey:
    public = csr.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey) or not csr.is_signature_valid:
        raise PkiError("the certificate request must be signed by its own ECDSA key")
    return public


def names_address(cert: x509.Certificate, address: str) -> bool:
    """Whether `cert` names IP address `address` among its SANs."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return ipaddress.ip_address(address) in sans.get_values_for_type(x509.IPAddress)


def new_authority() -> Authority:
    key = new_key()
    subject = _name(f"cloudnet CA {secrets.token_hex(4)}")
    cert = (
        _builder(subject, subject, key.public_key(), CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(cert, key)


def load_authority(cert_path: Path, key_path: Path) -> Authority:
    """The CA in these files; PkiError if they do not make one (not a CA, or the key is not the certificate's)."""
    cert, key = load_cert(cert_path), load_key(key_path)
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise PkiError(f"{cert_path} is not a CA certificate (no basicConstraints CA:TRUE)")
    if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
        raise PkiError(f"{key_path} is not the key of {cert_path}")
    return Authority(cert, key)


def load_or_create_authority(cert_path: Path, key_path: Path) -> Authority:
    """The CA of this cloud: made at first start (key 0600), read afterwards."""
    if not cert_path.exists() and not key_path.exists():
        ca = new_authority()
        write_private(key_path, key_pem(ca.key))
        write_private(cert_path, ca.pem)
    return load_authority(cert_path, key_path)


def new_csr(host: str, key: Key) -> bytes:
    csr = x509.CertificateSigningRequestBuilder().subject_name(_name(host)).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM)


def load_csr(pem: str) -> x509.CertificateSigningRequest:
    try:
        return x509.load_pem_x509_csr(pem.encode())
    except (ValueError, UnicodeEncodeError) as exc:
        raise PkiError(f"not a PEM certificate request: {exc}") from None


def peer_of(der: bytes) -> tuple[str, int]:
    """(host name, serial) of a client certificate the TLS layer verified against the CA."""
    cert = x509.load_der_x509_certificate(der)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return (str(names[0].value) if names else ""), cert.serial_number


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
