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

V-FedMV (Algorithm 2): party ``k`` holds ``X_k`` and runs the W and Z_k steps; the
server holds ``Y`` and runs the Z step. Crossing the barrier: ``Z_k`` (and
``Z_k_test``) party → server, ``Z`` (and ``Z_test``) server → party; ``zeta_k`` and
the party's local objective terms travel as scalar metadata (the paper has the
parties send ``zeta_k`` with ``Z_k``). ``X_k``, ``X_k^test`` and ``W_k`` never leave
their party.

H-FedMV (Algorithm 3): client ``l`` holds all views ``X^l_k`` and labels ``Y^l`` of
its own samples. Each round the server sends the global ``W_k``; every client runs
``local_iter`` passes of local multi-view learning in the order of Algorithm 3
(Z_k step (16), Z step (17), W step (14-15)), starting from the global ``W_k``
and keeping its ``Z^l`` between rounds; it returns ``W^l_k`` and its sample count
``N_l`` (metadata); the server sets ``W_k = sum_l (N_l / N) W^l_k``. Only the
``W`` matrices cross; views, labels and ``Z`` stay local.

Initialisation: ``Z`` and ``Z_k`` are random non-negative matrices with
orthonormal columns (Algorithms 1-3, line 1-3), drawn from independent streams
spawned from ``random_state``. As in MMVFL, the first V-FedMV W step starts IRLS
from ``A = I`` (ridge) instead of a random ``W_k``. In H-FedMV the server draws a
random ``W_k`` (``N(0, 1/d_k)`` entries) as in Algorithm 3; the clients' random
``Z^l_k`` of line 2 are overwritten by Eq. (16) before they are read, so only
``Z^l`` is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._registry import register_estimator
from fedviews.data._validation import check_Xs, check_y, one_hot
from fedviews.errors import ConfigError, DataError, check_fitted
from fedviews.federation import (
    Coordinator,
    Message,
    Party,
    PrivacyPolicy,
    Transport,
    federate,
    handles,
)
from fedviews.linear._common import (
    orthonormal_nonnegative,
    per_party,
    small_blas,
)
from fedviews.linear._consensus import IRLSOptions, consensus_weights, number, sq
from fedviews.linear._l21 import L21Problem, row_norms

__all__ = [
    "HFedMV",
    "LocalMVL",
    "SingleViewFL",
    "fedmv_consensus",
    "hfedmv_policy",
    "mvl_local",
]


def hfedmv_policy(n_views: int) -> PrivacyPolicy:
    """The H-FedMV barrier for ``n_views`` views: only local and global ``W_k`` cross."""
    return PrivacyPolicy.of(
        "h-fedmv",
        {
            ("client", "coordinator"): [f"W_local_{k}" for k in range(n_views)],
            ("coordinator", "client"): [f"W_{k}" for k in range(n_views)],
        },
    )


def _check_iter(value: int, tol: float, name: str) -> None:
    if isinstance(value, bool) or int(value) < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    if not tol >= 0:
        raise ConfigError(f"tolerance for {name} must be >= 0, got {tol!r}")


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
    _check_iter(max_iter, tol, "test_max_iter")
    w = consensus_weights(zetas)
    Zk = [np.array(P, dtype=np.float64) for P in Ps]
    Z = sum(wk * z for wk, z in zip(w, Zk, strict=True))  # Eq. (12)
    it = 1
    for it in range(2, max_iter + 1):  # noqa: B007
        Zk = [(P + z * Z) / (1.0 + z) for P, z in zip(Ps, zetas, strict=True)]  # Eq. (13)
        Z_new = sum(wk * z for wk, z in zip(w, Zk, strict=True))
        done = np.sqrt(sq(Z_new - Z)) <= tol * max(np.sqrt(sq(Z_new)), 1e-300)
        Z = Z_new
        if done:
            break
    return np.asarray(Z), it


class _ConsensusPredictor(BaseEstimator):
    """``predict = argmax`` of the consensus ``Z^test`` (shared by the multi-view estimators)."""

    classes_: np.ndarray

    def decision_function(self, Xs: Sequence[np.ndarray]) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

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
            Zk = [(xw + z * self.Z) / (1.0 + z) for xw, z in zip(XW, self.zetas, strict=True)]
            num = sum(z * zk for z, zk in zip(self.zetas, Zk, strict=True)) + self.eta * self.Y
            self.Z = num / (sum(self.zetas) + self.eta)
            Ws = [
                p.solve(zk, b, W0=W, max_iter=self.solver.max_iter, tol=self.solver.tol).W
                for p, zk, b, W in zip(self.problems, Zk, self.betas, Ws, strict=True)
            ]
            f = self.eta * sq(self.Z - self.Y)
            for p, W, zk, b, z in zip(self.problems, Ws, Zk, self.betas, self.zetas, strict=True):
                f += sq(p.X @ W - zk) + b * float(row_norms(W).sum()) + z * sq(zk - self.Z)
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
    _check_iter(n_iter, inner_tol, "n_iter")
    ss = np.random.SeedSequence(random_state).spawn(2)
    Ws = _init_W([X.shape[1] for X in Xs], Y.shape[1], ss[0])
    hist: list[float] = []
    with small_blas():
        probs = [L21Problem(X, eps=eps) for X in Xs]
        Z = orthonormal_nonnegative(Y.shape[0], Y.shape[1], np.random.default_rng(ss[1]))
        for _ in range(n_iter):
            Zk = [(X @ W + z * Z) / (1 + z) for X, W, z in zip(Xs, Ws, zetas, strict=True)]
            Z = (sum(z * zk for z, zk in zip(zetas, Zk, strict=True)) + eta * Y) / (
                sum(zetas) + eta
            )
            Ws = [
                pr.solve(zk, b, W0=W, max_iter=inner_max_iter, tol=inner_tol).W
                for pr, zk, b, W in zip(probs, Zk, betas, Ws, strict=True)
            ]
            f = eta * sq(Z - Y)
            for X, W, zk, b, z in zip(Xs, Ws, Zk, betas, zetas, strict=True):
                f += sq(X @ W - zk) + b * float(row_norms(W).sum()) + z * sq(zk - Z)
            hist.append(f)
    return {"W": Ws, "Z": Z, "objective": hist}


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
        self.beta = beta
        self.zeta = zeta
        self.eta = eta
        self.n_iter = n_iter
        self.inner_max_iter = inner_max_iter
        self.inner_tol = inner_tol
        self.test_max_iter = test_max_iter
        self.test_tol = test_tol
        self.eps = eps
        self.random_state = random_state

    def fit(
        self, Xs: Sequence[np.ndarray], y: np.ndarray, classes: np.ndarray | None = None
    ) -> LocalMVL:
        """Fit on one holder's views; ``classes`` fixes the label set (e.g. the federation's)."""
        Xs, y = _prepare_views(Xs, y, "LocalMVL")
        Y, self.classes_ = one_hot(y, None if classes is None else np.asarray(classes))
        if Y.shape[1] < 2:
            raise DataError("the label set must contain at least two classes")
        _check_iter(self.test_max_iter, self.test_tol, "test_max_iter")
        out = mvl_local(
            Xs,
            Y,
            beta=self.beta,
            zeta=self.zeta,
            eta=self.eta,
            n_iter=self.n_iter,
            inner_max_iter=self.inner_max_iter,
            inner_tol=self.inner_tol,
            eps=self.eps,
            random_state=self.random_state,
        )
        self.W_, self.Z_, self.objective_ = out["W"], out["Z"], out["objective"]
        self.zetas_ = per_party(self.zeta, len(Xs), "zeta")
        self.n_features_in_ = [X.shape[1] for X in Xs]
        return self

    def decision_function(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """Consensus ``Z^test`` (testing phase run locally)."""
        check_fitted(self, "W_", "zetas_")
        Xs = check_Xs(Xs, n_views=len(self.W_), n_features=self.n_features_in_)
        Z, self.test_iterations_ = fedmv_consensus(
            [X @ W for X, W in zip(Xs, self.W_, strict=True)],
            self.zetas_,
            max_iter=self.test_max_iter,
            tol=self.test_tol,
        )
        return Z


# --------------------------------------------------------------------------- H-FedMV


class HFedMVClient(Party):
    """Client ``L_l`` of Algorithm 3: all views and labels of its own samples stay here."""

    def __init__(
        self, name: str, learner: _LocalMVL | _SingleViewLearner, n_samples: int, local_iter: int
    ) -> None:
        super().__init__(name, role="client")
        self.learner = learner
        self.n_samples = n_samples
        self.local_iter = local_iter
        self.W_local: list[np.ndarray] = []

    @handles("local_train")
    def on_local_train(self, msg: Message) -> Message:
        K = len(self.learner.problems)
        self.W_local = self.learner.passes(
            [msg.arrays[f"W_{k}"] for k in range(K)], self.local_iter
        )
        return self.reply(
            msg,
            arrays={f"W_local_{k}": W for k, W in enumerate(self.W_local)},
            meta={"n_samples": self.n_samples, "local_objective": self.learner.objective[-1]},
        )

    def state_dict(self) -> dict[str, np.ndarray]:
        """This client's private state after a round: its ``Z^l``, local ``W^l_k``, objectives."""
        state = {f"W_local_{k}": np.asarray(W) for k, W in enumerate(self.W_local)}
        state["objective"] = np.asarray(self.learner.objective, dtype=np.float64)
        if isinstance(self.learner, _LocalMVL):
            state["Z"] = self.learner.Z
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`; the next round then equals the uninterrupted one."""
        K = len(self.learner.problems)
        if isinstance(self.learner, _LocalMVL):
            if "Z" not in state or state["Z"].shape != self.learner.Z.shape:
                raise DataError(
                    f"client {self.name!r}: the saved state does not fit this client's data "
                    f"(Z {state['Z'].shape if 'Z' in state else None} vs "
                    f"{self.learner.Z.shape}); resume with the same data and config"
                )
            self.learner.Z = np.array(state["Z"], dtype=np.float64)
        self.learner.objective = [float(f) for f in state["objective"]]
        names = [f"W_local_{k}" for k in range(K)]
        self.W_local = (
            [np.array(state[n], dtype=np.float64) for n in names] if names[0] in state else []
        )


class _SingleViewLearner:
    """Eq. (20) on one client's single view, warm-started from the global ``W`` (Single View FL)."""

    def __init__(self, X: np.ndarray, Y: np.ndarray, beta: float, solver: IRLSOptions) -> None:
        self.problems = [L21Problem(X, eps=solver.eps)]
        self.Y, self.beta, self.solver = Y, beta, solver
        self.objective: list[float] = []

    def passes(self, Ws: Sequence[np.ndarray], n_pass: int) -> list[np.ndarray]:
        """``n_pass`` IRLS iterations of Eq. (20) from ``Ws[0]``."""
        res = self.problems[0].solve(
            self.Y, self.beta, W0=Ws[0], max_iter=n_pass, tol=self.solver.tol
        )
        self.objective.append(res.objective[-1])
        return [res.W]


class HFedMVServer(Coordinator):
    """The H-FedMV server: broadcasts the global ``W_k`` and averages with weights ``N_l / N``."""

    def __init__(self, clients: Sequence[str], Ws: list[np.ndarray], n_rounds: int) -> None:
        super().__init__()
        self.clients = list(clients)
        self.W = Ws
        self.n_rounds = n_rounds
        self.objective: list[float] = []

    @staticmethod
    def aggregate(
        local: Sequence[Sequence[np.ndarray]], sizes: Sequence[float]
    ) -> list[np.ndarray]:
        """``W_k = sum_l (N_l / N) W^l_k`` for every view ``k`` (Algorithm 3)."""
        N = float(sum(sizes))
        K = len(local[0])
        return [sum((n / N) * Ws[k] for n, Ws in zip(sizes, local, strict=True)) for k in range(K)]  # type: ignore[misc]

    def state_dict(self) -> dict[str, np.ndarray]:
        """The server's state after a round: the global ``W_k`` and the objective history."""
        state = {f"W_{k}": W for k, W in enumerate(self.W)}
        state["objective"] = np.asarray(self.objective, dtype=np.float64)
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`: :meth:`run` goes on with the next round."""
        shapes = [W.shape for W in self.W]
        got = [state[f"W_{k}"].shape if f"W_{k}" in state else None for k in range(len(shapes))]
        if got != shapes:
            raise DataError(
                f"the saved W_k have shapes {got}, this run needs {shapes}; "
                "resume with the same data and config"
            )
        self.W = [np.array(state[f"W_{k}"], dtype=np.float64) for k in range(len(shapes))]
        self.objective = [float(f) for f in state["objective"]]

    def run(self, on_round_end: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """Rounds ``len(objective) + 1 .. n_rounds`` (all of them unless :meth:`load_state`).

        ``on_round_end(r)`` is called after round ``r`` (e.g. to write a checkpoint).
        """
        K = len(self.W)
        for r in range(len(self.objective) + 1, self.n_rounds + 1):
            replies = self.broadcast(
                self.clients,
                "local_train",
                arrays={f"W_{k}": W for k, W in enumerate(self.W)},
                round=r,
            )
            local = [[replies[c].arrays[f"W_local_{k}"] for k in range(K)] for c in self.clients]
            sizes = [number(replies[c], "n_samples") for c in self.clients]
            self.W = self.aggregate(local, sizes)
            self.objective.append(sum(number(replies[c], "local_objective") for c in self.clients))
            if on_round_end is not None:
                on_round_end(r)
        return self.W


def _check_clients(
    clients: Any, single_view: bool = False
) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
    """Validate ``[(Xs, y), ...]``: every client holds every view, same widths, and labels."""
    if not isinstance(clients, (list, tuple)) or len(clients) == 0:
        raise DataError("clients must be a non-empty list of (Xs, y) pairs, one per client")
    Xss: list[list[np.ndarray]] = []
    ys: list[np.ndarray] = []
    for l, item in enumerate(clients):  # noqa: E741
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise DataError(f"clients[{l}] must be a pair (Xs, y), got {type(item).__name__}")
        Xs, y = item
        _labels_present(y, f"client {l}")
        Xs = check_Xs([Xs] if single_view else Xs, name=f"clients[{l}].Xs")
        Xss.append(Xs)
        ys.append(check_y(y, Xs[0].shape[0], name=f"clients[{l}].y"))
    K = len(Xss[0])
    widths = [X.shape[1] for X in Xss[0]]
    for l, Xs in enumerate(Xss[1:], start=1):  # noqa: E741
        if len(Xs) != K:
            raise DataError(
                f"client {l} holds {len(Xs)} views but client 0 holds {K}; in H-FedMV every client "
                "must hold every view (drop the missing view everywhere, or impute it at that client)"
            )
        w = [X.shape[1] for X in Xs]
        if w != widths:
            bad = [k for k in range(K) if w[k] != widths[k]]
            raise DataError(
                f"view dimensions differ across clients: client {l} has widths {w}, client 0 has "
                f"{widths} (views {bad}); every client must describe a view with the same features"
            )
    return Xss, ys


def _global_classes(ys: Sequence[np.ndarray]) -> np.ndarray:
    classes = np.unique(np.concatenate([np.asarray(y) for y in ys]))
    if len(classes) < 2:
        raise DataError("the clients' labels contain fewer than two classes")
    return classes


@register_estimator("hfedmv")
class HFedMV(_ConsensusPredictor):
    """Horizontal federated multi-view learning (Algorithm 3).

    Parameters
    ----------
    beta, zeta, eta : float or list
        β_k (paper: 4), ζ_k and η (paper: from {2^0..2^5}, the same for all clients).
    n_rounds : int, default=20
        Communication rounds (paper: 20).
    local_iter : int, default=2
        Passes of local multi-view learning per round (Algorithm 3's "while not converge").
    inner_max_iter, inner_tol : int, float
        IRLS iterations of every W step.
    test_max_iter, test_tol : int, float
        Testing-phase consensus (Eqs. 18-19, run locally by each client).
    eps : float
    random_state : int or None
        Stream 0: server's random ``W_k``; stream ``1 + l``: client ``l``'s ``Z^l``.
    transport : callable, optional
        ``transport(policy) -> Transport``.

    Attributes
    ----------
    W_ : list of ndarray
        Global ``W_k`` after the last round (held by the server and every client).
    local_W_ : list of list of ndarray
        Every client's ``W^l_k`` of the last round (simulation only; each is sent
        to the server, which is what the aggregation test checks).
    objective_ : list of float
        Sum over clients of the local objective (Eq. 1 on local data) after local training, per round.
    history_ : list of float
        ``objective_`` (the per-round record every federated estimator exposes).
    client_sizes_ : list of int
    classes_, run_stats_, transport_
    """

    def __init__(
        self,
        beta: float | Sequence[float] = 4.0,
        zeta: float | Sequence[float] = 8.0,
        eta: float = 16.0,
        n_rounds: int = 20,
        local_iter: int = 2,
        inner_max_iter: int = 5,
        inner_tol: float = 1e-6,
        test_max_iter: int = 1000,
        test_tol: float = 1e-8,
        eps: float = 1e-10,
        random_state: int | None = 0,
        transport: Any = None,
    ) -> None:
        self.beta = beta
        self.zeta = zeta
        self.eta = eta
        self.n_rounds = n_rounds
        self.local_iter = local_iter
        self.inner_max_iter = inner_max_iter
        self.inner_tol = inner_tol
        self.test_max_iter = test_max_iter
        self.test_tol = test_tol
        self.eps = eps
        self.random_state = random_state
        self.transport = transport

    def fit(self, clients: Sequence[tuple[Sequence[np.ndarray], np.ndarray]]) -> HFedMV:
        """Run Algorithm 3; ``clients[l] = (Xs_l, y_l)`` with every view of client l's samples."""
        Xss, ys = _check_clients(clients)
        K, M = len(Xss[0]), len(Xss)
        betas = per_party(self.beta, K, "beta")
        self.zetas_ = per_party(self.zeta, K, "zeta")
        (eta,) = per_party(self.eta, 1, "eta")
        for name, v, t in [
            ("n_rounds", self.n_rounds, 0.0),
            ("local_iter", self.local_iter, 0.0),
            ("inner_max_iter", self.inner_max_iter, self.inner_tol),
            ("test_max_iter", self.test_max_iter, self.test_tol),
        ]:
            _check_iter(v, t, name)
        self.classes_ = _global_classes(ys)  # the label set is agreed beforehand (public metadata)
        c = len(self.classes_)
        solver = IRLSOptions(self.inner_max_iter, self.inner_tol, self.eps)
        ss = np.random.SeedSequence(self.random_state).spawn(M + 1)
        self.n_features_in_ = [X.shape[1] for X in Xss[0]]
        policy = hfedmv_policy(K)
        with small_blas():
            parties = [
                HFedMVClient(
                    f"client{l}",
                    _LocalMVL(
                        Xs,
                        one_hot(y, self.classes_)[0],
                        betas=betas,
                        zetas=self.zetas_,
                        eta=eta,
                        seed=ss[1 + l],
                        solver=solver,
                    ),
                    Xs[0].shape[0],
                    self.local_iter,
                )
                for l, (Xs, y) in enumerate(zip(Xss, ys, strict=True))  # noqa: E741
            ]
            server = HFedMVServer(
                [p.name for p in parties], _init_W(self.n_features_in_, c, ss[0]), self.n_rounds
            )
            custom: Transport | None = self.transport(policy) if self.transport else None
            self.transport_ = federate([server, *parties], policy, custom)
            self.W_ = server.run()
        self.local_W_ = [p.W_local for p in parties]
        self.client_sizes_ = [p.n_samples for p in parties]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.feature_importances_ = [row_norms(W) for W in self.W_]
        self.run_stats_ = self.transport_.log.summary()
        return self

    def decision_function(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """Consensus ``Z^test`` of Eqs. (18)-(19), computed locally by the client holding ``Xs``."""
        check_fitted(self, "W_", "zetas_")
        Xs = check_Xs(Xs, n_views=len(self.W_), n_features=self.n_features_in_)
        Z, self.test_iterations_ = fedmv_consensus(
            [X @ W for X, W in zip(Xs, self.W_, strict=True)],
            self.zetas_,
            max_iter=self.test_max_iter,
            tol=self.test_tol,
        )
        return Z


@register_estimator("single_view_fl")
class SingleViewFL(BaseEstimator):
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
    ) -> None:
        self.beta = beta
        self.n_rounds = n_rounds
        self.local_iter = local_iter
        self.inner_tol = inner_tol
        self.eps = eps
        self.random_state = random_state
        self.transport = transport

    def fit(self, clients: Sequence[tuple[np.ndarray, np.ndarray]]) -> SingleViewFL:
        Xss, ys = _check_clients(clients, single_view=True)
        (beta,) = per_party(self.beta, 1, "beta")
        for name, v in [("n_rounds", self.n_rounds), ("local_iter", self.local_iter)]:
            _check_iter(v, self.inner_tol, name)
        self.classes_ = _global_classes(ys)
        solver = IRLSOptions(self.local_iter, self.inner_tol, self.eps)
        ss = np.random.SeedSequence(self.random_state).spawn(1)
        self.n_features_in_ = Xss[0][0].shape[1]
        policy = hfedmv_policy(1)
        with small_blas():
            parties = [
                HFedMVClient(
                    f"client{l}",
                    _SingleViewLearner(Xs[0], one_hot(y, self.classes_)[0], beta, solver),
                    Xs[0].shape[0],
                    self.local_iter,
                )
                for l, (Xs, y) in enumerate(zip(Xss, ys, strict=True))  # noqa: E741
            ]
            server = HFedMVServer(
                [p.name for p in parties],
                _init_W([self.n_features_in_], len(self.classes_), ss[0]),
                self.n_rounds,
            )
            custom: Transport | None = self.transport(policy) if self.transport else None
            self.transport_ = federate([server, *parties], policy, custom)
            self.W_ = server.run()[0]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.run_stats_ = self.transport_.log.summary()
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """``argmax X W`` with the global ``W``."""
        check_fitted(self, "W_", "classes_")
        (X,) = check_Xs([X], name="X", n_features=[self.n_features_in_])
        return self.classes_[np.argmax(X @ self.W_, axis=1)]
