"""The centralized reference of H-FedMV (Che et al., Algorithm 3, training phase).

Written from the paper's equations in one function (no parties, no messages), sharing
no update step with the client (:class:`~fedviews.linear.hfedmv.protocol.LocalLearner`)
or the server: "federated == centralized" then checks the update equations, not only
the plumbing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews.federation import spawn_streams
from fedviews.linear._common import orthonormal_nonnegative, per_party
from fedviews.linear._reference import fro2, irls, l21


def hfedmv_centralized(
    clients: Sequence[tuple[Sequence[np.ndarray], np.ndarray]],
    *,
    beta: float | Sequence[float] = 4.0,
    zeta: float | Sequence[float] = 8.0,
    eta: float = 16.0,
    n_rounds: int = 20,
    local_iter: int = 2,
    inner_max_iter: int = 5,
    inner_tol: float = 1e-6,
    eps: float = 1e-10,
    random_state: int | None = 0,
) -> dict[str, Any]:
    """Algorithm 3 (training phase) run centrally: ``clients[l] = (Xs_l, Y_l)``, every view
    of client ``l``'s samples and their one-hot labels (columns: the federation's classes).

    Every round, every client ``l`` starts from the global ``W_k`` and runs ``local_iter``
    passes of: ``Z^l_k = (X^l_k W^l_k + zeta_k Z^l) / (1 + zeta_k)`` for every view
    (Eq. 16); ``Z^l = (sum_k zeta_k Z^l_k + eta Y^l) / (sum_k zeta_k + eta)`` (Eq. 17);
    for every view, IRLS on ``||X^l_k W^l_k - Z^l_k||^2 + beta_k ||W^l_k||_{2,1}`` from
    the current ``W^l_k`` (Eqs. 14-15, :func:`~fedviews.linear._reference.irls`), keeping
    its ``Z^l`` between rounds; then ``W_k = sum_l (N_l / N) W^l_k``. A client's objective
    is Eq. (1) on its own data after its last pass; a round's, their sum.

    Initialisation, as :class:`~fedviews.linear.HFedMV` draws it: the server's ``W_k``
    with ``N(0, 1/d_k)`` entries from stream 0 (view by view), client ``l``'s ``Z^l``
    random non-negative with orthonormal columns from stream ``1 + l``.

    Returns
    -------
    dict
        ``{"W": [...], "W_local": [[...] per client], "Z": [Z^l per client],
        "objective": [...]}``.
    """
    K = len(clients[0][0])
    betas, zetas = per_party(beta, K, "beta"), per_party(zeta, K, "zeta")
    c = clients[0][1].shape[1]
    streams = spawn_streams(random_state, len(clients) + 1)
    rng = np.random.default_rng(streams[0])
    W = [rng.standard_normal((X.shape[1], c)) / np.sqrt(X.shape[1]) for X in clients[0][0]]
    Zs = [
        orthonormal_nonnegative(len(Y), c, np.random.default_rng(streams[1 + l]))
        for l, (_, Y) in enumerate(clients)  # noqa: E741
    ]
    W_local: list[list[np.ndarray]] = []
    objective: list[float] = []
    for _ in range(n_rounds):
        W_local, f_round = [], 0.0
        for l, (Xs, Y) in enumerate(clients):  # noqa: E741
            Ws, Z = list(W), Zs[l]
            for _ in range(local_iter):
                Zk = [(X @ Wk + z * Z) / (1.0 + z) for X, Wk, z in zip(Xs, Ws, zetas, strict=True)]
                Z = (sum(z * Z_k for z, Z_k in zip(zetas, Zk, strict=True)) + eta * Y) / (
                    sum(zetas) + eta
                )
                Ws = [
                    irls(X, Z_k, b, Wk, inner_max_iter, inner_tol, eps)
                    for X, Z_k, b, Wk in zip(Xs, Zk, betas, Ws, strict=True)
                ]
                f = eta * fro2(Z - Y)
                for X, Wk, Z_k, b, z in zip(Xs, Ws, Zk, betas, zetas, strict=True):
                    f += fro2(X @ Wk - Z_k) + b * l21(Wk) + z * fro2(Z_k - Z)
            Zs[l] = Z
            W_local.append(Ws)
            f_round += float(f)
        N = sum(len(Y) for _, Y in clients)
        W = [
            sum(len(Y) / N * Wl[k] for (_, Y), Wl in zip(clients, W_local, strict=True))
            for k in range(K)
        ]
        objective.append(f_round)
    return {"W": W, "W_local": W_local, "Z": Zs, "objective": objective}
