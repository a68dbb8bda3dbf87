"""The estimator side of the consensus algorithms: the in-process fit of MMVFL and V-FedMV
(:class:`ConsensusFit`) and the consensus predictor of the FedMV estimators."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from fedviews._classifier import Classifier, run_in_process
from fedviews._persist import Persistent
from fedviews.data import PartyData, check_classes, check_Xs
from fedviews.errors import ConvergenceWarning, DataError, check_fitted
from fedviews.federation import Defense, Roster, RunSpec, build_in_process
from fedviews.linear._common import small_blas
from fedviews.linear._consensus import ConsensusParty, ConsensusServer
from fedviews.linear._l21 import row_norms
from fedviews.linear._testing_phase import fedmv_consensus


class ConsensusFit:
    """The in-process fit of the MMVFL and V-FedMV estimators (mixed into them)."""

    #: the run is not saved (:meth:`~fedviews._persist.Persistent.save`); pickled, it is
    _live: ClassVar[tuple[str, ...]] = ("fed_",)
    transport: Any
    random_state: int | None
    defense: Any
    verbose: bool

    def fit_run(
        self,
        algorithm: str,
        params: Any,
        Xs: Sequence[np.ndarray],
        y: np.ndarray,
        owner: int | None,
    ) -> tuple[ConsensusServer, list[ConsensusParty]]:
        """Run ``algorithm`` with ``params`` in this process: party ``k`` (``party{k}``) is
        built from its own view ``Xs[k]`` only, with ``y`` if ``k == owner`` (``None``: the
        coordinator holds ``y``), exactly as in a deployment.

        Sets ``fed_`` (the run: its runner drives the testing phase later), ``classes_``,
        ``transport_``, ``Z_``, ``W_``, ``Z_k_`` and ``scalers_`` (read
        from the party objects of the simulation; never sent), ``feature_importances_``,
        ``objective_`` (= ``history_``), ``n_iter_``, ``converged_``,
        ``n_features_in_`` and ``run_stats_``. Returns the server and the parties.
        """
        names = tuple(f"party{k}" for k in range(len(Xs)))
        holder = "coordinator" if owner is None else names[owner]
        roster = Roster(names, label_owner=holder)
        run = RunSpec(
            algorithm, params, roster, self.random_state, Defense.of(self.defense, validate=False)
        )
        ids = np.arange(len(y))
        datas = {
            p: PartyData(ids, X, y if p == holder else None) for p, X in zip(names, Xs, strict=True)
        }
        if owner is None:
            datas[holder] = PartyData(ids, None, y)
        self.classes_ = np.unique(y)
        with small_blas():
            fed = build_in_process(run, datas, transport=self.transport)
            self.transport_ = fed.transport
            self.Z_ = run_in_process(fed, type(self).__name__, params.max_iter, self.verbose)
        self.fed_ = fed
        server = fed.coordinator
        assert isinstance(server, ConsensusServer)
        parties = [p for n in names if isinstance(p := fed.parties[n], ConsensusParty)]
        self.W_: list[np.ndarray] = [p.W for p in parties if p.W is not None]
        self.Z_k_ = [p.Z_k for p in parties]
        self.scalers_ = [p.scaler for p in parties]
        self.feature_importances_ = [row_norms(W) for W in self.W_]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.n_iter_ = len(self.objective_)
        self.converged_ = server.converged
        note = server.unconverged()
        if note is not None:
            warnings.warn(ConvergenceWarning(f"{type(self).__name__}: {note}"), stacklevel=3)
        self.n_features_in_ = [X.shape[1] for X in Xs]
        self.run_stats_ = self.transport_.log.summary()
        self.privacy_ = fed.privacy
        return server, parties


def labels_present(y: Any, where: str) -> None:
    if y is None:
        raise DataError(
            f"{where}: labels are missing (y is None); FedMV is supervised through "
            "||Z - Y||^2, so the label holder must pass y"
        )


class ConsensusPredictor(Persistent, Classifier):
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


def prepare_views(Xs: Any, y: Any, where: str) -> tuple[list[np.ndarray], np.ndarray]:
    Xs = check_Xs(Xs)
    labels_present(y, where)
    return Xs, check_classes(y, Xs[0].shape[0])
