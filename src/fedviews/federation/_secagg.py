"""Secure aggregation: the coordinator learns a sum of the parties' arrays and no single one.

Where a coordinator needs only ``sum_k x_k`` (MMVFL/V-FedMV's ``sum_k zeta_k Z_k``),
every party sends ``x_k`` masked with pairwise masks that cancel in the sum
(Bonawitz et al., CCS 2017, without the dropout recovery):

* **Keys.** At the start of a run the coordinator asks every party for a fresh
  X25519 public key (``secagg:keys``) and hands each the others' keys
  (``secagg:peers``), with a random session salt. On a transport with TLS
  certificates (a ``fedviews launch``/``serve`` deployment) every key is signed with
  its party's certificate key and every party checks the peers' signatures against
  the federation CA (:func:`fedviews.federation._e2e.verify_certificate`), so a
  coordinator that relays the keys cannot substitute its own and unmask a party.
  Without certificates (in one process, or a deployment without TLS) the keys are
  not authenticated: the protection then holds against an honest-but-curious
  coordinator only.
* **Masks.** Parties ``a < b`` (by name) share ``s_ab = HKDF-SHA256(X25519(a, b),
  salt=session, info="fedviews-secagg-v1" | a | b)``. For the array ``name`` of
  round ``r`` the mask is the AES-256-CTR keystream under
  ``HKDF(s_ab, info=... | r | name)``, read as 64-bit words; ``a`` adds it, ``b``
  subtracts it. A party refuses to mask the same ``(round, name)`` twice with
  different values (the difference of two maskings would reveal the difference of
  the values).
* **Ring.** Values are fixed point, ``round(x 2^f)`` in the ring of 64-bit integers
  (``f = frac_bits``, default 32: a resolution of 2.3e-10). A party refuses (a
  :class:`~fedviews.errors.DataError`, never a silent clip) a value that the sum of
  ``K`` of them could overflow: ``|x| < 2^(62 - f) / K``. The coordinator checks
  every masked array it receives (name, shape, ``uint64``) and names the sender of
  a wrong one; it then adds them modulo 2^64 and decodes the sum.

What it does not do: recover from a party that drops out (in VFL every party's
view is needed every round, so a missing party stops the run with
:class:`~fedviews.errors.PartyUnavailable` as without masking); protect against
parties that collude with the coordinator (with ``K`` parties, ``K - 1`` of them and
the coordinator learn the last one's array from the sum); hide what the
*result* reveals (the coordinator still learns, and MMVFL broadcasts, the sum).
Every masked array is uniform over the ring given all but one party's masks.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, DataError, PrivacyError, ProtocolError
from fedviews.federation._certs import crypto
from fedviews.federation._e2e import _b64, _Signer, _statement, _unb64, hkdf, x25519_secret
from fedviews.federation._message import Message
from fedviews.federation._meta import loads
from fedviews.federation._party import Coordinator, Party, handles
from fedviews.federation._policy import PrivacyPolicy

#: the kinds of the key exchange (session kinds: only the coordinator sends them)
SECAGG_KINDS = ("secagg:keys", "secagg:peers")

_INFO = b"fedviews-secagg-v1"
DEFAULT_FRAC_BITS = 32


def _keystream(key: bytes, n: int) -> np.ndarray:
    """``n`` pseudo-random 64-bit words: the AES-256-CTR keystream of ``key`` (a fresh key
    for every use, so the all-zero counter block is never reused under one key)."""
    ciphers = crypto().ciphers
    enc = ciphers.Cipher(ciphers.algorithms.AES(key), ciphers.modes.CTR(bytes(16))).encryptor()
    return np.frombuffer(enc.update(bytes(8 * n)) + enc.finalize(), dtype="<u8")


def encode(x: np.ndarray, frac_bits: int, n_members: int, what: str) -> np.ndarray:
    """``x`` as fixed point in the ring of 64-bit integers; refuses what the sum could overflow."""
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise DataError(f"{what} holds NaN or infinite values: it cannot be aggregated")
    limit = 2.0 ** (62 - frac_bits) / max(n_members, 1)
    big = float(np.max(np.abs(a))) if a.size else 0.0
    if big >= limit:
        raise DataError(
            f"{what} holds a value of magnitude {big:.3g}, beyond what the secure sum of "
            f"{n_members} parties holds with frac_bits={frac_bits} (|x| < {limit:.3g}); "
            "lower defense.frac_bits"
        )
    return np.rint(a * 2.0**frac_bits).astype(np.int64).view(np.uint64)


def decode(s: np.ndarray, frac_bits: int) -> np.ndarray:
    """The real numbers a ring sum of :func:`encode` values stands for."""
    return np.asarray(s, dtype=np.uint64).view(np.int64).astype(np.float64) / 2.0**frac_bits


class SecureSum:
    """One party's side: its X25519 key, the pairwise mask keys, and :meth:`mask`.

    ``tls``: the party's certificate files (:class:`~fedviews.federation.TLSFiles`);
    with them its key is signed and the peers' keys must be signed by theirs.
    ``secret``: the raw X25519 private key (default: a fresh one).
    """

    def __init__(
        self,
        name: str,
        frac_bits: int = DEFAULT_FRAC_BITS,
        tls: Any = None,
        secret: bytes | None = None,
    ) -> None:
        self.name, self.frac_bits, self.tls = name, int(frac_bits), tls
        x25519 = crypto().x25519.X25519PrivateKey
        self._secret = x25519.generate() if secret is None else x25519.from_private_bytes(secret)
        self._public = self._secret.public_key().public_bytes_raw()
        self._pairs: dict[str, tuple[int, bytes]] = {}  # peer -> (sign, pair key)
        self._used: dict[tuple[int, str], str] = {}  # (round, name) -> digest of the value
        self.n_members = 0

    def bundle(self) -> dict[str, str]:
        """This party's public key, signed with its certificate's key when it has one."""
        out = {"x25519": _b64(self._public)}
        if self.tls is not None:
            signer = _Signer(self.tls)
            out["cert"] = signer.cert_pem.decode("ascii")
            out["sig"] = signer.sign(_INFO, self.name, self._public)
        return out

    def set_peers(self, members: Sequence[str], bundles: Mapping[str, Any], session: bytes) -> None:
        """Check every other member's bundle and derive the pairwise mask keys (once per key:
        a second exchange would forget which ``(round, name)`` were masked, and the same
        masks could then hide a second value)."""
        if self.n_members:
            raise ProtocolError(
                f"the coordinator sent {self.name!r} the secure-aggregation peers twice for one "
                "key (masks must not be reused); a new exchange starts with secagg:keys"
            )
        if self.name not in members or len(set(members)) != len(members):
            raise ProtocolError(
                f"the coordinator listed the members {list(members)} to {self.name!r}"
            )
        if len(members) < 2:  # no peer, no mask: the "masked" array would be the array
            raise PrivacyError(
                f"the coordinator listed only {list(members)} for a secure sum: with no other "
                f"member {self.name!r}'s array would leave unmasked"
            )
        signer = None if self.tls is None else _Signer(self.tls)
        pairs = {}
        for peer in members:
            if peer == self.name:
                continue
            b = bundles.get(peer)
            if not isinstance(b, Mapping) or "x25519" not in b:
                raise ProtocolError(
                    f"the coordinator sent no key of {peer!r} for secure aggregation"
                )
            public = _unb64(b["x25519"], f"{peer!r}'s key")
            if signer is not None:
                if "cert" not in b or "sig" not in b:
                    raise PrivacyError(
                        f"{peer!r}'s secure-aggregation key is not signed: refusing to mask "
                        "with a key the coordinator could have substituted"
                    )
                signer.verify(b, peer, _INFO, peer, public)
            shared = x25519_secret(self._secret, public, peer)
            lo, hi = sorted((self.name, peer))
            key = hkdf(shared, _statement(_INFO, lo, hi), salt=session)
            pairs[peer] = (1 if self.name == lo else -1, key)
        self._pairs, self._used, self.n_members = pairs, {}, len(members)

    def private_state(self) -> str:
        """Everything this party needs to go on masking in another process, as JSON: its
        private key, its pairwise keys and the ``(round, name)`` it masked. Secret: it is
        kept where the party runs (a Flower node's ``Context.state``), never sent."""
        return json.dumps(
            {
                "secret": self._secret.private_bytes_raw().hex(),
                "frac_bits": self.frac_bits,
                "n_members": self.n_members,
                "pairs": {p: [sign, key.hex()] for p, (sign, key) in self._pairs.items()},
                "used": [[r, n, d] for (r, n), d in self._used.items()],
            }
        )

    @classmethod
    def from_private_state(cls, name: str, text: str, tls: Any = None) -> SecureSum:
        """The :class:`SecureSum` that :meth:`private_state` wrote (the same keys, the
        same record of what was masked); a :class:`ProtocolError` if it is damaged."""
        try:
            st = json.loads(text)
            out = cls(name, int(st["frac_bits"]), tls, bytes.fromhex(st["secret"]))
            out._pairs = {str(p): (int(s), bytes.fromhex(k)) for p, (s, k) in st["pairs"].items()}
            out._used = {(int(r), str(n)): str(d) for r, n, d in st["used"]}
            out.n_members = int(st["n_members"])
        except (ValueError, TypeError, KeyError, AttributeError):
            raise ProtocolError(
                f"{name!r}: its saved secure-aggregation state is damaged"
            ) from None
        return out

    def mask(self, arrays: Mapping[str, np.ndarray], round: int) -> dict[str, np.ndarray]:
        """``arrays`` in fixed point plus this party's pairwise masks (``uint64``), for the
        secure sum of round ``round``."""
        if not self.n_members:
            raise ProtocolError(f"{self.name!r} has no secure-aggregation keys (no secagg:peers)")
        out = {}
        for name, x in arrays.items():
            enc = encode(x, self.frac_bits, self.n_members, f"{self.name}'s {name!r}")
            digest = hashlib.sha256(enc.tobytes() + repr(enc.shape).encode()).hexdigest()
            if self._used.setdefault((round, name), digest) != digest:
                raise ProtocolError(
                    f"{self.name!r} was asked to mask {name!r} of round {round} twice with "
                    "different values (that would reveal their difference)"
                )
            info = _statement(_INFO, str(int(round)), name)
            total = enc.reshape(-1).copy()
            for sign, key in self._pairs.values():
                stream = _keystream(hkdf(key, info), total.size)
                total = total + stream if sign > 0 else total - stream  # modulo 2^64
            out[name] = total.reshape(enc.shape)
        return out


def unmask_sum(
    replies: Mapping[str, Message], shapes: Mapping[str, tuple[int, ...]], frac_bits: int
) -> dict[str, np.ndarray]:
    """The decoded sums of the masked arrays ``shapes`` over all ``replies`` (by party),
    each checked on arrival: present, of its shape, ``uint64`` (the sender is named)."""
    sums = {name: np.zeros(shape, dtype=np.uint64) for name, shape in shapes.items()}
    for msg in replies.values():
        for name, shape in shapes.items():
            a = msg.array(name, shape)
            if a.dtype != np.uint64:
                raise ProtocolError(
                    f"{msg.sender!r} sent {name!r} as {a.dtype}: a masked array is uint64",
                    party=msg.sender,
                )
            np.add(sums[name], a, out=sums[name])  # modulo 2^64
    return {name: decode(s, frac_bits) for name, s in sums.items()}


def check_secure_sum_members(members: Sequence[str], what: str) -> None:
    """A :class:`ConfigError` unless at least two ``what`` (a plural) take part in a secure
    sum (with one, the sum is its own array: nothing is hidden)."""
    if len(members) < 2:
        raise ConfigError(
            f"secagg hides each array in the sum of the {what}: it needs at least two {what} "
            f"(with one, the sum is its array), got {list(members)}"
        )


def secure_sum_setup(
    coord: Coordinator, parties: Sequence[str], frac_bits: int, round: int = 0
) -> None:
    """The key exchange of a run's secure sums, driven by the coordinator: it relays the
    parties' public keys (it learns nothing it could unmask with)."""
    replies = coord.broadcast(
        list(parties), "secagg:keys", meta={"frac_bits": frac_bits}, round=round
    )
    bundles = {}
    for p, r in replies.items():
        raw = r.meta.get("bundle")
        try:
            bundles[p] = loads(str(raw))
        except json.JSONDecodeError:
            raise ProtocolError(f"{p!r} sent a malformed secure-aggregation key") from None
    meta = {
        "members": json.dumps(list(parties)),
        "bundles": json.dumps(bundles),
        "session": secrets.token_hex(32),
    }
    coord.broadcast(list(parties), "secagg:peers", meta=meta, round=round)


class SecureSumParty(Party):
    """A party that can take part in secure sums (the handlers of :func:`secure_sum_setup`)."""

    secure_sum: SecureSum | None = None
    #: the members the run's secure sums must list (set by ``Algorithm.make_party``)
    secure_members: frozenset[str] | None = None

    def keyed_sum(self, what: str) -> SecureSum:
        """This party's :class:`SecureSum`, or a :class:`ProtocolError` when the coordinator
        asks for ``what`` before the key exchange (``what`` leaves this party only masked)."""
        if self.secure_sum is None:
            raise ProtocolError(
                f"{self.name!r} was asked for {what} before the secure-aggregation key "
                "exchange: it sends it only masked"
            )
        return self.secure_sum

    @handles("secagg:keys")
    def on_secagg_keys(self, msg: Message) -> Message:
        bits = int(msg.number("frac_bits"))
        if not 8 <= bits <= 48:
            raise ProtocolError(f"the coordinator asked for frac_bits={bits} (8..48)")
        self.secure_sum = SecureSum(self.name, bits, tls=getattr(self.transport, "tls", None))
        return self.reply(msg, meta={"bundle": json.dumps(self.secure_sum.bundle())})

    @handles("secagg:peers")
    def on_secagg_peers(self, msg: Message) -> None:
        if self.secure_sum is None:
            raise ProtocolError(f"{self.name!r} got secagg:peers before secagg:keys")
        try:
            members = loads(str(msg.meta.get("members")))
            bundles = loads(str(msg.meta.get("bundles")))
            session = bytes.fromhex(str(msg.meta.get("session")))
        except (json.JSONDecodeError, ValueError):
            raise ProtocolError("the coordinator sent malformed secure-aggregation keys") from None
        if not isinstance(members, list) or not isinstance(bundles, dict) or len(session) < 16:
            raise ProtocolError("the coordinator sent malformed secure-aggregation keys")
        if self.secure_members is not None and set(map(str, members)) != self.secure_members:
            raise PrivacyError(
                f"the coordinator listed {members} as the members of {self.name!r}'s secure "
                f"sums, this run's are {sorted(self.secure_members)}: with members left out "
                "the rest could read what it masks"
            )
        self.secure_sum.set_peers([str(m) for m in members], bundles, session)


def secured_policy(policy: PrivacyPolicy, masked: Mapping[str, Sequence[str]]) -> PrivacyPolicy:
    """``policy`` with secure sums: every array ``name`` of ``masked`` is replaced by the
    masked arrays ``masked[name]`` that stand for it, and the coordinator may send the
    key-exchange kinds to every role it sends anything to (nothing else widens)."""
    allowed = {
        pair: frozenset(m for n in names for m in masked.get(n, (n,)))
        for pair, names in policy.allowed.items()
    }
    kinds = {
        pair: ks | frozenset(SECAGG_KINDS) if pair[0] == "coordinator" else ks
        for pair, ks in policy.kinds.items()
    }
    return PrivacyPolicy(f"{policy.name}+secagg", allowed, kinds, policy.strict_kinds)
