r"""Private set intersection (PSI) by commutative Diffie-Hellman blinding in ristretto255.

Protocol (semi-honest, coordinator-assisted, K >= 1 parties)
-----------------------------------------------------------
Every party ``k`` draws a fresh secret scalar ``a_k`` (uniform modulo the group
order ``l``, non-zero) and hashes each of its IDs to a group element ``H(id)``
of ristretto255, the prime-order group built on Curve25519 (RFC 9496). Scalar
multiplication commutes, ``b (a P) = a (b P)``, so blinding in any order gives
the same element.

1. ``psi:blind`` — party ``k`` sends ``{a_k H(id)}`` for its IDs, in a secret
   random order, to the coordinator;
2. ``psi:reblind`` — the coordinator passes that set through every other party
   ``j`` in turn (chains run in parallel, one party per chain per step), which
   multiplies every element by ``a_j``; the fully blinded set
   ``{a_1 \cdots a_K H(id)}`` goes back to the coordinator, never to a party;
3. ``psi:result`` — the coordinator intersects the K fully blinded sets and tells
   each party the positions (in its own secret order) of its IDs that are in the
   intersection. Each party sorts its common IDs, so every party ends up with the
   same rows in the same order.

Every ``psi:*`` message carries ``meta={"group": <name>}``: one session can run
several independent PSIs (alignment *groups*, e.g. each data owner with each
label owner, or a test split), sequentially or concurrently; a party keeps its
key, secret order and result per group (see :class:`PSIParty`).

The group operations (hashing IDs to ristretto255, blinding, their cost):
:mod:`fedviews.privacy._psi_group`.

Threat model and leakage
------------------------
Semi-honest (honest-but-curious) parties and coordinator that do not collude;
security rests on the decisional Diffie-Hellman assumption in ristretto255 with
``H`` modelled as a random oracle. Keys are fresh for every run and group, so
blinded sets of two runs cannot be linked. What leaks, and to whom:

- a **party** learns the intersection (its own IDs that every party in the group
  holds) and the **set sizes** of the other parties (it re-blinds their sets);
  it sees the other sets only under keys it does not know;
- the **coordinator** learns no ID but learns every party's **set size** and, by
  comparing fully blinded sets, the size of every intersection of a subset of
  the parties (all Venn-diagram cell counts: for parties ``A, B, C`` the counts
  ``|A∩B|``, ``|A∩C|``, ``|B∩C|``, ``|A∩B∩C|``); with two parties that is just the
  intersection size. It also learns which positions of each (secretly shuffled)
  set are common — nothing about which ID sits there.

Sealed chains (deployments with TLS)
------------------------------------
A coordinator that could have a party re-blind *any* set could test guessed IDs:
send the party ``{H(c)}`` for a dictionary of candidates ``c`` and compare the
answer with that party's blinded set. Where the transport seals party-to-party
messages end to end (:mod:`fedviews.federation._e2e`; a TLS deployment), the
chains are therefore sealed, and every party checks them against the order its
*own* configuration fixes (:attr:`PSIParty.chains`: the group's members; a
deployed party takes them from its config), never against the coordinator's word:

- each party hands its blinded set, and every set it re-blinds before a chain's
  last step, to the coordinator sealed for the next member of that order
  (``psi_sealed``: an opaque byte array the coordinator relays but can neither
  read nor forge). A request whose ``next`` is empty before the last step, names
  a skipped, foreign or out-of-order member, or comes for a group the party has
  no member list of, is refused (:class:`~fedviews.errors.PrivacyError` naming
  the coordinator): a singly or partly blinded set never leaves a party unsealed;
- a party blinds its set once per group and re-blinds only sets sealed by the
  member before it, ``K - 1`` of them per group, each once. Every chain passes
  the members in the same cyclic order and the coordinator runs the steps one
  after another, so the ``s``-th set a party re-blinds is the set of the member
  ``s`` places before it: the *origin* follows from the authenticated sealer and
  the count, never from a field the sealer writes (one party cannot have
  dictionaries re-blinded under invented origins);
- only the fully blinded set of a chain's last step reaches the coordinator in
  the clear.

The coordinator then never sees a singly or partly blinded set and cannot have
anything of its own re-blinded: the dictionary attack is closed. It still learns
the sizes and intersection counts listed above. Without sealing (in one process;
a deployment with ``--insecure`` or ``federation.end_to_end = false``) a party
re-blinds what the coordinator sends it: there the coordinator is trusted not to
test guessed IDs. Flower has no end-to-end keys, so the deployment refuses the
PSI there (``fedviews.deploy._flower_node.refuse_psi``).

Not covered: a coordinator colluding with a party can still test guessed IDs of
the other parties (the member before a party in the chain order can seal a
dictionary in place of a set it should hand on, which that party re-blinds like
the real one: at most ``K - 1`` sets per group); malicious parties (wrong keys, fake or inflated sets) are not prevented.
Only the arrays ``psi_set``, ``psi_sealed`` and ``psi_positions`` cross the
barrier (see :data:`PSI_POLICY`); the metadata is the group name, the next party
of a chain, the set size and the number of common rows.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedviews.data import register_intersection
from fedviews.errors import DataError, PrivacyError, ProtocolError
from fedviews.federation import (
    Coordinator,
    Message,
    Party,
    PrivacyPolicy,
    federate,
    handles,
    to_host,
)
from fedviews.privacy._psi_group import (
    _WIDTH,
    _check_set,
    _sodium,
    blind_ids,
    new_key,
    reblind,
)

PSI_POLICY = PrivacyPolicy.of(
    "psi",
    {
        ("party", "coordinator"): ["psi_set", "psi_sealed"],
        ("coordinator", "party"): ["psi_set", "psi_sealed", "psi_positions"],
    },
    kinds={("coordinator", "party"): ["psi:blind", "psi:reblind", "psi:result"]},
)


# -- parties -----------------------------------------------------------------
@dataclass
class _GroupState:
    key: bytes
    order: np.ndarray  # secret permutation: set position -> row of ``ids``
    ids: np.ndarray  # the ID list used for this group
    reblinded: list[str] = field(default_factory=list)  # origins of the sealed sets re-blinded


def _group_of(msg: Message) -> str:
    group = msg.meta.get("group")
    if not isinstance(group, str) or not group:
        raise ProtocolError(f"{msg.kind!r} without a PSI group name (meta['group'])")
    return group


class PSIParty(Party):
    """A party's side of the PSI: its IDs never leave it, only blinded elements do.

    Several alignment groups may run (also concurrently); for each group the
    party blinds the IDs returned by :meth:`psi_ids` and, once that group's PSI
    finished, :attr:`psi_rows` ``[group]`` holds the positions of the common IDs
    in that ID list, ordered by ascending ID (the same order at every party).
    ``chains`` maps each group to its members in chain order, as this party's own
    configuration fixes them; a transport that seals needs it (see "Sealed chains"
    in :mod:`fedviews.privacy._psi`).
    """

    def __init__(
        self,
        name: str,
        ids: Any,
        role: str = "party",
        chains: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        super().__init__(name, role)
        self.ids = np.asarray(ids)
        #: the members of each alignment group in chain order, as this party's own
        #: configuration fixes them (a sealed chain follows it, see :meth:`_chain`)
        self.chains = {g: list(m) for g, m in (chains or {}).items()}
        self.psi_rows: dict[str, np.ndarray] = {}
        self._psi_state: dict[str, _GroupState] = {}
        self._psi_blinded: set[str] = set()  # groups this party blinded its set for (sealed)
        self._psi_lock = threading.Lock()

    def psi_ids(self, group: str) -> np.ndarray:
        """The IDs this party intersects in ``group`` (default: :attr:`ids` for every group)."""
        return self.ids

    def _state(self, msg: Message) -> _GroupState:
        group = _group_of(msg)
        with self._psi_lock:
            state = self._psi_state.get(group)
        if state is None:
            raise ProtocolError(f"{self.name!r}: {msg.kind!r} of group {group!r} before psi:blind")
        return state

    @handles("psi:blind")
    def on_psi_blind(self, msg: Message) -> Message:
        group = _group_of(msg)
        ids = np.asarray(self.psi_ids(group))
        if ids.ndim != 1:
            raise DataError(f"{self.name!r}: PSI IDs of group {group!r} must be one-dimensional")
        if len(np.unique(ids)) != len(ids):
            raise DataError(f"{self.name!r}: the PSI IDs of group {group!r} have duplicates")
        sealed = self._sealing() is not None
        nxt = self._next_hop(msg, group, 0) if sealed else ""
        state = _GroupState(
            key=new_key(),
            order=_secret_permutation(len(ids)),  # unrelated to the ID order
            ids=ids,
        )
        with self._psi_lock:
            if sealed and group in self._psi_blinded:
                raise PrivacyError(
                    f"{self.name!r} refused {msg.sender!r}'s second psi:blind of group "
                    f"{group!r}: a party blinds its set once per group (a fresh key would "
                    "reopen the chain for another set to re-blind)"
                )
            if sealed:
                self._psi_blinded.add(group)
            self._psi_state[group] = state
            self.psi_rows.pop(group, None)
        points = blind_ids(state.key, ids[state.order])
        return self._hand_on(msg, group, nxt, points, {"n": len(ids)})

    def _sealing(self) -> Any:
        """The transport's end-to-end keys, if it seals party-to-party messages."""
        return getattr(self.transport, "e2e", None)

    def _members(self, msg: Message, group: str) -> list[str]:
        """The members of ``group`` in chain order, as this party's own configuration
        (:attr:`chains`) fixes them: a sealed chain never follows the coordinator's word."""
        members = self.chains.get(group)
        if not members or self.name not in members:
            raise PrivacyError(
                f"{self.name!r} has no member list of the PSI group {group!r} that includes it: "
                f"{msg.sender!r}'s {msg.kind!r} is refused (a sealed chain follows the order "
                "this party's own configuration fixes, never the coordinator's)"
            )
        return members

    def _next_hop(self, msg: Message, group: str, step: int) -> str:
        """The party that gets this party's output of ``step`` of a sealed chain of
        ``group`` (0: its blinded set; ``s``: the ``s``-th set it re-blinds), in the
        order of :meth:`_members`; ``""`` after a chain's last step, whose fully blinded
        set goes to the coordinator. A request whose ``next`` says otherwise (empty
        before the last step, a skipped or foreign member) is refused, naming its sender."""
        members = self._members(msg, group)
        k, j = len(members), members.index(self.name)
        expected = members[(j + 1) % k] if step < k - 1 else ""
        said = msg.meta.get("next", "")
        if said != expected:
            raise PrivacyError(
                f"{self.name!r} refused {msg.sender!r}'s {msg.kind!r} of group {group!r}: it "
                f"names {said!r} as the chain's next party where the order of the members "
                f"{members} gives {expected!r} (a singly or partly blinded set never leaves "
                "a party unsealed, and no member is skipped)"
            )
        return expected

    def _hand_on(
        self, msg: Message, group: str, nxt: str, points: np.ndarray, meta: dict[str, Any]
    ) -> Message:
        """Reply with ``points``: sealed for the chain's next party ``nxt`` if there is one,
        else (a chain's last step, or a transport that does not seal) in the clear."""
        if not nxt:
            return self.reply(msg, arrays={"psi_set": points}, meta={"group": group, **meta})
        inner = Message(
            "psi:chain", self.name, nxt, arrays={"psi_set": points}, meta={"group": group}
        )
        blob = np.frombuffer(self._sealing().seal(inner), dtype=np.uint8)
        return self.reply(msg, arrays={"psi_sealed": blob}, meta={"group": group, **meta})

    @handles("psi:reblind")
    def on_psi_reblind(self, msg: Message) -> Message:
        state, group = self._state(msg), _group_of(msg)
        keys = self._sealing()
        if keys is None:  # in one process: re-blind what the coordinator sends
            points = msg.arrays.get("psi_set")
            if points is None:
                raise ProtocolError(f"{self.name!r}: psi:reblind without psi_set")
            points = reblind(state.key, points, msg.sender)
            return self.reply(msg, arrays={"psi_set": points}, meta={"group": group})
        blob = msg.arrays.get("psi_sealed")
        if blob is None:
            raise PrivacyError(
                f"{self.name!r} re-blinds only sets sealed by another party (the coordinator "
                "sent one of its own: refused, it could test guessed IDs with it)"
            )
        members = self._members(msg, group)
        inner = keys.open(np.ascontiguousarray(blob, dtype=np.uint8).tobytes())
        if inner.kind != "psi:chain" or inner.meta.get("group") != group:
            raise PrivacyError(
                f"{self.name!r}: {inner.sender!r} sealed a set of another chain or group"
            )
        # Every chain passes the members in the same cyclic order and the coordinator runs
        # its steps one after another, so the s-th set this party re-blinds comes from the
        # member before it and is the set of the member s places before it: the origin
        # follows from the authenticated sealer and the count, never from a field it wrote.
        k, j = len(members), members.index(self.name)
        sealer = members[(j - 1) % k]
        if inner.sender != sealer:
            raise PrivacyError(
                f"{self.name!r} re-blinds in group {group!r} only sets sealed by {sealer!r}, "
                f"the member before it in the chain order {members}; {inner.sender!r} sealed "
                "this one: refused"
            )
        with self._psi_lock:
            done = state.reblinded
            if len(done) >= k - 1:
                raise PrivacyError(
                    f"{self.name!r} already re-blinded the set of "
                    f"{' and '.join(map(repr, done)) or 'no one'} in group {group!r}, every "
                    f"other member's: {msg.sender!r}'s psi:reblind is refused (each set is "
                    "re-blinded once)"
                )
            step = len(done) + 1
            nxt = self._next_hop(msg, group, step)
            done.append(members[(j - step) % k])
        points = reblind(state.key, inner.array("psi_set", (None, _WIDTH)), inner.sender)
        return self._hand_on(msg, group, nxt, points, {})

    @handles("psi:result")
    def on_psi_result(self, msg: Message) -> Message:
        state, group = self._state(msg), _group_of(msg)
        pos = np.asarray(msg.arrays.get("psi_positions", np.empty(0)))
        if pos.dtype.kind not in "iu" or pos.ndim != 1:
            raise ProtocolError(f"{self.name!r}: psi_positions must be a 1-d integer array")
        pos = pos.astype(np.int64)
        if len(pos) and (pos.min() < 0 or pos.max() >= len(state.order)):
            raise ProtocolError(f"{self.name!r}: psi_positions out of range")
        if len(np.unique(pos)) != len(pos):
            raise ProtocolError(f"{self.name!r}: psi_positions has duplicates")
        rows = state.order[pos]
        rows = rows[np.argsort(state.ids[rows], kind="stable")]
        with self._psi_lock:
            self.psi_rows[group] = rows
            self._psi_state.pop(group, None)  # the scalar is single-use
        return self.reply(msg, meta={"group": group, "n_common": len(rows)})


# -- coordinator ---------------------------------------------------------------
def _secret_permutation(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` from the OS's CSPRNG."""
    seed = int.from_bytes(os.urandom(32), "little")
    return np.random.Generator(np.random.PCG64(seed)).permutation(n)


def _full_set(reply: Message, sender: str, n: int | None) -> np.ndarray:
    if "psi_sealed" in reply.arrays:  # a sealed chain: relayed as it is to the next party
        sealed = to_host(reply.arrays["psi_sealed"])
        if sealed.dtype != np.uint8 or sealed.ndim != 1:
            raise ProtocolError(f"{sender!r} replied with a malformed psi_sealed")
        return sealed
    if "psi_set" not in reply.arrays:
        raise ProtocolError(f"{sender!r} replied without a psi_set")
    pts = to_host(reply.arrays["psi_set"])
    _check_set(pts, sender, "replied with")
    if n is not None and len(pts) != n:
        raise ProtocolError(f"{sender!r} re-blinded {n} elements into {len(pts)}")
    return pts


def _common_positions(sets: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Positions, in each set, of the elements common to all sets (sorted)."""
    # fixed-width "S32" compares all 32 bytes (every element has exactly 32), and
    # sorts faster than the equivalent "V32"
    keys = [np.ascontiguousarray(s).view(f"S{_WIDTH}").ravel() for s in sets]
    common, pos = keys[0], [np.arange(len(keys[0]))]
    for k in keys[1:]:
        common, i_common, i_k = np.intersect1d(common, k, return_indices=True)
        pos = [p[i_common] for p in pos] + [i_k]
    return [np.sort(p) for p in pos]


def run_psi(coordinator: Party, parties: Sequence[str], group: str = "default") -> int:
    """Drive the PSI of ``group`` from ``coordinator`` among ``parties``; return the
    intersection size.

    Chain ``k`` (party ``k``'s set) visits party ``(k + s) mod K`` at step ``s``,
    so all parties work in parallel without waiting for each other; step ``s + 1``
    starts when every chain finished step ``s`` (a party of a sealed chain derives
    the origin of the ``s``-th set it re-blinds from that order). Several
    groups may run concurrently (e.g. from different threads of the coordinator);
    afterwards each party holds the group's rows in ``psi_rows[group]``.
    """
    names = list(parties)
    K = len(names)
    if K == 0:
        raise DataError("psi needs at least one party")
    if len(set(names)) != K:
        raise DataError(f"a party appears twice in the PSI of group {group!r}: {names}")
    if not isinstance(group, str) or not group:
        raise DataError("the PSI group name must be a non-empty string")
    meta = {"group": group}
    sizes: dict[int, int] = {}

    def step(k: int, s: int, points: np.ndarray) -> np.ndarray:
        target = names[(k + s) % K]
        hop = {**meta, "next": names[(k + s + 1) % K] if s < K - 1 else ""}
        if s == 0:
            reply = coordinator.send(target, "psi:blind", meta=hop)
            n = reply.meta.get("n")
            if n is not None and not (
                isinstance(n, (int, float))
                and not isinstance(n, bool)
                and math.isfinite(n)
                and n >= 0
                and n == int(n)
            ):  # (int(nan) raised a raw ValueError in the coordinator)
                raise ProtocolError(
                    f"{target!r} said its set holds n = {n!r} elements: expected a count",
                    party=target,
                )
            sizes[k] = -1 if n is None else int(n)
            return _full_set(reply, target, None)
        name = "psi_sealed" if points.ndim == 1 else "psi_set"
        reply = coordinator.send(target, "psi:reblind", arrays={name: points}, meta=hop)
        return _full_set(reply, target, len(points) if name == "psi_set" else None)

    sets = [np.empty((0, _WIDTH), dtype=np.uint8)] * K
    with ThreadPoolExecutor(max_workers=K) as pool:
        for s in range(K):
            sets = list(pool.map(step, range(K), [s] * K, sets))
        for k, pts in enumerate(sets):
            if pts.ndim != 2 or (sizes.get(k, -1) >= 0 and len(pts) != sizes[k]):
                raise ProtocolError(
                    f"the PSI chain of {names[k]!r} in group {group!r} came back without its "
                    f"{sizes.get(k)} fully blinded elements"
                )
        positions = _common_positions(sets)
        n_common = len(positions[0])

        def result(k: int) -> None:
            small = np.int32 if len(sets[k]) < 2**31 else np.int64
            arrays = {"psi_positions": positions[k].astype(small)}
            reply = coordinator.send(names[k], "psi:result", arrays=arrays, meta=meta)
            if reply.meta.get("n_common") != n_common:
                raise ProtocolError(f"{names[k]!r} did not take the PSI result of {group!r}")

        list(pool.map(result, range(K)))
    return n_common


class _PSIDriver(Coordinator):
    def __init__(self, parties: Sequence[str]) -> None:
        super().__init__()
        self.parties = list(parties)

    def run(self) -> int:
        return run_psi(self, self.parties)


def psi_intersect(id_arrays: Sequence[Any]) -> tuple[np.ndarray, Any]:
    """Run the PSI among in-process parties; return ``(common IDs sorted, transport)``.

    The transport's message log shows what crossed (only blinded elements and
    positions).
    """
    if not id_arrays:
        raise DataError("psi needs at least one ID list")
    parties = [PSIParty(f"party{k}", ids) for k, ids in enumerate(id_arrays)]
    driver = _PSIDriver([p.name for p in parties])
    transport = federate([driver, *parties], PSI_POLICY)
    driver.run()
    first = parties[0]
    return first.ids[first.psi_rows["default"]], transport


@register_intersection("psi")
def _psi(id_arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``align(..., method="psi")``: the common IDs, found by :func:`psi_intersect`."""
    _sodium()  # a missing extra raises MissingDependency here, not inside a party
    return psi_intersect(id_arrays)[0]
