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

The protocol is defined once, in :mod:`fedviews.deep._sfedmv_spec`
(:class:`SFedMVAlgorithm`; this module holds its torch parties): ``fit`` with
federated extractors and H-FedMV fusion runs exactly what ``fedviews launch``
deploys. Only extractor parameters cross in stage 1 (``view{k}/{param}``), only
``W_k``/``W_local_k`` in stage 2 (one policy, one message log:
``transport_.log``). Sequences, labels and embeddings stay on their client.

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
  ``random_state`` (:func:`~fedviews.deep._sfedmv_spec.view_seeds`).
* Embeddings are used as they are (tanh-bounded GRU states); no
  standardisation, which would need another federated aggregate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_sequences
from fedviews.deep._common import (
    load_module,
    load_optimizer,
    module_arrays,
    optimizer_arrays,
    preload_optimizers,
    require_torch,
    resolve_device,
)
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
from fedviews.deep._sfedmv_spec import (
    DEPLOY_ONLY,
    SFedMVParams,
    _prefixed,
    _unprefixed,
    fusion_seed,
    sequence_policy,
    view_seeds,
)
from fedviews.errors import ConfigError, DataError, ProtocolError, check_fitted
from fedviews.federation import (
    Coordinator,
    Defense,
    Message,
    Roster,
    RunSpec,
    SecureSumParty,
    build_in_process,
    estimator_params,
    handles,
    secure_sum_setup,
    unmask_sum,
)
from fedviews.linear import HFEDMV_SPEC, HFedMV, HFedMVClient, HFedMVServer, LocalMVL

__all__ = [
    "EXTRACTOR_MODES",
    "FUSIONS",
    "SFedMV",
    "SFedMVClient",
    "SFedMVServer",
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
Weights = dict[str, np.ndarray]


# --------------------------------------------------------------------------- stage 1


class SequenceClient(SecureSumParty):
    """Client ``L_l``: its sequences, labels, extractors and optimizer state never leave it.

    ``secure`` (``defense.kind = "secagg"``): ``N_l w_l`` and ``N_l loss_l`` of a view leave
    only masked for the server's secure sum (``masked_view{k}/...``)."""

    def __init__(
        self,
        name: str,
        views: list[list[np.ndarray]],
        y: np.ndarray,
        n_classes: int,
        cfg: GRUConfig,
        seeds: Sequence[int],
        device: Any,
        secure: bool = False,
    ) -> None:
        super().__init__(name, role="client")
        self.secure = secure
        self.views, self.y = views, y
        self.n_classes, self.cfg, self.device = n_classes, cfg, device
        self.models: list[BiGRUExtractor | None] = [None] * len(views)
        self.optimizers: list[Any] = [None] * len(views)
        self.rng = [new_rng_state(s) for s in seeds]
        self.losses: list[list[float]] = [[] for _ in views]
        preload_optimizers()  # the models, with their RMSProp, are built on first use

    def model(self, k: int) -> BiGRUExtractor:
        """View ``k``'s local model (built, with its RMSProp, on first use)."""
        if not 0 <= k < len(self.views):
            raise ProtocolError(f"{self.name!r} holds {len(self.views)} views, not view {k}")
        if self.models[k] is None:
            model = make_extractor(self.views[k][0].shape[1], self.n_classes, self.cfg, 0)
            self.models[k] = model.to(self.device)
            self.optimizers[k] = torch.optim.RMSprop(model.parameters(), lr=self.cfg.lr)
        built = self.models[k]
        assert built is not None
        return built

    def load(self, k: int, msg: Message) -> BiGRUExtractor:
        """Put the received global parameters of view ``k`` into the local model."""
        model = self.model(k)
        set_params(model, _unprefixed(k, msg, get_params(model)))
        return model

    @handles("train_view")
    def on_train_view(self, msg: Message) -> Message:
        k = int(msg.number("view"))
        model = self.load(k, msg)
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
        n = len(self.y)
        if self.secure:  # what the server's weighted average needs, summed over the clients
            keys = self.keyed_sum(f"view {k}")
            values = {
                f"masked_{name}": n * a for name, a in _prefixed(k, get_params(model)).items()
            }
            values[f"masked_view{k}/loss"] = np.array([n * loss])
            return self.reply(msg, arrays=keys.mask(values, msg.round), meta={"n_samples": n})
        return self.reply(
            msg,
            arrays=_prefixed(k, get_params(model)),
            meta={"n_samples": n, "loss": loss},
        )

    @handles("final_view")
    def on_final_view(self, msg: Message) -> None:
        self.load(int(msg.number("view")), msg)

    def embed(self, views: list[list[np.ndarray]]) -> list[np.ndarray]:
        """``X_k``: ``views`` embedded with this client's (final) extractors."""
        if any(m is None for m in self.models):
            raise ProtocolError(f"{self.name!r}: a view's final extractor was never received")
        return [sequence_embed(self.model(k), s, device=self.device) for k, s in enumerate(views)]

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
            if model is not None:
                state.update(module_arrays(f"view{k}/param", model))
                state.update(optimizer_arrays(f"view{k}/opt", self.optimizers[k]))
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
            if any(n.startswith(pre + "param/") for n in state):
                load_module(pre + "param", self.model(k), state, self.name)
                load_optimizer(pre + "opt", self.optimizers[k], state)


class SequenceServer(Coordinator):
    """The stage-1 server: FedAvg of every view's extractor with weights ``N_l / N``."""

    def __init__(
        self,
        clients: Sequence[str],
        models: Sequence[BiGRUExtractor],
        n_rounds: int,
        on_round: RoundCallback | None = None,
        frac_bits: int | None = None,
    ) -> None:
        super().__init__()
        self.frac_bits = frac_bits  # secure aggregation (None: the plain protocol)
        self.clients = list(clients)
        self.models = list(models)  # they hold the global parameters
        self.params = [get_params(m) for m in models]
        self.n_rounds = n_rounds
        self.on_round = on_round
        self.local: list[list[Weights]] = [[] for _ in models]
        self.loss: list[list[float]] = [[] for _ in models]
        self.rounds_done = 0  # over all views: view k, round t is round k * n_rounds + t

    @staticmethod
    def aggregate(local: Sequence[Weights], sizes: Sequence[float]) -> Weights:
        """``w = sum_l (N_l / N) w_l`` for every parameter (Algorithm 4)."""
        N = float(sum(sizes))
        pairs = list(zip(sizes, local, strict=True))
        return {
            name: sum(((n / N) * p[name] for n, p in pairs), np.zeros_like(first))
            for name, first in local[0].items()
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        """The server's state after a round: every view's global parameters and losses."""
        state: dict[str, np.ndarray] = {"rounds_done": np.asarray(self.rounds_done, np.int64)}
        for k, params in enumerate(self.params):
            state.update(_prefixed(k, params))
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

    def run(self, on_round_end: Callable[[int], None] | None = None) -> Any:
        """Rounds ``rounds_done + 1 ..`` of every view (all of them unless :meth:`load_state`).

        ``on_round_end(r)`` is called after round ``r = k * n_rounds + t`` (view ``k``,
        round ``t``), e.g. to write a checkpoint. A resumed run first sends the final
        parameters of every finished view again (the clients may have missed them).
        """
        resumed = self.rounds_done > 0
        if self.frac_bits is not None:  # fresh keys for this run (also a resumed one)
            secure_sum_setup(self, self.clients, self.frac_bits, round=self.rounds_done)
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
                sizes = [replies[c].count("n_samples") for c in self.clients]
                if self.frac_bits is not None:  # only the sums over the clients
                    self.params[k], loss = secure_average(
                        replies, k, self.params[k], self.frac_bits
                    )
                    self.loss[k].append(loss)
                else:
                    local = [_unprefixed(k, replies[c], self.params[k]) for c in self.clients]
                    losses = [replies[c].number("loss") for c in self.clients]
                    self.params[k] = self.aggregate(local, sizes)
                    self.local[k] = local
                    self.loss[k].append(float(np.dot(sizes, losses) / sum(sizes)))
                set_params(self.models[k], self.params[k])
                if self.on_round is not None:
                    self.on_round(k, t, None, self.models[k])
                self.rounds_done = k * self.n_rounds + t
                if on_round_end is not None:
                    on_round_end(self.rounds_done)
            self._send_final(k)
        return self.params


def secure_average(
    replies: Mapping[str, Message], k: int, like: Weights, frac_bits: int
) -> tuple[Weights, float]:
    """View ``k``'s FedAvg ``sum_l N_l w_l / N`` and mean loss from the clients' masked
    replies (secure aggregation): the parameters named and shaped as ``like``."""
    shapes = {f"masked_view{k}/{n}": a.shape for n, a in like.items()}
    totals = unmask_sum(replies, {**shapes, f"masked_view{k}/loss": (1,)}, frac_bits)
    N = float(sum(m.count("n_samples") for m in replies.values()))
    params = {n: (totals[f"masked_view{k}/{n}"] / N).astype(a.dtype) for n, a in like.items()}
    return params, float(totals[f"masked_view{k}/loss"][0] / N)


# --------------------------------------------------------------------------- the whole run


class SFedMVClient(SequenceClient):
    """A client of both stages: stage 1 as :class:`SequenceClient`; on the first
    ``local_train`` it embeds its own sequences (and test sequences) and builds its
    H-FedMV client from them with ``make_fusion(X, X_test)``."""

    def __init__(
        self,
        *args: Any,
        make_fusion: Callable[[list[np.ndarray], list[np.ndarray] | None], HFedMVClient],
        test_views: list[list[np.ndarray]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.make_fusion, self.test_views = make_fusion, test_views
        self.fusion: HFedMVClient | None = None

    def _fusion(self) -> HFedMVClient:
        if self.fusion is None:  # stage 2 starts
            test = None if self.test_views is None else self.embed(self.test_views)
            self.fusion = self.make_fusion(self.embed(self.views), test)
        return self.fusion

    @handles("local_train")
    def on_local_train(self, msg: Message) -> Message:
        fusion = self._fusion()
        fusion.secure_sum = self.secure_sum  # the keys of the fusion's exchange, if any
        return fusion.on_local_train(msg)

    @handles("final")
    def on_final(self, msg: Message) -> Message:
        return self._fusion().on_final(msg)

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        super().load_state(state)
        self.fusion = None  # a resumed run redoes the (deterministic) fusion

    def results(self) -> dict[str, np.ndarray]:
        """What a client keeps: its final extractors and H-FedMV's results (``W_k``, test predictions)."""
        out = {} if self.fusion is None else HFEDMV_SPEC.party_results(self.fusion)
        for k, model in enumerate(self.models):
            if model is not None:
                out.update(_prefixed(k, get_params(model)))
        return out


class SFedMVServer(SequenceServer):
    """The server of both stages: stage 1, then the H-FedMV server ``fusion`` on the embeddings."""

    def __init__(self, *args: Any, fusion: HFedMVServer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fusion = fusion

    def run(self, on_round_end: Callable[[int], None] | None = None, *, fuse: bool = True) -> Any:
        """Stage 1 (checkpointed by ``on_round_end``), then (``fuse``) the fusion."""
        super().run(on_round_end)
        if not fuse:
            return self.params
        # the fusion server acts as this one: same name, transport and recording
        self.fusion.name, self.fusion.transport = self.name, self.transport
        self.fusion.recording = self.recording
        with HFEDMV_SPEC.compute_limits():
            return self.fusion.run()

    def progress(self) -> list[str]:
        R = self.n_rounds
        lines = [
            f"round {k * R + t + 1}: view {k} round {t + 1}, train loss {v:.4f}"
            for k, losses in enumerate(self.loss)
            for t, v in enumerate(list(losses))
        ]
        return lines + [f"fusion {line}" for line in self.fusion.progress()]

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics, arrays)``: stage 1's losses and global GRUs, H-FedMV's results."""
        fused, arrays = HFEDMV_SPEC.coordinator_results(self.fusion)
        metrics = {
            "round_loss": [list(v) for v in self.loss],
            "rounds_done": self.rounds_done,
            "fusion_objective": fused.pop("objective"),
            **{k: v for k, v in fused.items() if k != "rounds_done"},
        }
        for k, ps in enumerate(self.params):
            arrays.update(_prefixed(k, ps))
        return metrics, arrays


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

    The hyper-parameters besides ``extractors``, ``fusion``, ``random_state`` and
    ``transport`` are those of :class:`~fedviews.deep._sfedmv_spec.SFedMVParams`
    (a deployment's ``[params]``), less the deployment-only ``torch_threads`` and
    ``evaluate``.

    Parameters
    ----------
    extractors : {"federated", "local", "centralized"}, default="federated"
        How the per-view GRUs are trained (see the module docstring).
    fusion : {"hfedmv", "local"}, default="hfedmv"
        H-FedMV across clients, or LocalMVL per client on its own embeddings.
    hidden_size, num_layers, dropout, lr, batch_size, local_epochs, n_rounds
        Extractor architecture and FedAvg schedule, see :class:`GRUConfig`.
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

    Attributes
    ----------
    classes_ : ndarray
    extractors_ : list of BiGRUExtractor or list of list
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
    ) -> None:
        store_params(self, locals())

    # -- helpers ---------------------------------------------------------
    def _params(self) -> SFedMVParams:
        if self.extractors not in EXTRACTOR_MODES:
            raise ConfigError(
                f"extractors must be one of {list(EXTRACTOR_MODES)}, got {self.extractors!r}"
            )
        if self.fusion not in FUSIONS:
            raise ConfigError(f"fusion must be one of {list(FUSIONS)}, got {self.fusion!r}")
        params: SFedMVParams = estimator_params(SFedMVParams, self, skip=DEPLOY_ONLY)
        params.validate()
        return params

    def _encode(self, ys: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.searchsorted(self.classes_, y).astype(np.int64) for y in ys]

    def _extractors_of(self, client: int | None) -> list[BiGRUExtractor]:
        if self.setting_[0] != "local":
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
        c = len(self.classes_)
        dev = resolve_device(self.device)
        self.device_ = dev
        self.n_channels_ = [v[0].shape[1] for v in views[0]]
        self.client_sizes_ = [len(y) for y in ys]
        self.setting_: tuple[str, str | None] = (self.extractors, None)
        self.__dict__.pop("fusion_", None)  # it fused the embeddings of the former extractors
        self.transport_: Any = None
        self.round_loss_: list[list[float]] = []
        self.local_params_: list[list[Weights]] = []
        K, M = len(self.n_channels_), len(views)
        fed = None
        if self.extractors == "local":
            self.extractors_ = [
                train_local_extractors(
                    views[l],
                    yi[l],
                    c,
                    p,
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
                p,
                random_state=self.random_state,
                device=dev,
                on_round=on_round,
            )
        else:  # the deployed protocol: every client built from its own data by the spec
            names = tuple(f"client{l}" for l in range(M))  # noqa: E741
            run = RunSpec(
                "sfedmv",
                p,
                Roster(names, label_owners=names),
                self.random_state,
                Defense.of(self.defense),
            )
            datas = {
                n: PartyData.from_sequences(np.arange(len(y)), v, y)
                for n, v, y in zip(names, views, yi, strict=True)
            }
            fed = build_in_process(run, datas, transport=self.transport)
            server = fed.coordinator
            assert isinstance(server, SFedMVServer)
            server.on_round = on_round
            server.run(fuse=fuse)
            self.transport_ = fed.transport
            self.privacy_ = fed.privacy
            self.extractors_ = server.models  # they hold the final global parameters
            self.local_params_ = server.local
            self.round_loss_ = server.loss
        self.history_ = self.round_loss_
        self.run_stats_ = None if self.transport_ is None else self.transport_.log.summary()
        return fed

    # -- stage 2 ---------------------------------------------------------
    def _fusion_estimator(self, p: SFedMVParams) -> HFedMV:
        fp = p.fusion()
        return HFedMV(
            **{k: getattr(fp, k) for k in ("beta", "zeta", "eta", "local_iter", "inner_max_iter")},
            n_rounds=fp.n_rounds,
            random_state=fusion_seed(self.random_state),
            transport=self.transport,
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
        (:class:`~fedviews.deep._sfedmv_spec.SFedMVAlgorithm`) in one process.
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
        fusion.n_features_in_ = [2 * p.hidden_size] * K
        clients_ = [fed.parties[n].fusion for n in fed.run.federation.parties]
        self.fusion_ = fusion.adopt(server.fusion, clients_, fed.transport)
        self.setting_ = ("federated", "hfedmv")
        return self

    # -- inference -------------------------------------------------------
    def transform(self, views: Any, client: int | None = None) -> list[np.ndarray]:
        """Embed sequences into the feature matrices ``X_k`` (``(n, 2 * hidden_size)`` each).

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
