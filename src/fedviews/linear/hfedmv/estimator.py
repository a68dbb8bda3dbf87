"""The H-FedMV estimator: every client's arrays -> its own data -> the one runner -> fitted
attributes; each client's prediction runs the testing phase (Eqs. 18-19) locally."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews._classifier import accuracy, run_in_process
from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_classes, check_Xs
from fedviews.errors import ConfigError, DataError, check_fitted
from fedviews.federation import (
    Defense,
    Party,
    Roster,
    RunSpec,
    Transport,
    build_in_process,
    estimator_params,
)
from fedviews.linear._common import Scaler, party_index, per_party, scaled_views, small_blas
from fedviews.linear._consensus_fit import ConsensusPredictor, labels_present
from fedviews.linear._l21 import row_norms
from fedviews.linear.hfedmv.parties import HFedMVClient, HFedMVServer
from fedviews.linear.hfedmv.spec import HFedMVParams


def check_clients(
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
        labels_present(y, f"client {l}")
        Xs = check_Xs([Xs] if single_view else Xs, name=f"clients[{l}].Xs")
        Xss.append(Xs)
        ys.append(check_classes(y, Xs[0].shape[0], name=f"clients[{l}].y"))
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


def global_classes(ys: Sequence[np.ndarray]) -> np.ndarray:
    classes = np.unique(np.concatenate([np.asarray(y) for y in ys]))
    if len(classes) < 2:
        raise DataError("the clients' labels contain fewer than two classes")
    return classes


@register_estimator("hfedmv")
class HFedMV(ConsensusPredictor):
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
    standardize : {"none", "local", "pooled"}, default="none"
        Feature scaling before training: none, every client with its own training
        statistics, or the pooled statistics of all clients (from their sums; only
        per-feature sums cross). :meth:`predict` scales new rows the same way (with
        ``"local"``, as the client it names).
    defense : str, dict or Defense, optional
        ``"secagg"``: the server learns only the weighted sums of the clients' models
        (and, pooled, of their feature sums), never one client's; ``"label_rr"``: every
        client randomizes its training labels; ``"model_dp"``: clipped, noised updates,
        client-level DP (:class:`~fedviews.federation.Defense`).
    random_state : int or None
        Stream 0: server's random ``W_k``; stream ``1 + l``: client ``l``'s ``Z^l``.
    transport : callable, optional
        ``transport(policy) -> Transport``.
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar per round with its objective (a line
        per round when stderr is no terminal); silent when False.

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
    scalers_ : list of (ndarray, ndarray) or None
        Every client's ``(mean, scale)`` of its views side by side (``standardize``;
        the same for all clients with ``"pooled"``; ``None`` without scaling).
    privacy_ : dict
        The privacy ledger of the run's defense per client; empty without one.
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
        standardize: str = "none",
        defense: Any = None,
        random_state: int | None = 0,
        transport: Any = None,
        verbose: bool = False,
    ) -> None:
        store_params(self, locals())

    def fit(self, clients: Sequence[tuple[Sequence[np.ndarray], np.ndarray]]) -> HFedMV:
        """Run Algorithm 3; ``clients[l] = (Xs_l, y_l)`` with every view of client l's samples.

        Client ``l`` is named ``client{l}`` and built from its own views and labels
        only (:class:`HFedMVAlgorithm`), exactly as in a deployment.
        """
        Xss, ys = check_clients(clients)
        K = len(Xss[0])
        self.classes_ = global_classes(ys)  # the label set is agreed beforehand (public metadata)
        params = estimator_params(HFedMVParams, self, skip=("evaluate",))
        self.zetas_ = per_party(params.zeta, K, "zeta")
        names = tuple(f"client{l}" for l in range(len(Xss)))  # noqa: E741
        roster = Roster(names, label_owners=names)
        run = RunSpec(
            "hfedmv", params, roster, self.random_state, Defense.of(self.defense, validate=False)
        )
        dims = tuple(X.shape[1] for X in Xss[0])
        datas = {
            name: PartyData(
                np.arange(len(y)),
                np.hstack(Xs),
                np.searchsorted(self.classes_, y).astype(np.int64),
                view_dims=dims,
            )
            for name, Xs, y in zip(names, Xss, ys, strict=True)
        }
        self.n_features_in_ = list(dims)
        with small_blas():
            fed = build_in_process(run, datas, transport=self.transport)
            run_in_process(fed, "H-FedMV", params.n_rounds, self.verbose)
        server = fed.coordinator
        assert isinstance(server, HFedMVServer)
        self.privacy_ = fed.privacy
        return self.adopt(server, [fed.parties[n] for n in names], fed.transport)

    def adopt(self, server: HFedMVServer, clients: Sequence[Party], transport: Transport) -> HFedMV:
        """Take the fitted model from a finished run's server and clients (this estimator's,
        or the fusion stage of S-FedMV); ``classes_``, ``zetas_`` and ``n_features_in_``
        are the caller's."""
        parties = [c for c in clients if isinstance(c, HFedMVClient)]
        self.W_ = server.W
        self.local_W_ = [p.W_local for p in parties]
        self.client_sizes_ = [p.n_samples for p in parties]
        self.scalers_ = [p.scaler for p in parties]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.feature_importances_ = [row_norms(W) for W in self.W_]
        self.transport_ = transport
        self.run_stats_ = transport.log.summary()
        return self

    def decision_function(self, Xs: Sequence[np.ndarray], client: int | None = None) -> np.ndarray:
        """Consensus ``Z^test`` (Eqs. 18-19) of raw views ``Xs``, run locally by their holder:
        scaled first as the clients scaled their training views (``standardize``); with
        ``"local"`` scaling ``client`` names whose statistics to use (the client predicting)."""
        check_fitted(self, "W_", "scalers_")
        Xs = check_Xs(Xs, n_views=len(self.W_), n_features=self.n_features_in_)
        return super().decision_function(scaled_views(Xs, self._scaler(client)))

    def predict(self, Xs: Sequence[np.ndarray], client: int | None = None) -> np.ndarray:
        """Class labels: ``argmax`` of :meth:`decision_function`."""
        Z = self.decision_function(Xs, client)  # raises NotFittedError before fit
        return self.classes_[np.argmax(Z, axis=1)]

    def score(
        self, Xs: Sequence[np.ndarray], y: Any, sample_weight: Any = None, client: int | None = None
    ) -> float:
        """Accuracy of :meth:`predict` (as ``client``, where it matters) against ``y``."""
        return accuracy(self.predict(Xs, client), y, sample_weight)

    def _scaler(self, client: int | None) -> Scaler | None:
        scalers = self.scalers_
        if client is not None:
            return scalers[party_index(client, len(scalers), "client")]
        first = scalers[0]
        for s in scalers[1:]:  # "local": each client its own
            if (s is None) != (first is None) or not all(map(np.array_equal, s or (), first or ())):
                raise ConfigError(
                    "every client scaled its views with its own statistics (standardize="
                    "'local'): pass client=l to predict as client l"
                )
        return first
