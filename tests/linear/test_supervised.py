"""supFL (Eq. 15) and supMVLFL (Eq. 16, joint reading) against references that share no code
with their IRLS solver: a proximal-gradient (FISTA) solve of the same convex objective, the
optimality (KKT) conditions of the ℓ2,1 problem, and the closed forms at its two ends (least
squares as beta -> 0; W = 0 once beta >= max_i ||2 x_i^T Y||)."""

import numpy as np
import pytest
from _views import planted_views

from fedviews.data import one_hot
from fedviews.linear import SupFL, SupMVLFL

BETAS = (0.8, 3.0, 12.0)  # one per party: a few rows of the third view are zero


def _objective(X, Y, W, beta_rows):
    return float(np.sum((X @ W - Y) ** 2) + np.sum(beta_rows * np.linalg.norm(W, axis=1)))


def _fista(X, Y, beta_rows, iters=20_000):
    """min_W ||XW - Y||_F^2 + sum_i beta_i ||W_i||_2 by accelerated proximal gradient: a
    gradient step on the square loss, then each row shrunk toward 0 by step * beta_i."""
    step = 1.0 / (2.0 * np.linalg.eigvalsh(X.T @ X)[-1])
    W = Z = np.zeros((X.shape[1], Y.shape[1]))
    t = 1.0
    for _ in range(iters):
        G = Z - step * 2.0 * X.T @ (X @ Z - Y)
        norms = np.linalg.norm(G, axis=1, keepdims=True)
        shrink = np.maximum(0.0, 1.0 - step * beta_rows[:, None] / np.maximum(norms, 1e-300))
        W_next = shrink * G
        t_next = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        Z = W_next + (t - 1.0) / t_next * (W_next - W)
        W, t = W_next, t_next
    return W


def _assert_kkt(X, Y, W, beta_rows, atol):
    """0 is in the subdifferential: a nonzero row i has 2 x_i^T (XW - Y) = -beta_i W_i/||W_i||,
    a zero row has ||2 x_i^T (XW - Y)|| <= beta_i."""
    grad = 2.0 * X.T @ (X @ W - Y)
    norms = np.linalg.norm(W, axis=1)
    active = norms > 1e-6
    assert active.any() and not active.all()  # both conditions are exercised
    np.testing.assert_allclose(
        grad[active],
        -beta_rows[active, None] * W[active] / norms[active, None],
        atol=atol,
    )
    assert np.all(np.linalg.norm(grad[~active], axis=1) <= beta_rows[~active] + atol)


def test_supfl_is_each_partys_own_l21_regression():
    Xs, y = planted_views(n=60, dims=(4, 6, 8), seed=0)
    Y, _ = one_hot(y)
    est = SupFL(beta=list(BETAS), max_iter=2000, tol=1e-14).fit(Xs, y)
    for X, W, beta in zip(Xs, est.W_, BETAS, strict=True):
        rows = np.full(X.shape[1], beta)
        ref = _fista(X, Y, rows)
        np.testing.assert_allclose(W, ref, atol=1e-7)
        assert _objective(X, Y, W, rows) == pytest.approx(_objective(X, Y, ref, rows), rel=1e-9)
    _assert_kkt(Xs[2], Y, est.W_[2], np.full(Xs[2].shape[1], BETAS[2]), atol=1e-4)


def test_supmvlfl_is_the_joint_problem_with_blockwise_beta():
    Xs, y = planted_views(n=60, dims=(4, 6, 8), seed=1)
    Y, _ = one_hot(y)
    est = SupMVLFL(beta=list(BETAS), max_iter=2000, tol=1e-14).fit(Xs, y)
    X = np.hstack(Xs)
    rows = np.concatenate([np.full(Xk.shape[1], b) for Xk, b in zip(Xs, BETAS, strict=True)])
    W = np.vstack(est.W_)
    ref = _fista(X, Y, rows)
    np.testing.assert_allclose(W, ref, atol=1e-7)
    assert _objective(X, Y, W, rows) == pytest.approx(_objective(X, Y, ref, rows), rel=1e-9)
    _assert_kkt(X, Y, W, rows, atol=1e-4)
    # and not supFL: each view's block differs from that view fitted alone
    alone = SupFL(beta=list(BETAS), max_iter=2000, tol=1e-14).fit(Xs, y)
    assert all(np.abs(a - b).max() > 1e-2 for a, b in zip(alone.W_, est.W_, strict=True))
    prediction = np.argmax(sum(Xk @ Wk for Xk, Wk in zip(Xs, est.W_, strict=True)), axis=1)
    np.testing.assert_array_equal(est.predict_joint(Xs), est.classes_[prediction])


def test_closed_forms_at_both_ends_of_beta():
    Xs, y = planted_views(n=60, dims=(4, 6, 8), seed=2)
    Y, _ = one_hot(y)
    # beta -> 0: ordinary least squares, per party (supFL) and on all views (supMVLFL)
    tiny = SupFL(beta=1e-9, max_iter=200, tol=1e-14).fit(Xs, y)
    for X, W in zip(Xs, tiny.W_, strict=True):
        np.testing.assert_allclose(W, np.linalg.lstsq(X, Y, rcond=None)[0], atol=1e-7)
    joint = SupMVLFL(beta=1e-9, max_iter=200, tol=1e-14).fit(Xs, y)
    ols = np.linalg.lstsq(np.hstack(Xs), Y, rcond=None)[0]
    np.testing.assert_allclose(np.vstack(joint.W_), ols, atol=1e-7)
    # beta >= max_i ||2 x_i^T Y||: W = 0 is optimal (its subgradient condition holds)
    for k, X in enumerate(Xs):
        edge = float(np.linalg.norm(2.0 * X.T @ Y, axis=1).max())
        zero = SupFL(beta=1.01 * edge, max_iter=2000, tol=1e-14).fit([X], y)
        assert np.abs(zero.W_[0]).max() < 1e-6, k
        below = SupFL(beta=0.9 * edge, max_iter=2000, tol=1e-14).fit([X], y)
        assert np.abs(below.W_[0]).max() > 1e-3, k


@pytest.mark.parametrize("Est", [SupFL, SupMVLFL])
def test_orthonormal_labels_are_the_target(Est):
    """``label_scale="orthonormal"``: the target is ``Y`` with ``Y^T Y = I``; by the
    homogeneity of the objective, fitting ``s Y`` at β equals ``s`` times fitting ``Y`` at
    ``β / s`` (balanced classes: one common ``s = 1/sqrt(n_c)``)."""
    Xs, y = planted_views(n=60, dims=(4, 6, 8), seed=2)
    s = 1.0 / np.sqrt(np.bincount(y)[0])
    assert np.all(np.bincount(y) == np.bincount(y)[0])
    kw = dict(max_iter=2000, tol=1e-14)
    scaled = Est(beta=0.3, label_scale="orthonormal", **kw).fit(Xs, y)
    plain = Est(beta=0.3 / s, **kw).fit(Xs, y)
    for a, b in zip(scaled.W_, plain.W_, strict=True):
        np.testing.assert_allclose(a, s * b, atol=1e-7)
    assert not np.allclose(scaled.W_[0], Est(beta=0.3, **kw).fit(Xs, y).W_[0], atol=1e-3)
