"""Leakage attacks recover planted secrets on toy data; bad inputs raise fedviews errors."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from fedviews.errors import ConfigError, DataError
from fedviews.privacy import _attacks
from fedviews.privacy._attacks import (
    auc,
    binary_scores,
    chance_level,
    label_recovery,
    labels_by_completion,
    labels_by_direction,
    labels_from_consensus,
    labels_from_softmax_gradient,
    reconstruct_features,
    reconstruction_quality,
)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _aux_per_class(y: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` rows of every class."""
    return np.concatenate([np.flatnonzero(y == c)[:k] for c in np.unique(y)])


def test_module_imports_no_torch() -> None:
    tree = ast.parse(Path(_attacks.__file__).read_text(encoding="utf-8"))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in names if m.split(".")[0] == "torch"]


# --- consensus matrix ---------------------------------------------------------------


def test_consensus_recovers_labels_and_aux_fixes_permuted_columns() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, size=200)
    Z = np.eye(4)[y] + 0.1 * rng.standard_normal((200, 4))
    assert label_recovery(labels_from_consensus(Z), y) == 100.0

    perm = np.array([2, 0, 3, 1])
    Zp = Z[:, perm]  # column j holds class perm[j]
    aux = _aux_per_class(y, 1)
    pred = labels_from_consensus(Zp, aux_rows=aux, aux_y=y[aux])
    assert pred.dtype.kind == "i" and pred.shape == (200,)
    assert label_recovery(pred, y, exclude_rows=aux) == 100.0
    assert label_recovery(labels_from_consensus(Zp), y, exclude_rows=aux) < 50.0


def test_consensus_column_without_aux_rows_keeps_identity() -> None:
    Z = np.eye(3)[[0, 1, 2, 2]]
    # column 0 -> label 1 (known); columns 1, 2 have no aux row and keep their index
    assert labels_from_consensus(Z, aux_rows=[0], aux_y=[1]).tolist() == [1, 1, 2, 2]


# --- gradients ----------------------------------------------------------------------


def test_direction_recovers_labels_through_a_linear_top_layer() -> None:
    rng = np.random.default_rng(1)
    n, C, d = 300, 4, 20
    y = rng.integers(0, C, size=n)
    z = rng.standard_normal((n, C))
    W = rng.standard_normal((C, d))
    G = (_softmax(z) - np.eye(C)[y]) @ W  # gradient w.r.t. the attacker's d outputs
    aux = _aux_per_class(y, 2)
    pred = labels_by_direction(G, aux_rows=aux, aux_y=y[aux])
    rec = label_recovery(pred, y, exclude_rows=aux)
    assert rec >= 90.0
    assert rec > chance_level(y, exclude_rows=aux) + 50.0


def test_direction_zero_gradient_rows_get_the_largest_aux_class() -> None:
    G = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [2.0, 0.1]])
    pred = labels_by_direction(G, aux_rows=[0, 1, 2], aux_y=[3, 5, 5])
    assert pred.tolist() == [3, 5, 5, 5, 3]


def _imbalanced_binary(seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Li et al.'s setting: rare positives, gradient (p - y) w through a shared layer."""
    rng = np.random.default_rng(seed)
    n = 400
    y = (rng.random(n) < 0.05).astype(int)
    y[0] = 1
    p = 1 / (1 + np.exp(-(-3.0 + 0.5 * rng.standard_normal(n))))  # predicts ~5% positive
    w = rng.standard_normal(16)
    G = (p - y)[:, None] * w + 0.01 * rng.standard_normal((n, 16))
    return G, y


def test_binary_norm_and_direction_scores_separate_rare_positives() -> None:
    G, y = _imbalanced_binary()
    norm = binary_scores(G, kind="norm")
    np.testing.assert_allclose(norm, np.linalg.norm(G, axis=1))
    assert auc(norm, y) > 0.9
    direction = binary_scores(G, kind="direction", positive_row=0)
    assert direction[0] == pytest.approx(1.0)
    assert auc(direction, y) == pytest.approx(1.0, abs=1e-9)


def test_softmax_gradient_argmin_recovers_every_label() -> None:
    rng = np.random.default_rng(3)
    n, C = 64, 10
    logits = 3.0 * rng.standard_normal((n, C))
    y = rng.integers(0, C, size=n)

    def mean_ce(z: np.ndarray) -> float:
        logp = z - z.max(axis=1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
        return float(-logp[np.arange(n), y].mean())

    G = (_softmax(logits) - np.eye(C)[y]) / n
    # the closed form is the gradient of the mean cross-entropy (central differences)
    eps = 1e-6
    for i, c in [(0, 0), (5, int(y[5])), (17, 3)]:
        dz = np.zeros_like(logits)
        dz[i, c] = eps
        fd = (mean_ce(logits + dz) - mean_ce(logits - dz)) / (2 * eps)
        assert fd == pytest.approx(G[i, c], abs=1e-8)
    assert label_recovery(labels_from_softmax_gradient(G), y) == 100.0


# --- model completion ---------------------------------------------------------------


def test_completion_recovers_labels_from_clustered_features() -> None:
    rng = np.random.default_rng(4)
    n, C, d = 300, 3, 10
    y = rng.integers(0, C, size=n)
    means = 3.0 * rng.standard_normal((C, d))
    F = means[y] + rng.standard_normal((n, d))
    aux = _aux_per_class(y, 3)
    pred = labels_by_completion(F, aux_rows=aux, aux_y=y[aux])
    assert label_recovery(pred, y, exclude_rows=aux) >= 95.0
    assert np.array_equal(pred, labels_by_completion(F, aux_rows=aux, aux_y=y[aux]))


# --- feature reconstruction ---------------------------------------------------------


def _planted(n: int, rank: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8x8 images X (of given latent rank, or full) and activations A = X M, M full-rank."""
    rng = np.random.default_rng(seed)
    if rank is None:
        X = rng.random((n, 64))
    else:
        X = 0.5 + 0.1 * rng.standard_normal((n, rank)) @ rng.standard_normal((rank, 64))
    M = rng.standard_normal((64, 64)) + 8.0 * np.eye(64)  # well-conditioned, invertible
    return X.reshape(n, 8, 8), X @ M


@pytest.mark.parametrize(("n_aux", "rank"), [(200, None), (40, 8)], ids=["primal", "dual"])
def test_inverse_model_reconstructs_planted_images(n_aux: int, rank: int | None) -> None:
    X, A = _planted(300, rank, seed=5)
    aux = np.arange(n_aux)
    X_hat = reconstruct_features(A, aux_rows=aux, X_aux=X[aux], alpha=1e-8)
    assert X_hat.shape == X.shape
    q = reconstruction_quality(X_hat[n_aux:], X[n_aux:])
    assert q["mse"] < 1e-6
    assert q["ssim"] > 0.99


@pytest.mark.parametrize("n_aux", [30, 120], ids=["dual", "primal"])
def test_ridge_matches_an_explicit_solve_of_the_other_form(n_aux: int) -> None:
    rng = np.random.default_rng(6)
    A = rng.standard_normal((150, 50))
    X = rng.standard_normal((150, 7))
    aux = rng.permutation(150)[:n_aux]
    alpha = 1.0
    Aa, Xa = A[aux], X[aux]
    Ac, Xc = Aa - Aa.mean(0), Xa - Xa.mean(0)
    W_primal = np.linalg.solve(Ac.T @ Ac + alpha * np.eye(50), Ac.T @ Xc)
    W_dual = Ac.T @ np.linalg.solve(Ac @ Ac.T + alpha * np.eye(n_aux), Xc)
    np.testing.assert_allclose(W_primal, W_dual, atol=1e-10)
    reference = (A - Aa.mean(0)) @ W_primal + Xa.mean(0)
    got = reconstruct_features(A, aux_rows=aux, X_aux=Xa, alpha=alpha)
    np.testing.assert_allclose(got, reference, atol=1e-10)


# --- metrics ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 8, 8), (5, 1, 8, 8), (5, 3, 8, 8), (5, 4, 5)])
def test_identical_images_score_zero_mse_and_unit_ssim(shape: tuple[int, ...]) -> None:
    X = np.random.default_rng(7).random(shape)
    q = reconstruction_quality(X.copy(), X)
    assert q["mse"] == 0.0
    assert q["ssim"] == pytest.approx(1.0)
    noisy = reconstruction_quality(X + 0.3 * np.random.default_rng(8).random(shape), X)
    assert noisy["mse"] > 0.0 and noisy["ssim"] < 0.99


def test_ssim_is_nan_for_tiny_or_flat_samples() -> None:
    X = np.ones((3, 2, 8))
    assert np.isnan(reconstruction_quality(X, X)["ssim"])
    q = reconstruction_quality(np.zeros((3, 10)), np.ones((3, 10)))
    assert q["mse"] == 1.0 and np.isnan(q["ssim"])


def test_recovery_and_chance_exclude_aux_rows() -> None:
    y = np.array([0, 0, 0, 1, 1, 2])
    pred = np.array([1, 0, 0, 1, 0, 2])
    assert label_recovery(pred, y) == pytest.approx(100 * 4 / 6)
    assert label_recovery(pred, y, exclude_rows=[0, 4]) == 100.0
    assert chance_level(y) == 50.0
    assert chance_level(y, exclude_rows=[0, 1]) == 50.0


# --- bad input ----------------------------------------------------------------------


def test_bad_inputs_raise_fedviews_errors_with_a_fix() -> None:
    G = np.random.default_rng(9).standard_normal((10, 3))
    G_nan = G.copy()
    G_nan[2, 1] = np.nan
    with pytest.raises(DataError, match="NaN or infinite"):
        labels_by_direction(G_nan, aux_rows=[0, 1], aux_y=[0, 1])
    with pytest.raises(DataError, match="NaN or infinite"):
        labels_from_softmax_gradient(G_nan)
    with pytest.raises(DataError, match=r"outside \[0, 10\)"):
        labels_by_direction(G, aux_rows=[0, 10], aux_y=[0, 1])
    with pytest.raises(DataError, match="duplicated"):
        labels_by_completion(G, aux_rows=[1, 1], aux_y=[0, 1])
    with pytest.raises(ConfigError, match="at least 2 classes"):
        labels_by_direction(G, aux_rows=[0, 1], aux_y=[1, 1])
    with pytest.raises(ConfigError, match="at least 2 classes"):
        labels_by_completion(G, aux_rows=[0, 1], aux_y=[1, 1])
    with pytest.raises(DataError, match="match the lengths"):
        labels_by_direction(G, aux_rows=[0, 1, 2], aux_y=[0, 1])
    with pytest.raises(ConfigError, match="empty"):
        labels_by_direction(G, aux_rows=[], aux_y=[])
    with pytest.raises(DataError, match="2-D"):
        labels_from_softmax_gradient(G[:, :, None])
    with pytest.raises(DataError, match="2-D"):
        labels_from_consensus(G[0])
    with pytest.raises(ConfigError, match="both aux_rows and aux_y"):
        labels_from_consensus(G, aux_rows=[0])
    with pytest.raises(DataError, match="integer class codes"):
        labels_by_direction(G, aux_rows=[0, 1], aux_y=["a", "b"])


def test_bad_scoring_and_reconstruction_arguments() -> None:
    G = np.random.default_rng(10).standard_normal((10, 3))
    with pytest.raises(ConfigError, match="positive_row"):
        binary_scores(G, kind="direction")
    with pytest.raises(ConfigError, match="'norm' or 'direction'"):
        binary_scores(G, kind="angle")  # type: ignore[arg-type]
    with pytest.raises(DataError, match="outside"):
        binary_scores(G, kind="direction", positive_row=10)
    with pytest.raises(DataError, match="two classes"):
        auc(np.arange(4.0), [1, 1, 1, 1])
    with pytest.raises(DataError, match="X_aux has 2 rows but aux_rows lists 3"):
        reconstruct_features(G, aux_rows=[0, 1, 2], X_aux=np.zeros((2, 4)))
    with pytest.raises(ConfigError, match="alpha"):
        reconstruct_features(G, aux_rows=[0, 1], X_aux=np.zeros((2, 4)), alpha=0.0)
    with pytest.raises(DataError, match="X_hat has shape"):
        reconstruction_quality(np.zeros((4, 8, 8)), np.zeros((5, 8, 8)))
    with pytest.raises(DataError, match="pred has shape"):
        label_recovery([0, 1], [0, 1, 1])
    with pytest.raises(DataError, match="no rows left"):
        chance_level([0, 1], exclude_rows=[0, 1])
