"""``standardize``: a party scales its own view with its own statistics, and its new rows
(predict, the testing phase) with the same ones, never with none or with their own."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews import data
from fedviews.errors import ConfigError
from fedviews.federation import estimator_params
from fedviews.linear import MMVFL, HFedMV, MMVFLParams, VFedMV


def _scaler(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return X.mean(axis=0), sd


@pytest.fixture(scope="module")
def hw() -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
    """Raw Handwritten views on very different scales (x1000 + 50), 120 train / 60 new rows."""
    data.fetch("handwritten")
    ds = data.load("handwritten", views=["fou", "zer", "kar"])
    idx = np.random.default_rng(1).permutation(data.balanced_subsample(ds.y, 18, random_state=1))
    Xs = [v[idx] * 1000.0 + 50.0 for v in ds.views]
    return [X[:120] for X in Xs], ds.y[idx][:120], [X[120:] for X in Xs]


def test_mmvfl_predicts_new_rows_with_the_partys_training_scaling(hw):
    Xs, y, Xn = hw
    kw = {"beta": 0.5, "max_iter": 4, "inner_max_iter": 5}
    m = MMVFL(standardize=True, **kw).fit(Xs, y)
    scalers = [_scaler(X) for X in Xs]
    ref = MMVFL(**kw).fit([(X - mu) / sd for X, (mu, sd) in zip(Xs, scalers, strict=True)], y)
    for k, (mu, sd) in enumerate(scalers):
        np.testing.assert_allclose(m.W_[k], ref.W_[k], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(m.scalers_[k][0], mu)
        np.testing.assert_allclose(m.scalers_[k][1], sd)
        np.testing.assert_array_equal(
            m.predict(Xn[k], party=k), ref.predict((Xn[k] - mu) / sd, party=k)
        )
    assert ref.scalers_ == [None] * len(Xs)
    assert np.mean(m.predict(Xs[0], party=0) == y) > 0.8  # raw rows, scaled by party 0


def test_mmvfl_and_vfedmv_parties_keep_their_scaler_in_their_results(hw):
    """A deployed party writes its results: W without the scaling it needs is no model."""
    Xs, y, _ = hw
    mm = MMVFL(standardize=True, max_iter=2)
    _, mm_parties = mm.fit_run("mmvfl", estimator_params(MMVFLParams, mm), Xs, y, 0)
    vf = VFedMV(standardize=True, max_iter=2).fit(Xs, y)
    for parties in (mm_parties, vf.parties_):
        for party, X in zip(parties, Xs, strict=True):
            res = party.results()
            mu, sd = _scaler(X)
            np.testing.assert_allclose(res["x_mean"], mu)
            np.testing.assert_allclose(res["x_scale"], sd)
    assert "x_mean" not in VFedMV(max_iter=2).fit(Xs, y).parties_[0].results()


def test_vfedmv_testing_phase_scales_each_partys_test_view(hw):
    Xs, y, Xn = hw
    kw = {"beta": 2.0, "zeta": 4.0, "eta": 8.0, "max_iter": 4, "inner_max_iter": 5}
    m = VFedMV(standardize=True, **kw).fit(Xs, y)
    scalers = [_scaler(X) for X in Xs]
    ref = VFedMV(**kw).fit([(X - mu) / sd for X, (mu, sd) in zip(Xs, scalers, strict=True)], y)
    scaled_new = [(X - mu) / sd for X, (mu, sd) in zip(Xn, scalers, strict=True)]
    np.testing.assert_allclose(m.decision_function(Xn), ref.decision_function(scaled_new))
    np.testing.assert_array_equal(m.predict(Xn), ref.predict(scaled_new))
    assert np.mean(m.predict(Xs) == y) > 0.8


def _clients(Xs: list[np.ndarray], y: np.ndarray) -> list[tuple[list[np.ndarray], np.ndarray]]:
    parts = np.array_split(np.arange(len(y)), 3)
    return [([X[p] for X in Xs], y[p]) for p in parts]


def test_hfedmv_predicts_with_the_pooled_scaling(hw):
    Xs, y, Xn = hw
    kw = {"n_rounds": 3, "local_iter": 1, "inner_max_iter": 3}
    m = HFedMV(standardize="pooled", **kw).fit(_clients(Xs, y))
    mu, sd = _scaler(np.hstack(Xs))  # the pooled statistics of all clients' rows
    cuts = np.cumsum([X.shape[1] for X in Xs])[:-1]
    scale = lambda V: np.split((np.hstack(V) - mu) / sd, cuts, axis=1)  # noqa: E731
    ref = HFedMV(**kw).fit(_clients(scale(Xs), y))
    np.testing.assert_allclose(m.decision_function(Xn), ref.decision_function(scale(Xn)))
    np.testing.assert_array_equal(m.predict(Xn), ref.predict(scale(Xn)))
    np.testing.assert_array_equal(m.predict(Xn, client=2), m.predict(Xn))
    assert np.mean(m.predict(Xs) == y) > 0.8


def test_hfedmv_local_scaling_predicts_as_the_client_it_names(hw):
    Xs, y, Xn = hw
    clients = _clients(Xs, y)
    m = HFedMV(standardize="local", n_rounds=3, local_iter=1, inner_max_iter=3).fit(clients)
    with pytest.raises(ConfigError, match="pass client=l"):
        m.predict(Xn)
    cuts = np.cumsum([X.shape[1] for X in Xs])[:-1]
    for c, (views, _) in enumerate(clients):
        mu, sd = _scaler(np.hstack(views))
        Z = m.decision_function(Xn, client=c)
        mine = np.split((np.hstack(Xn) - mu) / sd, cuts, axis=1)
        no_scaling = HFedMV().set_params(test_max_iter=m.test_max_iter)
        no_scaling.W_, no_scaling.zetas_, no_scaling.n_features_in_ = (
            m.W_,
            m.zetas_,
            m.n_features_in_,
        )
        no_scaling.scalers_, no_scaling.classes_ = [None] * 3, m.classes_
        np.testing.assert_allclose(Z, no_scaling.decision_function(mine))


def test_a_label_owners_results_predict_its_labels_like_the_estimator(hw):
    """A deployed label owner's W, with labels that are not 0..C-1, is no model without the
    order of its columns: its results hold ``classes`` (MMVFL; V-FedMV's label-owner party)."""
    Xs, y, Xn = hw
    labels = y * 10 + 1
    mm = MMVFL(standardize=True, max_iter=4, inner_max_iter=5)
    _, parties = mm.fit_run("mmvfl", estimator_params(MMVFLParams, mm), Xs, labels, 0)
    res = parties[0].results()
    X = (Xn[0] - res["x_mean"]) / res["x_scale"]
    np.testing.assert_array_equal(
        res["classes"][np.argmax(X @ res["W"], axis=1)], mm.predict(Xn[0], party=0)
    )
    assert "classes" not in parties[1].results()  # the others never see the labels
