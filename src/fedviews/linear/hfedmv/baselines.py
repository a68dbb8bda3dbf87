"""The baselines of H-FedMV in the FedMV paper: "MV w/o FL" (:class:`LocalMVL`, local
multi-view learning on one holder's data, :func:`mvl_local`) and "Single View FL"
(:class:`SingleViewFL`, FedAvg of Eq. 20 over clients holding one view, on the H-FedMV
client and server)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from fedviews._classifier import Classifier, round_progress
from fedviews._estimator import store_params
from fedviews._persist import Persistent
from fedviews._registry import register_estimator
from fedviews.data import check_Xs, one_hot
from fedviews.errors import DataError, check_fitted
from fedviews.federation import Transport, federate, spawn_streams
from fedviews.linear._common import (
    check_count,
    check_iter,
    check_positive,
    per_party,
    small_blas,
)
from fedviews.linear._consensus import IRLSOptions
from fedviews.linear._consensus_fit import ConsensusPredictor, prepare_views
from fedviews.linear._l21 import L21Problem
from fedviews.linear.hfedmv.estimator import check_clients, global_classes
from fedviews.linear.hfedmv.parties import HFedMVClient, HFedMVServer
from fedviews.linear.hfedmv.protocol import LocalLearner, init_W
from fedviews.linear.hfedmv.spec import hfedmv_policy


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

    Written as a plain loop (no parties, no messages) on the client's learner; H-FedMV with a single client
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
    Ws = init_W([X.shape[1] for X in Xs], Y.shape[1], ss[0])
    with small_blas():
        solver = IRLSOptions(inner_max_iter, inner_tol, eps)
        mvl = LocalLearner(Xs, Y, betas=betas, zetas=zetas, eta=eta, seed=ss[1], solver=solver)
        Ws = mvl.passes(Ws, n_iter)
    return {"W": Ws, "Z": mvl.Z, "objective": mvl.objective}


@register_estimator("mv_local")
class LocalMVL(ConsensusPredictor):
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
        Xs, y = prepare_views(Xs, y, "LocalMVL")
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


class _SingleViewLearner:
    """Eq. (20) on one client's single view, warm-started from the global ``W`` (Single View FL)."""

    def __init__(
        self, Xs: list[np.ndarray], *, Y: np.ndarray, beta: float, solver: IRLSOptions
    ) -> None:
        self.problems = [L21Problem(Xs[0], eps=solver.eps)]
        self.Y, self.beta, self.solver = Y, beta, solver
        self.objective: list[float] = []

    def passes(self, Ws: Sequence[np.ndarray], n_pass: int) -> list[np.ndarray]:
        """``n_pass`` IRLS iterations of Eq. (20) from ``Ws[0]``."""
        res = self.problems[0].solve(
            self.Y, self.beta, W0=Ws[0], max_iter=n_pass, tol=self.solver.tol
        )
        self.objective.append(res.objective[-1])
        return [res.W]


@register_estimator("single_view_fl")
class SingleViewFL(Persistent, Classifier):
    """The "Single View FL" baseline: FedAvg of Eq. (20) over clients holding one view.

    Every round each client runs ``local_iter`` IRLS iterations of
    ``min ||X^l W - Y^l||^2 + beta ||W||_{2,1}`` from the global ``W``, and the
    server averages with weights ``N_l / N`` (same server and policy as H-FedMV).

    ``fit(clients)`` takes ``[(X_l, y_l), ...]`` with one 2-D view per client.

    Parameters
    ----------
    beta : float, default=4
        ℓ2,1 strength of Eq. (20).
    n_rounds : int, default=20
        Communication rounds.
    local_iter : int, default=5
        IRLS iterations per client and round.
    inner_tol, eps : float
        IRLS stopping rule and ε of Eq. (5).
    random_state : int or None
        Seed of the server's random initial ``W``.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process).
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar per round with its objective (a line
        per round when stderr is no terminal); silent when False.

    Attributes
    ----------
    W_ : ndarray (d, n_classes)
        The global ``W`` after the last round.
    objective_ : list of float
        Sum over clients of their local objective, per round.
    history_ : list of float
        ``objective_`` (the per-round record every federated estimator exposes).
    classes_, n_features_in_
    run_stats_, transport_
        Message statistics and the transport (its ``log`` lists every message).
    """

    def __init__(
        self,
        beta: float = 4.0,
        n_rounds: int = 20,
        local_iter: int = 5,
        inner_tol: float = 1e-6,
        eps: float = 1e-10,
        random_state: int | None = 0,
        transport: Any = None,
        verbose: bool = False,
    ) -> None:
        store_params(self, locals())

    def fit(self, clients: Sequence[tuple[np.ndarray, np.ndarray]]) -> SingleViewFL:
        Xss, ys = check_clients(clients, single_view=True)
        (beta,) = per_party(self.beta, 1, "beta")
        check_count(self.n_rounds, "n_rounds")
        check_iter(self.local_iter, self.inner_tol, "local_iter", "inner_tol")
        check_positive(self.eps, "eps")
        self.classes_ = global_classes(ys)
        solver = IRLSOptions(self.local_iter, self.inner_tol, self.eps)
        ss = spawn_streams(self.random_state, 1)
        self.n_features_in_ = Xss[0][0].shape[1]
        policy = hfedmv_policy(1)
        with small_blas():
            parties = [
                HFedMVClient(
                    f"client{l}",
                    Xs,
                    Y,
                    partial(_SingleViewLearner, Y=Y, beta=beta, solver=solver),
                    local_iter=self.local_iter,
                )
                for l, (Xs, y) in enumerate(zip(Xss, ys, strict=True))  # noqa: E741
                for Y in [one_hot(y, self.classes_)[0]]
            ]
            server = HFedMVServer(
                [p.name for p in parties],
                init_W([self.n_features_in_], len(self.classes_), ss[0]),
                self.n_rounds,
            )
            custom: Transport | None = self.transport(policy) if self.transport else None
            self.transport_ = federate([server, *parties], policy, custom)
            with round_progress(
                "Single View FL", self.n_rounds, server.progress, self.verbose
            ) as on_round:
                self.W_ = server.run(on_round)[0]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.run_stats_ = self.transport_.log.summary()
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """``argmax X W`` with the global ``W``."""
        check_fitted(self, "W_", "classes_")
        (X,) = check_Xs([X], name="X", n_features=[self.n_features_in_])
        return self.classes_[np.argmax(X @ self.W_, axis=1)]
