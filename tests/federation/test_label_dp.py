"""Label DP by randomized response: the mechanism, its accounting, and that the run is
post-processing of the randomized labels (the guarantee's whole argument)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedviews.data import PartyData
from fedviews.errors import ConfigError, DataError
from fedviews.federation import (
    Defense,
    Local,
    Roster,
    RunSpec,
    build_in_process,
    defend_local,
    privacy_ledger,
    randomized_response,
)
from fedviews.linear import MMVFL, VFedMV
from fedviews.linear.mmvfl import MMVFLParams


def _data(seed=0, n=150, dims=(6, 9, 5), c=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    Xs = [rng.normal(size=(n, d)) + np.eye(c)[y] @ rng.normal(size=(c, d)) for d in dims]
    return Xs, y


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_randomized_response_keeps_and_flips_with_the_right_probabilities(eps):
    C, n = 5, 200_000
    y = np.array(["a", "b", "c", "d", "e"])[np.arange(n) % C]  # any label type
    out = randomized_response(y, eps, np.random.default_rng(1))
    keep = math.exp(eps) / (math.exp(eps) + C - 1)
    assert abs((out == y).mean() - keep) < 0.005  # > 4 standard deviations
    # a flipped label is uniform over the other C - 1 classes
    flipped = out[(y == "a") & (out != y)]
    freq = np.array([(flipped == c).mean() for c in "bcde"])
    np.testing.assert_allclose(freq, 0.25, atol=0.01)
    assert set(out) == set(y)


def test_the_ledger_is_dp_accountings_pld_and_equals_the_closed_form():
    pytest.importorskip("dp_accounting")
    for eps in (0.25, 1.0, 3.0):
        run = RunSpec("mmvfl", defense=Defense.of({"kind": "label_rr", "epsilon": eps}))
        led = privacy_ledger(run, ["bank"], n_classes=10)
        got = led["parties"]["bank"]
        assert got["accountant"] == "dp-accounting PLD" and got["delta"] == 0.0
        assert got["epsilon"] == pytest.approx(eps, rel=1e-3)  # PLD's discretisation
    assert privacy_ledger(RunSpec("mmvfl"), ["bank"], 10) == {}


@pytest.mark.parametrize("Est", [MMVFL, VFedMV])
def test_a_label_dp_run_is_the_plain_run_on_the_randomized_labels(Est):
    """Everything after the one draw is post-processing: the defended run equals the plain
    run given the label owner's randomized labels (so nothing else can leak them)."""
    Xs, y = _data()
    d = {"kind": "label_rr", "epsilon": 1.0, "seed": 7}
    defended = Est(max_iter=5, tol=0, defense=d).fit(Xs, y)
    holder = "party0" if Est is MMVFL else "coordinator"
    ids = np.arange(len(y))
    from fedviews.federation import Local

    local = Local(PartyData(ids, None, y), {"train": ids}, {})
    roster = Roster(("party0", "party1", "party2"), label_owner=holder)
    run = RunSpec(Est.__name__.lower(), federation=roster, defense=Defense.of(d))
    y_rr = defend_local(run, holder, local).data.y
    assert 0.4 < (y_rr == y).mean() < 0.8  # keep probability e / (e + 2) = 0.58
    plain = Est(max_iter=5, tol=0).fit(Xs, y_rr)
    np.testing.assert_allclose(defended.Z_, plain.Z_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(defended.objective_, plain.objective_, rtol=1e-12)
    assert defended.privacy_["parties"][holder]["epsilon"] == pytest.approx(1.0, rel=1e-3)


def test_the_experimenter_keeps_the_true_labels_and_only_holders_randomize():
    Xs, y = _data()
    names = ("party0", "party1", "party2")
    datas = {
        p: PartyData(np.arange(len(y)), X, y if p == "party1" else None)
        for p, X in zip(names, Xs, strict=True)
    }
    d = Defense.of({"kind": "label_rr", "epsilon": 0.5, "seed": 3})
    run = RunSpec("mmvfl", MMVFLParams(max_iter=2), Roster(names, label_owner="party1"), 0, d)
    fed = build_in_process(run, datas)
    np.testing.assert_array_equal(fed.locals["party1"].data.y, y)  # the answer key: true
    owner = fed.parties["party1"]
    assert (np.argmax(owner.Y, axis=1) != y).mean() > 0.3  # it trains on randomized labels
    assert list(fed.privacy["parties"]) == ["party1"]


def test_label_dp_config_errors():
    with pytest.raises(ConfigError, match="epsilon of label_rr must be in"):
        Defense.of("label_rr")  # no budget given
    with pytest.raises(ConfigError, match="epsilon of label_rr must be in"):
        Defense.of({"kind": "label_rr", "epsilon": -1})
    with pytest.raises(ConfigError, match="defense.seed"):
        Defense.of({"kind": "label_rr", "epsilon": 1, "seed": "x"})


def test_a_holder_of_one_class_is_refused():
    """Randomized response over a single class changes nothing: no guarantee to claim."""
    run = RunSpec("mmvfl", defense=Defense.of({"kind": "label_rr", "epsilon": 1.0}))
    one = Local(PartyData(np.arange(5), np.zeros((5, 2)), np.full(5, 3)), {}, {})
    with pytest.raises(DataError, match="one class only"):
        defend_local(run, "bank", one)
    two = Local(PartyData(np.arange(6), np.zeros((6, 2)), np.arange(6) % 2), {}, {})
    assert set(defend_local(run, "bank", two).data.y) <= {0, 1}
