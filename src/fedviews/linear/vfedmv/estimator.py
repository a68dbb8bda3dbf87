"""The V-FedMV estimator: arrays -> each party's own view -> the one runner -> fitted
attributes; its testing phase is the deployed one (the runner and the parties' handlers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import check_Xs
from fedviews.errors import check_fitted
from fedviews.federation import estimator_params
from fedviews.linear._common import per_party, scaled
from fedviews.linear._consensus_fit import ConsensusFit, ConsensusPredictor, prepare_views
from fedviews.linear.vfedmv.spec import VFedMVParams


@register_estimator("vfedmv")
class VFedMV(ConsensusFit, ConsensusPredictor):
    """Vertical federated multi-view learning (Algorithm 2), with its consensus testing phase.

    Party ``k`` holds view ``X_k``; the server holds the labels. Row-wise ℓ2,1 (see
    the module docstring for the choice).

    Parameters
    ----------
    beta : float or list of float, default=4
        ℓ2,1 strength β_k (the paper uses 4).
    zeta : float or list of float, default=8
        ζ_k, tying ``Z_k`` to ``Z`` (paper: chosen in {2^0..2^5} on validation).
    eta : float, default=16
        η, tying ``Z`` to ``Y`` (paper: chosen in {2^0..2^5}).
    max_iter, tol : int, float
        Outer rounds and the relative-objective-change stopping rule.
    inner_max_iter, inner_tol : int, float
        IRLS iterations per round (Algorithm 2, inner loop).
    test_max_iter, test_tol : int, float
        Iterations / stopping rule of the testing-phase consensus.
    eps : float
        ε of Eq. (5).
    standardize : bool, default=False
        Every party scales its own view with its own column statistics first, and
        its test view in the testing phase with the same statistics.
    random_state : int or None
        Seed of the random initial ``Z`` / ``Z_k``.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process).
    defense : str, dict or Defense, optional
        ``"secagg"``: secure aggregation of the ``Z_k`` (the server learns only
        ``sum_k zeta_k Z_k``; :class:`~fedviews.federation.Defense`). Default: none.
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar per round with its objective (Eq. 1) (a line
        per round when stderr is no terminal); silent when False.

    Attributes
    ----------
    W_ : list of ndarray (d_k, n_classes)
        Each party's transformation matrix (read from the party objects of the
        in-process simulation; never sent).
    Z_ : ndarray (n_samples, n_classes)
        Final consensus pseudo-labels (server side).
    scalers_ : list of (ndarray, ndarray) or None
        Each party's own training column means and standard deviations
        (``standardize``; ``None`` without it), kept by that party.
    objective_ : list of float
        Objective (Eq. 1) after every round (non-increasing).
    history_ : list of float
        ``objective_`` (the per-round record every federated estimator exposes).
    feature_importances_ : list of ndarray
        Row norms of every ``W_k``.
    test_iterations_ : int
        Consensus iterations of the last :meth:`predict` / :meth:`decision_function`.
    run_stats_, transport_
        Message statistics and the transport (its ``log`` lists every message,
        including those of the testing phase).
    fed_ : InProcessRun
        The fitted run: :meth:`predict` runs its testing phase with the same runner,
        server and parties (:func:`~fedviews.federation.build_in_process`).
    """

    def __init__(
        self,
        beta: float | Sequence[float] = 4.0,
        zeta: float | Sequence[float] = 8.0,
        eta: float = 16.0,
        max_iter: int = 30,
        tol: float = 1e-6,
        inner_max_iter: int = 20,
        inner_tol: float = 1e-6,
        test_max_iter: int = 1000,
        test_tol: float = 1e-8,
        eps: float = 1e-10,
        standardize: bool = False,
        random_state: int | None = 0,
        transport: Any = None,
        defense: Any = None,
        verbose: bool = False,
    ) -> None:
        store_params(self, locals())

    #: saved without its run: a loaded V-FedMV runs the testing phase in one place
    _live = ("fed_", "parties_", "server_")

    def _restore_live(self, state: dict[str, Any]) -> None:
        self.zetas_ = per_party(self.zeta, len(self.W_), "zeta")  # the parties' zeta_k

    def fit(self, Xs: Sequence[np.ndarray], y: np.ndarray) -> VFedMV:
        """Run Algorithm 2: ``Xs[k]`` is party k's view, ``y`` the server's labels.

        The parties are named ``party0 .. party{K-1}``; the server (``coordinator``)
        holds the labels, as in the paper. Every party is built from its own view
        only (:class:`VFedMVAlgorithm`), exactly as in a deployment.
        """
        Xs, y = prepare_views(Xs, y, "V-FedMV")
        params = estimator_params(VFedMVParams, self, skip=("evaluate",))
        self.server_, self.parties_ = self.fit_run("vfedmv", params, Xs, y, None)
        return self

    def decision_function(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """Consensus ``Z^test`` by the federated testing phase (Algorithm 2, Eqs. 12-13).

        Each party holds its own test view ``Xs[k]`` and computes ``X_k^test W_k``
        locally; the runner that fitted the model runs the testing phase as a deployment
        does (the server's ``test_init`` / ``test_update`` to the parties' handlers, no
        training round left); only ``Z_k_test`` and ``Z_test`` are exchanged.
        """
        if not hasattr(self, "fed_") and hasattr(self, "W_"):  # loaded (save/load): no run
            return self._local_testing_phase(Xs)
        check_fitted(self, "parties_", "server_", "fed_")
        Xs = check_Xs(Xs, n_views=len(self.parties_), n_features=self.n_features_in_)
        for party, X in zip(self.parties_, Xs, strict=True):
            party.hold_test(X)
        self.server_.test = (self.test_max_iter, self.test_tol)
        self.fed_()
        self.test_iterations_ = self.server_.scores["test_iterations"]
        self.run_stats_ = self.transport_.log.summary()
        return np.asarray(self.server_.scores["Z_test"])

    def _local_testing_phase(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """The testing phase (Eqs. 12-13) run in one place with the parties' ``W_k`` and
        scalers: a loaded estimator has no federation. The same iterations as the parties'
        (the same ``Z^test``; with ``defense="secagg"`` the parties' differs by the rounding
        of its fixed-point sums)."""
        Xs = check_Xs(Xs, n_views=len(self.W_), n_features=self.n_features_in_)
        return super().decision_function(
            [scaled(X, s) for X, s in zip(Xs, self.scalers_, strict=True)]
        )
