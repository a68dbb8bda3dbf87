"""The fast ℓ2,1 solver against a deliberately naive reference (explicit inverse)."""

import numpy as np
import pytest

from fedviews.errors import ConfigError, DataError
from fedviews.linear import L21Problem, l21_least_squares, l21_norm
from fedviews.linear._reference import naive_irls


@pytest.mark.parametrize("shape", [(60, 8), (40, 25)])
@pytest.mark.parametrize("method", ["primal", "woodbury"])
def test_solver_matches_naive_reference(shape, method):
    rng = np.random.default_rng(1)
    X = rng.normal(size=shape)
    T = rng.normal(size=(shape[0], 3))
    W_ref, hist_ref = naive_irls(X, T, 0.7, 15)
    res = l21_least_squares(X, T, 0.7, max_iter=15, tol=0.0, method=method)
    assert res.n_iter == 15
    np.testing.assert_allclose(res.W, W_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(res.objective, hist_ref, rtol=1e-8)


def test_woodbury_equals_primal_when_samples_fewer_than_features():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 120))
    T = rng.normal(size=(30, 4))
    assert L21Problem(X).method == "woodbury"
    a = l21_least_squares(X, T, 0.3, max_iter=40, tol=0, method="woodbury")
    b = l21_least_squares(X, T, 0.3, max_iter=40, tol=0, method="primal")
    np.testing.assert_allclose(a.W, b.W, rtol=1e-7, atol=1e-9)


def test_objective_decreases_and_converges():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 20))
    T = rng.normal(size=(80, 2))
    res = l21_least_squares(X, T, 2.0, max_iter=500, tol=1e-10)
    assert res.converged
    obj = np.array(res.objective)
    assert np.all(np.diff(obj) <= 1e-12 * obj[:-1])
    # the solution is a stationary point: subgradient optimality on non-zero rows
    W = res.W
    G = 2 * X.T @ (X @ W - T)
    norms = np.linalg.norm(W, axis=1)
    active = norms > 1e-6
    np.testing.assert_allclose(G[active], -2.0 * W[active] / norms[active, None], atol=5e-3)
    assert np.all(np.linalg.norm(G[~active], axis=1) <= 2.0 + 1e-4)


def test_zero_rows_for_irrelevant_features_under_strong_regularisation():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 10))
    W_true = np.zeros((10, 2))
    W_true[:3] = rng.normal(size=(3, 2)) * 3
    T = X @ W_true + 0.01 * rng.normal(size=(200, 2))
    res = l21_least_squares(X, T, 20.0, max_iter=300, tol=1e-12)
    norms = np.linalg.norm(res.W, axis=1)
    assert set(np.argsort(-norms)[:3]) == {0, 1, 2}
    assert norms[3:].max() < 1e-3 * norms[:3].min()
    assert l21_norm(res.W) == pytest.approx(norms.sum())


def test_block_beta_equals_scaled_problem():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(50, 6))
    T = rng.normal(size=(50, 2))
    res = l21_least_squares(X, T, np.full(6, 0.5), max_iter=20, tol=0)
    ref = l21_least_squares(X, T, 0.5, max_iter=20, tol=0)
    np.testing.assert_allclose(res.W, ref.W, rtol=1e-10)


@pytest.mark.parametrize("beta", [0.0, -1.0, float("nan")])
def test_bad_beta(beta):
    with pytest.raises(ConfigError, match="beta"):
        l21_least_squares(np.ones((5, 2)), np.ones((5, 1)), beta)


def test_bad_inputs():
    with pytest.raises(DataError, match="NaN"):
        l21_least_squares(np.array([[1.0, np.nan]]), np.ones((1, 1)), 1.0)
    with pytest.raises(DataError, match="T must have shape"):
        l21_least_squares(np.ones((5, 2)), np.ones((4, 1)), 1.0)
    with pytest.raises(ConfigError, match="method"):
        l21_least_squares(np.ones((5, 2)), np.ones((5, 1)), 1.0, method="qr")


@pytest.mark.parametrize(("method", "beta"), [("primal", 1e-300), ("woodbury", 1e-12)])
def test_numerically_singular_system_is_a_data_error(method, beta):
    # the unscaled 'mor' view (values up to 15399) with a duplicated column and a tiny beta:
    # X^T X + beta A (or X A^-1 X^T / beta + I) is singular to working precision; this used to
    # be a raw numpy LinAlgError from inside scipy's Cholesky
    from fedviews.data import load

    ds = load("handwritten")
    X = ds.views[ds.view_names.index("mor")][:300]
    X = np.hstack([X, X[:, :2]])
    with pytest.raises(DataError, match="numerically singular.*raise beta"):
        l21_least_squares(X, np.eye(10)[ds.y[:300]], beta, method=method)


def test_warm_start_of_the_wrong_shape_is_a_data_error():
    with pytest.raises(DataError, match=r"W0 must have shape \(2, 1\)"):
        l21_least_squares(np.ones((5, 2)), np.ones((5, 1)), 1.0, W0=np.zeros((3, 1)))
