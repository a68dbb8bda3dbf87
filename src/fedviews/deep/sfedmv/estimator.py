r"""The S-FedMV estimator: clients' sequences -> the one runner -> fitted extractors and fusion.

Horizontal setting: ``M`` clients each hold their own samples, every sample has
``K`` sequential views (multichannel time series of varying length) and a label.
``fit`` with federated extractors and H-FedMV fusion deals every client's sequences
into its own :class:`~fedviews.data.PartyData` and runs the protocol defined once in
:class:`~fedviews.deep.sfedmv.spec.SFedMVAlgorithm` in one process: exactly what
``fedviews launch`` deploys. Only extractor parameters cross in stage 1
(``view{k}/{param}``), only ``W_k``/``W_local_k`` in stage 2 (one policy, one message
log: ``transport_.log``). Sequences, labels and embeddings stay on their client.

Baselines of the paper's Table 3 are the same estimator with other settings
(:mod:`fedviews.deep.sfedmv.baselines`):

=================================  ========================  ============
method                              ``extractors``            ``fusion``
=================================  ========================  ============
S-FedMV                             ``"federated"``           ``"hfedmv"``
Local Sequential H-FedMV            ``"local"``               ``"hfedmv"``
Local Sequential LocalMV            ``"local"``               ``"local"``
Centralized Sequential H-FedMV      ``"centralized"``         ``"hfedmv"``
=================================  ========================  ============

``"local"``: every client draws its own initial GRUs and trains them alone for
``n_rounds * local_epochs`` epochs, so the clients' embeddings live in unrelated
feature spaces. ``"centralized"``: one set of GRUs
trained on the pooled training sequences of all clients (a non-private upper
bound). ``fusion="local"``: every client fits :class:`fedviews.linear.LocalMVL`
on its own embeddings (no federation at all).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews._classifier import Classifier, accuracy, round_progress
from fedviews._estimator import store_params
from fedviews._params import check_value, factory_fields, spec
from fedviews._persist import Persistent
from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_classes, check_sequences
from fedviews.deep._common import (
    host_copies,
    load_saved_module,
    module_arrays,
    resolve_device,
)
from fedviews.deep.sfedmv.baselines import train_local_extractors
from fedviews.deep.sfedmv.nets import Extractor, make_extractor, sequence_embed
from fedviews.deep.sfedmv.parties import RoundCallback, SFedMVServer
from fedviews.deep.sfedmv.protocol import Weights, fusion_seed
from fedviews.deep.sfedmv.spec import DEPLOY_ONLY, SFedMVParams
from fedviews.errors import ConfigError, DataError, check_fitted
from fedviews.federation import (
    Defense,
    Roster,
    RunSpec,
    build_in_process,
    estimator_params,
)
from fedviews.linear import HFedMV, LocalMVL

__all__ = ["EXTRACTOR_MODES", "FUSIONS", "SFedMV", "check_sequence_clients"]

EXTRACTOR_MODES = ("federated", "local", "centralized")
FUSIONS = ("hfedmv", "local")


def check_sequence_clients(
    clients: Any,
) -> tuple[list[list[list[np.ndarray]]], list[np.ndarray]]:
    """Validate ``[(views_l, y_l), ...]``: every client holds every view with the same channels.

    Raises
    ------
    DataError
        Not a list of pairs, missing labels, a missing view (``None`` or fewer
        views than client 0), views of one client with different sample counts,
        or channel counts that differ between clients.
    """
    if not isinstance(clients, (list, tuple)) or len(clients) == 0:
        raise DataError("clients must be a non-empty list of (views, y) pairs, one per client")
    out_v: list[list[list[np.ndarray]]] = []
    out_y: list[np.ndarray] = []
    for l, item in enumerate(clients):  # noqa: E741
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise DataError(f"clients[{l}] must be a pair (views, y), got {type(item).__name__}")
        views, y = item
        if y is None:
            raise DataError(f"clients[{l}]: labels are missing (y is None); S-FedMV is supervised")
        out_v.append(check_sequences(views, name=f"clients[{l}].views"))
        out_y.append(check_classes(y, len(out_v[-1][0]), name=f"clients[{l}].y"))
    K = len(out_v[0])
    channels = [v[0].shape[1] for v in out_v[0]]
    for l, views in enumerate(out_v[1:], start=1):  # noqa: E741
        if len(views) != K:
            raise DataError(
                f"client {l} holds {len(views)} views but client 0 holds {K}; in S-FedMV every "
                "client must hold every view (drop the view everywhere, or the client)"
            )
        ch = [v[0].shape[1] for v in views]
        if ch != channels:
            raise DataError(
                f"channels per view differ across clients: client {l} has {ch}, client 0 has "
                f"{channels}; every client must record a view with the same channels"
            )
    return out_v, out_y


@register_estimator("sfedmv")
class SFedMV(Persistent, Classifier):
    """S-FedMV (Algorithm 4 + H-FedMV) and the baselines of the paper's Table 3.

    The hyper-parameters besides ``extractors``, ``fusion``, ``random_state`` and
    ``transport`` are those of :class:`~fedviews.deep.sfedmv.spec.SFedMVParams`
    (a deployment's ``[params]``), less the deployment-only ``torch_threads`` and
    ``evaluate``.

    Parameters
    ----------
    extractors : {"federated", "local", "centralized"}, default="federated"
        How the per-view GRUs are trained (see the module docstring).
    fusion : {"hfedmv", "local"}, default="hfedmv"
        H-FedMV across clients, or LocalMVL per client on its own embeddings.
    hidden_size, num_layers, dropout, lr, batch_size, local_epochs, n_rounds
        Extractor architecture and FedAvg schedule, see :class:`~fedviews.deep.sfedmv.protocol.GRUConfig`.
    extractor : callable or str, default=""
        Your own per-view extractor instead of the GRU (docs/your-own-model.md):
        ``extractor(n_channels, view)`` returns a module whose ``forward(x, lengths)``
        embeds a zero-padded batch ``(B, T, n_channels)`` of sequences of the given lengths
        as ``(B, E)``; a callable or an import path ``"package.module:function"``.
    beta, zeta, eta : float or list
        FedMV weights (β_k, ζ_k, η) of the fusion stage (β, ζ: one value or one per view).
    fusion_rounds : int, default=20
        H-FedMV rounds (paper: 20); LocalMVL runs ``fusion_rounds * local_iter`` passes.
    local_iter, inner_max_iter : int
        H-FedMV local passes per round and IRLS iterations per W step.
    defense : str, dict or Defense, optional
        With federated extractors: ``"secagg"`` (the server learns only the sums of the
        clients' ``N_l``-weighted extractors and fusion models) or ``"label_rr"``
        (:class:`~fedviews.federation.Defense`).
    random_state : int or None
    device : str, default="cpu"
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    transport : callable, optional
        ``transport(policy) -> Transport`` for both stages (default in-process).
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar through the extractor rounds (with
        their train loss when federated) and the H-FedMV fusion rounds (with the objective;
        a line per round when stderr is no terminal); silent when False.

    Attributes
    ----------
    classes_ : ndarray
    extractors_ : list of Extractor or list of list
        Per view the global extractor; with ``extractors="local"``,
        ``extractors_[l][k]`` is client ``l``'s own.
    fusion_ : HFedMV or list of LocalMVL
    transport_ : Transport or None
        The federation of the federated extractors (``None`` otherwise); its ``log``
        lists every message. ``fit`` with H-FedMV fusion runs both stages on it
        (``fusion_.transport_`` is the same one); ``fit_fusion`` alone runs H-FedMV
        on a transport of its own (``fusion_.transport_``).
    run_stats_ : dict or None
        ``transport_.log.summary()`` (``None`` when ``transport_`` is).
    local_params_ : list of list of dict
        ``[k][l]``: client ``l``'s parameters of view ``k`` sent in the last round
        (simulation only; the aggregation test checks the global ones against them).
    round_loss_ : list of list of float
        ``[k][t]``: sample-weighted mean training loss of round ``t`` (federated only).
    history_ : list of list of float
        ``round_loss_`` (the per-round record every federated estimator exposes).
    client_sizes_ : list of int
    privacy_ : dict
        The privacy ledger of the federated run's defense (federated extractors only).
    setting_ : (str, str or None)
        ``(extractors, fusion)`` of the fit (``fusion`` None until the fusion stage ran):
        :meth:`transform`, :meth:`predict` and :meth:`fit_fusion` use the extractors of
        the mode they were trained in and :meth:`predict` the fitted fusion, so a later
        ``set_params(extractors=...)`` waits for the next :meth:`fit_extractors` and
        ``set_params(fusion=...)`` for the next :meth:`fit_fusion`.

    Notes
    -----
    Every party draws from its own torch and numpy streams, so ``fit`` leaves the
    global torch, numpy and ``random`` states unchanged.
    """

    extractors_: Any

    def __init__(
        self,
        extractors: str = "federated",
        fusion: str = "hfedmv",
        hidden_size: int = 32,
        num_layers: int = 1,
        dropout: float = 0.1,
        lr: float = 0.005,
        batch_size: int = 128,
        local_epochs: int = 2,
        n_rounds: int = 10,
        extractor: Any = "",
        beta: float | Sequence[float] = 4.0,
        zeta: float | Sequence[float] = 8.0,
        eta: float = 16.0,
        fusion_rounds: int = 20,
        local_iter: int = 2,
        inner_max_iter: int = 5,
        defense: Any = None,
        random_state: int | None = 0,
        device: str = "cpu",
        transport: Any = None,
        verbose: bool = False,
    ) -> None:
        store_params(self, locals())

    # -- helpers ---------------------------------------------------------
    def _params(self) -> SFedMVParams:
        """The run's params, validated (the extractors trained locally are no federated run
        whose set-up would check them), after the estimator's own ``extractors`` and ``fusion``."""
        check_value("extractors", self.extractors, spec(str, choices=EXTRACTOR_MODES))
        check_value("fusion", self.fusion, spec(str, choices=FUSIONS))
        params: SFedMVParams = estimator_params(SFedMVParams, self, skip=DEPLOY_ONLY)
        params.validate()
        return params

    def _encode(self, ys: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.searchsorted(self.classes_, y).astype(np.int64) for y in ys]

    #: saved as the extractors' weights (a list per client with ``extractors="local"``)
    _live = ("extractors_", "device_")
    _factories = factory_fields(SFedMVParams)

    def _live_state(self) -> dict[str, Any]:
        local = self.setting_[0] == "local"
        groups = self.extractors_ if local else [self.extractors_]
        # each extractor with its structure, which loading checks (load_module)
        return {"extractors": [[module_arrays("extractor", m) for m in g] for g in groups]}

    def _restore_live(self, state: dict[str, Any]) -> None:
        self.device_ = resolve_device(self.device)
        p, c = self._params(), len(self.classes_)
        groups = []
        for group in state["extractors"]:
            models = [make_extractor(ch, c, p, 0, view=k) for k, ch in enumerate(self.n_channels_)]
            for k, (m, saved) in enumerate(zip(models, group, strict=True)):
                load_saved_module("extractor", m, saved, f"view {k}'s saved extractor")
            groups.append([m.to(self.device_) for m in models])
        self.extractors_ = groups if self.setting_[0] == "local" else groups[0]

    def _extractors_of(self, client: int | None) -> list[Extractor]:
        if client is not None:
            check_value("client", client, spec(int, low=0, high=len(self.client_sizes_) - 1))
        if self.setting_[0] != "local":
            shared: list[Extractor] = self.extractors_
            return shared
        if client is None or not 0 <= client < len(self.extractors_):
            raise ConfigError(
                f"extractors='local': pass client=0..{len(self.extractors_) - 1}, the client whose "
                "own GRUs embed these sequences"
            )
        own: list[Extractor] = self.extractors_[client]
        return own

    # -- stage 1 ---------------------------------------------------------
    def fit_extractors(self, clients: Any, on_round: RoundCallback | None = None) -> SFedMV:
        """Stage 1 only: train the per-view extractors (``on_round`` after every round)."""
        self._stage1(clients, on_round, fuse=False)
        return self

    def _stage1(self, clients: Any, on_round: RoundCallback | None, *, fuse: bool) -> Any:
        """Stage 1 (and, ``fuse``, the H-FedMV fusion on the same run); returns the run."""
        p = self._params()
        views, ys = check_sequence_clients(clients)
        self.classes_ = np.unique(np.concatenate(ys))
        if len(self.classes_) < 2:
            raise DataError("the clients' labels contain fewer than two classes")
        yi = self._encode(ys)
        self.device_ = resolve_device(self.device)
        self.n_channels_ = [v[0].shape[1] for v in views[0]]
        self.client_sizes_ = [len(y) for y in ys]
        self.setting_: tuple[str, str | None] = (self.extractors, None)
        self.__dict__.pop("fusion_", None)  # it fused the embeddings of the former extractors
        self.transport_: Any = None
        self.round_loss_: list[list[float]] = []
        self.local_params_: list[list[Weights]] = []
        K, M = len(self.n_channels_), len(views)
        fed = None
        if self.extractors == "federated":
            # the deployed protocol: every client built from its own data by the spec
            names = tuple(f"client{l}" for l in range(M))  # noqa: E741
            run = RunSpec(
                "sfedmv",
                p,
                Roster(names, label_owners=names),
                self.random_state,
                Defense.of(self.defense, validate=False),
            )
            datas = {
                n: PartyData.from_sequences(np.arange(len(y)), v, y)
                for n, v, y in zip(names, views, yi, strict=True)
            }
            fed = build_in_process(run, datas, transport=self.transport)
            server = fed.coordinator
            assert isinstance(server, SFedMVServer)
            server.on_round, server.fuse = on_round, fuse
            # the runner: the spec drives the server, as a deployment does; the bar goes on
            # through the fusion rounds (shown, not checkpointed)
            stage1, lines = K * p.n_rounds, fed.algorithm.progress
            total = stage1 + (p.fusion().n_rounds if fuse else 0)
            with round_progress("S-FedMV", total, lambda: lines(server), self.verbose) as hook:
                if hook is not None:
                    server.on_fusion_round = lambda r: hook(stage1 + r)
                fed(hook)
            self.transport_ = fed.transport
            self.privacy_ = fed.privacy
            self.extractors_ = server.models  # they hold the final global parameters
            self.local_params_ = [[host_copies(w) for w in view] for view in server.local]
            self.round_loss_ = server.loss
        else:
            self.extractors_ = self._train_alone(views, yi, p, on_round)
        self.history_ = self.round_loss_
        self.run_stats_ = None if self.transport_ is None else self.transport_.log.summary()
        return fed

    def _train_alone(
        self,
        views: list[list[list[np.ndarray]]],
        yi: list[np.ndarray],
        p: SFedMVParams,
        on_round: RoundCallback | None,
    ) -> Any:
        """The extractors trained without a federation: every client's own
        (``extractors="local"``), or one set on the pooled sequences (``"centralized"``);
        ``verbose`` shows their rounds."""
        K, M, c = len(self.n_channels_), len(views), len(self.classes_)
        local = self.extractors == "local"
        shown: list[str] = []
        total = K * p.n_rounds * (M if local else 1)
        with round_progress(self.extractors, total, lambda: shown, self.verbose) as tick:

            def each(k: int, t: int, client: int | None, model: Extractor) -> None:
                shown.append(
                    f"view {k} round {t + 1}" + ("" if client is None else f", client {client}")
                )
                if tick is not None:
                    tick(len(shown))
                if on_round is not None:
                    on_round(k, t, client, model)

            common = {"random_state": self.random_state, "device": self.device_, "on_round": each}
            if not local:
                pooled = [[s for l in range(M) for s in views[l][k]] for k in range(K)]  # noqa: E741
                return train_local_extractors(pooled, np.concatenate(yi), c, p, **common)
            return [
                train_local_extractors(
                    views[l], yi[l], c, p, client_index=l, report_as=l, own_init=True, **common
                )
                for l in range(M)  # noqa: E741
            ]

    # -- stage 2 ---------------------------------------------------------
    def _fusion_estimator(self, p: SFedMVParams) -> HFedMV:
        fp = p.fusion()
        return HFedMV(
            **{k: getattr(fp, k) for k in ("beta", "zeta", "eta", "local_iter", "inner_max_iter")},
            n_rounds=fp.n_rounds,
            random_state=fusion_seed(self.random_state),
            transport=self.transport,
            verbose=self.verbose,
        )

    def fit_fusion(self, clients: Any) -> SFedMV:
        """Stage 2 only, with the fitted extractors: embed locally, then H-FedMV / LocalMVL.

        Lets the two local baselines share one set of locally trained GRUs:
        ``est.set_params(fusion="local").fit_fusion(clients)``. H-FedMV here is the
        same protocol with the same seed as the fusion stage of :meth:`fit`.
        """
        check_fitted(self, "extractors_", "client_sizes_", "setting_")
        p = self._params()
        views, ys = check_sequence_clients(clients)
        if len(views) != len(self.client_sizes_):
            raise DataError(f"fit with {len(self.client_sizes_)} clients, got {len(views)}")
        unseen = np.setdiff1d(np.concatenate(ys), self.classes_)
        if len(unseen):
            raise DataError(
                f"labels {unseen[:5].tolist()} were not seen when the extractors were fit "
                f"(classes {self.classes_.tolist()}); refit with fit(clients)"
            )
        Xs = [self.transform(v, client=l) for l, v in enumerate(views)]  # noqa: E741
        yi = self._encode(ys)
        if self.fusion == "hfedmv":
            self.fusion_: Any = self._fusion_estimator(p).fit(list(zip(Xs, yi, strict=True)))
        else:
            self.fusion_ = [
                LocalMVL(
                    beta=self.beta,
                    zeta=self.zeta,
                    eta=self.eta,
                    n_iter=self.fusion_rounds * self.local_iter,
                    inner_max_iter=self.inner_max_iter,
                    random_state=fusion_seed(self.random_state),
                ).fit(X, y, classes=np.arange(len(self.classes_)))
                for X, y in zip(Xs, yi, strict=True)
            ]
        self.setting_ = (self.setting_[0], self.fusion)
        return self

    def fit(self, clients: Any, on_round: RoundCallback | None = None) -> SFedMV:
        """Both stages; ``clients[l] = (views_l, y_l)`` with ``views_l[k]`` client l's view-k sequences.

        Federated extractors with H-FedMV fusion run the whole deployed protocol
        (:class:`~fedviews.deep.sfedmv.spec.SFedMVAlgorithm`) in one process.
        """
        if (self.extractors, self.fusion) != ("federated", "hfedmv"):
            return self.fit_extractors(clients, on_round).fit_fusion(clients)
        fed = self._stage1(clients, on_round, fuse=True)
        server = fed.coordinator
        p = self._params()
        fusion = self._fusion_estimator(p)
        fusion.classes_ = np.arange(len(self.classes_))
        K = len(self.n_channels_)
        fusion.zetas_ = [float(z) for z in np.broadcast_to(np.asarray(p.zeta, float), (K,))]
        fusion.n_features_in_ = [m.width for m in server.models]
        clients_ = [fed.parties[n].fusion for n in fed.run.federation.parties]
        self.fusion_ = fusion.adopt(server.fusion, clients_, fed.transport)
        self.setting_ = ("federated", "hfedmv")
        return self

    # -- inference -------------------------------------------------------
    def transform(self, views: Any, client: int | None = None) -> list[np.ndarray]:
        """Embed sequences into the feature matrices ``X_k`` (``(n, E_k)`` each: ``E_k = 2 *
        hidden_size`` with the GRUs, a user extractor's embedding width otherwise).

        ``client`` selects whose GRUs to use when ``extractors="local"``.
        """
        check_fitted(self, "extractors_", "n_channels_", "setting_")
        seqs = check_sequences(views, n_views=len(self.n_channels_), n_channels=self.n_channels_)
        models = self._extractors_of(client)
        return [
            sequence_embed(m, s, device=self.device_) for m, s in zip(models, seqs, strict=True)
        ]

    def predict(self, views: Any, client: int | None = None) -> np.ndarray:
        """Class labels of the sequences held by ``client`` (needed for local extractors / fusion)."""
        check_fitted(self, "extractors_", "fusion_", "setting_")
        Xs = self.transform(views, client)
        if self.setting_[1] == "local":
            if client is None or not 0 <= client < len(self.fusion_):
                raise ConfigError("fusion='local': pass client=l, whose own model predicts")
            idx = self.fusion_[client].predict(Xs)
        else:
            idx = self.fusion_.predict(Xs)
        return np.asarray(self.classes_[np.asarray(idx, dtype=np.int64)])

    def score(
        self, views: Any, y: Any, sample_weight: Any = None, client: int | None = None
    ) -> float:
        """Accuracy of :meth:`predict` on ``client``'s sequences against ``y``."""
        return accuracy(self.predict(views, client), y, sample_weight)
