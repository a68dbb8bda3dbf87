"""The MMVFL estimator: arrays -> each party's own view -> the one runner -> fitted attributes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews._classifier import Classifier
from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import check_classes, check_Xs
from fedviews.federation import estimator_params
from fedviews.linear._common import PartyPredictor, party_index
from fedviews.linear._consensus_fit import ConsensusFit
from fedviews.linear.mmvfl.spec import MMVFLParams


@register_estimator("mmvfl")
class MMVFL(ConsensusFit, PartyPredictor, Classifier):
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
        the diagonal of class counts). With balanced classes the scale is one common
        factor ``s``, and fitting ``s Y`` at ``beta`` is ``s`` times the fit of ``Y`` at
        ``beta / s``: the predictions differ from the one-hot fit at the same ``beta``.
    random_state : int or None
        Seed of the random initial ``Z`` / ``Z_k``.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process). Algorithms never
        choose a concrete transport themselves.
    defense : str, dict or Defense, optional
        ``"secagg"``: secure aggregation of the ``Z_k`` (the server learns only
        ``sum_k zeta_k Z_k``; :class:`~fedviews.federation.Defense`). Default: none.
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar per round with its objective (Eq. 4) (a line
        per round when stderr is no terminal); silent when False.

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
        max_iter: int = 200,
        tol: float = 1e-6,
        inner_max_iter: int = 20,
        inner_tol: float = 1e-6,
        eps: float = 1e-10,
        standardize: bool = False,
        label_scale: str = "onehot",
        random_state: int | None = 0,
        transport: Any = None,
        defense: Any = None,
        verbose: bool = False,
    ) -> None:
        store_params(self, locals())

    def fit(self, Xs: Sequence[np.ndarray], y: np.ndarray) -> MMVFL:
        """Run the federated protocol; ``Xs[k]`` is party k's view, ``y`` the label owner's labels.

        The parties are named ``party0 .. party{K-1}``; each is built from its own
        view only (:class:`MMVFLAlgorithm`), exactly as a deployed party process.
        """
        Xs = check_Xs(Xs)
        y = check_classes(y, Xs[0].shape[0])
        owner = party_index(self.label_owner, len(Xs), "label_owner")
        self.fit_run("mmvfl", estimator_params(MMVFLParams, self), Xs, y, owner)
        return self
