r"""S-FedMV (Che et al., Section 6, Algorithm 4): federated multi-view *sequence* learning.

Horizontal setting: ``M`` clients each hold their own samples, every sample has
``K`` sequential views (multichannel time series of varying length) and a label.

Stage 1 — feature extractors (Algorithm 4). For each view ``k`` separately, a
bidirectional GRU with a classification head (:mod:`fedviews.deep._gru`) is
trained by FedAvg: the server sends the global parameters ``w^k_t``; every
client runs ``local_epochs`` epochs of RMSProp mini-batch training on its own
sequences of view ``k`` (``LocalTraining``) and returns ``w^{k,l}_{t+1}`` with its
sample count ``N_l``; the server sets ``w^k_{t+1} = sum_l (N_l / N) w^{k,l}_{t+1}``.
After the last round the server sends the final ``w^k`` and every client embeds
its sequences locally into ``X^l_k`` (``2 * hidden_size`` features: last forward
and backward GRU states).

Stage 2 — fusion: H-FedMV (Algorithm 3, :class:`fedviews.linear.HFedMV`) on the
clients' embedding matrices ``(X^l_1..X^l_K, y^l)``.

Only extractor parameters cross in stage 1 (array names ``view{k}/{param}``,
enforced by :func:`sequence_policy` and visible in ``transport_.log``); only
``W_k`` cross in stage 2. Sequences, labels and embeddings stay on their client.

Baselines of the paper's Table 3 are the same estimator with other settings:

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

Choices where the paper is silent
---------------------------------
* Each client keeps its own RMSProp state across rounds (as a Keras model that
  is re-fit after ``set_weights`` would); it is never sent. With this choice
  FedAvg with a single client is *exactly* local training for ``n_rounds *
  local_epochs`` epochs (tested).
* Every party has its own RNG streams (shuffling and dropout), derived from
  ``random_state`` by ``SeedSequence`` (view ``k``: child ``k``; its child 0
  initialises the server's GRU, child ``1 + l`` is client ``l``'s stream).
* Embeddings are used as they are (tanh-bounded GRU states); no
  standardisation, which would need another federated aggregate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._registry import register_estimator
from fedviews.data._sequences import check_sequences
from fedviews.deep._common import require_torch, resolve_device
from fedviews.deep._gru import (
    BiGRUExtractor,
    GRUConfig,
    get_params,
    make_extractor,
    new_rng_state,
    sequence_embed,
    set_params,
    train_epochs,
)
from fedviews.errors import ConfigError, DataError, ProtocolError, check_fitted
from fedviews.federation import (
    Coordinator,
    Message,
    Party,
    PrivacyPolicy,
    Transport,
    federate,
    handles,
)
from fedviews.linear import HFedMV, LocalMVL

__all__ = [
    "EXTRACTOR_MODES",
    "FUSIONS",
    "SFedMV",
    "SequenceClient",
    "SequenceServer",
    "check_sequence_clients",
    "sequence_policy",
    "train_local_extractors",
    "view_seeds",
]

torch = require_torch()

EXTRACTOR_MODES = ("federated", "local", "centralized")
FUSIONS = ("hfedmv", "local")

#: ``on_round(view, round, client, model)``: ``client`` is None for a shared (global) model.
RoundCallback = Callable[[int, int, "int | None", BiGRUExtractor], None]
Params = dict[str, np.ndarray]


def view_seeds(random_state: int | None, view: int, client: int) -> tuple[int, int]:
    """``(init_seed, client_seed)`` of view ``view``: the server's GRU init and client ``client``'s stream."""
    ss = np.random.SeedSequence(random_state).spawn(view + 1)[view]
    children = ss.spawn(client + 2)
    return int(children[0].generate_state(1)[0]), int(children[client + 1].generate_state(1)[0])


def _fusion_seed(random_state: int | None) -> int:
    """The fusion stage's seed: the root sequence's own state (the views use its children)."""
    return int(np.random.SeedSequence(random_state).generate_state(1)[0])


def sequence_policy(param_names: Sequence[str], n_views: int) -> PrivacyPolicy:
    """The S-FedMV stage-1 barrier: only ``view{k}/{param}`` extractor parameters cross."""
    names = [f"view{k}/{p}" for k in range(n_views) for p in param_names]
    return PrivacyPolicy.of(
        "s-fedmv", {("client", "coordinator"): names, ("coordinator", "client"): names}
    )


def _prefixed(k: int, params: Params) -> Params:
    return {f"view{k}/{name}": a for name, a in params.items()}


def _unprefixed(k: int, arrays: Any) -> Params:
    prefix = f"view{k}/"
    out = {n[len(prefix) :]: a for n, a in arrays.items() if n.startswith(prefix)}
    if len(out) != len(arrays):
        raise ProtocolError(f"expected only view {k} parameters, got {sorted(arrays)}")
    return out


def _meta_number(msg: Message, key: str) -> float:
    value = msg.meta.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"{msg.sender} sent meta[{key!r}] = {value!r}, expected a number")
    return float(value)


# --------------------------------------------------------------------------- parties


class SequenceClient(Party):
    """Client ``L_l``: its sequences, labels, extractors and optimizer state never leave it."""

    def __init__(
        self,
        name: str,
        views: list[list[np.ndarray]],
        y: np.ndarray,
        n_classes: int,
        cfg: GRUConfig,
        seeds: Sequence[int],
        device: Any,
    ) -> None:
        super().__init__(name, role="client")
        self.views, self.y = views, y
        self.n_classes, self.cfg, self.device = n_classes, cfg, device
        self.models: list[BiGRUExtractor | None] = [None] * len(views)
        self.optimizers: list[Any] = [None] * len(views)
        self.rng = [new_rng_state(s) for s in seeds]
        self.losses: list[list[float]] = [[] for _ in views]

    def load(self, k: int, params: Params) -> BiGRUExtractor:
        """Put the received global parameters of view ``k`` into the local model."""
        if self.models[k] is None:
            model = make_extractor(self.views[k][0].shape[1], self.n_classes, self.cfg, 0)
            self.models[k] = model.to(self.device)
            self.optimizers[k] = torch.optim.RMSprop(model.parameters(), lr=self.cfg.lr)
        loaded = self.models[k]
        assert loaded is not None
        set_params(loaded, params)
        return loaded

    @handles("train_view")
    def on_train_view(self, msg: Message) -> Message:
        k = int(_meta_number(msg, "view"))
        model = self.load(k, _unprefixed(k, msg.arrays))
        loss = train_epochs(
            model,
            self.optimizers[k],
            self.views[k],
            self.y,
            self.cfg.local_epochs,
            self.cfg.batch_size,
            self.rng[k],
            self.device,
        )
        self.losses[k].append(loss)
        return self.reply(
            msg,
            arrays=_prefixed(k, get_params(model)),
            meta={"n_samples": len(self.y), "loss": loss},
        )

    @handles("final_view")
    def on_final_view(self, msg: Message) -> None:
        k = int(_meta_number(msg, "view"))
        self.load(k, _unprefixed(k, msg.arrays))

    def state_dict(self) -> dict[str, np.ndarray]:
        """Private state after a round: per view the model, RMSProp state, RNG streams, losses.

        Keys ``view{k}/param/<name>``, ``view{k}/opt/<i>/<name>``, ``view{k}/rng_torch``,
        ``view{k}/rng_numpy`` (the generator's state as JSON) and ``view{k}/loss``.
        """
        state: dict[str, np.ndarray] = {}
        for k, model in enumerate(self.models):
            state[f"view{k}/rng_torch"] = self.rng[k]["torch"].numpy().copy()
            state[f"view{k}/rng_numpy"] = np.array(
                json.dumps(self.rng[k]["numpy"].bit_generator.state)
            )
            state[f"view{k}/loss"] = np.asarray(self.losses[k], dtype=np.float64)
            if model is None:
                continue
            for name, a in get_params(model).items():
                state[f"view{k}/param/{name}"] = a
            for i, st in self.optimizers[k].state_dict()["state"].items():
                for name, v in st.items():
                    arr = v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v)
                    state[f"view{k}/opt/{i}/{name}"] = arr.copy()
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`; the next round then equals the uninterrupted one."""
        for k in range(len(self.views)):
            pre = f"view{k}/"
            if pre + "rng_torch" not in state:
                raise DataError(
                    f"client {self.name!r}: the saved state has no view {k}; resume with the "
                    "same data and config"
                )
            self.rng[k]["torch"] = torch.from_numpy(np.array(state[pre + "rng_torch"]))
            gen = np.random.default_rng()
            gen.bit_generator.state = json.loads(str(state[pre + "rng_numpy"]))
            self.rng[k]["numpy"] = gen
            self.losses[k] = [float(v) for v in state[pre + "loss"]]
            params = {
                n[len(pre + "param/") :]: v
                for n, v in state.items()
                if n.startswith(pre + "param/")
            }
            if not params:
                continue
            self.load(k, params)
            opt_state: dict[int, dict[str, Any]] = {}
            for n, v in state.items():
                if n.startswith(pre + "opt/"):
                    i, name = n[len(pre + "opt/") :].split("/", 1)
                    opt_state.setdefault(int(i), {})[name] = torch.as_tensor(np.array(v))
            opt = self.optimizers[k]
            saved = opt.state_dict()
            saved["state"] = opt_state
            opt.load_state_dict(saved)


class SequenceServer(Coordinator):
    """The S-FedMV server: FedAvg of every view's extractor with weights ``N_l / N``."""

    def __init__(
        self,
        clients: Sequence[str],
        init_params: Sequence[Params],
        n_rounds: int,
        models: Sequence[BiGRUExtractor],
        on_round: RoundCallback | None = None,
    ) -> None:
        super().__init__()
        self.clients = list(clients)
        self.params = list(init_params)
        self.n_rounds = n_rounds
        self.models = list(models)
        self.on_round = on_round
        self.local: list[list[Params]] = [[] for _ in init_params]
        self.loss: list[list[float]] = [[] for _ in init_params]
        self.rounds_done = 0  # over all views: view k, round t is round k * n_rounds + t

    @staticmethod
    def aggregate(local: Sequence[Params], sizes: Sequence[float]) -> Params:
        """``w = sum_l (N_l / N) w_l`` for every parameter (Algorithm 4)."""
        N = float(sum(sizes))
        return {
            name: sum((n / N) * p[name] for n, p in zip(sizes, local, strict=True))  # type: ignore[misc]
            for name in local[0]
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        """The server's state after a round: every view's global parameters and losses."""
        state: dict[str, np.ndarray] = {"rounds_done": np.asarray(self.rounds_done, np.int64)}
        for k, params in enumerate(self.params):
            state.update({f"view{k}/{n}": a for n, a in params.items()})
            state[f"loss/{k}"] = np.asarray(self.loss[k], dtype=np.float64)
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`: :meth:`run` goes on with the next round.

        (:attr:`local`, the clients' parameters of the last round, is not restored.)
        """
        for k, params in enumerate(self.params):
            missing = [n for n in params if f"view{k}/{n}" not in state]
            if missing:
                raise DataError(f"the server state lacks view {k}'s parameters {missing}")
            self.params[k] = {n: np.array(state[f"view{k}/{n}"]) for n in params}
            self.loss[k] = [float(v) for v in state[f"loss/{k}"]]
            set_params(self.models[k], self.params[k])
        self.rounds_done = int(state["rounds_done"])

    def _send_final(self, k: int) -> None:
        self.broadcast(
            self.clients,
            "final_view",
            arrays=_prefixed(k, self.params[k]),
            meta={"view": k},
            round=(k + 1) * self.n_rounds,
        )

    def run(self, on_round_end: Callable[[int], None] | None = None) -> list[Params]:
        """Rounds ``rounds_done + 1 ..`` of every view (all of them unless :meth:`load_state`).

        ``on_round_end(r)`` is called after round ``r = k * n_rounds + t`` (view ``k``,
        round ``t``), e.g. to write a checkpoint. A resumed run first sends the final
        parameters of every finished view again (the clients may have missed them).
        """
        resumed = self.rounds_done > 0
        for k in range(len(self.params)):
            done = self.rounds_done - k * self.n_rounds
            if done >= self.n_rounds:
                if resumed:
                    self._send_final(k)
                continue
            for t in range(max(done, 0) + 1, self.n_rounds + 1):
                replies = self.broadcast(
                    self.clients,
                    "train_view",
                    arrays=_prefixed(k, self.params[k]),
                    meta={"view": k},
                    round=k * self.n_rounds + t,
                )
                local = [_unprefixed(k, replies[c].arrays) for c in self.clients]
                sizes = [_meta_number(replies[c], "n_samples") for c in self.clients]
                self.params[k] = self.aggregate(local, sizes)
                self.local[k] = local
                self.loss[k].append(
                    sum(
                        n * _meta_number(replies[c], "loss")
                        for n, c in zip(sizes, self.clients, strict=True)
                    )
                    / sum(sizes)
                )
                set_params(self.models[k], self.params[k])
                if self.on_round is not None:
                    self.on_round(k, t, None, self.models[k])
                self.rounds_done = k * self.n_rounds + t
                if on_round_end is not None:
                    on_round_end(self.rounds_done)
            self._send_final(k)
        return self.params


# --------------------------------------------------------------------------- local training


def train_local_extractors(
    views: list[list[np.ndarray]],
    y: np.ndarray,
    n_classes: int,
    cfg: GRUConfig,
    *,
    random_state: int | None = 0,
    client_index: int = 0,
    device: Any = "cpu",
    on_round: RoundCallback | None = None,
    report_as: int | None = None,
    own_init: bool = False,
) -> list[BiGRUExtractor]:
    """One data holder trains its per-view extractors alone (no messages).

    ``n_rounds * local_epochs`` epochs with one persistent RMSProp per view and
    the RNG streams of client ``client_index`` of the federation. The initial
    GRU is the federation server's (``own_init=False``: FedAvg with one client
    then gives exactly this result) or drawn from the holder's own stream
    (``own_init=True``: clients that never talk start from unrelated GRUs).
    ``on_round(view, t, report_as, model)`` is called every ``local_epochs`` epochs.
    """
    cfg.validate()
    dev = resolve_device(device) if isinstance(device, str) else device
    models = []
    for k, seqs in enumerate(views):
        init_seed, seed = view_seeds(random_state, k, client_index)
        model = make_extractor(
            seqs[0].shape[1], n_classes, cfg, seed + 1 if own_init else init_seed
        ).to(dev)
        opt = torch.optim.RMSprop(model.parameters(), lr=cfg.lr)
        rng = new_rng_state(seed)
        for t in range(1, cfg.n_rounds + 1):
            train_epochs(model, opt, seqs, y, cfg.local_epochs, cfg.batch_size, rng, dev)
            if on_round is not None:
                on_round(k, t, report_as, model)
        models.append(model)
    return models


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
        out_v.append(check_sequences(views, y, name=f"clients[{l}].views"))
        y_arr = np.asarray(y)
        if y_arr.ndim != 1:
            raise DataError(f"clients[{l}].y must be 1-D, got shape {y_arr.shape}")
        out_y.append(y_arr)
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


# --------------------------------------------------------------------------- estimator


@register_estimator("sfedmv")
class SFedMV(BaseEstimator):
    """S-FedMV (Algorithm 4 + H-FedMV) and the baselines of the paper's Table 3.

    Parameters
    ----------
    extractors : {"federated", "local", "centralized"}, default="federated"
        How the per-view GRUs are trained (see the module docstring).
    fusion : {"hfedmv", "local"}, default="hfedmv"
        H-FedMV across clients, or LocalMVL per client on its own embeddings.
    hidden_size, num_layers, dropout, lr, batch_size, local_epochs, n_rounds
        Extractor architecture and FedAvg schedule, see :class:`GRUConfig`.
    beta, zeta, eta : float
        FedMV weights (β_k, ζ_k, η) of the fusion stage.
    fusion_rounds : int, default=20
        H-FedMV rounds (paper: 20); LocalMVL runs ``fusion_rounds * local_iter`` passes.
    local_iter, inner_max_iter : int
        H-FedMV local passes per round and IRLS iterations per W step.
    random_state : int or None
    device : str, default="cpu"
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    transport : callable, optional
        ``transport(policy) -> Transport`` for both stages (default in-process).

    Attributes
    ----------
    classes_ : ndarray
    extractors_ : list of BiGRUExtractor or list of list
        Per view the global extractor; with ``extractors="local"``,
        ``extractors_[l][k]`` is client ``l``'s own.
    fusion_ : HFedMV or list of LocalMVL
    transport_ : Transport or None
        Stage-1 transport (``None`` unless ``extractors="federated"``); its
        ``log`` lists every message. Stage 2's is ``fusion_.transport_``.
    run_stats_ : dict or None
        ``transport_.log.summary()`` (``None`` when ``transport_`` is). Stage 2's
        are ``fusion_.run_stats_`` and ``fusion_.history_`` (H-FedMV only:
        ``fusion="local"`` sends nothing).
    local_params_ : list of list of dict
        ``[k][l]``: client ``l``'s parameters of view ``k`` sent in the last round
        (simulation only; the aggregation test checks the global ones against them).
    round_loss_ : list of list of float
        ``[k][t]``: sample-weighted mean training loss of round ``t`` (federated only).
    history_ : list of list of float
        ``round_loss_`` (the per-round record every federated estimator exposes).
    client_sizes_ : list of int

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
        beta: float = 4.0,
        zeta: float = 8.0,
        eta: float = 16.0,
        fusion_rounds: int = 20,
        local_iter: int = 2,
        inner_max_iter: int = 5,
        random_state: int | None = 0,
        device: str = "cpu",
        transport: Any = None,
    ) -> None:
        self.extractors = extractors
        self.fusion = fusion
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dropout = dropout
        self.lr = lr
        self.batch_size = batch_size
        self.local_epochs = local_epochs
        self.n_rounds = n_rounds
        self.beta = beta
        self.zeta = zeta
        self.eta = eta
        self.fusion_rounds = fusion_rounds
        self.local_iter = local_iter
        self.inner_max_iter = inner_max_iter
        self.random_state = random_state
        self.device = device
        self.transport = transport

    # -- helpers ---------------------------------------------------------
    def _config(self) -> GRUConfig:
        if self.extractors not in EXTRACTOR_MODES:
            raise ConfigError(
                f"extractors must be one of {list(EXTRACTOR_MODES)}, got {self.extractors!r}"
            )
        if self.fusion not in FUSIONS:
            raise ConfigError(f"fusion must be one of {list(FUSIONS)}, got {self.fusion!r}")
        cfg = GRUConfig(
            self.hidden_size,
            self.num_layers,
            self.dropout,
            self.lr,
            self.batch_size,
            self.local_epochs,
            self.n_rounds,
        )
        cfg.validate()
        return cfg

    def _encode(self, ys: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.searchsorted(self.classes_, y).astype(np.int64) for y in ys]

    def _extractors_of(self, client: int | None) -> list[BiGRUExtractor]:
        if self.extractors != "local":
            shared: list[BiGRUExtractor] = self.extractors_
            return shared
        if client is None or not 0 <= client < len(self.extractors_):
            raise ConfigError(
                f"extractors='local': pass client=0..{len(self.extractors_) - 1}, the client whose "
                "own GRUs embed these sequences"
            )
        own: list[BiGRUExtractor] = self.extractors_[client]
        return own

    # -- stage 1 ---------------------------------------------------------
    def fit_extractors(self, clients: Any, on_round: RoundCallback | None = None) -> SFedMV:
        """Stage 1 only: train the per-view extractors (``on_round`` after every round)."""
        cfg = self._config()
        views, ys = check_sequence_clients(clients)
        self.classes_ = np.unique(np.concatenate(ys))
        if len(self.classes_) < 2:
            raise DataError("the clients' labels contain fewer than two classes")
        yi = self._encode(ys)
        c = len(self.classes_)
        dev = resolve_device(self.device)
        self.device_ = dev
        self.n_channels_ = [v[0].shape[1] for v in views[0]]
        self.client_sizes_ = [len(y) for y in ys]
        self.transport_: Transport | None = None
        self.round_loss_: list[list[float]] = []
        self.local_params_: list[list[Params]] = []
        K, M = len(self.n_channels_), len(views)
        if self.extractors == "local":
            self.extractors_ = [
                train_local_extractors(
                    views[l],
                    yi[l],
                    c,
                    cfg,
                    random_state=self.random_state,
                    client_index=l,
                    device=dev,
                    on_round=on_round,
                    report_as=l,
                    own_init=True,
                )
                for l in range(M)  # noqa: E741
            ]
        elif self.extractors == "centralized":
            pooled = [[s for l in range(M) for s in views[l][k]] for k in range(K)]  # noqa: E741
            self.extractors_ = train_local_extractors(
                pooled,
                np.concatenate(yi),
                c,
                cfg,
                random_state=self.random_state,
                device=dev,
                on_round=on_round,
            )
        else:
            inits = [
                make_extractor(ch, c, cfg, view_seeds(self.random_state, k, 0)[0]).to(dev)
                for k, ch in enumerate(self.n_channels_)
            ]
            parties = [
                SequenceClient(
                    f"client{l}",
                    views[l],
                    yi[l],
                    c,
                    cfg,
                    [view_seeds(self.random_state, k, l)[1] for k in range(K)],
                    dev,
                )
                for l in range(M)  # noqa: E741
            ]
            server = SequenceServer(
                [p.name for p in parties],
                [get_params(m) for m in inits],
                cfg.n_rounds,
                inits,
                on_round,
            )
            policy = sequence_policy(list(get_params(inits[0])), K)
            custom: Transport | None = self.transport(policy) if self.transport else None
            self.transport_ = federate([server, *parties], policy, custom)
            server.run()
            self.extractors_ = inits  # the server's models hold the final global parameters
            self.local_params_ = server.local
            self.round_loss_ = server.loss
        self.history_ = self.round_loss_
        self.run_stats_ = None if self.transport_ is None else self.transport_.log.summary()
        return self

    # -- stage 2 ---------------------------------------------------------
    def fit_fusion(self, clients: Any) -> SFedMV:
        """Stage 2 only, with the fitted extractors: embed locally, then H-FedMV / LocalMVL.

        Lets the two local baselines share one set of locally trained GRUs:
        ``est.set_params(fusion="local").fit_fusion(clients)``.
        """
        check_fitted(self, "extractors_", "client_sizes_")
        self._config()
        views, ys = check_sequence_clients(clients)
        if len(views) != len(self.client_sizes_):
            raise DataError(f"fit with {len(self.client_sizes_)} clients, got {len(views)}")
        Xs = [self.transform(v, client=l) for l, v in enumerate(views)]  # noqa: E741
        yi = self._encode(ys)
        seed = _fusion_seed(self.random_state)
        if self.fusion == "hfedmv":
            self.fusion_: Any = HFedMV(
                beta=self.beta,
                zeta=self.zeta,
                eta=self.eta,
                n_rounds=self.fusion_rounds,
                local_iter=self.local_iter,
                inner_max_iter=self.inner_max_iter,
                random_state=seed,
                transport=self.transport,
            ).fit(list(zip(Xs, yi, strict=True)))
        else:
            self.fusion_ = [
                LocalMVL(
                    beta=self.beta,
                    zeta=self.zeta,
                    eta=self.eta,
                    n_iter=self.fusion_rounds * self.local_iter,
                    inner_max_iter=self.inner_max_iter,
                    random_state=seed,
                ).fit(X, y, classes=np.arange(len(self.classes_)))
                for X, y in zip(Xs, yi, strict=True)
            ]
        return self

    def fit(self, clients: Any, on_round: RoundCallback | None = None) -> SFedMV:
        """Both stages; ``clients[l] = (views_l, y_l)`` with ``views_l[k]`` client l's view-k sequences."""
        return self.fit_extractors(clients, on_round).fit_fusion(clients)

    # -- inference -------------------------------------------------------
    def transform(self, views: Any, client: int | None = None) -> list[np.ndarray]:
        """Embed sequences into the feature matrices ``X_k`` (``(n, 2 * hidden_size)`` each).

        ``client`` selects whose GRUs to use when ``extractors="local"``.
        """
        check_fitted(self, "extractors_", "n_channels_")
        seqs = check_sequences(views, n_views=len(self.n_channels_), n_channels=self.n_channels_)
        models = self._extractors_of(client)
        return [
            sequence_embed(m, s, device=self.device_) for m, s in zip(models, seqs, strict=True)
        ]

    def predict(self, views: Any, client: int | None = None) -> np.ndarray:
        """Class labels of the sequences held by ``client`` (needed for local extractors / fusion)."""
        check_fitted(self, "extractors_", "fusion_")
        Xs = self.transform(views, client)
        if self.fusion == "local":
            if client is None or not 0 <= client < len(self.fusion_):
                raise ConfigError("fusion='local': pass client=l, whose own model predicts")
            idx = self.fusion_[client].predict(Xs)
        else:
            idx = self.fusion_.predict(Xs)
        return np.asarray(self.classes_[np.asarray(idx, dtype=np.int64)])
