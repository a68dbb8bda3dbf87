"""End-to-end protection of party-to-party messages that the coordinator's hub relays.

TLS ends at the hub, so without this layer the coordinator could read (and
alter) every activation and gradient that one party sends another through it.
With TLS on, every party-to-party payload is sealed between the two parties:

* **Keys.** Each party process makes a fresh X25519 key pair and signs its public
  key with its certificate's private key (ECDSA P-256, SHA-256) in its hello. The
  hub hands every party the others' bundles (certificate, X25519 key, signature)
  once all have joined. A party accepts a bundle only if the certificate is signed
  by the federation CA, names exactly that party, is valid now and not on its
  revocation list, and the signature verifies: a hub without the CA's key cannot
  substitute a key of its own (nor add one in its own name, which its certificate
  could sign: a party refuses a bundle that names the hub). The pairwise key of the direction ``a → b`` is
  ``HKDF-SHA256(X25519(a, b), salt=session, info="fedviews-e2e-v1" | a | b)``;
  ``session`` is a random value of this run.
* **Sealing.** The array bytes and the ``meta`` table are encrypted with AES-256-GCM
  under a random 96-bit nonce; the clear header (kind, sender, receiver, round,
  array names, dtypes, shapes, sizes: what the hub's policy check and log need)
  is the associated data, so the hub can neither read the payload nor change the
  header. A per-direction sequence number in the header (authenticated too) lets
  the receiver refuse a replayed message.
* **What the hub can still do.** Drop, delay or reorder messages, and report a
  party as unavailable (availability is the coordinator's to give). It learns
  the header fields above and the size of ``meta``. A coordinator that also holds
  the CA's private key can issue itself a certificate under a party's name and
  so defeat this layer: keep the CA with someone other than the coordinator's
  operator where that matters.

Sealed message layout (see :meth:`fedviews.federation.Message.encode`)::

    b"FVM1" | u32 header length | header JSON (meta = {}, "sealed": {...}) |
    AES-GCM(meta JSON | array bytes) | 16-byte tag
"""

from __future__ import annotations

import base64
import datetime
import json
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedviews.errors import PrivacyError, ProtocolError
from fedviews.federation._certs import TLSFiles, crypto, revoked_serials
from fedviews.federation._message import (
    SEAL_TAG,
    Message,
    parse_header,
    prefix,
    read_arrays,
    write_arrays,
)
from fedviews.federation._meta import loads
from fedviews.federation._tensors import refuse_not_finite

_INFO = b"fedviews-e2e-v1"
_HUB = b"fedviews-hub-v1"
#: sequence numbers this far behind the newest one seen are refused as replays
_WINDOW = 4096
#: seconds a party waits for the peers' keys before a party-to-party message fails
_KEYS_WAIT = 30.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    try:
        return base64.b64decode(str(text), validate=True)
    except (ValueError, TypeError):
        raise ProtocolError(f"{what} is not base64") from None


def hkdf(secret: bytes, info: bytes, salt: bytes | None = None) -> bytes:
    """A 32-byte key: HKDF-SHA256 of ``secret`` under ``info`` (and ``salt``)."""
    c = crypto()
    return bytes(
        c.HKDF(algorithm=c.hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)
    )


def _statement(info: bytes, *parts: bytes | str) -> bytes:
    """``info | part | ...``, joined by NUL bytes: what a key or signature is bound to."""
    return b"\0".join([info, *(p.encode() if isinstance(p, str) else p for p in parts)])


def x25519_secret(own: Any, public: bytes, peer: str) -> bytes:
    """The X25519 shared secret of ``own`` (a private key) and ``peer``'s ``public`` key."""
    try:
        return bytes(own.exchange(crypto().x25519.X25519PublicKey.from_public_bytes(public)))
    except ValueError:
        raise PrivacyError(f"{peer!r}'s X25519 key is invalid") from None


def verify_certificate(trust: Trust, pem: bytes, name: str) -> Any:
    """The public key of ``pem`` if it is a valid certificate of party ``name`` in this
    federation: signed by its CA, common name exactly ``name``, valid now, not revoked
    (without a CA in ``trust``: readable, named ``name`` and valid now only)."""
    c = crypto()
    try:
        cert = c.x509.load_pem_x509_certificate(pem)
        if trust.ca is not None:
            ca = c.x509.load_pem_x509_certificate(trust.ca.read_bytes())
            hash_alg = cert.signature_hash_algorithm
            if cert.issuer != ca.subject or hash_alg is None:
                raise PrivacyError(f"the certificate offered for {name!r} is not from this CA")
            ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, c.ec.ECDSA(hash_alg))
    except c.exceptions.InvalidSignature:
        raise PrivacyError(
            f"the certificate offered for {name!r} is not signed by the CA"
        ) from None
    except ValueError as exc:
        raise PrivacyError(f"the certificate offered for {name!r} is unreadable: {exc}") from None
    if not isinstance(cert.public_key(), c.ec.EllipticCurvePublicKey):  # what signs a bundle
        raise PrivacyError(f"the certificate offered for {name!r} holds no elliptic-curve key")
    names = [a.value for a in cert.subject.get_attributes_for_oid(c.NameOID.COMMON_NAME)]
    if names != [name]:  # exact: TLS host names compare case-insensitively, fedviews does not
        raise PrivacyError(f"a certificate of {names} was offered as {name!r}'s")
    now = datetime.datetime.now(datetime.timezone.utc)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise PrivacyError(f"the certificate of {name!r} is not valid now")
    if f"{cert.serial_number:x}" in trust.revoked:
        raise PrivacyError(f"the certificate of {name!r} is revoked")
    return cert.public_key()


@dataclass(frozen=True)
class Trust:
    """What a certificate is checked against: the federation CA (``ca.crt``) and the
    revoked serial numbers (hex). ``ca=None``: no CA at hand (a relay that holds none), so
    only a certificate's own consistency is checked, not who issued it."""

    ca: Path | None
    revoked: frozenset[str] = frozenset()

    @classmethod
    def of(cls, tls: TLSFiles) -> Trust:
        return cls(tls.ca, tls.revoked)

    @classmethod
    def from_dir(cls, directory: str | Path) -> Trust:
        """``DIR/ca.crt`` and ``DIR/revoked.txt``; no CA where ``DIR/ca.crt`` is absent."""
        d = Path(directory)
        return cls(d / "ca.crt" if (d / "ca.crt").is_file() else None, revoked_serials(d))

    def verify(
        self, signed: Mapping[str, Any], name: str, info: bytes, *parts: bytes | str
    ) -> None:
        """Check that ``signed["sig"]``, over the statement ``info | parts``, comes from
        ``signed["cert"]``, a valid certificate of ``name``."""
        try:
            pem = str(signed["cert"]).encode("ascii")
        except UnicodeEncodeError:
            raise PrivacyError(f"the certificate offered for {name!r} is not PEM") from None
        key = verify_certificate(self, pem, name)
        sig = _unb64(signed["sig"], f"{name!r}'s signature")
        try:
            key.verify(sig, _statement(info, *parts), crypto().ec.ECDSA(crypto().hashes.SHA256()))
        except crypto().exceptions.InvalidSignature:
            raise PrivacyError(f"a signature claimed to be {name!r}'s does not verify") from None


def _signed_key(trust: Trust, peer: str, bundle: Any) -> bytes:
    """The X25519 public key of ``peer``'s ``bundle`` (``{"cert", "x25519", "sig"}``), once
    its certificate and signature check out (:meth:`Trust.verify`)."""
    if not isinstance(bundle, Mapping) or not {"cert", "x25519", "sig"} <= set(bundle):
        raise ProtocolError(f"a malformed key bundle for {peer!r}")
    if not all(isinstance(bundle[k], str) for k in ("cert", "x25519", "sig")):
        raise ProtocolError(f"a malformed key bundle for {peer!r}: fields must be strings")
    public = _unb64(bundle["x25519"], f"{peer!r}'s key")
    trust.verify(bundle, peer, _INFO, peer, public)
    return public


def check_bundle(trust: TLSFiles | Trust, peer: str, bundle: Any) -> None:
    """Check ``peer``'s end-to-end bundle as every party will: signed by the key of its
    certificate, an X25519 key that yields a shared secret (not all zeros, say).

    The hub checks each bundle at the hello, so that one party's bad key is refused,
    naming it, instead of failing every other party when the hub hands it out. A
    :class:`Trust` without a CA (a Flower ServerApp that holds none) checks all but who
    issued the certificate.
    """
    public = _signed_key(trust if isinstance(trust, Trust) else Trust.of(trust), peer, bundle)
    x25519_secret(crypto().x25519.X25519PrivateKey.generate(), public, peer)


class _Signer:
    """This process's certificate and private key (the ones it uses for TLS)."""

    def __init__(self, tls: TLSFiles) -> None:
        c = crypto()
        self.trust = Trust.of(tls)
        self.cert_pem = tls.cert.read_bytes()
        self._key = c.serialization.load_pem_private_key(tls.key.read_bytes(), password=None)
        self._ecdsa = c.ec.ECDSA(c.hashes.SHA256())

    def sign(self, info: bytes, *parts: bytes | str) -> str:
        """The signature (base64) of the statement ``info | parts`` with this key."""
        return _b64(self._key.sign(_statement(info, *parts), self._ecdsa))

    def verify(
        self, signed: Mapping[str, Any], name: str, info: bytes, *parts: bytes | str
    ) -> None:
        """:meth:`Trust.verify` against this process's CA and revocation list."""
        self.trust.verify(signed, name, info, *parts)


class HubProof:
    """The end a party dials proves it holds the key of a certificate named exactly as the
    party expects: the hub (the coordinator's name), or a peer's direct-link listener.

    TLS checks the server's certificate against the name a party expects, but
    compares host names case-insensitively (and grpc does not show the client
    which certificate it accepted); the server therefore also signs the party's hello
    nonce, and the party checks that signature against a certificate whose common
    name is exactly the expected name.
    """

    @staticmethod
    def make(tls: TLSFiles, party: str, nonce: bytes) -> dict[str, str]:
        signer = _Signer(tls)
        return {"cert": signer.cert_pem.decode("ascii"), "sig": signer.sign(_HUB, party, nonce)}

    @staticmethod
    def check(tls: TLSFiles, coordinator: str, party: str, nonce: bytes, proof: Any) -> None:
        if not isinstance(proof, Mapping) or "cert" not in proof or "sig" not in proof:
            raise PrivacyError(
                f"the server did not prove that it is {coordinator!r} (no signed welcome)"
            )
        _Signer(tls).verify(proof, coordinator, _HUB, party, nonce)


class E2EKeys:
    """One party's end-to-end keys: its signed X25519 bundle, its peers', seal and open."""

    def __init__(self, name: str, tls: TLSFiles, hub: str = "") -> None:
        self.name = name
        #: the relaying hub's name: never a peer (with a key in its name it could seal for itself)
        self.hub = hub
        self._signer = _Signer(tls)
        self._secret = crypto().x25519.X25519PrivateKey.generate()
        self._public = self._secret.public_key().public_bytes_raw()
        self._send: dict[str, Any] = {}  # receiver -> AESGCM
        self._recv: dict[str, Any] = {}  # sender -> AESGCM
        # counters per pairwise key, (peer, its X25519 key, session), kept for the life of
        # this key pair: a bundle the hub hands out again must not reopen the replay window
        self._key_of: dict[str, tuple[str, bytes, bytes]] = {}
        self._seq: dict[tuple[str, bytes, bytes], int] = {}
        self._seen: dict[tuple[str, bytes, bytes], tuple[int, set[int]]] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()  # the hub handed out the peers' keys

    def bundle(self) -> dict[str, str]:
        """What this party's hello carries: its X25519 key, signed with its certificate's key."""
        return {
            "x25519": _b64(self._public),
            "sig": self._signer.sign(_INFO, self.name, self._public),
        }

    def set_peers(self, peers: Mapping[str, Any], session: bytes) -> None:
        """Verify every peer's bundle (``{name: {"cert", "x25519", "sig"}}``) and derive keys."""
        aesgcm = crypto().AESGCM
        send: dict[str, Any] = {}
        recv: dict[str, Any] = {}
        key_of: dict[str, tuple[str, bytes, bytes]] = {}
        for peer, b in peers.items():
            if peer == self.name:
                continue
            if peer == self.hub:
                raise PrivacyError(
                    f"the hub handed out an end-to-end key in its own name {peer!r}: refused "
                    "(it could seal messages as a party, e.g. a set for a party to re-blind)"
                )
            public = _signed_key(self._signer.trust, peer, b)
            shared = x25519_secret(self._secret, public, peer)

            def key(a: str, b_: str, shared: bytes = shared) -> Any:
                return aesgcm(hkdf(shared, _statement(_INFO, a, b_), salt=session))

            send[peer], recv[peer] = key(self.name, peer), key(peer, self.name)
            key_of[peer] = (peer, public, session)
        with self._lock:
            self._send, self._recv, self._key_of = send, recv, key_of
            for k in key_of.values():
                self._seq.setdefault(k, 0)
                self._seen.setdefault(k, (0, set()))
        self._ready.set()

    def _wait_for_keys(self) -> None:
        """The peers' keys come right after the last party joined: wait for them (bounded)."""
        if not self._ready.is_set():
            self._ready.wait(_KEYS_WAIT)

    def seal(self, msg: Message) -> bytearray:
        """``msg`` encoded with its meta and arrays encrypted for ``msg.receiver``."""
        self._wait_for_keys()
        with self._lock:
            aead = self._send.get(msg.receiver)
            if aead is None:
                raise PrivacyError(
                    f"no end-to-end key for {msg.receiver!r}: refusing to send it a message "
                    "the hub could read"
                )
            k = self._key_of[msg.receiver]
            self._seq[k] += 1
            seq = self._seq[k]
        head, payloads = msg.layout()
        meta = json.dumps(head["meta"], allow_nan=True).encode("utf-8")
        nonce = secrets.token_bytes(12)
        head["meta"] = {}
        head["sealed"] = {"nonce": nonce.hex(), "seq": seq, "meta_bytes": len(meta)}
        clear = prefix(json.dumps(head, allow_nan=True).encode("utf-8"))
        plain = bytearray(len(meta) + sum(c.nbytes for c in payloads))
        plain[: len(meta)] = meta
        write_arrays(plain, len(meta), payloads)  # the one copy of the arrays, as unsealed
        out = bytearray(len(clear) + len(plain) + SEAL_TAG)
        out[: len(clear)] = clear
        body = memoryview(out)[len(clear) :]
        if hasattr(aead, "encrypt_into"):  # cryptography >= 45: no extra copy
            aead.encrypt_into(nonce, plain, clear, body)
        else:  # pragma: no cover - older cryptography
            body[:] = aead.encrypt(nonce, bytes(plain), clear)
        return out

    def open(self, data: bytes | bytearray | memoryview) -> Message:
        """The message sealed in ``data`` (checked: sender's key, header, no replay)."""
        view = memoryview(data)
        head, specs, offset = parse_header(view)
        sealed = head.get("sealed")
        sender = str(head["sender"])
        if not isinstance(sealed, Mapping):
            raise PrivacyError(
                f"{sender!r} sent an unsealed message; party-to-party messages must be "
                "end-to-end encrypted"
            )
        if head["receiver"] != self.name:
            raise PrivacyError(f"a message for {head['receiver']!r} was delivered to {self.name!r}")
        self._wait_for_keys()
        with self._lock:
            aead, k = self._recv.get(sender), self._key_of.get(sender)
        if aead is None or k is None:
            raise PrivacyError(f"no end-to-end key for {sender!r}: cannot open its message")
        plain = bytearray(len(view) - offset - SEAL_TAG)  # writable: the arrays view it
        try:
            nonce = bytes.fromhex(str(sealed["nonce"]))
            if hasattr(aead, "decrypt_into"):  # cryptography >= 45: no extra copy
                aead.decrypt_into(nonce, view[offset:], view[:offset], plain)
            else:  # pragma: no cover - older cryptography
                plain[:] = aead.decrypt(nonce, bytes(view[offset:]), bytes(view[:offset]))
        except (crypto().exceptions.InvalidTag, ValueError):
            raise PrivacyError(
                f"a message claimed to be {sender!r}'s failed authentication "
                "(altered or forged on the way)"
            ) from None
        self._check_replay(k, int(sealed["seq"]))
        n_meta = int(sealed["meta_bytes"])
        try:
            meta = loads(plain[:n_meta].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ProtocolError(f"{sender!r} sealed a corrupt meta table") from None
        if not isinstance(meta, dict):
            raise ProtocolError(f"{sender!r} sealed a meta value that is not a table")
        msg = Message(
            kind=head["kind"],
            sender=sender,
            receiver=self.name,
            round=int(head["round"]),
            arrays=read_arrays(memoryview(plain), n_meta, specs, copy=False),
            meta=meta,
        )
        refuse_not_finite(sender, msg.kind, msg.arrays)
        return msg

    def _check_replay(self, key: tuple[str, bytes, bytes], seq: int) -> None:
        sender = key[0]
        with self._lock:
            newest, seen = self._seen[key]
            if seq <= newest - _WINDOW or seq in seen or seq < 1:
                raise PrivacyError(f"a replayed message of {sender!r} (sequence {seq}) was refused")
            seen.add(seq)
            newest = max(newest, seq)
            if len(seen) > 2 * _WINDOW:  # forget what the window check refuses anyway
                seen = {s for s in seen if s > newest - _WINDOW}
            self._seen[key] = (newest, seen)
