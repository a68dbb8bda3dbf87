"""Deliberately naive reference implementations (plain solves, no caching).

They transcribe the papers' equations as literally as possible and exist only to
check the fast code (tests) and to measure its speed-up (benchmarks). They import
nothing of the parties or of their update steps (``z_k_step``, ``z_step``,
:class:`~fedviews.linear._l21.L21Problem`), so that "federated == centralized"
checks the update equations, not only the plumbing. Never use them for real work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.linalg as sla

from fedviews.federation import spawn_streams
from fedviews.linear._common import orthonormal_nonnegative


def naive_irls(
    X: np.ndarray, T: np.ndarray, beta: float, n_iter: int, eps: float = 1e-10
) -> tuple[np.ndarray, list[float]]:
    """Eqs. (7)-(8) verbatim, starting from A = I; returns W and the objective per iteration."""
    A = np.eye(X.shape[1])
    hist = []
    W = np.zeros((X.shape[1], T.shape[1]))
    for _ in range(n_iter):
        W = np.linalg.inv(X.T @ X + beta * A) @ X.T @ T
        A = np.diag(1.0 / (2.0 * (np.linalg.norm(W, axis=1) + eps)))
        hist.append(float(np.linalg.norm(X @ W - T) ** 2 + beta * np.linalg.norm(W, axis=1).sum()))
    return W, hist


def fro2(A: np.ndarray) -> float:
    return float(np.sum(A * A))


def _rows(W: np.ndarray) -> np.ndarray:
    return np.linalg.norm(W, axis=1)


def l21(W: np.ndarray) -> float:
    return float(_rows(W).sum())


def _stops(prev: float, f: float, tol: float) -> bool:
    """The papers' "until convergence", as the fast code reads it: the objective changed
    by at most ``tol`` (relative) since the last iteration (never with ``tol = 0``)."""
    return bool(tol > 0 and np.isfinite(prev) and abs(prev - f) <= tol * abs(prev))


def irls(
    X: np.ndarray,
    T: np.ndarray,
    beta: float,
    W0: np.ndarray | None,
    max_iter: int,
    tol: float,
    eps: float,
) -> np.ndarray:
    """The W step of both papers, ``min ||X W - T||^2 + beta ||W||_{2,1}``: alternate
    ``A = diag(1 / (2 (||w_i|| + eps)))`` (MMVFL Eq. 7, FedMV Eqs. 5, 14) and
    ``W = (X^T X + beta A)^{-1} X^T T`` (MMVFL Eq. 8, FedMV Eqs. 6, 15), from ``W0``
    (``None``: ``A = I``), until the objective changes by at most ``tol`` (relative) or
    ``max_iter`` times."""
    W = W0
    prev = np.inf if W0 is None else fro2(X @ W0 - T) + beta * l21(W0)
    for _ in range(max_iter):
        A = np.eye(X.shape[1]) if W is None else np.diag(1.0 / (2.0 * (_rows(W) + eps)))
        W = sla.solve(X.T @ X + beta * A, X.T @ T, assume_a="pos")
        f = fro2(X @ W - T) + beta * l21(W)
        if _stops(prev, f, tol):
            break
        prev = f
    assert W is not None
    return W


def consensus_reference(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    betas: Sequence[float],
    zetas: Sequence[float],
    eta: float,
    *,
    label_owner: int | None,
    max_iter: int,
    tol: float,
    inner_max_iter: int,
    inner_tol: float,
    eps: float,
    random_state: int | None,
) -> dict[str, Any]:
    """Block-coordinate descent on ``sum_k ||X_k W_k - Z_k||^2 + beta_k ||W_k||_{2,1}
    + zeta_k ||Z_k - Z||^2`` plus the label term, written from the equations.

    One round, for every view ``k``: the W step (:func:`irls`, warm-started), then
    ``Z_k = (X_k W_k + zeta_k Z) / (1 + zeta_k)`` (FedMV Eq. 8, MMVFL Eq. 12) or, at
    the label owner ``l`` of MMVFL, ``Z_l = (X_l W_l + zeta_l Z + eta Y) / (1 + zeta_l
    + eta)`` (MMVFL Eq. 11); then ``Z = sum_k zeta_k Z_k / sum_k zeta_k`` (MMVFL
    Eq. 14) or, with the labels at the server (``label_owner=None``), ``Z = (sum_k
    zeta_k Z_k + eta Y) / (sum_k zeta_k + eta)`` (FedMV Eq. 10). Stops when the
    objective after a round changes by at most ``tol`` (relative).

    Initialisation: ``Z`` from stream 0 and ``Z_k`` from stream ``1 + k`` of
    ``random_state``, random non-negative with orthonormal columns (MMVFL Algorithm 1,
    line 1; FedMV Algorithm 2); the first W step starts from ``A = I``.

    Returns
    -------
    dict
        ``{"W": [...], "Z": Z, "Z_k": [...], "objective": [...]}``.
    """
    K, (n, c) = len(Xs), Y.shape
    streams = spawn_streams(random_state, K + 1)
    Z = orthonormal_nonnegative(n, c, np.random.default_rng(streams[0]))
    Zk = [orthonormal_nonnegative(n, c, np.random.default_rng(streams[1 + k])) for k in range(K)]
    Ws: list[np.ndarray | None] = [None] * K
    objective: list[float] = []
    prev = np.inf
    for _ in range(max_iter):
        for k, X in enumerate(Xs):
            Ws[k] = W = irls(X, Zk[k], betas[k], Ws[k], inner_max_iter, inner_tol, eps)
            if k == label_owner:
                Zk[k] = (X @ W + zetas[k] * Z + eta * Y) / (1.0 + zetas[k] + eta)
            else:
                Zk[k] = (X @ W + zetas[k] * Z) / (1.0 + zetas[k])
        weighted = np.asarray(sum(z * Z_k for z, Z_k in zip(zetas, Zk, strict=True)))
        if label_owner is None:
            Z = (weighted + eta * Y) / (sum(zetas) + eta)
        else:
            Z = weighted / sum(zetas)
        f = eta * fro2((Z if label_owner is None else Zk[label_owner]) - Y)
        for X, Wk, Z_k, b, z in zip(Xs, Ws, Zk, betas, zetas, strict=True):
            assert Wk is not None
            f += fro2(X @ Wk - Z_k) + b * l21(Wk) + z * fro2(Z_k - Z)
        objective.append(f)
        if _stops(prev, f, tol):
            break
        prev = f
    return {"W": Ws, "Z": Z, "Z_k": Zk, "objective": objective}
