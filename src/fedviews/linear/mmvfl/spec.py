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

from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import check_Xs, check_y, one_hot
from fedviews.federation import (
    Local,
    PrivacyPolicy,
    RunSpec,
    estimator_params,
    register_algorithm_spec,
    spawn_streams,
)
from fedviews.linear._common import (
    PartyPredictor,
    check_flag,
    check_iter,
    check_label_scale,
    check_weights,
    party_index,
    per_party,
    scale_labels,
)
from fedviews.linear._consensus import (
    ConsensusAlgorithm,
    ConsensusFit,
    ConsensusParty,
    ConsensusServer,
    IRLSOptions,
    consensus_centralized,
)

MMVFL_POLICY = PrivacyPolicy.of(
    "mmvfl",
    {
        ("party", "coordinator"): ["Z_k"],
        ("coordinator", "party"): ["Z"],
    },
    kinds={("coordinator", "party"): ["update"]},
)


#: One MMVFL participant: its view ``X_k`` (and ``Y`` for the label owner) never leave it.
#: The shared consensus party; the label owner's Z_k step holds the label term
#: ``eta ||Z_l - Y||^2`` (Eq. 11).
MMVFLParty = ConsensusParty


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
        frac_bits: int | None = None,
    ) -> None:
        super().__init__(
            parties, n_samples, n_classes, seed, max_iter=max_iter, tol=tol, zeta=zeta,
            frac_bits=frac_bits,
        )  # fmt: skip


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
    label_scale: str = "onehot",
    random_state: int | None = 0,
) -> dict[str, Any]:
    """The MMVFL updates run centrally in one function (no parties, no messages).

    Same initialisation streams and update order as :class:`MMVFL`; used to check
    that the federated run equals the centralized computation of the objective
    (:func:`~fedviews.linear._consensus.consensus_centralized`, the label term at
    party ``label_owner``; the one-hot ``Y`` scaled by ``label_scale`` as the label owner
    scales it). Returns ``{"W": [...], "Z": Z, "Z_k": [...], "objective": [...]}``.
    """
    K = len(Xs)
    return consensus_centralized(
        Xs, scale_labels(Y, label_scale), per_party(beta, K, "beta"), per_party(zeta, K, "zeta"), eta,
        label_owner=label_owner, max_iter=max_iter, tol=tol,
        solver=IRLSOptions(inner_max_iter, inner_tol, eps), random_state=random_state,
    )  # fmt: skip


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
    label_scale: str = "onehot"

    def validate(self, n_parties: int | None = None) -> None:
        """Raise :class:`ConfigError` for an invalid value (per-party lists need ``n_parties``)."""
        check_weights(self, n_parties)
        check_iter(self.max_iter, self.tol, "max_iter", "tol")
        check_iter(self.inner_max_iter, self.inner_tol, "inner_max_iter", "inner_tol")
        check_flag(self.standardize, "standardize")
        check_label_scale(self.label_scale)


class MMVFLAlgorithm(ConsensusAlgorithm):
    """MMVFL as a federated algorithm: every party a view owner, one of them the label owner."""

    name = "mmvfl"
    Params = MMVFLParams

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return self.secured(run, MMVFL_POLICY)

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> MMVFLParty:
        y, _, kwargs = self.party_inputs(run, party, local, setup)
        Y, classes = (None, None) if y is None else one_hot(y)  # the label owner's Eq. (11)
        if Y is not None:
            Y = scale_labels(Y, run.params.label_scale)
        eta = run.params.eta if Y is not None else 0.0
        return MMVFLParty(party, Y=Y, eta=eta, classes=classes, **kwargs)

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
            frac_bits=run.defense.secagg_bits,
        )


MMVFL_SPEC = register_algorithm_spec(MMVFLAlgorithm())


@register_estimator("mmvfl")
class MMVFL(ConsensusFit, PartyPredictor, BaseEstimator):
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
        Every party scales its own view with its own column statistics first;
        :meth:`predict` scales the party's new rows with the same statistics.
    label_scale : {"onehot", "orthonormal"}, default="onehot"
        The label owner's target ``Y`` (Eq. 11): the paper's one-hot matrix, or its
        columns divided by the square root of the class counts so that ``Y^T Y = I``
        (Sec. 4.4 states that ``Y`` satisfies it; the one-hot ``Y`` does only up to
        the diagonal of class counts). :meth:`predict` takes ``argmax X W_k``, which
        the scaling does not change with balanced classes.
    random_state : int or None
        Seed of the random initial ``Z`` / ``Z_k``.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process). Algorithms never
        choose a concrete transport themselves.
    defense : str, dict or Defense, optional
        ``"secagg"``: secure aggregation of the ``Z_k`` (the server learns only
        ``sum_k zeta_k Z_k``; :class:`~fedviews.federation.Defense`). Default: none.

    Attributes
    ----------
    W_ : list of ndarray (d_k, n_classes)
        Each party's transformation matrix. In this in-process simulation the
        estimator reads them from the party objects; they are never sent.
    Z_ : ndarray (n_samples, n_classes)
        Final consensus pseudo-labels.
    scalers_ : list of (ndarray, ndarray) or None
        Each party's own training column means and standard deviations
        (``standardize``; ``None`` without it), kept by that party.
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
        label_scale: str = "onehot",
        random_state: int | None = 0,
        transport: Any = None,
        defense: Any = None,
    ) -> None:
        store_params(self, locals())

    def fit(self, Xs: Sequence[np.ndarray], y: np.ndarray) -> MMVFL:
        """Run the federated protocol; ``Xs[k]`` is party k's view, ``y`` the label owner's labels.

        The parties are named ``party0 .. party{K-1}``; each is built from its own
        view only (:class:`MMVFLAlgorithm`), exactly as a deployed party process.
        """
        Xs = check_Xs(Xs)
        y = check_y(y, Xs[0].shape[0])
        owner = party_index(self.label_owner, len(Xs), "label_owner")
        self.fit_run("mmvfl", estimator_params(MMVFLParams, self), Xs, y, owner)
        return self
