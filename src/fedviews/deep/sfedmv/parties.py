r"""S-FedMV's parties (Che et al., Section 6, Algorithm 4): clients and the server of both stages.

Stage 1 — feature extractors (Algorithm 4). For each view ``k`` separately, a
bidirectional GRU with a classification head (:mod:`fedviews.deep.sfedmv.nets`) is
trained by FedAvg: the server sends the global parameters ``w^k_t``; every
client runs ``local_epochs`` epochs of RMSProp mini-batch training on its own
sequences of view ``k`` (``LocalTraining``) and returns ``w^{k,l}_{t+1}`` with its
sample count ``N_l``; the server sets ``w^k_{t+1} = sum_l (N_l / N) w^{k,l}_{t+1}``.
After the last round the server sends the final ``w^k`` and every client embeds
its sequences locally into ``X^l_k`` (``2 * hidden_size`` features: last forward
and backward GRU states; or a user extractor's embedding, ``params.extractor``).

Stage 2 — fusion: H-FedMV (Algorithm 3, :class:`fedviews.linear.HFedMV`) on the
clients' embedding matrices ``(X^l_1..X^l_K, y^l)``: every client builds its own
H-FedMV client from its embeddings, the server runs H-FedMV's server.

The spec (:class:`~fedviews.deep.sfedmv.spec.SFedMVAlgorithm`) builds these parties;
this module never imports it (what both need: :mod:`fedviews.deep.sfedmv.protocol`).

Choices where the paper is silent
---------------------------------
* Each client keeps its own RMSProp state across rounds (as a Keras model that
  is re-fit after ``set_weights`` would); it is never sent. With this choice
  FedAvg with a single client is *exactly* local training for ``n_rounds *
  local_epochs`` epochs (tested).
* Every party has its own RNG streams (shuffling and dropout), derived from
  ``random_state`` (:func:`~fedviews.deep.sfedmv.protocol.view_seeds`).
* Embeddings are used as they are (tanh-bounded GRU states); no
  standardisation, which would need another federated aggregate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedviews.deep._common import (
    host_copies,
    load_module,
    load_optimizer,
    module_arrays,
    optimizer_arrays,
    preload_optimizers,
    require_torch,
    to_tensor,
)
from fedviews.deep.sfedmv.nets import (
    Extractor,
    get_params,
    make_extractor,
    new_rng_state,
    param_tensors,
    sequence_embed,
    set_params,
    train_epochs,
)
from fedviews.deep.sfedmv.protocol import (
    GRUConfig,
    Weights,
    fedavg,
    secure_average,
    view_params,
    view_prefixed,
)
from fedviews.errors import DataError, ProtocolError
from fedviews.federation import (
    Coordinator,
    Message,
    SecureSumParty,
    handles,
    of_planned,
    secure_sum_setup,
)
from fedviews.linear import HFEDMV_SPEC, HFedMVClient, HFedMVServer

__all__ = ["SFedMVClient", "SFedMVServer", "SequenceClient", "SequenceServer"]

torch = require_torch()

#: ``on_round(view, round, client, model)``: ``client`` is None for a shared (global) model.
RoundCallback = Callable[[int, int, "int | None", Extractor], None]


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
        self.models: list[Extractor | None] = [None] * len(views)
        self.optimizers: list[Any] = [None] * len(views)
        self.rng = [new_rng_state(s) for s in seeds]
        self.losses: list[list[float]] = [[] for _ in views]
        preload_optimizers()  # the models, with their RMSProp, are built on first use

    def model(self, k: int) -> Extractor:
        """View ``k``'s local model (built, with its RMSProp, on first use)."""
        if not 0 <= k < len(self.views):
            raise ProtocolError(f"{self.name!r} holds {len(self.views)} views, not view {k}")
        if self.models[k] is None:
            model = make_extractor(self.views[k][0].shape[1], self.n_classes, self.cfg, 0, view=k)
            self.models[k] = model.to(self.device)
            self.optimizers[k] = torch.optim.RMSprop(model.parameters(), lr=self.cfg.lr)
        built = self.models[k]
        assert built is not None
        return built

    def load(self, msg: Message) -> tuple[int, Extractor]:
        """The view ``meta["view"]`` of ``msg`` (checked: one that this client holds) and its
        local model, holding the received global parameters."""
        k = msg.number("view")
        if k != int(k) or not 0 <= k < len(self.views):
            raise ProtocolError(
                f"{msg.sender!r} sent view {k!r}; {self.name!r} holds views "
                f"0..{len(self.views) - 1}",
                party=msg.sender,
            )
        model = self.model(int(k))
        set_params(model, view_params(int(k), msg, param_tensors(model)))
        return int(k), model

    @handles("train_view")
    def on_train_view(self, msg: Message) -> Message:
        k, model = self.load(msg)
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
                f"masked_{name}": n * a for name, a in view_prefixed(k, get_params(model)).items()
            }
            values[f"masked_view{k}/loss"] = np.array([n * loss])
            return self.reply(msg, arrays=keys.mask(values, msg.round), meta={"n_samples": n})
        return self.reply(  # tensors on its device: the transport hands the server a copy
            msg,
            arrays=view_prefixed(k, param_tensors(model)),
            meta={"n_samples": n, "loss": loss},
        )

    @handles("final_view")
    def on_final_view(self, msg: Message) -> None:
        self.load(msg)

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


def _like(params: Weights, arrays: Mapping[str, Any]) -> Weights:
    """``arrays`` as tensors of ``params``' types on their device."""
    return {n: to_tensor(arrays[n], t.device, t.dtype) for n, t in params.items()}


class SequenceServer(Coordinator):
    """The stage-1 server: FedAvg of every view's extractor with weights ``N_l / N``.

    Its global parameters (:attr:`params`) are tensors on its models' device, and so are
    the clients' that it receives in one process (device-resident messages: nothing goes
    through host memory in a round); the secure sum is computed in fixed point on the host.
    """

    def __init__(
        self,
        clients: Sequence[str],
        models: Sequence[Extractor],
        n_rounds: int,
        on_round: RoundCallback | None = None,
        frac_bits: int | None = None,
    ) -> None:
        super().__init__()
        self.frac_bits = frac_bits  # secure aggregation (None: the plain protocol)
        self.clients = list(clients)
        self.models = list(models)  # they hold the global parameters
        self.params = [{n: t.clone() for n, t in param_tensors(m).items()} for m in models]
        self.n_rounds = n_rounds
        self.on_round = on_round
        self.local: list[list[Weights]] = [[] for _ in models]
        self.loss: list[list[float]] = [[] for _ in models]
        self.rounds_done = 0  # over all views: view k, round t is round k * n_rounds + t

    #: ``w = sum_l (N_l / N) w_l`` for every parameter (Algorithm 4)
    aggregate = staticmethod(fedavg)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The server's state after a round: every view's global parameters and losses."""
        state: dict[str, np.ndarray] = {"rounds_done": np.asarray(self.rounds_done, np.int64)}
        for k, params in enumerate(self.params):
            state.update(view_prefixed(k, host_copies(params)))
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
            self.params[k] = _like(params, {n: state[f"view{k}/{n}"] for n in params})
            self.loss[k] = [float(v) for v in state[f"loss/{k}"]]
            set_params(self.models[k], self.params[k])
        self.rounds_done = int(state["rounds_done"])

    def _send_final(self, k: int) -> None:
        self.broadcast(
            self.clients,
            "final_view",
            arrays=view_prefixed(k, self.params[k]),
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
                    arrays=view_prefixed(k, self.params[k]),
                    meta={"view": k},
                    round=k * self.n_rounds + t,
                )
                sizes = [replies[c].count("n_samples") for c in self.clients]
                if self.frac_bits is not None:  # only the sums over the clients
                    avg, loss = secure_average(
                        replies, k, host_copies(self.params[k]), self.frac_bits
                    )
                    self.params[k] = _like(self.params[k], avg)
                    self.loss[k].append(loss)
                else:
                    local = [view_params(k, replies[c], self.params[k]) for c in self.clients]
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
                out.update(view_prefixed(k, get_params(model)))
        return out


class SFedMVServer(SequenceServer):
    """The server of both stages: stage 1, then the H-FedMV server ``fusion`` on the embeddings.

    ``fuse = False`` stops after stage 1 (the estimator's ``fit_extractors``)."""

    def __init__(self, *args: Any, fusion: HFedMVServer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fusion = fusion
        self.fuse = True
        #: called after each fusion round ``r`` (1..fusion rounds) to show it, never to
        #: checkpoint: the fusion is not resumable mid-way (``on_round_end`` is stage 1's)
        self.on_fusion_round: Callable[[int], None] | None = None

    def run(self, on_round_end: Callable[[int], None] | None = None) -> Any:
        """Stage 1 (checkpointed by ``on_round_end``), then (:attr:`fuse`) the fusion."""
        super().run(on_round_end)
        if not self.fuse:
            return self.params
        # the fusion server acts as this one: same name, transport and recording
        self.fusion.name, self.fusion.transport = self.name, self.transport
        self.fusion.recording = self.recording
        with HFEDMV_SPEC.compute_limits():
            return self.fusion.run(self.on_fusion_round)

    def progress(self) -> list[str]:
        R = self.n_rounds
        lines = [
            f"round {k * R + t + 1}: view {k} round {t + 1}, train loss {v:.4f}"
            for k, losses in enumerate(self.loss)
            for t, v in enumerate(list(losses))
        ]
        fused = self.fusion.n_rounds  # numbered on their own: fusion round k/fusion_rounds
        return lines + [f"fusion {of_planned(line, fused)}" for line in self.fusion.progress()]

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
            arrays.update(view_prefixed(k, host_copies(ps)))
        return metrics, arrays


# --------------------------------------------------------------------------- local training
