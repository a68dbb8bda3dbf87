r"""Private set intersection (PSI) by commutative Diffie-Hellman blinding on P-256.

Protocol (semi-honest, coordinator-assisted, K >= 1 parties)
-----------------------------------------------------------
Every party ``k`` draws a secret scalar ``a_k`` and hashes each of its IDs to a
point ``H(id)`` of the NIST P-256 curve (prime order, cofactor 1). A point is
represented by its x-coordinate only, and the blinding ``x(P) -> x(a P)`` is
computed with ECDH (the ``cryptography`` package, OpenSSL). Because ``P`` and
``-P`` share their x-coordinate, ``x(b \cdot x(a P)) = x(ab P) = x(a \cdot x(b P))``:
blinding by x-coordinates commutes.

1. ``psi:blind`` — party ``k`` sends ``{x(a_k H(id))}`` for its IDs, in a secret
   random order, to the coordinator;
2. ``psi:reblind`` — the coordinator passes that set through every other party
   ``j`` in turn (chains run in parallel, one party per chain per step), which
   raises every element to ``a_j``; the fully blinded set ``{x(a_1 \cdots a_K H(id))}``
   goes back to the coordinator, never to a party;
3. ``psi:result`` — the coordinator intersects the K fully blinded sets and tells
   each party the positions (in its own secret order) of its IDs that are in the
   intersection. Each party sorts its common IDs, so every party ends up with the
   same rows in the same order.

Hash to curve: ``H(id)`` is try-and-increment — the first counter ``c`` for which
``SHA-256("fedviews-psi-v1|P-256|" || c || id)`` is the x-coordinate of a curve
point (about two tries on average). IDs are encoded with their type
(``i:<int>``, ``s:<utf-8>``), so ``5`` and ``"5"`` never collide.

Threat model and leakage
------------------------
Semi-honest (honest-but-curious) parties and coordinator that do not collude;
security rests on the decisional Diffie-Hellman assumption on P-256 with ``H``
modelled as a random oracle. A party learns the intersection (its own IDs that
every party holds) and the **set sizes** of the other parties (it re-blinds
their sets). The coordinator learns no ID but learns the **set sizes** and, by
comparing fully blinded sets, the size of every intersection of a subset of
parties (the Venn-diagram cell counts); with two parties that is just the
intersection size. A coordinator colluding with a party can test guessed IDs
of the other parties; malicious parties (wrong keys, fake sets) are not
prevented. Only the arrays ``psi_set`` and ``psi_positions`` cross the
barrier (see :data:`PSI_POLICY`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fedviews.data._align import register_intersection
from fedviews.errors import DataError, ProtocolError, require
from fedviews.federation import Coordinator, Message, Party, PrivacyPolicy, federate, handles

__all__ = ["PSI_POLICY", "PSIParty", "blind_ids", "psi_intersect", "reblind", "run_psi"]

PSI_POLICY = PrivacyPolicy.of(
    "psi",
    {("party", "coordinator"): ["psi_set"], ("coordinator", "party"): ["psi_set", "psi_positions"]},
)
_DST = b"fedviews-psi-v1|P-256|"
_WIDTH = 32  # bytes of an x-coordinate


def _ec() -> Any:
    require("cryptography", "grpc")
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec


def _encode_id(v: Any) -> bytes:
    if isinstance(v, (bytes, np.bytes_)):
        return b"b:" + bytes(v)
    if isinstance(v, (str, np.str_)):
        return b"s:" + str(v).encode("utf-8")
    return b"i:" + str(int(v)).encode("ascii")


def _hash_to_point(ec: Any, curve: Any, v: Any) -> Any:
    data = _encode_id(v)
    for counter in range(256):
        x = hashlib.sha256(_DST + struct.pack("<B", counter) + data).digest()
        try:
            return ec.EllipticCurvePublicKey.from_encoded_point(curve, b"\x02" + x)
        except ValueError:  # x is not on the curve: try the next counter
            continue
    raise ProtocolError("hash to curve failed 256 times (probability 2^-256)")  # pragma: no cover


def new_key() -> Any:
    """A fresh secret blinding scalar (a P-256 private key)."""
    ec = _ec()
    return ec.generate_private_key(ec.SECP256R1())


def blind_ids(key: Any, ids: np.ndarray) -> np.ndarray:
    """``(n, 32)`` uint8 x-coordinates of ``key * H(id)`` for every ID."""
    ec = _ec()
    curve, ecdh = ec.SECP256R1(), ec.ECDH()
    out = bytearray()
    for v in ids.tolist():
        out += key.exchange(ecdh, _hash_to_point(ec, curve, v))
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(len(ids), _WIDTH).copy()


def reblind(key: Any, points: np.ndarray) -> np.ndarray:
    """Raise every x-coordinate in ``points`` ((n, 32) uint8) to ``key``."""
    ec = _ec()
    pts = np.ascontiguousarray(points, dtype=np.uint8)
    if pts.ndim != 2 or pts.shape[1] != _WIDTH:
        raise ProtocolError(f"psi_set must have shape (n, {_WIDTH}), got {pts.shape}")
    curve, ecdh = ec.SECP256R1(), ec.ECDH()
    out = bytearray()
    raw = pts.tobytes()
    for i in range(len(pts)):
        try:
            P = ec.EllipticCurvePublicKey.from_encoded_point(
                curve, b"\x02" + raw[i * _WIDTH : (i + 1) * _WIDTH]
            )
        except ValueError:
            raise ProtocolError(f"psi_set element {i} is not a curve point") from None
        out += key.exchange(ecdh, P)
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(len(pts), _WIDTH).copy()


class PSIParty(Party):
    """A party's side of the PSI: its IDs never leave it, only blinded points do.

    After the protocol, :attr:`rows` holds the positions of the common IDs in
    this party's ID list, ordered by ascending ID (the same order at every party).
    """

    def __init__(self, name: str, ids: Any, role: str = "party") -> None:
        super().__init__(name, role)
        self.ids = np.asarray(ids)
        self.rows: np.ndarray | None = None
        self._key: Any = None
        self._order: np.ndarray | None = None

    @handles("psi:blind")
    def on_psi_blind(self, msg: Message) -> Message:
        self._key = new_key()
        rng = np.random.default_rng()  # secret order, unrelated to the ID order
        self._order = rng.permutation(len(self.ids))
        return self.reply(msg, arrays={"psi_set": blind_ids(self._key, self.ids[self._order])})

    @handles("psi:reblind")
    def on_psi_reblind(self, msg: Message) -> Message:
        if self._key is None:
            raise ProtocolError(f"{self.name!r}: psi:reblind before psi:blind")
        return self.reply(msg, arrays={"psi_set": reblind(self._key, msg.arrays["psi_set"])})

    @handles("psi:result")
    def on_psi_result(self, msg: Message) -> Message:
        if self._order is None:
            raise ProtocolError(f"{self.name!r}: psi:result before psi:blind")
        rows = self._order[np.asarray(msg.arrays["psi_positions"], dtype=np.int64)]
        self.rows = rows[np.argsort(self.ids[rows], kind="stable")]
        self._key = None  # the scalar is single-use
        return self.reply(msg, meta={"n_common": len(rows)})


def _as_rows(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.uint8).view(f"V{_WIDTH}").ravel()


def run_psi(coordinator: Party, parties: Sequence[str]) -> int:
    """Drive the PSI from ``coordinator`` among ``parties``; return the intersection size.

    Chain ``k`` (party ``k``'s set) visits party ``(k + s) mod K`` at step ``s``,
    so all parties work in parallel without waiting for each other.
    """
    names = list(parties)
    K = len(names)

    def step(k: int, s: int, points: np.ndarray) -> np.ndarray:
        kind, arrays = ("psi:blind", {}) if s == 0 else ("psi:reblind", {"psi_set": points})
        return coordinator.send(names[(k + s) % K], kind, arrays=arrays).arrays["psi_set"]

    sets = [np.empty((0, _WIDTH), dtype=np.uint8)] * K
    with ThreadPoolExecutor(max_workers=K) as pool:
        for s in range(K):
            sets = list(pool.map(step, range(K), [s] * K, sets))
    full = [_as_rows(x) for x in sets]
    common = full[0]
    for f in full[1:]:
        common = np.intersect1d(common, f)
    for name, f in zip(names, full, strict=True):
        pos = np.flatnonzero(np.isin(f, common)).astype(np.int64)
        coordinator.send(name, "psi:result", arrays={"psi_positions": pos})
    return int(len(common))


class _PSIDriver(Coordinator):
    def __init__(self, parties: Sequence[str]) -> None:
        super().__init__()
        self.parties = list(parties)

    def run(self) -> int:
        return run_psi(self, self.parties)


def psi_intersect(id_arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Run the PSI among in-process parties; return ``(common IDs sorted, transport)``.

    The transport's message log shows what crossed (only blinded points and
    positions).
    """
    if not id_arrays:
        raise DataError("psi needs at least one ID list")
    parties = [PSIParty(f"party{k}", ids) for k, ids in enumerate(id_arrays)]
    driver = _PSIDriver([p.name for p in parties])
    transport = federate([driver, *parties], PSI_POLICY)
    driver.run()
    first = parties[0]
    assert first.rows is not None
    return np.sort(first.ids[first.rows]), transport


@register_intersection("psi")
def _psi(id_arrays: Sequence[np.ndarray]) -> np.ndarray:
    return psi_intersect(id_arrays)[0]
