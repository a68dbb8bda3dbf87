"""Deliberately naive reference implementations (explicit inverses, no caching).

They transcribe the MMVFL paper's equations as literally as possible and exist
only to check the fast code (tests) and to measure its speed-up (benchmarks).
Never use them for real work.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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


def naive_mmvfl(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    beta: float,
    zeta: float,
    eta: float,
    owner: int,
    rounds: int,
    inner: int,
    seed: int | None,
    eps: float = 1e-10,
) -> tuple[list[np.ndarray], np.ndarray, list[float]]:
    """Algorithm 1 with a fixed number of rounds / inner iterations, explicit inverses.

    Same initialisation streams as :class:`fedviews.linear.MMVFL`; returns
    ``(W_list, Z, objective_per_round)``.
    """
    K = len(Xs)
    ss = np.random.SeedSequence(seed).spawn(K + 1)
    n, c = Y.shape
    Z = orthonormal_nonnegative(n, c, np.random.default_rng(ss[0]))
    Zk = [orthonormal_nonnegative(n, c, np.random.default_rng(ss[1 + k])) for k in range(K)]
    A = [np.eye(X.shape[1]) for X in Xs]
    W = [np.zeros((X.shape[1], c)) for X in Xs]
    obj = []
    for _ in range(rounds):
        for k, X in enumerate(Xs):
            for _ in range(inner):
                W[k] = np.linalg.inv(X.T @ X + beta * A[k]) @ X.T @ Zk[k]
                A[k] = np.diag(1 / (2 * (np.linalg.norm(W[k], axis=1) + eps)))
            if k == owner:
                Zk[k] = (X @ W[k] + zeta * Z + eta * Y) / (1 + zeta + eta)
            else:
                Zk[k] = (X @ W[k] + zeta * Z) / (1 + zeta)
        Z = np.sum(Zk, axis=0) / K  # Eq. (14) with equal zeta
        f = sum(
            np.linalg.norm(X @ w - z) ** 2
            + beta * np.linalg.norm(w, axis=1).sum()
            + zeta * np.linalg.norm(z - Z) ** 2
            for X, w, z in zip(Xs, W, Zk, strict=True)
        )
        obj.append(float(f + eta * np.linalg.norm(Zk[owner] - Y) ** 2))
    return W, Z, obj
