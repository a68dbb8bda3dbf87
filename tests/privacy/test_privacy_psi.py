"""PSI (ristretto255): exact intersection, alignment groups, invalid elements, what crosses."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("rbcl")

from fedviews.data import align  # noqa: E402
from fedviews.errors import DataError, ProtocolError  # noqa: E402
from fedviews.federation import Coordinator, InProcessTransport, Message, handles  # noqa: E402
from fedviews.privacy import (  # noqa: E402
    PSI_POLICY,
    PSIParty,
    blind_ids,
    hash_ids,
    new_key,
    psi_intersect,
    reblind,
    run_psi,
)


class _Recording(InProcessTransport):
    """Keeps every message that crossed, as it went over the wire."""

    def __init__(self, policy):
        super().__init__(policy)
        self.messages: list[Message] = []
        self._lock = threading.Lock()

    def request(self, msg):
        reply = super().request(msg)
        with self._lock:
            self.messages += [msg, reply]
        return reply

    def blob(self) -> bytes:
        return b"".join(m.encode() for m in self.messages)

    def elements(self) -> set[bytes]:
        out: set[bytes] = set()
        for m in self.messages:
            if "psi_set" in m.arrays:
                out |= {r.tobytes() for r in m.arrays["psi_set"]}
        return out


class _Driver(Coordinator):
    def __init__(self, names, groups=("default",)):
        super().__init__()
        self.names, self.groups = names, groups

    def run(self):
        return run_psi(self, self.names, self.groups[0])


def _federation(parties, groups=("default",)):
    driver = _Driver([p.name for p in parties], groups)
    rec = _Recording(PSI_POLICY)
    for p in [driver, *parties]:
        rec.register(p)
    return driver, rec


def _random_sets(kind: str, sizes, seed: int):
    rng = np.random.default_rng(seed)
    universe = np.arange(5 * max(sizes)) * 7919 + 11
    if kind == "str":
        universe = np.array([f"user-{u:07d}" for u in universe])
    return [rng.choice(universe, size=s, replace=False) for s in sizes], universe


def _intersect(sets):
    out = sets[0]
    for s in sets[1:]:
        out = np.intersect1d(out, s)
    return out


@pytest.mark.parametrize("kind", ["int", "str"])
@pytest.mark.parametrize("sizes", [(600, 800), (500, 700, 650)])
def test_psi_finds_exactly_the_intersection(kind, sizes):
    sets, _ = _random_sets(kind, sizes, seed=len(sizes))
    expected = _intersect(sets)
    assert 0 < len(expected) < min(sizes)  # partial overlap
    got, transport = psi_intersect(sets)
    np.testing.assert_array_equal(got, expected)
    assert transport.log.arrays_sent() == {"psi_set", "psi_positions"}

    parties = [PSIParty(f"p{k}", s) for k, s in enumerate(sets)]
    driver, _ = _federation(parties)
    assert driver.run() == len(expected)
    for p in parties:  # every party: its own rows, in ascending-ID order
        np.testing.assert_array_equal(p.ids[p.psi_rows["default"]], expected)
        assert not hasattr(p, "rows")


def test_psi_is_the_align_hook():
    a, b = ["c", "a", "b", "e"], ["b", "d", "c"]
    pa, pb = align(a, b, method="psi")
    assert pa.tolist() == [2, 0] and pb.tolist() == [0, 2]


def test_typed_encoding_keeps_int_and_str_apart():
    got, _ = psi_intersect([np.array([5, 6, 7]), np.array(["5", "6", "7"], dtype=object)])
    assert len(got) == 0
    got, _ = psi_intersect([np.array([5.0, 6.0]), np.array([6, 8])])  # integral floats are ints
    assert got.tolist() == [6.0]
    with pytest.raises(DataError):
        psi_intersect([np.array([1.5, 2.0]), np.array([2, 3])])
    with pytest.raises(DataError, match="duplicates"):
        psi_intersect([np.array([1, 1, 2]), np.array([2, 3])])


class _SplitParty(PSIParty):
    """One party, one ID list per group (e.g. train and test splits)."""

    def __init__(self, name, by_group):
        super().__init__(name, by_group["train"])
        self.by_group = by_group

    def psi_ids(self, group):
        return self.by_group.get(group, self.ids)


def test_two_groups_in_one_session_run_concurrently():
    rng = np.random.default_rng(11)
    train, _ = _random_sets("int", (400, 500, 450), seed=5)
    test = [rng.choice(np.arange(10_000, 10_600), size=s, replace=False) for s in (200, 250, 300)]
    parties = [
        _SplitParty(f"p{k}", {"train": tr, "test": te})
        for k, (tr, te) in enumerate(zip(train, test))
    ]
    driver, rec = _federation(parties)
    names = [p.name for p in parties]
    sizes: dict[str, int] = {}

    def go(group):
        sizes[group] = run_psi(driver, names, group)

    threads = [threading.Thread(target=go, args=(g,)) for g in ("train", "test")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # a third group of only two parties, afterwards
    sizes["pair"] = run_psi(driver, names[:2], "pair")

    expected = {"train": _intersect(train), "test": _intersect(test)}
    assert sizes["train"] == len(expected["train"]) > 0
    assert sizes["test"] == len(expected["test"]) > 0
    for p in parties:
        for group in ("train", "test"):
            np.testing.assert_array_equal(p.by_group[group][p.psi_rows[group]], expected[group])
        assert p._psi_state == {}  # keys are single-use, dropped after the result
    pair = np.intersect1d(train[0], train[1])
    assert sizes["pair"] == len(pair)
    for p in parties[:2]:
        np.testing.assert_array_equal(p.ids[p.psi_rows["pair"]], pair)
    assert "pair" not in parties[2].psi_rows
    groups = {m.meta.get("group") for m in rec.messages}
    assert groups == {"train", "test", "pair"}  # every psi message names its group
    assert all(m.kind.startswith("psi:") for m in rec.messages)


def test_invalid_elements_are_rejected():
    key = new_key()
    good = hash_ids(np.arange(3))
    np.testing.assert_array_equal(reblind(key, good), blind_ids(key, np.arange(3)))
    bad = good.copy()
    bad[1] = 0xFF  # not a canonical encoding (>= p)
    with pytest.raises(ProtocolError, match="element 1"):
        reblind(key, bad)
    ident = good.copy()
    ident[2] = 0  # the identity: would blind every ID to the same value
    with pytest.raises(ProtocolError, match="element 2"):
        reblind(key, ident)
    odd = good.copy()
    odd[0, 0] |= 1  # negative field element: non-canonical in ristretto255
    with pytest.raises(ProtocolError, match="element 0"):
        reblind(key, odd)
    with pytest.raises(ProtocolError, match="shape"):
        reblind(key, good[:, :31])
    with pytest.raises(ProtocolError):
        reblind(key, good.astype(np.int16))


def test_parties_reject_protocol_violations():
    parties = [PSIParty("p0", np.arange(50)), PSIParty("p1", np.arange(25, 80))]
    driver, _ = _federation(parties)
    with pytest.raises(ProtocolError, match="before psi:blind"):
        driver.send("p0", "psi:reblind", arrays={"psi_set": hash_ids([1])}, meta={"group": "g"})
    with pytest.raises(ProtocolError, match="group"):
        driver.send("p0", "psi:blind")
    driver.send("p0", "psi:blind", meta={"group": "g"})
    bad = np.full((4, 32), 0xFF, dtype=np.uint8)
    with pytest.raises(ProtocolError, match="not a valid ristretto255"):
        driver.send("p0", "psi:reblind", arrays={"psi_set": bad}, meta={"group": "g"})
    with pytest.raises(ProtocolError, match="out of range"):
        driver.send(
            "p0", "psi:result", arrays={"psi_positions": np.array([50])}, meta={"group": "g"}
        )


def test_only_blinded_elements_cross_and_keys_are_fresh():
    sets, universe = _random_sets("str", (300, 400, 350), seed=7)
    runs = []
    for _ in range(2):  # the same ID lists, twice
        parties = [PSIParty(f"p{k}", s) for k, s in enumerate(sets)]
        driver, rec = _federation(parties)
        assert driver.run() == len(_intersect(sets))
        runs.append(rec)

    for rec in runs:
        log = rec.log
        assert log.arrays_sent() == {"psi_set", "psi_positions"}
        assert log.arrays_sent(receiver="coordinator") == {"psi_set"}
        for e in log.entries:
            assert set(e.arrays) <= {"psi_set", "psi_positions"}
            for name, shape in zip(e.arrays, e.shapes):
                expected_ndim, width = (2, (32,)) if name == "psi_set" else (1, shape[-1:])
                assert len(shape) == expected_ndim and shape[-1:] == width
        for m in rec.messages:  # metadata: group, next party of a chain, set size, common count
            assert set(m.meta) <= {"group", "next", "n", "n_common"}
        blob = rec.blob()
        assert not any(uid.encode() in blob for uid in universe)  # no ID in the clear
        hashed = {r.tobytes() for r in hash_ids(universe)}
        assert not hashed & rec.elements()  # nor an unblinded hash of one
        fixed = {r.tobytes() for r in blind_ids(b"\x07" + bytes(31), universe)}
        assert not fixed & rec.elements()  # nor a hash under a fixed key

    # fresh keys: the two runs of the same IDs share no blinded element
    assert not runs[0].elements() & runs[1].elements()
    # each set is blinded, then re-blinded twice under other key products: only the
    # fully blinded elements of common IDs coincide
    union = np.unique(np.concatenate(sets))
    assert len(runs[0].elements()) == 2 * sum(len(s) for s in sets) + len(union)


def test_chunked_threads_give_the_plain_set_intersection(monkeypatch):
    """Small chunks on several threads (ragged last chunk): the same intersection as Python's
    set intersection, and the same elements as blinding one ID at a time."""
    from fedviews.privacy import _psi_group as _psi

    monkeypatch.setattr(_psi, "_PARALLEL_MIN", 8)
    monkeypatch.setattr(_psi, "_CHUNK", 37)
    monkeypatch.setattr(_psi, "_workers", lambda: 3)
    rng = np.random.default_rng(23)
    a, b = (rng.choice(700, size=s, replace=False) for s in (311, 290))
    got, _ = psi_intersect([a, b])
    assert got.tolist() == sorted(set(a.tolist()) & set(b.tolist()))
    key, ids = new_key(), a[:100]
    whole = blind_ids(key, ids)
    one_by_one = np.concatenate([blind_ids(key, ids[i : i + 1]) for i in range(len(ids))])
    np.testing.assert_array_equal(whole, one_by_one)
    np.testing.assert_array_equal(reblind(key, hash_ids(ids)), whole)
    with pytest.raises(ProtocolError, match=r"'p9' sent a psi_set whose element 75 "):
        bad = hash_ids(ids)
        bad[75] = 0
        reblind(key, bad, "p9")


class _Malformed(PSIParty):
    """Replies to psi:reblind with elements one byte short, or one element too few."""

    def __init__(self, name, ids, cut):
        super().__init__(name, ids)
        self.cut = cut

    @handles("psi:reblind")
    def on_psi_reblind(self, msg):
        reply = super().on_psi_reblind(msg)
        pts = reply.arrays["psi_set"]
        pts = pts[:, :31] if self.cut == "width" else pts[1:]
        return self.reply(msg, arrays={"psi_set": np.ascontiguousarray(pts)}, meta=reply.meta)


@pytest.mark.parametrize("cut", ["width", "rows"])
def test_a_malformed_psi_set_names_its_sender(cut):
    parties = [PSIParty("p0", np.arange(40)), _Malformed("liar", np.arange(20, 70), cut)]
    driver, _ = _federation(parties)
    match = r"'liar' replied with a psi_set of uint8 \(40, 31\)" if cut == "width" else "'liar'"
    with pytest.raises(ProtocolError, match=match):
        driver.run()
    # and a party names the coordinator when the coordinator sends it a malformed set
    driver.send("p0", "psi:blind", meta={"group": "g"})
    short = np.zeros((3, 31), dtype=np.uint8)
    with pytest.raises(ProtocolError, match=r"'coordinator' sent a psi_set of uint8 \(3, 31\)"):
        driver.send("p0", "psi:reblind", arrays={"psi_set": short}, meta={"group": "g"})


class _Miscounted(PSIParty):
    """Answers psi:blind honestly but for its set size: ``n`` as given."""

    def __init__(self, name, ids, n):
        super().__init__(name, ids)
        self.n = n

    @handles("psi:blind")
    def on_psi_blind(self, msg):
        reply = super().on_psi_blind(msg)
        return self.reply(msg, arrays=reply.arrays, meta={**reply.meta, "n": self.n})


@pytest.mark.parametrize("n", [float("nan"), float("inf"), -5, 2.5, "7"])
def test_a_set_size_that_is_no_count_names_its_sender(n):
    """int(NaN) raised a raw ValueError in the coordinator (a traceback, no culprit)."""
    parties = [PSIParty("p0", np.arange(40)), _Miscounted("liar", np.arange(20, 70), n)]
    driver, _ = _federation(parties)
    with pytest.raises(
        ProtocolError, match=r"'liar' said its set holds n = .* expected a count"
    ) as err:
        driver.run()
    assert err.value.party == "liar"
