r"""FedMV (Che et al.): vertical and horizontal federated multi-view learning.

Multi-view objective (Eq. 1), views ``k = 1..K``, one-hot labels ``Y``:

.. math::
    \sum_k \|X_k W_k - Z_k\|_F^2 + \beta_k \|W_k\|_{2,1} + \zeta_k \|Z_k - Z\|_F^2
    + \eta \|Z - Y\|_F^2

ℓ2,1 norm. The paper defines ``||W||_{2,1}`` once as a sum over *columns* but
says it promotes *row* sparsity for feature selection and uses the row-wise
reweighting of Eq. (5) (``A_k`` is ``d_k x d_k``, one weight per row). We use the
row-wise norm (rows of ``W_k`` are features), consistent with Eqs. (5)-(6).

Training (block-coordinate descent, every step an exact block minimisation or an
IRLS majorisation step, so the objective is non-increasing):

* W step (Eqs. 5-6): IRLS on ``min ||X_k W_k - Z_k||^2 + beta_k ||W_k||_{2,1}``,
  warm-started, with the cached Gram / Woodbury solver of :class:`L21Problem`;
* Z_k step (Eq. 8): ``Z_k = (X_k W_k + zeta_k Z) / (1 + zeta_k)``;
* Z step (Eq. 10): ``Z = (sum_k zeta_k Z_k + eta Y) / (sum_k zeta_k + eta)``.

Testing phase (Eqs. 2, 12-13): with ``P_k = X_k^test W_k`` fixed, alternate
``Z^test = sum zeta_k Z_k^test / sum zeta_k`` and
``Z_k^test = (P_k + zeta_k Z^test) / (1 + zeta_k)`` from ``Z_k^test = P_k``; the
prediction is ``argmax Z^test``. Eliminating ``Z_k^test`` shows that the iteration
converges to the closed-form minimiser of Eq. (2),
``Z^test = sum_k w_k P_k / sum_k w_k`` with ``w_k = zeta_k / (1 + zeta_k)``, at the
linear rate ``sum_k (zeta_k^2/(1+zeta_k)) / sum_k zeta_k`` per iteration.

This module holds what both share: the testing phase (:func:`fedmv_consensus`),
the consensus predictor, and local multi-view learning in the order of Algorithm 3
(:class:`LocalMVL`, :func:`mvl_local`; an H-FedMV client's loop). V-FedMV
(Algorithm 2, the consensus protocol of :mod:`fedviews.linear._consensus`) is
defined in :mod:`fedviews.linear._vfedmv`, H-FedMV (Algorithm 3) in
:mod:`fedviews.linear._hfedmv`; their docstrings say what crosses the barrier and
how every stream is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import check_Xs, check_y, one_hot
from fedviews.errors import DataError, check_fitted
from fedviews.federation import spawn_streams
from fedviews.linear._common import (
    check_count,
    check_iter,
    check_positive,
    orthonormal_nonnegative,
    per_party,
    small_blas,
)
from fedviews.linear._consensus import (
    IRLSOptions,
    consensus_iterations,
    consensus_weights,
    sq,
    z_k_step,
    z_step,
)
from fedviews.linear._l21 import L21Problem, l21_norm


def _labels_present(y: Any, where: str) -> None:
    if y is None:
        raise DataError(
            f"{where}: labels are missing (y is None); FedMV is supervised through "
            "||Z - Y||^2, so the label holder must pass y"
        )


# --------------------------------------------------------------------------- testing phase


def fedmv_consensus(
    Ps: Sequence[np.ndarray],
    zeta: float | Sequence[float],
    *,
    max_iter: int = 1000,
    tol: float = 1e-8,
) -> tuple[np.ndarray, int]:
    """Testing phase (Eqs. 12-13) run in one place: the consensus ``Z^test`` of ``P_k = X_k^test W_k``.

    Returns ``(Z_test, n_iter)``. Stops when ``||Z_t - Z_{t-1}||_F <= tol ||Z_t||_F``.
    This is the local computation of an H-FedMV client and the centralized twin of
    the V-FedMV testing protocol.
    """
    zetas = per_party(zeta, len(Ps), "zeta")
    check_iter(max_iter, tol, "test_max_iter", "test_tol")

    def update(Z: np.ndarray, it: int) -> list[np.ndarray]:  # Eq. (13)
        return [z_k_step(P, Z, z) for P, z in zip(Ps, zetas, strict=True)]

    Zk = [np.array(P, dtype=np.float64) for P in Ps]
    return consensus_iterations(Zk, update, consensus_weights(zetas), max_iter, tol)


class _ConsensusPredictor(BaseEstimator):
    """``predict = argmax`` of the consensus ``Z^test`` (shared by the multi-view estimators)."""

    classes_: np.ndarray
    W_: list[np.ndarray]
    zetas_: list[float]
    n_features_in_: list[int]
    test_max_iter: int
    test_tol: float

    def decision_function(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """Consensus ``Z^test`` of the testing phase (Eqs. 12-13 / 18-19), run locally by the
        holder of ``Xs`` with the fitted ``W_k`` (V-FedMV overrides it with the federated one)."""
        check_fitted(self, "W_", "zetas_")
        Xs = check_Xs(Xs, n_views=len(self.W_), n_features=self.n_features_in_)
        Z, self.test_iterations_ = fedmv_consensus(
            [X @ W for X, W in zip(Xs, self.W_, strict=True)],
            self.zetas_,
            max_iter=self.test_max_iter,
            tol=self.test_tol,
        )
        return Z

    def predict(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """Class labels: ``argmax`` of the consensus ``Z^test`` (Eqs. 12-13)."""
        Z = self.decision_function(Xs)  # raises NotFittedError before fit
        return self.classes_[np.argmax(Z, axis=1)]


def _prepare_views(Xs: Any, y: Any, where: str) -> tuple[list[np.ndarray], np.ndarray]:
    Xs = check_Xs(Xs)
    _labels_present(y, where)
    return Xs, check_y(y, Xs[0].shape[0])


# --------------------------------------------------------------------------- local MVL


def _init_W(dims: Sequence[int], c: int, seed: np.random.SeedSequence) -> list[np.ndarray]:
    """Server's random ``W_k`` (Algorithm 3, line 1): ``N(0, 1/d_k)`` entries."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((d, c)) / np.sqrt(d) for d in dims]


class _LocalMVL:
    """One data holder's multi-view learning state in the order of Algorithm 3 (Eqs. 14-17)."""

    def __init__(
        self,
        Xs: Sequence[np.ndarray],
        Y: np.ndarray,
        *,
        betas: Sequence[float],
        zetas: Sequence[float],
        eta: float,
        seed: np.random.SeedSequence,
        solver: IRLSOptions,
    ) -> None:
        self.problems = [L21Problem(X, eps=solver.eps) for X in Xs]
        self.Y, self.betas, self.zetas, self.eta = Y, list(betas), list(zetas), eta
        self.solver = solver
        self.Z = orthonormal_nonnegative(Y.shape[0], Y.shape[1], np.random.default_rng(seed))
        self.objective: list[float] = []

    def passes(self, Ws: Sequence[np.ndarray], n_pass: int) -> list[np.ndarray]:
        """``n_pass`` passes of Z_k (16), Z (17), W (14-15) starting from ``Ws``."""
        Ws = list(Ws)
        for _ in range(n_pass):
            XW = [p.X @ W for p, W in zip(self.problems, Ws, strict=True)]
            Zk = [z_k_step(xw, self.Z, z) for xw, z in zip(XW, self.zetas, strict=True)]  # (16)
            self.Z = z_step(self.zetas, Zk, self.eta, self.Y)  # (17)
            Ws = [
                p.solve(zk, b, W0=W, max_iter=self.solver.max_iter, tol=self.solver.tol).W
                for p, zk, b, W in zip(self.problems, Zk, self.betas, Ws, strict=True)
            ]
            f = self.eta * sq(self.Z - self.Y)
            for p, W, zk, b, z in zip(self.problems, Ws, Zk, self.betas, self.zetas, strict=True):
                f += sq(p.X @ W - zk) + b * l21_norm(W) + z * sq(zk - self.Z)
            self.objective.append(f)
        return Ws


def mvl_local(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    *,
    beta: float | Sequence[float] = 4.0,
    zeta: float | Sequence[float] = 8.0,
    eta: float = 16.0,
    n_iter: int = 100,
    inner_max_iter: int = 5,
    inner_tol: float = 1e-6,
    eps: float = 1e-10,
    random_state: int | None = 0,
) -> dict[str, Any]:
    """Local multi-view learning of one data holder (Algorithm 3's client loop, alone).

    Written as a plain loop (no parties, no messages); H-FedMV with a single client
    must give the same result (same streams: ``W`` from stream 0, ``Z`` from stream 1).
    Returns ``{"W": [...], "Z": Z, "objective": [...]}`` (objective after every pass).
    """
    K = len(Xs)
    betas, zetas = per_party(beta, K, "beta"), per_party(zeta, K, "zeta")
    check_count(n_iter, "n_iter")
    check_iter(inner_max_iter, inner_tol, "inner_max_iter", "inner_tol")
    check_positive(eta, "eta")
    check_positive(eps, "eps")
    ss = spawn_streams(random_state, 2)
    Ws = _init_W([X.shape[1] for X in Xs], Y.shape[1], ss[0])
    with small_blas():
        solver = IRLSOptions(inner_max_iter, inner_tol, eps)
        mvl = _LocalMVL(Xs, Y, betas=betas, zetas=zetas, eta=eta, seed=ss[1], solver=solver)
        Ws = mvl.passes(Ws, n_iter)
    return {"W": Ws, "Z": mvl.Z, "objective": mvl.objective}


@register_estimator("mv_local")
class LocalMVL(_ConsensusPredictor):
    """Multi-view learning on one holder's data, no federation (the "MV w/o FL" baseline).

    Parameters are those of :class:`HFedMV`; ``n_iter`` passes of Algorithm 3's
    local loop from a random ``W``. ``predict`` runs the testing phase locally.
    No party sends anything, so there is no ``transport_``, ``run_stats_`` or
    ``history_``; ``objective_`` is the objective after every pass.
    """

    def __init__(
        self,
        beta: float | Sequence[float] = 4.0,
        zeta: float | Sequence[float] = 8.0,
        eta: float = 16.0,
        n_iter: int = 100,
        inner_max_iter: int = 5,
        inner_tol: float = 1e-6,
        test_max_iter: int = 1000,
        test_tol: float = 1e-8,
        eps: float = 1e-10,
        random_state: int | None = 0,
    ) -> None:
        store_params(self, locals())

    def fit(
        self, Xs: Sequence[np.ndarray], y: np.ndarray, classes: np.ndarray | None = None
    ) -> LocalMVL:
        """Fit on one holder's views; ``classes`` fixes the label set (e.g. the federation's)."""
        Xs, y = _prepare_views(Xs, y, "LocalMVL")
        Y, self.classes_ = one_hot(y, None if classes is None else np.asarray(classes))
        if Y.shape[1] < 2:
            raise DataError("the label set must contain at least two classes")
        check_iter(self.test_max_iter, self.test_tol, "test_max_iter", "test_tol")
        params = self.get_params(deep=False)  # mvl_local's, and the testing phase's
        out = mvl_local(Xs, Y, **{k: v for k, v in params.items() if not k.startswith("test_")})
        self.W_, self.Z_, self.objective_ = out["W"], out["Z"], out["objective"]
        self.zetas_ = per_party(self.zeta, len(Xs), "zeta")
        self.n_features_in_ = [X.shape[1] for X in Xs]
        return self
