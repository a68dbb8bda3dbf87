"""MMVFL: naive reference, federated == centralized, monotone objective, privacy, feature selection."""

import numpy as np
import pytest
from _views import planted_views as _data

from fedviews.data import one_hot
from fedviews.errors import ConfigError, DataError, PrivacyError
from fedviews.linear import MMVFL, SupFL, SupMVLFL, mmvfl_centralized, scale_labels
from fedviews.linear.mmvfl.reference import naive_mmvfl


def test_mmvfl_matches_naive_reference():
    Xs, y = _data()
    Y, _ = one_hot(y)
    m = MMVFL(
        beta=0.5,
        zeta=5.0,
        eta=7.0,
        label_owner=1,
        max_iter=6,
        tol=0,
        inner_max_iter=4,
        inner_tol=0,
        random_state=3,
    )
    m.fit(Xs, y)
    W_ref, Z_ref, obj_ref = naive_mmvfl(Xs, Y, 0.5, 5.0, 7.0, 1, 6, 4, 3)
    for a, b in zip(m.W_, W_ref):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(m.Z_, Z_ref, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(m.objective_, obj_ref, rtol=1e-8)


def test_federated_equals_centralized():
    Xs, y = _data(1)
    Y, _ = one_hot(y)
    kw = dict(
        beta=[0.1, 1.0, 3.0], zeta=[10.0, 20.0, 30.0], eta=50.0, label_owner=2, max_iter=15, tol=0
    )
    m = MMVFL(**kw, random_state=7).fit(Xs, y)
    c = mmvfl_centralized(Xs, Y, **kw, random_state=7)
    for a, b in zip(m.W_, c["W"]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(m.Z_, c["Z"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(m.objective_, c["objective"], rtol=1e-10)


def test_orthonormal_labels_satisfy_YtY_equal_identity():
    Y, _ = one_hot(np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2]))  # unbalanced classes
    S = scale_labels(Y, "orthonormal")
    np.testing.assert_allclose(S.T @ S, np.eye(3), atol=1e-15)
    np.testing.assert_array_equal(S > 0, Y > 0)
    assert scale_labels(Y, "onehot") is Y
    with pytest.raises(ConfigError, match="label_scale"):
        scale_labels(Y, "unit")
    with pytest.raises(ConfigError, match="label_scale"):
        MMVFL(label_scale="unit").fit(*_data(1))


def test_federated_equals_centralized_with_orthonormal_labels():
    Xs, y = _data(1)
    y = np.where(np.arange(len(y)) < 7, 0, y)  # unbalanced, so the scale differs per class
    Y, _ = one_hot(y)
    kw = dict(beta=0.5, zeta=10.0, eta=50.0, label_owner=1, max_iter=12, tol=0)
    m = MMVFL(**kw, label_scale="orthonormal", random_state=3).fit(Xs, y)
    c = mmvfl_centralized(Xs, Y, **kw, label_scale="orthonormal", random_state=3)
    for a, b in zip(m.W_, c["W"]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(m.Z_, c["Z"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(m.objective_, c["objective"], rtol=1e-10)
    onehot = mmvfl_centralized(Xs, Y, **kw, random_state=3)
    assert not np.allclose(m.objective_, onehot["objective"])  # the scale reached the party


@pytest.mark.parametrize("zeta,eta", [(1.0, 1.0), (1000.0, 1000.0), (3.0, 100.0)])
def test_objective_non_increasing(zeta, eta):
    Xs, y = _data(2, dims=(5, 40, 120))  # includes a Woodbury view (n < d)
    m = MMVFL(beta=0.3, zeta=zeta, eta=eta, max_iter=40, tol=0).fit(Xs, y)
    obj = np.asarray(m.objective_)
    assert len(obj) == 40
    assert np.all(np.diff(obj) <= 1e-9 * obj[:-1]), np.diff(obj).max()


def test_only_Zk_and_Z_cross_the_barrier():
    Xs, y = _data(3)
    m = MMVFL(beta=1.0, max_iter=5).fit(Xs, y)
    log = m.transport_.log
    assert log.arrays_sent() == {"Z", "Z_k"}
    for k in range(3):
        assert log.arrays_sent(sender=f"party{k}") == {"Z_k"}
        assert log.arrays_sent(receiver=f"party{k}") == {"Z"}
    # nothing travels party to party
    assert all(e.sender == "coordinator" or e.receiver == "coordinator" for e in log.entries)
    stats = m.run_stats_
    assert stats["rounds"] == m.n_iter_
    n, c = 90, 3
    assert stats["per_party"]["party0"]["bytes_sent"] >= m.n_iter_ * n * c * 8


def test_privacy_policy_blocks_a_leaking_party():
    from fedviews.linear.mmvfl import MMVFLParty

    class LeakyParty(MMVFLParty):
        def on_update(self, msg):
            reply = super().on_update(msg)
            return self.reply(msg, arrays={**reply.arrays, "X_k": self.problem.X}, meta=reply.meta)

    Xs, y = _data(4)
    import fedviews.linear.mmvfl.spec as mod

    orig = mod.MMVFLParty
    mod.MMVFLParty = LeakyParty
    try:
        with pytest.raises(PrivacyError, match="X_k"):
            MMVFL(max_iter=2).fit(Xs, y)
    finally:
        mod.MMVFLParty = orig


def test_feature_selection_recovers_planted_support_at_every_party():
    """Parties without labels recover their informative features through Z."""
    rng = np.random.default_rng(5)
    n, c = 300, 3
    y = rng.integers(0, c, n)
    Xs = []
    for d in (20, 25, 30):
        X = rng.normal(size=(n, d))
        X[:, :3] += 2.5 * np.eye(c)[y]  # planted support: features 0, 1, 2
        Xs.append(X)
    m = MMVFL(beta=30.0, zeta=10.0, eta=10.0, max_iter=30).fit(Xs, y)
    for imp in m.feature_importances_:
        assert set(np.argsort(-imp)[:3]) == {0, 1, 2}
    # parties predict the labels from their own view alone
    for k in range(3):
        assert (m.predict(Xs[k], party=k) == y).mean() > 0.8


def test_supervised_baselines():
    Xs, y = _data(6)
    s = SupFL(beta=0.5).fit(Xs, y)
    j = SupMVLFL(beta=0.5).fit(Xs, y)
    assert [W.shape for W in s.W_] == [(6, 3), (9, 3), (14, 3)]
    assert [W.shape for W in j.W_] == [(6, 3), (9, 3), (14, 3)]
    assert (j.predict_joint(Xs) == y).mean() >= max(
        (s.predict(X, party=k) == y).mean() for k, X in enumerate(Xs)
    ) - 0.05
    # supMVLFL is the joint problem, not K copies of supFL
    assert not np.allclose(s.W_[0], j.W_[0])


def test_bad_input_errors():
    Xs, y = _data(7)
    with pytest.raises(ConfigError, match="label_owner=5 is out of range"):
        MMVFL(label_owner=5).fit(Xs, y)
    with pytest.raises(ConfigError, match="beta"):
        MMVFL(beta=0).fit(Xs, y)
    with pytest.raises(ConfigError, match="beta has 2 values"):
        MMVFL(beta=[1.0, 2.0]).fit(Xs, y)
    bad = [X.copy() for X in Xs]
    bad[1][3, 2] = np.nan
    with pytest.raises(DataError, match=r"Xs\[1\] contains 1 NaN"):
        MMVFL().fit(bad, y)
    with pytest.raises(DataError, match="disagree on the number of samples"):
        MMVFL().fit([Xs[0], Xs[1][:-1]], y)
    with pytest.raises(DataError, match="labels but the views have"):
        MMVFL().fit(Xs, y[:-1])
    m = MMVFL(max_iter=2).fit(Xs, y)
    with pytest.raises(DataError, match="features"):
        m.predict(Xs[0], party=1)
    # the view of the party that predicts is named, not the "X[0]" of a list
    with pytest.raises(DataError, match=r"^X \(party 1's view\) contains 1 NaN"):
        m.predict(bad[1], party=1)


@pytest.mark.parametrize("name", ["MMVFL", "VFedMV"])
def test_a_fit_stopped_at_max_iter_warns_and_says_unconverged(name):
    """MMVFL and V-FedMV stopped at max_iter with the objective still falling, silently."""
    import warnings

    from fedviews import linear
    from fedviews.errors import ConvergenceWarning

    Xs, y = _data()
    cls = getattr(linear, name)
    note = r"not converged: stopped after max_iter=2 rounds, the objective still changed by "
    with pytest.warns(ConvergenceWarning, match=f"{name}: {note}"):
        m = cls(max_iter=2, tol=1e-12).fit(Xs, y)
    assert m.converged_ is False and m.n_iter_ == 2
    # the coordinator says it too: a deployment prints these lines (fedviews run / launch)
    lines = m.fed_.coordinator.progress()
    assert lines[:2] == [f"round {r}: objective {v:.6g}" for r, v in enumerate(m.objective_, 1)]
    change = abs(m.objective_[1] - m.objective_[0]) / abs(m.objective_[0])
    assert lines[2] == (
        f"{note}{change:.2g} (relative) in the last one, tol=1e-12; raise max_iter for the "
        "converged solution"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # a converged fit is quiet
        m = cls(max_iter=500, tol=1e-3).fit(Xs, y)
    assert m.converged_ is True and m.n_iter_ < 500
    # stopped before max_iter: the coordinator says why after the last round's line
    n = m.n_iter_
    assert m.fed_.coordinator.progress()[n - 1 :] == [
        f"round {n}: objective {m.objective_[-1]:.6g}",
        f"converged after {n} of max_iter=500 rounds: the objective changed by less than "
        "tol=0.001 (relative) in the last one",
    ]


@pytest.mark.parametrize("dtype", [str, object], ids=["strings", "objects"])
def test_a_view_of_numeric_strings_or_objects_is_refused(dtype):
    """Before: "1.5" strings and object arrays were converted to floats silently."""
    Xs, y = _data(7)
    with pytest.raises(DataError, match=r"Xs\[1\] holds .* values; it must be numbers"):
        MMVFL(max_iter=2).fit([Xs[0], Xs[1].astype(dtype)], y)
    m = MMVFL(max_iter=2).fit(Xs, y)
    with pytest.raises(DataError, match="it must be numbers"):
        m.predict(Xs[0].astype(dtype), party=0)


def test_a_party_without_features_is_refused_before_the_run():
    """A party file without `X` (or a CSV of IDs only) loaded and set up, and round 1 failed
    with numpy's "unexpected array size" as the party's report."""
    from fedviews.data import PartyData
    from fedviews.errors import DataError
    from fedviews.federation import Roster, RunSpec, build_in_process
    from fedviews.linear.mmvfl import MMVFLParams

    ids = np.arange(30)
    rng = np.random.default_rng(0)
    datas = {
        "a": PartyData(ids, rng.normal(size=(30, 4)), np.arange(30) % 3),
        "b": PartyData(ids, None),
    }
    run = RunSpec("mmvfl", MMVFLParams(), Roster(("a", "b"), label_owner="a"))
    with pytest.raises(DataError, match="'b' holds no features \\(X\\): every mmvfl party"):
        build_in_process(run, datas)
