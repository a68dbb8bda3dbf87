"""The centralized reference of V-FedMV (Che et al., Algorithm 2, training phase)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews.linear._common import per_party
from fedviews.linear._reference import consensus_reference


def vfedmv_centralized(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    *,
    beta: float | Sequence[float] = 4.0,
    zeta: float | Sequence[float] = 8.0,
    eta: float = 16.0,
    max_iter: int = 30,
    tol: float = 1e-6,
    inner_max_iter: int = 20,
    inner_tol: float = 1e-6,
    eps: float = 1e-10,
    random_state: int | None = 0,
) -> dict[str, Any]:
    """Algorithm 1 (training phase) run centrally: no parties, no messages.

    Same initialisation streams, update order and stopping rules as :class:`VFedMV`;
    used to check that the federated run equals the centralized computation of the
    objective. Written from the paper's equations (5), (6), (8) and (10)
    (:func:`~fedviews.linear._reference.consensus_reference`, the label term in the Z
    step), sharing no update step with the parties. Returns
    ``{"W": [...], "Z": Z, "Z_k": [...], "objective": [...]}``.
    """
    K = len(Xs)
    return consensus_reference(
        Xs, Y, per_party(beta, K, "beta"), per_party(zeta, K, "zeta"), eta,
        label_owner=None, max_iter=max_iter, tol=tol, inner_max_iter=inner_max_iter,
        inner_tol=inner_tol, eps=eps, random_state=random_state,
    )  # fmt: skip
