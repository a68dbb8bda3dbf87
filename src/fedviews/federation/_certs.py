"""A federation's certificate authority and per-party certificates (mutual TLS).

``fedviews certs init DIR`` creates ``DIR/ca.key`` and ``DIR/ca.crt``;
``fedviews certs issue DIR NAME`` creates ``DIR/NAME.key`` and ``DIR/NAME.crt``
with the party name as common name and DNS subject-alternative name. The
coordinator's certificate is issued the same way (name ``coordinator``); extra
``--host`` names/addresses can be added to it. ``fedviews certs revoke DIR NAME``
adds the certificate's serial number to ``DIR/revoked.txt``, which the
coordinator reads at start-up. Only ``NAME.key``, ``NAME.crt`` and ``ca.crt``
are handed to each organisation; ``ca.key`` stays with whoever runs the CA.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fedviews.errors import ConfigError, require

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_DAYS = 825


@functools.cache
def crypto() -> Any:
    """The ``cryptography`` modules of certificates, end-to-end sealing and secure
    aggregation (imported on first use: they need the ``grpc`` extra)."""
    require("cryptography", "grpc")
    from cryptography import exceptions, x509
    from cryptography.hazmat.primitives import ciphers, hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, x25519
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    return SimpleNamespace(
        x509=x509,
        exceptions=exceptions,
        ciphers=ciphers,
        hashes=hashes,
        serialization=serialization,
        ec=ec,
        x25519=x25519,
        AESGCM=AESGCM,
        HKDF=HKDF,
        NameOID=NameOID,
        EKU=ExtendedKeyUsageOID,
    )


def check_name(name: str, what: str = "party name", why: str = "") -> str:
    """``name`` if it can name a party, a certificate, a file and a folder (else ConfigError)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{what} {name!r} must be 1-64 letters, digits, '_', '-' or '.', "
            f"starting with a letter or digit{why}"
        )
    return name


def _write_key(path: Path, key: Any) -> None:
    """Write a private key readable by its owner only, from the first byte on."""
    serialization = crypto().serialization
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.unlink(missing_ok=True)  # a new file gets the mode below (an old one keeps its own)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)


def init_ca(directory: str | Path, name: str = "fedviews federation CA") -> Path:
    """Create a federation CA (``ca.key``, ``ca.crt``) in ``directory``; return ``ca.crt``."""
    x509 = crypto().x509
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if (d / "ca.key").exists():
        raise ConfigError(f"{d / 'ca.key'} exists already; use another directory")
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    ca = x509.BasicConstraints(ca=True, path_length=0)
    return _issue(d, "ca", name, None, None, 10 * 365, [(ca, True), (usage, True)])


def issue_certificate(
    directory: str | Path,
    name: str,
    hosts: Sequence[str] = (),
    days: int = _DAYS,
    *,
    replace: bool = False,
) -> Path:
    """Issue ``NAME.crt``/``NAME.key`` signed by the CA in ``directory``; return the cert path.

    The certificate works for both ends of a connection (client and server auth);
    its common name and first DNS name are ``name``; ``hosts`` adds DNS names or
    IP addresses (for the coordinator's address). A name that already has a
    certificate is refused unless ``replace``, which revokes the old one first.
    """
    c = crypto()
    d = Path(directory)
    check_name(name)
    if name.lower() == "ca":
        raise ConfigError("'ca' names the federation's CA files; choose another party name")
    if not (d / "ca.key").is_file():
        raise ConfigError(f"no CA in {d}; create one with: fedviews certs init {d}")
    other = next(  # ('Alice' beside 'alice': one file on a case-insensitive file system)
        (f.stem for f in d.glob("*.crt") if f.stem != name and f.stem.lower() == name.lower()),
        None,
    )
    if other is not None:
        raise ConfigError(
            f"{name!r} differs from the certified party {other!r} only in letter case; party "
            "names are unique up to letter case (their files would collide on some systems)"
        )
    if (d / f"{name}.crt").exists():
        if not replace:
            raise ConfigError(
                f"{d / (name + '.crt')} exists; pass --replace to issue a new one "
                "(the old certificate is revoked)"
            )
        revoke_certificate(d, name)
    ca_key = c.serialization.load_pem_private_key((d / "ca.key").read_bytes(), password=None)
    ca_cert = c.x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    alt: list[Any] = [c.x509.DNSName(name)]
    for h in hosts:
        try:
            alt.append(c.x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            alt.append(c.x509.DNSName(h))
    extensions = [
        (c.x509.BasicConstraints(ca=False, path_length=None), True),
        (c.x509.SubjectAlternativeName(alt), False),
        (c.x509.ExtendedKeyUsage([c.EKU.SERVER_AUTH, c.EKU.CLIENT_AUTH]), False),
    ]
    return _issue(d, name, name, ca_cert.subject, ca_key, days, extensions)


def _issue(
    d: Path,
    stem: str,
    name: str,
    issuer: Any,
    signer: Any,
    days: int,
    extensions: list[tuple[Any, bool]],
) -> Path:
    """Write ``d/STEM.key`` (a fresh P-256 key) and ``d/STEM.crt``: its certificate for the
    common name ``name``, issued by ``issuer`` with the key ``signer`` (``None``: self-signed),
    valid from five minutes ago for ``days`` days, with ``(extension, critical)`` pairs."""
    c = crypto()
    key = c.ec.generate_private_key(c.ec.SECP256R1())
    subject = c.x509.Name([c.x509.NameAttribute(c.NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        c.x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer)
        .public_key(key.public_key())
        .serial_number(c.x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    cert = builder.sign(key if signer is None else signer, c.hashes.SHA256())
    _write_key(d / f"{stem}.key", key)
    path = d / f"{stem}.crt"
    path.write_bytes(cert.public_bytes(c.serialization.Encoding.PEM))
    return path


def revoke_certificate(directory: str | Path, name: str) -> int:
    """Add the serial number of ``DIR/NAME.crt`` to ``DIR/revoked.txt``; return it."""
    x509 = crypto().x509
    d = Path(directory)
    path = d / f"{check_name(name)}.crt"
    if not path.is_file():
        raise ConfigError(f"no certificate {path}")
    serial = int(x509.load_pem_x509_certificate(path.read_bytes()).serial_number)
    if f"{serial:x}" not in revoked_serials(d):  # (revoked once: issue --replace revokes too)
        with (d / "revoked.txt").open("a") as fh:
            fh.write(f"{serial:x} {name}\n")
    return serial


def certificate_advice(name: str, operator: bool, directory: Path | None = None) -> str:
    """How ``name`` gets its certificates: the CA operator (the coordinator's organisation)
    creates the federation's CA once and issues every certificate; a party never creates a
    CA of its own (the others would refuse it), it asks the operator for its files."""
    d = directory or Path("certs")
    if operator:
        return (
            f"as the federation's CA operator, create the CA once with `fedviews certs init "
            f"{d}`, then `fedviews certs issue {d} {name}` for this coordinator and "
            f"`fedviews certs issue {d} PARTY` for each party (or pass --insecure for a "
            "plain-text test on one machine)"
        )
    return (
        f"ask the organisation that runs the federation's CA (the coordinator's) for "
        f"ca.crt, {name}.crt and {name}.key: it issues them with `fedviews certs issue "
        f"CA_DIR {name}` and sends them to you ({name}.key over a private channel); put "
        f"them in {d} (or pass --insecure for a plain-text test on one machine)"
    )


def revoked_serials(directory: Path) -> frozenset[str]:
    """The serial numbers (hex) listed in ``directory/revoked.txt`` (none if it is absent)."""
    rl = directory / "revoked.txt"
    if not rl.is_file():
        return frozenset()
    return frozenset(line.split()[0] for line in rl.read_text().splitlines() if line.strip())


def _check_issued_to(cert: Path, name: str) -> None:
    """A ConfigError unless the PEM certificate ``cert`` is issued to ``name`` (its common
    name, case aside): a coordinator started with a party's certificate was refused by every
    party only at TLS's name check, each saying the coordinator was unreachable."""
    c = crypto()
    try:
        loaded = c.x509.load_pem_x509_certificate(cert.read_bytes())
    except ValueError:
        raise ConfigError(f"{cert} is not a PEM certificate") from None
    names = [a.value for a in loaded.subject.get_attributes_for_oid(c.NameOID.COMMON_NAME)]
    if [str(n).lower() for n in names] != [name.lower()]:
        raise ConfigError(
            f"{cert} is issued to {', '.join(map(repr, names)) or 'no name'}, not {name!r}: "
            f"give {name!r} its own certificate (its peers check the name)"
        )


@dataclass(frozen=True)
class TLSFiles:
    """The PEM files one process needs: the federation CA, its certificate and key.

    ``revoked`` holds serial numbers (hex) that the coordinator refuses.
    """

    ca: Path
    cert: Path
    key: Path
    revoked: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_dir(cls, directory: str | Path, name: str, *, operator: bool = False) -> TLSFiles:
        """``DIR/ca.crt``, ``DIR/NAME.crt``, ``DIR/NAME.key`` (and ``DIR/revoked.txt``).

        ``operator``: ``NAME`` runs the federation's CA (the coordinator), which decides
        what a missing file's error advises: the operator creates the CA and issues the
        certificates; a party asks the operator for its own.
        """
        d = Path(directory)
        files = cls(d / "ca.crt", d / f"{name}.crt", d / f"{name}.key")
        for p in (files.ca, files.cert, files.key):
            if not p.is_file():
                raise ConfigError(f"missing {p}; {certificate_advice(name, operator, d)}")
        _check_issued_to(files.cert, name)
        return cls(files.ca, files.cert, files.key, revoked_serials(d))

    def server_credentials(self) -> Any:
        grpc: Any = require("grpc", "grpc")
        return grpc.ssl_server_credentials(
            [(self.key.read_bytes(), self.cert.read_bytes())],
            root_certificates=self.ca.read_bytes(),
            require_client_auth=True,
        )

    def channel_credentials(self) -> Any:
        grpc: Any = require("grpc", "grpc")
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes(),
            private_key=self.key.read_bytes(),
            certificate_chain=self.cert.read_bytes(),
        )

    def is_revoked(self, pem: bytes) -> bool:
        """Whether the PEM certificate a peer presented has a revoked serial number."""
        if not self.revoked or not pem:
            return False
        x509 = crypto().x509
        return f"{x509.load_pem_x509_certificate(pem).serial_number:x}" in self.revoked
