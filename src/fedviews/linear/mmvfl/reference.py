"""References of MMVFL: the centralized run of the federated updates and a deliberately
naive transcription of Algorithm 1 (explicit inverses, fixed iteration counts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews.linear._common import orthonormal_nonnegative, per_party, scale_labels
from fedviews.linear._reference import consensus_reference


def mmvfl_centralized(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    *,
    beta: float | Sequence[float] = 1.0,
    zeta: float | Sequence[float] = 1000.0,
    eta: float = 1000.0,
    label_owner: int = 0,
    max_iter: int = 200,
    tol: float = 1e-6,
    inner_max_iter: int = 20,
    inner_tol: float = 1e-6,
    eps: float = 1e-10,
    label_scale: str = "onehot",
    random_state: int | None = 0,
) -> dict[str, Any]:
    """The MMVFL updates run centrally in one function (no parties, no messages).

    Same initialisation streams, update order and stopping rules as :class:`MMVFL`;
    used to check that the federated run equals the centralized computation of the
    objective. Written from the equations (Eqs. 7-8, 11, 12, 14;
    :func:`~fedviews.linear._reference.consensus_reference`, the label term at party
    ``label_owner``), sharing no update step with the parties; the one-hot ``Y`` is
    scaled by ``label_scale`` as the label owner scales it. Returns
    ``{"W": [...], "Z": Z, "Z_k": [...], "objective": [...]}``.
    """
    K = len(Xs)
    return consensus_reference(
        Xs, scale_labels(Y, label_scale), per_party(beta, K, "beta"), per_party(zeta, K, "zeta"), eta,
        label_owner=label_owner, max_iter=max_iter, tol=tol, inner_max_iter=inner_max_iter,
        inner_tol=inner_tol, eps=eps, random_state=random_state,
    )  # fmt: skip


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
