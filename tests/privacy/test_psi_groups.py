"""PSI alignment groups of one session: independent groups (no shared party) run
concurrently, groups that share a party one after another; same results and messages."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("rbcl")

from fedviews.federation import Coordinator, InProcessTransport  # noqa: E402
from fedviews.privacy import PSI_POLICY, PSIParty, run_psi_groups  # noqa: E402
from fedviews.privacy._psi import _chains  # noqa: E402


def test_groups_are_cut_into_chains_that_share_no_party():
    assert _chains({}) == []
    assert _chains({"a": ["x"], "b": ["y"], "c": ["z"]}) == [["a"], ["b"], ["c"]]
    # H-FedMV: each client's train and test groups share the client
    hfedmv = {"c1": ["c1"], "c2": ["c2"], "c1:test": ["c1"], "c2:test": ["c2"]}
    assert _chains(hfedmv) == [["c1", "c1:test"], ["c2", "c2:test"]]
    # Multi-VFL: the data owners are in every group: one chain, in the order given
    multivfl = {"bank": ["d0", "d1", "bank"], "clinic": ["d0", "d1", "clinic"], "test": ["d0"]}
    assert _chains(multivfl) == [["bank", "clinic", "test"]]
    # a later group joins two chains: merged, still in the order given
    joined = {"a": ["p"], "b": ["q"], "d": ["p"], "c": ["p", "q"], "e": ["r"]}
    assert _chains(joined) == [["a", "b", "d", "c"], ["e"]]


class _Party(PSIParty):
    """One ID list per group; with ``meet``, its first blinding waits for the other
    parties' (a barrier that only concurrent groups can pass)."""

    def __init__(self, name, by_group, meet=None):
        super().__init__(name, next(iter(by_group.values())))
        self.by_group, self.meet = by_group, meet
        self.busy = 0
        self.most_busy = 0
        self.order: list[str] = []
        self._lock = threading.Lock()

    def psi_ids(self, group):
        with self._lock:
            self.busy += 1
            self.most_busy = max(self.most_busy, self.busy)
            self.order.append(group)
        try:
            if self.meet is not None:
                self.meet.wait(timeout=20)
            return self.by_group[group]
        finally:
            with self._lock:
                self.busy -= 1


def _run(layout, concurrent, meet=None):
    """``layout``: ``{group: parties}``; every party holds its own random IDs per group."""
    rng = np.random.default_rng(3)
    names = sorted({p for ps in layout.values() for p in ps})
    ids = {
        (p, g): rng.choice(np.arange(900), size=300 + 10 * k, replace=False)
        for k, (p, g) in enumerate((p, g) for g, ps in layout.items() for p in ps)
    }
    parties = {
        p: _Party(p, {g: ids[p, g] for g, ps in layout.items() if p in ps}, meet) for p in names
    }
    transport = InProcessTransport(PSI_POLICY)
    driver = Coordinator()
    for obj in (driver, *parties.values()):
        transport.register(obj)
    reported: list[tuple[str, int]] = []
    sizes = run_psi_groups(
        driver, layout, lambda g, n, s: reported.append((g, n)), concurrent=concurrent
    )
    for g, ps in layout.items():  # every party of every group: the common IDs, ascending
        common = np.sort(ids[ps[0], g])
        for p in ps[1:]:
            common = np.intersect1d(common, ids[p, g])
        assert sizes[g] == len(common) > 0
        for p in ps:
            np.testing.assert_array_equal(ids[p, g][parties[p].psi_rows[g]], common)
    assert list(sizes) == list(layout) and reported == list(sizes.items())
    entries = Counter(
        (e.sender, e.receiver, e.round, e.kind, e.arrays, e.shapes, e.meta)
        for e in transport.log.entries
    )
    return parties, entries


def test_independent_groups_run_concurrently_with_the_same_results_and_messages():
    layout = {"c1": ["c1"], "c2": ["c2"], "c1:test": ["c1"], "c2:test": ["c2"]}
    # c1 and c2 both blind before either is answered: only concurrent groups get there
    parties, concurrent = _run(layout, True, threading.Barrier(2))
    assert parties["c1"].order == ["c1", "c1:test"] and parties["c2"].order == ["c2", "c2:test"]
    _, sequential = _run(layout, False)
    assert concurrent == sequential  # the same entries, each as often


def test_groups_that_share_a_party_run_one_after_another_in_order():
    layout = {
        "bank": ["d0", "d1", "bank"],
        "clinic": ["d0", "d1", "clinic"],
        "test": ["d0", "d1", "bank"],
    }
    parties, concurrent = _run(layout, True)
    for p in ("d0", "d1"):
        assert parties[p].order == ["bank", "clinic", "test"] and parties[p].most_busy == 1
    _, sequential = _run(layout, False)
    assert concurrent == sequential
