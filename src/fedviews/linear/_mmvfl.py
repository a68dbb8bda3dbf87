r"""MMVFL (Feng & Yu): multi-participant multi-class VFL by label sharing through Z.

Objective (Eq. 4), K parties, party ``l`` (the label owner) holds the one-hot ``Y``:

.. math::
    \sum_k \|X_k W_k - Z_k\|_F^2 + \beta_k \|W_k\|_{2,1} + \zeta_k \|Z_k - Z\|_F^2
    + \eta \|Z_l - Y\|_F^2

Algorithm 1, one round:

1. every party runs IRLS (Eqs. 7-8) on ``min ||X_k W_k - Z_k||^2 + beta_k ||W_k||_{2,1}``,
   warm-started from its previous ``W_k`` (its Gram matrix is cached);
2. every party updates ``Z_k`` in closed form (Eq. 12; Eq. 11 for the label owner);
3. parties send ``Z_k`` to the coordinator, which computes ``Z = sum zeta_k Z_k / sum zeta_k``
   (Eq. 14) and sends ``Z`` back.

Every update is an exact block minimisation (or an IRLS majorisation step), so the
objective is non-increasing over rounds. Only ``Z_k`` (party → coordinator) and
``Z`` (coordinator → party) cross the privacy barrier; parties also report the
scalar value of their local terms in message metadata so that the coordinator can
track the global objective.

Initialisation (line 1 of Algorithm 1): ``Z`` and every ``Z_k`` are random
non-negative matrices with orthonormal columns (random cluster indicators),
drawn from independent streams spawned from ``random_state``. Instead of a random
``W_k`` the first IRLS iteration starts from ``A = I`` (the ridge solution), the
usual choice for this solver (Nie et al., 2010); later rounds warm-start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_Xs, check_y, one_hot, standardized
from fedviews.errors import ConfigError, DataError, check_fitted
from fedviews.federation import (
    Local,
    PrivacyPolicy,
    Roster,
    RunSpec,
    build_in_process,
    estimator_params,
    register_algorithm_spec,
    spawn_streams,
)
from fedviews.linear._common import (
    check_weights,
    orthonormal_nonnegative,
    per_party,
    small_blas,
)
from fedviews.linear._consensus import (
    ConsensusAlgorithm,
    ConsensusParty,
    ConsensusServer,
    IRLSOptions,
    sq,
)
from fedviews.linear._l21 import L21Problem, row_norms

__all__ = [
    "MMVFL",
    "MMVFL_POLICY",
    "MMVFL_SPEC",
    "MMVFLAlgorithm",
    "MMVFLParams",
    "MMVFLParty",
    "MMVFLServer",
    "mmvfl_centralized",
]

MMVFL_POLICY = PrivacyPolicy.of(
    "mmvfl",
    {
        ("party", "coordinator"): ["Z_k"],
        ("coordinator", "party"): ["Z"],
    },
    kinds={("coordinator", "party"): ["update"]},
)


class MMVFLParty(ConsensusParty):
    """One MMVFL participant: its view ``X_k`` (and ``Y`` for the label owner) never leave it.

    The shared consensus party (:class:`~fedviews.linear._consensus.ConsensusParty`);
    the label owner's Z_k step holds the label term ``eta ||Z_l - Y||^2`` (Eq. 11).
    """


class MMVFLServer(ConsensusServer):
    """The MMVFL server: ``Z = sum zeta_k Z_k / sum zeta_k`` (Eq. 14), the global objective."""

    def __init__(
        self,
        parties: Sequence[str],
        zeta: Sequence[float],
        n_samples: int,
        n_classes: int,
        seed: np.random.SeedSequence,
        *,
        max_iter: int,
        tol: float,
    ) -> None:
        super().__init__(parties, n_samples, n_classes, seed, max_iter=max_iter, tol=tol, zeta=zeta)


def _check_label_owner(label_owner: Any, K: int) -> int:
    if isinstance(label_owner, bool) or not isinstance(label_owner, (int, np.integer)):
        raise ConfigError(f"label_owner must be an integer party index, got {label_owner!r}")
    if not 0 <= int(label_owner) < K:
        raise ConfigError(f"label_owner={label_owner} is out of range for {K} parties (0..{K - 1})")
    return int(label_owner)


def _check_iter(max_iter: int, tol: float, name: str = "max_iter") -> None:
    if int(max_iter) < 1:
        raise ConfigError(f"{name} must be >= 1, got {max_iter}")
    if not tol >= 0:
        raise ConfigError(f"tol must be >= 0, got {tol}")


def mmvfl_centralized(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    *,
    beta: float | Sequence[float] = 1.0,
    zeta: float | Sequence[float] = 1000.0,
    eta: float = 1000.0,
    label_owner: int = 0,
    max_iter: int = 50,
    tol: float = 1e-6,
    inner_max_iter: int = 20,
    inner_tol: float = 1e-6,
    eps: float = 1e-10,
    random_state: int | None = 0,
) -> dict[str, Any]:
    """The MMVFL updates run centrally in one function (no parties, no messages).

    Same initialisation streams and update order as :class:`MMVFL`; used to check
    that the federated run equals the centralized computation of the objective.
    Returns ``{"W": [...], "Z": Z, "Z_k": [...], "objective": [...]}``.
    """
    K = len(Xs)
    betas, zetas = per_party(beta, K, "beta"), per_party(zeta, K, "zeta")
    with small_blas():
        return _mmvfl_centralized(
            Xs,
            Y,
            betas,
            zetas,
            eta,
            label_owner,
            max_iter,
            tol,
            inner_max_iter,
            inner_tol,
            eps,
            random_state,
        )


def _mmvfl_centralized(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    betas: list[float],
    zetas: list[float],
    eta: float,
    label_owner: int,
    max_iter: int,
    tol: float,
    inner_max_iter: int,
    inner_tol: float,
    eps: float,
    random_state: int | None,
) -> dict[str, Any]:
    K = len(Xs)
    ss = spawn_streams(random_state, K + 1)
    n, c = Y.shape
    Z = orthonormal_nonnegative(n, c, np.random.default_rng(ss[0]))
    Zk = [orthonormal_nonnegative(n, c, np.random.default_rng(ss[1 + k])) for k in range(K)]
    probs = [L21Problem(X, eps=eps) for X in Xs]
    Ws: list[np.ndarray] = [np.empty((0, 0))] * K
    started = [False] * K
    hist: list[float] = []
    prev = np.inf
    for _ in range(max_iter):
        f = 0.0
        for k in range(K):
            W0 = Ws[k] if started[k] else None
            started[k] = True
            Ws[k] = probs[k].solve(Zk[k], betas[k], W0=W0, max_iter=inner_max_iter, tol=inner_tol).W
            XW = Xs[k] @ Ws[k]
            if k == label_owner:
                Zk[k] = (XW + zetas[k] * Z + eta * Y) / (1 + zetas[k] + eta)
                f += eta * sq(Zk[k] - Y)
            else:
                Zk[k] = (XW + zetas[k] * Z) / (1 + zetas[k])
            f += sq(XW - Zk[k]) + betas[k] * float(row_norms(Ws[k]).sum())
        Z = np.tensordot(np.asarray(zetas), np.stack(Zk), axes=1) / sum(zetas)
        f += sum(z * sq(zk - Z) for z, zk in zip(zetas, Zk, strict=True))
        hist.append(f)
        if tol > 0 and np.isfinite(prev) and abs(prev - f) <= tol * abs(prev):
            break
        prev = f
    return {"W": Ws, "Z": Z, "Z_k": Zk, "objective": hist}


@dataclass(frozen=True)
class MMVFLParams:
    """Hyper-parameters of MMVFL: the one declaration used by :class:`MMVFL`, experiments
    and deployments (the ``[params]`` table).

    ``beta`` and ``zeta`` take one value for every party or one per party (in the
    order of the parties). ``standardize``: every party scales its own view with
    its own column means and standard deviations before training (no statistics
    cross the barrier); off by default, as in the paper.
    """

    beta: float | tuple[float, ...] = 1.0
    zeta: float | tuple[float, ...] = 1000.0
    eta: float = 1000.0
    max_iter: int = 50
    tol: float = 1e-6
    inner_max_iter: int = 20
    inner_tol: float = 1e-6
    eps: float = 1e-10
    standardize: bool = False

    def validate(self, n_parties: int | None = None) -> None:
        """Raise :class:`ConfigError` for an invalid value (per-party lists need ``n_parties``)."""
        check_weights(self, n_parties)
        _check_iter(self.max_iter, self.tol)
        _check_iter(self.inner_max_iter, self.inner_tol, "inner_max_iter")


class MMVFLAlgorithm(ConsensusAlgorithm):
    """MMVFL as a federated algorithm: every party a view owner, one of them the label owner."""

    name = "mmvfl"
    Params = MMVFLParams

    def check_params(self, params: Any, fed: Roster) -> None:
        super().check_params(params, fed)
        params.validate(len(fed.parties))

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return MMVFL_POLICY

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        setup = super().make_setup(run, infos)
        if setup["n_classes"] < 2:
            raise DataError("y must contain at least two classes")
        return setup

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> MMVFLParty:
        p: MMVFLParams = run.params
        parties = run.federation.parties
        k = parties.index(party)
        _, X, y = local.take("train")
        X = X.reshape(len(X), -1).astype(np.float64)
        if p.standardize:  # with this party's own statistics
            X = standardized(X)
        Y = None if y is None else one_hot(y)[0]
        return MMVFLParty(
            party,
            X,
            beta=per_party(p.beta, len(parties), "beta")[k],
            zeta=per_party(p.zeta, len(parties), "zeta")[k],
            n_classes=int(setup["n_classes"]),
            seed=spawn_streams(run.seed, len(parties) + 1)[1 + k],
            Y=Y,
            eta=p.eta if Y is not None else 0.0,
            solver=IRLSOptions(p.inner_max_iter, p.inner_tol, p.eps),
        )

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> MMVFLServer:
        p: MMVFLParams = run.params
        parties = run.federation.parties
        return MMVFLServer(
            parties,
            per_party(p.zeta, len(parties), "zeta"),
            int(setup["n_samples"]),
            int(setup["n_classes"]),
            spawn_streams(run.seed, len(parties) + 1)[0],
            max_iter=p.max_iter,
            tol=p.tol,
        )


MMVFL_SPEC = register_algorithm_spec(MMVFLAlgorithm())


@register_estimator("mmvfl")
class MMVFL(BaseEstimator):
    """Multi-participant multi-class VFL with ℓ2,1 feature selection (Feng & Yu).

    Parameters
    ----------
    beta : float or list of float, default=1.0
        ℓ2,1 strength β_k (scalar for all parties, or one per party).
    zeta : float or list of float, default=1000
        Consensus penalty ζ_k tying each ``Z_k`` to ``Z``.
    eta : float, default=1000
        Label penalty η tying the label owner's ``Z_l`` to ``Y``.
    label_owner : int, default=0
        Index of the party that owns the labels.
    max_iter, tol : int, float
        Outer rounds and the relative-objective-change stopping rule.
    inner_max_iter, inner_tol : int, float
        IRLS iterations per round (Algorithm 1, lines 4-7).
    eps : float
        ε of Eq. (7).
    standardize : bool, default=False
        Every party scales its own view with its own column statistics first.
    random_state : int or None
        Seed of the random initial ``Z`` / ``Z_k``.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process). Algorithms never
        choose a concrete transport themselves.

    Attributes
    ----------
    W_ : list of ndarray (d_k, n_classes)
        Each party's transformation matrix. In this in-process simulation the
        estimator reads them from the party objects; they are never sent.
    Z_ : ndarray (n_samples, n_classes)
        Final consensus pseudo-labels.
    feature_importances_ : list of ndarray (d_k,)
        ℓ2 norms of the rows of ``W_k``.
    objective_ : list of float
        Global objective (Eq. 4) after every round.
    run_stats_ : dict
        Rounds, messages, bytes per party, and which arrays crossed.
    transport_ : Transport
        The transport of the run (its ``log`` lists every message).
    """

    def __init__(
        self,
        beta: float | Sequence[float] = 1.0,
        zeta: float | Sequence[float] = 1000.0,
        eta: float = 1000.0,
        label_owner: int = 0,
        max_iter: int = 50,
        tol: float = 1e-6,
        inner_max_iter: int = 20,
        inner_tol: float = 1e-6,
        eps: float = 1e-10,
        standardize: bool = False,
        random_state: int | None = 0,
        transport: Any = None,
    ) -> None:
        self.beta = beta
        self.zeta = zeta
        self.eta = eta
        self.label_owner = label_owner
        self.max_iter = max_iter
        self.tol = tol
        self.inner_max_iter = inner_max_iter
        self.inner_tol = inner_tol
        self.eps = eps
        self.standardize = standardize
        self.random_state = random_state
        self.transport = transport

    def fit(self, Xs: Sequence[np.ndarray], y: np.ndarray) -> MMVFL:
        """Run the federated protocol; ``Xs[k]`` is party k's view, ``y`` the label owner's labels.

        The parties are named ``party0 .. party{K-1}``; each is built from its own
        view only (:class:`MMVFLAlgorithm`), exactly as a deployed party process.
        """
        Xs = check_Xs(Xs)
        K, n = len(Xs), Xs[0].shape[0]
        y = check_y(y, n)
        owner = _check_label_owner(self.label_owner, K)
        params = estimator_params(MMVFLParams, self)
        names = tuple(f"party{k}" for k in range(K))
        run = RunSpec("mmvfl", params, Roster(names, label_owner=names[owner]), self.random_state)
        ids = np.arange(n)
        datas = {p: PartyData(ids, Xs[k], y if k == owner else None) for k, p in enumerate(names)}
        self.classes_ = np.unique(y)
        with small_blas():
            fed = build_in_process(run, datas, transport=self.transport)
            self.transport_ = fed.transport
            self.Z_ = fed()
        parties = [fed.parties[p] for p in names]
        server = fed.coordinator
        assert isinstance(server, MMVFLServer)
        self.W_: list[np.ndarray] = [
            p.W for p in parties if isinstance(p, MMVFLParty) and p.W is not None
        ]
        self.Z_k_ = [p.Z_k for p in parties if isinstance(p, MMVFLParty)]
        self.feature_importances_ = [row_norms(W) for W in self.W_]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.n_iter_ = len(self.objective_)
        self.converged_ = server.converged
        self.n_features_in_ = [X.shape[1] for X in Xs]
        self.run_stats_ = self.transport_.log.summary()
        return self

    def predict(self, X: np.ndarray, party: int = 0) -> np.ndarray:
        """Party ``party``'s own prediction ``argmax X W_k`` from its view ``X``."""
        check_fitted(self, "W_", "classes_")
        W = self.W_[_check_label_owner(party, len(self.W_))]
        (X,) = check_Xs([X], name="X")
        if X.shape[1] != W.shape[0]:
            raise DataError(f"X has {X.shape[1]} features, party {party} was fit with {W.shape[0]}")
        return self.classes_[np.argmax(X @ W, axis=1)]
