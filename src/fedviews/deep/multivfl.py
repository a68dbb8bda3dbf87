"""Multi-VFL: D data owners x K label owners split learning (Mugunthan et al., Algorithm 1).

Parties
-------
``data_owner_d`` (role ``data_owner``)
    Holds strip ``d`` of every image (default: rows ``7d .. 7d+6`` of a 28x28
    image) and one copy ``W_{d,k}`` of its bottom model per label owner ``k``.
``label_owner_k`` (role ``label_owner``)
    Holds the labels of its own samples and a top model ``W_k``.
    ``label_owner_0`` also holds the labels of the evaluation set.
``server`` (role ``coordinator``)
    The aggregation server: holds the global top model and the server optimizer,
    and drives the rounds.

The algorithm is defined once (:class:`MultiVFLAlgorithm`, in
:mod:`fedviews.deep._multivfl_spec`: params, roles, alignment, policy); ``fit``
builds every party from its own data with it (:func:`fedviews.federation.build_in_process`),
exactly as a deployed party process does, and runs that protocol in one process.

One round (Algorithm 1)
-----------------------
1. The server sends every label owner ``train_round`` (control message with
   the round's shuffling seed). Label owner ``k`` runs ``local_epochs`` over its
   samples in batches; per batch it asks every data owner for the activations of
   its bottom copy ``W_{d,k}`` on those samples (``forward`` → ``activations``),
   stacks the ``D`` activations ``(n, 32, 7, 28)`` along the height axis into the
   ``(n, 32, 28, 28)`` map of the whole image, runs the top model, the loss and
   the backward pass, steps its top model, and sends each data owner only the
   gradient of *its own* activations (``backward`` → ``activation_grad``), with
   which the data owner finishes the backward pass and steps ``W_{d,k}``.
   Both sides derive the batch order from the shared seed, so no sample
   index crosses.
2. Label owner ``k`` replies with its top-model update ``W_k^{local} - W^{global}``.
3. The server applies the server optimizer (FedAvg, FedAdam, FedYogi,
   FedDemonAdam; :mod:`fedviews.deep._serveropt`) and sends the new global top
   model back to every label owner (``set_top``).
4. Every data owner averages its ``K`` bottom copies locally (lines 11-13).
5. The server asks ``label_owner_0`` to evaluate the global model (averaged
   bottoms + global top) on the held-out set; only the accuracy (a scalar) returns.

The privacy barrier is :func:`multivfl_policy`, enforced by the transport: raw strips,
labels and bottom-model weights never leave their owner. Sample-ID alignment between the data
owners and each label owner goes through :func:`fedviews.data.align`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._estimator import is_int, store_params
from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_ids, split_strips
from fedviews.deep._common import (
    accuracy,
    check_positive_ints,
    history_columns,
    history_records,
    history_summary,
    load_module,
    module_arrays,
    prefixed,
    preload_optimizers,
    progress_tail,
    resolve_device,
    state_arrays,
    to_numpy,
    to_tensor,
    torch_seed,
    unprefixed,
)
from fedviews.deep._multivfl_spec import (
    MULTIVFL_SPEC,
    MultiVFLAlgorithm,
    MultiVFLParams,
    epoch_order,
    label_owner_classes,
    multivfl_policy,
    partition_label_owners,
    round_seed,
    scaled_strip,
)
from fedviews.deep._nets import combine_activations, conv_bottom, conv_top, init_weights
from fedviews.deep._serveropt import ServerOptimizer
from fedviews.errors import (
    ConfigError,
    DataError,
    MissingDependency,
    ProtocolError,
    check_fitted,
)
from fedviews.federation import (
    Codec,
    Coordinator,
    Defense,
    Message,
    MetaValue,
    Party,
    Roster,
    RunSpec,
    SecureSumParty,
    build_in_process,
    estimator_params,
    handles,
    secure_sum_setup,
    unmask_sum,
)

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

__all__ = [
    "MULTIVFL_SPEC",
    "DataOwner",
    "LabelOwner",
    "MultiVFL",
    "MultiVFLAlgorithm",
    "MultiVFLParams",
    "Server",
    "build_bottom",
    "build_models",
    "build_top",
    "epoch_order",
    "label_owner_classes",
    "multivfl_policy",
    "partition_label_owners",
    "round_seed",
]

T = TypeVar("T")
_EVAL_BATCH = 1000


# --------------------------------------------------------------------------- models


def build_bottom(
    d: int, channels: int = 32, random_state: int = 0, init: str = "xavier"
) -> nn.Module:
    """The initial bottom model of data owner ``d`` (seed ``1000 * random_state + d + 1``;
    ``init``: :func:`~fedviews.deep._nets.init_weights`)."""
    with torch_seed(random_state * 1000 + d + 1):
        return init_weights(conv_bottom(1, channels), init)


def build_top(
    strip_heights: Sequence[int],
    width: int,
    n_classes: int,
    *,
    channels: int = 32,
    top_channels: int = 64,
    hidden: int = 128,
    random_state: int = 0,
    init: str = "xavier",
) -> nn.Module:
    """The initial top model (seed ``1000 * random_state``) on the stacked ``channels`` maps
    (``init``: :func:`~fedviews.deep._nets.init_weights`)."""
    with torch_seed(random_state * 1000):
        top = conv_top(
            channels,
            int(sum(strip_heights)),
            width,
            n_classes,
            channels=top_channels,
            hidden=hidden,
        )
        return init_weights(top, init)


def build_models(
    strip_heights: Sequence[int],
    width: int,
    n_classes: int,
    *,
    channels: int = 32,
    random_state: int = 0,
    init: str = "xavier",
    **top: int,
) -> tuple[list[nn.Module], nn.Module]:
    """Initial bottom models (one per data owner) and top model, seeded reproducibly.

    Bottom ``d`` is drawn with seed ``1000 * random_state + d + 1``, the top with
    ``1000 * random_state``; the global torch RNG is left as it was. ``init``: how
    (:func:`~fedviews.deep._nets.init_weights`); ``top``: the top model's ``top_channels``
    and ``hidden`` (:func:`build_top`).
    """
    bottoms = [build_bottom(d, channels, random_state, init) for d in range(len(strip_heights))]
    return bottoms, build_top(
        strip_heights, width, n_classes, channels=channels, random_state=random_state, init=init,
        **top,
    )  # fmt: skip


def _meta(msg: Message, key: str, kind: type[T]) -> T:
    """``msg.meta[key]`` checked to be of type ``kind`` (ints are accepted as floats; a float
    must be finite: a NaN loss or accuracy would be reported as a result)."""
    val = msg.meta.get(key)
    if kind is float and isinstance(val, int) and not isinstance(val, bool):
        val = float(val)
    if not isinstance(val, kind) or (isinstance(val, float) and not math.isfinite(val)):
        raise ProtocolError(
            f"{msg.kind!r} from {msg.sender!r}: meta[{key!r}] must be {kind.__name__}, got {val!r}"
        )
    return val


def _grad(t: torch.Tensor) -> torch.Tensor:
    if t.grad is None:
        raise ProtocolError("the top model did not back-propagate to the activations")
    return t.grad


def _received(msg: Message, like: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
    """The arrays named like ``like``'s (a state dict or named arrays) as ``msg`` carries them,
    checked by the receiver: every one present under ``prefix`` with the shape of its namesake
    in ``like`` (a :class:`ProtocolError` names the sender)."""
    return {k: msg.array(prefix + k, tuple(v.shape)) for k, v in like.items()}


def _activations(
    replies: Mapping[str, Message],
    owners: Sequence[str],
    rows: int,
    device: torch.device,
    codec: Codec,
    *,
    grad: bool = False,
) -> list[torch.Tensor]:
    """The data owners' ``(rows, C, h_d, w)`` activations of one batch as tensors on ``device``
    (leaves that require grad with ``grad``), checked by the label owner: the batch's rows,
    and the same channels and width as the first owner's."""
    arrays = [codec.unpack(replies[d], "activations", (rows, None, None, None)) for d in owners]
    C, W = arrays[0].shape[1], arrays[0].shape[3]
    for d, a in zip(owners, arrays, strict=True):
        if (a.shape[1], a.shape[3]) != (C, W):
            raise ProtocolError(
                f"{d!r} sent activations of shape {a.shape}; {owners[0]!r}'s have {C} "
                f"channels and width {W}"
            )
    return [to_tensor(a, device).requires_grad_(grad) for a in arrays]


@dataclass(frozen=True)
class GradDP:
    """A party's Gaussian defense (``grad_dp`` at a label owner, ``act_dp`` at a data owner;
    :mod:`fedviews.federation._defense`): per-sample clip norm ``clip``, noise std ``sigma``
    (``noise_multiplier * 2 * clip``), and the private random stream its noise is drawn
    from: one generator per ``key`` (round, batch, ...), so a round replayed after a resume
    releases the same values rather than fresh ones, and concurrent requests draw the
    same noise in any order. ``grad_clip``, ``grad_sigma``: the same for the per-sample
    gradients of a data owner's bottom model (``act_dp``)."""

    clip: float
    sigma: float
    stream: np.random.SeedSequence
    grad_clip: float = 1.0
    grad_sigma: float = 0.0

    def generator(self, key: Sequence[int], device: torch.device) -> torch.Generator:
        seq = np.random.SeedSequence([*self.stream.generate_state(4), *map(int, key)])
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seq.generate_state(1, np.uint64)[0] >> np.uint64(1)))
        return gen


def _clip_scale(per_sample: Sequence[torch.Tensor], clip: float) -> torch.Tensor:
    """``min(1, clip / ||v_i||)`` for every sample ``i`` of the joint vectors ``v_i`` whose
    parts are ``per_sample`` (each ``(B, ...)``)."""
    sq = sum(g.flatten(1).pow(2).sum(1) for g in per_sample)
    assert isinstance(sq, torch.Tensor)
    return (clip / (torch.sqrt(sq) + 1e-12)).clamp(max=1.0)


def _scaled(g: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return g * scale.view(-1, *([1] * (g.dim() - 1)))


def _noise(
    sigma: float, shape: Sequence[int], like: torch.Tensor, gen: torch.Generator
) -> torch.Tensor:
    if sigma == 0:
        return torch.zeros(tuple(shape), dtype=like.dtype, device=like.device)
    return sigma * torch.randn(tuple(shape), generator=gen, dtype=like.dtype, device=like.device)


def private_gradients(
    top: nn.Module,
    acts: Sequence[torch.Tensor],
    y: torch.Tensor,
    dp: GradDP,
    gen: torch.Generator,
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """DP-SGD's step at the label owner for one batch of ``B`` rows (``grad_dp``).

    Per sample ``i``: the gradient of its own cross-entropy with respect to the top
    model's parameters and to its activation rows (``torch.func``: ``vmap`` of ``grad``),
    the joint vector clipped to L2 norm ``dp.clip``. Returns the top-model gradient
    ``(sum_i clipped_i + N(0, sigma^2 I)) / B`` and each data owner's activation gradient,
    row ``i`` = ``(clipped_i + N(0, sigma^2 I)) / B``: with no clipping and no noise,
    exactly the gradients of the batch's mean loss (what the plain protocol sends).
    Noise is drawn from ``gen`` in a fixed order (parameters, then owners).
    """
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in top.named_parameters()}

    def loss_one(
        p: dict[str, torch.Tensor], parts: tuple[torch.Tensor, ...], target: torch.Tensor
    ) -> torch.Tensor:
        x = combine_activations([a.unsqueeze(0) for a in parts])
        return nn.functional.cross_entropy(functional_call(top, p, (x,)), target.unsqueeze(0))

    parts = tuple(a.detach() for a in acts)
    g_par, g_act = vmap(grad(loss_one, argnums=(0, 1)), in_dims=(None, 0, 0))(params, parts, y)
    scale = _clip_scale([*g_par.values(), *g_act], dp.clip)
    B = len(y)
    par = {
        k: (_scaled(g, scale).sum(0) + _noise(dp.sigma, g.shape[1:], g, gen)) / B
        for k, g in g_par.items()
    }
    act = [(_scaled(g, scale) + _noise(dp.sigma, g.shape, g, gen)) / B for g in g_act]
    return par, act


def clip_rows(a: torch.Tensor, clip: float) -> torch.Tensor:
    """Every row (sample) of ``a`` scaled down to L2 norm at most ``clip``."""
    return _scaled(a, _clip_scale([a], clip))


def private_bottom_gradients(
    bottom: nn.Module,
    x: torch.Tensor,
    grad_out: torch.Tensor,
    dp: GradDP,
    gen: torch.Generator,
) -> dict[str, torch.Tensor]:
    """DP-SGD's step at a data owner for one batch of ``B`` rows (``act_dp``).

    ``grad_out``: the gradient received for the (clipped, noised) activations it sent,
    i.e. ``(1/B) d loss_i / d a_i`` per row. Per sample ``i``: the gradient of
    ``<clip_rows(bottom(x_i)), B * grad_out_i>`` with respect to the bottom's
    parameters, clipped to ``dp.grad_clip``; returns ``(sum_i clipped_i + N(0,
    grad_sigma^2 I)) / B``. With no clipping and no noise: exactly what
    ``out.backward(grad_out)`` accumulates (the plain protocol).
    """
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in bottom.named_parameters()}
    B = len(x)

    def surrogate(p: dict[str, torch.Tensor], xi: torch.Tensor, gi: torch.Tensor) -> torch.Tensor:
        a = functional_call(bottom, p, (xi.unsqueeze(0),))
        return (clip_rows(a, dp.clip) * gi.unsqueeze(0)).sum()

    h = vmap(grad(surrogate), in_dims=(None, 0, 0))(params, x, grad_out * B)
    scale = _clip_scale(list(h.values()), dp.grad_clip)
    return {
        k: (_scaled(g, scale).sum(0) + _noise(dp.grad_sigma, g.shape[1:], g, gen)) / B
        for k, g in h.items()
    }


def _local_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=lr) if name == "adam" else torch.optim.SGD(params, lr=lr)


# --------------------------------------------------------------------------- parties


class DataOwner(Party):
    """Holds one strip of every image and ``K`` copies of its bottom model."""

    def __init__(
        self,
        name: str,
        strips: np.ndarray,
        positions: Mapping[str, np.ndarray],
        bottom: nn.Module,
        *,
        local_optimizer: str,
        lr: float,
        device: torch.device,
        codecs: tuple[Codec, Codec] = (Codec(), Codec()),
        dp: GradDP | None = None,
    ) -> None:
        super().__init__(name, role="data_owner")
        self.dp = dp
        if dp is not None:  # act_dp accounts one forward and one backward per sample and epoch
            rows = np.concatenate([np.asarray(p) for p in positions.values()])
            if len(np.unique(rows)) != len(rows):
                raise DataError(
                    f"{name!r}: act_dp needs the label owners' samples to be disjoint (a "
                    "sample in two groups would be released more often than accounted)"
                )
        self.owner_index = {k: i for i, k in enumerate(positions)}
        self.device = device
        self.act_codec, self.grad_codec = codecs
        # training samples aligned with each label owner, gathered once
        self.x = {k: to_tensor(strips[pos][:, None], device) for k, pos in positions.items()}
        self.copies = {k: copy.deepcopy(bottom).to(device) for k in positions}
        self.local_optimizer, self.lr = local_optimizer, lr
        self.optims: dict[str, torch.optim.Optimizer] = {}
        self._new_optimizers()
        self.split_x: dict[str, torch.Tensor] = {}
        self._order: dict[str, np.ndarray] = {}
        self._pending: dict[str, torch.Tensor] = {}
        self._batch: dict[str, tuple[torch.Tensor, int, int]] = {}  # act_dp: x, epoch, batch
        self._epoch: dict[str, int] = {}

    @property
    def bottom(self) -> nn.Module:
        """The first bottom copy (all copies are equal after :meth:`average_bottoms`)."""
        return next(iter(self.copies.values()))

    def _new_optimizers(self) -> None:
        """A fresh local optimizer for every bottom copy (after its weights were replaced)."""
        self.optims = {
            k: _local_optimizer(self.local_optimizer, m.parameters(), self.lr)
            for k, m in self.copies.items()
        }

    def set_split(self, split: str, strips: np.ndarray) -> None:
        """Hold evaluation/prediction strips locally (never sent)."""
        self.split_x[split] = to_tensor(strips[:, None], self.device)

    @handles("begin_epoch")
    def begin_epoch(self, msg: Message) -> None:
        n, epoch = len(self.x[msg.sender]), _meta(msg, "epoch", int)
        self._order[msg.sender] = epoch_order(_meta(msg, "seed", int), msg.round, epoch, n)
        self._epoch[msg.sender] = epoch

    def _gen(self, msg: Message, k: str, epoch: int, batch: int, phase: int) -> torch.Generator:
        assert self.dp is not None
        key = [msg.round, self.owner_index[k], epoch, batch, phase]
        return self.dp.generator(key, self.device)

    @handles("forward")
    def forward(self, msg: Message) -> Message:
        """The activations of batch ``batch``, after applying the gradient of the previous
        batch when the request carries it (``activation_grad``)."""
        k, b, bs = msg.sender, _meta(msg, "batch", int), _meta(msg, "batch_size", int)
        if any(n in msg.arrays for n in self.grad_codec.names("activation_grad")):
            self.backward(msg)
        elif k in self._pending:
            raise ProtocolError(
                f"{k!r} asked for the activations of batch {b} without returning the "
                "gradient of the previous batch"
            )
        order = self._order.get(k)
        if order is None or bs < 1 or not 0 <= b * bs < len(order):
            raise ProtocolError(
                f"{k!r} asked for batch {b} of size {bs}, which its epoch does not have "
                + ("(no begin_epoch yet)" if order is None else f"({len(order)} samples)")
            )
        idx = torch.as_tensor(order[b * bs : (b + 1) * bs], device=self.device)
        x = self.x[k].index_select(0, idx)
        if self.dp is None:
            out = self.copies[k](x)
        else:
            epoch = self._epoch.get(k, 0)
            with torch.no_grad():  # the release: clipped rows plus Gaussian noise
                out = clip_rows(self.copies[k](x), self.dp.clip)
                out = out + _noise(self.dp.sigma, out.shape, out, self._gen(msg, k, epoch, b, 0))
            self._batch[k] = (x, epoch, b)
        self._pending[k] = out
        return self.reply(msg, self.act_codec.pack("activations", to_numpy(out)))

    @handles("backward")
    def backward(self, msg: Message) -> None:
        k = msg.sender
        out = self._pending.pop(k, None)
        if out is None:
            raise ProtocolError(f"{k!r} sent a gradient for activations it never asked for")
        opt = self.optims[k]
        opt.zero_grad(set_to_none=True)
        grad = to_tensor(
            self.grad_codec.unpack(msg, "activation_grad", tuple(out.shape)), self.device
        )
        if self.dp is None:
            out.backward(grad)
        else:
            x, epoch, b = self._batch.pop(k)
            model = self.copies[k]
            gen = self._gen(msg, k, epoch, b, 1)
            g = private_bottom_gradients(model, x, grad, self.dp, gen)
            for name, param in model.named_parameters():
                param.grad = g[name]
        opt.step()

    @handles("average_bottoms")
    def average_bottoms(self, msg: Message) -> None:
        states = [m.state_dict() for m in self.copies.values()]
        mean = {n: torch.stack([s[n] for s in states]).mean(0) for n in states[0]}
        for m in self.copies.values():
            m.load_state_dict(mean)
        self._new_optimizers()

    def state_dict(self) -> dict[str, np.ndarray]:
        """The bottom model after :meth:`average_bottoms` (all copies are equal then)."""
        return module_arrays("bottom", self.bottom)

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict` (a round boundary): every copy gets the bottom."""
        for m in self.copies.values():
            load_module("bottom", m, state, self.name)
        self._new_optimizers()

    @handles("infer")
    def infer(self, msg: Message) -> Message:
        split, start, stop = (
            _meta(msg, "split", str),
            _meta(msg, "start", int),
            _meta(msg, "stop", int),
        )
        rows = self.split_x.get(split)
        if rows is None or not 0 <= start < stop <= len(rows):
            raise ProtocolError(
                f"{msg.sender!r} asked for rows {start}:{stop} of the {split!r} split, which "
                f"{self.name!r} " + ("does not hold" if rows is None else f"has {len(rows)} of")
            )
        x = rows[start:stop]
        with torch.no_grad():
            out = self.bottom(x)
            if self.dp is not None:  # evaluation rows: clipped as in training, not noised
                out = clip_rows(out, self.dp.clip)
        return self.reply(msg, self.act_codec.pack("activations", to_numpy(out)))


class LabelOwner(SecureSumParty):
    """Holds the labels of its samples and the top model; drives its batches.

    ``secure``: its top-model update leaves only masked for the server's secure sum
    (``defense.kind = "secagg"``, as ``masked_update/<name>``)."""

    def __init__(
        self,
        name: str,
        y: np.ndarray,
        top: nn.Module,
        data_owners: Sequence[str],
        *,
        batch_size: int,
        local_epochs: int,
        local_optimizer: str,
        lr: float,
        device: torch.device,
        codecs: tuple[Codec, Codec] = (Codec(), Codec()),
        dp: GradDP | None = None,
        secure: bool = False,
    ) -> None:
        super().__init__(name, role="label_owner")
        self.dp, self.secure = dp, secure
        self.act_codec, self.grad_codec = codecs
        self.device = device
        self.y = to_tensor(y, device, torch.long)
        self.top = copy.deepcopy(top).to(device)
        self.data_owners = list(data_owners)
        self.batch_size, self.local_epochs = batch_size, local_epochs
        self.local_optimizer, self.lr = local_optimizer, lr
        self.split_y: dict[str, np.ndarray] = {}
        self._global: dict[str, np.ndarray] = {}
        preload_optimizers()  # the data owners build theirs now; this one, every round

    @handles("set_top")
    def set_top(self, msg: Message) -> None:
        self._global = _received(msg, self.top.state_dict(), "top/")
        self.top.load_state_dict({k: to_tensor(v, self.device) for k, v in self._global.items()})

    @handles("train_round")
    def train_round(self, msg: Message) -> Message:
        seed, n, bs = _meta(msg, "seed", int), len(self.y), self.batch_size
        opt = _local_optimizer(self.local_optimizer, self.top.parameters(), self.lr)
        self.top.train()
        total, n_batches = 0.0, 0
        gen: torch.Generator | None = None  # grad_dp's noise of this round
        for epoch in range(self.local_epochs):
            self.broadcast(self.data_owners, "begin_epoch", meta={"seed": seed, "epoch": epoch})
            order = torch.as_tensor(epoch_order(seed, msg.round, epoch, n), device=self.device)
            # the gradients of batch b travel with the request for batch b + 1: one round
            # trip per batch instead of two; each data owner still applies them first
            grads_out: dict[str, dict[str, np.ndarray]] = {d: {} for d in self.data_owners}
            for b in range((n + bs - 1) // bs):
                # every data owner at once (over gRPC they compute in parallel)
                got = self.scatter("forward", grads_out, meta={"batch": b, "batch_size": bs})
                rows = len(order[b * bs : (b + 1) * bs])
                acts = _activations(
                    got, self.data_owners, rows, self.device, self.act_codec, grad=True
                )
                target = self.y.index_select(0, order[b * bs : (b + 1) * bs])
                opt.zero_grad(set_to_none=True)
                if self.dp is None:
                    loss = nn.functional.cross_entropy(self.top(combine_activations(acts)), target)
                    loss.backward()
                    grads = [_grad(a) for a in acts]
                    total += float(loss.detach())
                else:
                    gen = gen or self.dp.generator([msg.round], self.device)
                    g_par, grads = private_gradients(self.top, acts, target, self.dp, gen)
                    for k, param in self.top.named_parameters():
                        param.grad = g_par[k]
                opt.step()
                grads_out = {
                    d: self.grad_codec.pack("activation_grad", to_numpy(g))
                    for d, g in zip(self.data_owners, grads, strict=True)
                }
                n_batches += 1
            if n:  # the epoch's last batch
                self.scatter("backward", grads_out)
        update = {f"update/{k}": v - self._global[k] for k, v in state_arrays(self.top).items()}
        if self.secure:
            masked = {f"masked_{k}": v for k, v in update.items()}
            update = self.keyed_sum("its update").mask(masked, msg.round)
        meta: dict[str, MetaValue] = {"n_batches": n_batches}
        if self.dp is None:  # under grad_dp the loss of the true labels is not released
            meta["train_loss"] = total / max(n_batches, 1)
        return self.reply(msg, update, meta=meta)

    def top_state(self) -> dict[str, np.ndarray]:
        """This label owner's top model (the global one after ``set_top``)."""
        return prefixed("top/", state_arrays(self.top))

    def predict_split(self, split: str, n: int) -> np.ndarray:
        """Class indices predicted by the global model for the data owners' ``split``."""
        self.top.eval()
        preds = []
        with torch.no_grad():
            for start in range(0, n, _EVAL_BATCH):
                stop = min(n, start + _EVAL_BATCH)
                meta: dict[str, MetaValue] = {"split": split, "start": start, "stop": stop}
                got = self.broadcast(self.data_owners, "infer", meta=meta)
                acts = _activations(
                    got, self.data_owners, stop - start, self.device, self.act_codec
                )
                preds.append(to_numpy(self.top(combine_activations(acts)).argmax(1)))
        return np.concatenate(preds)

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        split = _meta(msg, "split", str)
        y = self.split_y[split]
        acc = float(np.mean(self.predict_split(split, len(y)) == y))
        return self.reply(msg, meta={"accuracy": acc})


class Server(Coordinator):
    """Aggregation server: global top model, server optimizer, round loop."""

    def __init__(
        self,
        top: nn.Module,
        optimizer: ServerOptimizer,
        label_owners: Sequence[str],
        data_owners: Sequence[str],
        *,
        rounds: int,
        random_state: int,
        evaluate: bool,
        callback: Callable[[int, dict[str, float]], None] | None = None,
        name: str = "server",
        frac_bits: int | None = None,
    ) -> None:
        super().__init__(name, role="coordinator")
        self.frac_bits = frac_bits  # secure aggregation of the updates (None: plain)
        self.params = state_arrays(top)
        self.optimizer = optimizer
        self.label_owners, self.data_owners = list(label_owners), list(data_owners)
        self.rounds, self.random_state, self.evaluate = rounds, random_state, evaluate
        self.callback = callback
        self.history: list[dict[str, float]] = []

    def _send_top(self, round_: int) -> None:
        self.broadcast(self.label_owners, "set_top", prefixed("top/", self.params), round=round_)

    def _updates(self, replies: Mapping[str, Message]) -> list[dict[str, np.ndarray]]:
        """The label owners' updates, each checked on arrival; under secure aggregation only
        their mean, from the masked sum (the one thing the server optimizer needs)."""
        if self.frac_bits is None:
            return [_received(rep, self.params, "update/") for rep in replies.values()]
        shapes = {f"masked_update/{k}": v.shape for k, v in self.params.items()}
        sums = unmask_sum(replies, shapes, self.frac_bits)
        n = len(replies)
        return [{k: sums[f"masked_update/{k}"] / n for k in self.params}]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Global top model, server-optimizer state and history (a round boundary)."""
        hist = {k: np.array(v) for k, v in history_columns(self.history).items()}
        return {
            **prefixed("top/", self.params),
            **prefixed("opt/", self.optimizer.state_dict()),
            **prefixed("history/", hist),
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`: :meth:`run` goes on after its last round."""
        top = unprefixed("top/", state)
        missing = set(self.params) - set(top)
        if missing:
            raise DataError(f"the server state lacks the top-model arrays {sorted(missing)}")
        history = history_records(unprefixed("history/", state))
        if len(history) > self.rounds:
            raise DataError(
                f"the server state holds {len(history)} rounds, more than this run's "
                f"rounds={self.rounds}: it is the state of another run"
            )
        self.params = {k: np.asarray(top[k], dtype=np.float32) for k in self.params}
        self.optimizer.load_state(unprefixed("opt/", state))
        self.history = history

    def run(self, on_round_end: Callable[[int], None] | None = None) -> list[dict[str, float]]:
        """Rounds ``len(history) + 1 .. rounds`` (all of them unless :meth:`load_state` ran);
        after each, :attr:`callback` and ``on_round_end(round)`` (the checkpoint point)."""
        assert self.transport is not None
        log = self.transport.log
        start = len(self.history)
        if self.frac_bits is not None:  # fresh keys for this run (also a resumed one)
            secure_sum_setup(self, self.label_owners, self.frac_bits, round=start)
        self._send_top(start)
        for r in range(start + 1, self.rounds + 1):
            t0, b0 = time.perf_counter(), log.total_bytes
            seed = round_seed(self.random_state, r)
            replies = self.broadcast(self.label_owners, "train_round", meta={"seed": seed}, round=r)
            updates = self._updates(replies)
            self.params = {
                k: v.astype(np.float32)
                for k, v in self.optimizer.step(self.params, updates).items()
            }
            self._send_top(r)
            self.broadcast(self.data_owners, "average_bottoms", round=r)
            losses = [
                _meta(rep, "train_loss", float)
                for rep in replies.values()
                if "train_loss" in rep.meta
            ]
            rec = {
                "round": float(r),
                "train_loss": float(np.mean(losses)) if losses else float("nan"),
                "train_seconds": time.perf_counter() - t0,
                "train_bytes": float(log.total_bytes - b0),
                "batches": float(sum(_meta(rep, "n_batches", int) for rep in replies.values())),
            }
            if self.evaluate:
                rep = self.send(self.label_owners[0], "evaluate", meta={"split": "test"}, round=r)
                rec["accuracy"] = _meta(rep, "accuracy", float)
            rec["seconds"] = time.perf_counter() - t0
            self.history.append(rec)
            if self.callback is not None:
                self.callback(r, rec)
            if on_round_end is not None:
                on_round_end(r)
        return self.history

    def progress(self) -> list[str]:
        """One line per finished round."""
        return [
            f"round {int(rec['round'])}: train loss {rec['train_loss']:.4f}{progress_tail(rec)}"
            for rec in list(self.history)
        ]

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics, arrays)``: the history by column and the global top model."""
        return history_summary(self.history, "rounds_done"), prefixed("top/", self.params)


# --------------------------------------------------------------------------- estimator


def _as_strips(X: Any, n_data_owners: int, name: str) -> list[np.ndarray]:
    """Images ``(n, H, W)`` → D strips ``(n, h_d, W)``; or validate a list of D strips."""
    if isinstance(X, np.ndarray) and X.ndim == 3:
        if X.shape[1] % n_data_owners:  # Multi-VFL gives every data owner an equal strip
            raise DataError(
                f"{name}: {X.shape[1]}-row images cannot be cut into {n_data_owners} equal "
                "strips; choose n_data_owners dividing the height, or pass the strips yourself "
                f"(a list of {n_data_owners} (n, rows, W) arrays)"
            )
        width = X.shape[2]
        strips = [s.reshape(len(X), -1, width) for s in split_strips(X, n_data_owners)]
    elif isinstance(X, (list, tuple)):
        if len(X) != n_data_owners:
            raise DataError(
                f"{name} has {len(X)} strips but n_data_owners={n_data_owners}; pass one strip per data owner"
            )
        strips = [np.asarray(s) for s in X]
        for d, s in enumerate(strips):
            if s.ndim != 3 or 0 in s.shape:
                raise DataError(
                    f"{name}[{d}] must be a non-empty (n_samples, rows, width) array, got shape {s.shape}"
                )
        shapes = [s.shape for s in strips]
        if len({s[0] for s in shapes}) != 1 or len({s[2] for s in shapes}) != 1:
            raise DataError(
                f"mismatched strip shapes {shapes}: every strip needs the same number of samples and the "
                "same width (they are stacked along the height axis); align the data owners by sample ID first"
            )
    else:
        raise DataError(
            f"{name} must be an (n, H, W) image array or a list of {n_data_owners} (n, rows, W) strips"
        )
    return [scaled_strip(s, name) for s in strips]


@register_estimator("multivfl")
class MultiVFL(BaseEstimator):
    """Multi-VFL: split learning with D data owners and K label owners.

    ``fit`` runs the one definition of the algorithm (:class:`MultiVFLAlgorithm`):
    every data owner and label owner is built from its own data only, exactly as a
    deployed party process (``fedviews launch`` with ``algorithm = "multivfl"``).

    The parameters shared with deployments are exactly the fields of
    :class:`MultiVFLParams`, with the same defaults.

    Parameters
    ----------
    n_data_owners : int
        ``D``: images are cut into ``D`` horizontal strips, one per data owner.
    n_label_owners : int
        ``K``: label owners, each with its own disjoint set of labelled samples.
    optimizer : {"fedavg", "fedadam", "fedyogi", "feddemonadam"}
        Server optimizer aggregating the label owners' top models.
    rounds : int
        Global rounds ``R``.
    local_epochs : int
        Epochs each label owner runs over its samples per round.
    batch_size : int
        Mini-batch size of the label owners' local epochs.
    lr : float
        Local learning rate ``η_k`` of the label owners and data owners. The default 0.1
        learns in a few rounds (MNIST, 2,000 images: 64 % after 3 rounds); the paper's
        1e-3 (set by ``configs/multivfl_*.toml``) stays at chance that long.
    local_optimizer : {"sgd", "adam"}
        Local step of label owners and data owners: ``"sgd"`` is Algorithm 1's
        ``W ← W − η_k ∇ℓ``; ``"adam"`` (not in the paper) is a fresh Adam every
        round, starting from the global model.
    server_lr, beta1, beta2, tau : float
        Server optimizer hyper-parameters (paper Table 2); ignored by ``fedavg``.
    scenario : str
        Label distribution among label owners: ``"iid"`` or ``"1niid"`` ... (paper Table 3).
    samples_per_owner : int, optional
        Samples per label owner (the paper uses 5000). Default: the largest count up to
        ``n // K`` that the scenario's class quotas fit in the data
        (:func:`~fedviews.deep._multivfl_spec.fitting_samples_per_owner`).
    channels, top_channels, hidden : int
        Bottom output channels (32), top convolution channels and hidden units.
    init : {"xavier", "torch"}
        Initial weights of every bottom and top model: ``"xavier"`` (Algorithm 1's
        "Gaussian/Xavier initializer": Glorot-normal weights, zero biases) or ``"torch"``
        (PyTorch's default layers, fedviews before 2026-11).
    device : {"auto", "cpu", "cuda", "cuda:<index>", "mps"}
        Torch device of every party (``"auto"``: CUDA when available, else CPU).
    evaluate : bool, default=True
        Record the accuracy of the global model on ``eval_set`` after every round
        (no effect without ``eval_set``; with ``False`` the eval set is not used).
    defense : str, dict or Defense, optional
        The run's defense (:class:`~fedviews.federation.Defense`): ``"label_rr"``
        (randomized labels) or ``"grad_dp"`` (per-sample clipped, noised gradients at
        the label owners), e.g. ``{"kind": "grad_dp", "epsilon": 4, "clip": 1}``.
        Default: none. The budget spent is in ``privacy_``.
    wire_activations : {"none", "fp16", "bf16", "int8"}
        How data owners send their activations (:class:`~fedviews.federation.Codec`;
        anything but ``"none"``, exact float32, is lossy and changes the math).
    wire_gradients : {"none", "fp16", "bf16", "int8", "topk"}
        How label owners send the activation gradients back (``"topk"``: only the
        largest ``topk_ratio`` of each sample's entries).
    topk_ratio : float
        Fraction of entries per sample kept by ``"topk"``.
    random_state : int
    log_entries : bool
        Keep every message in ``transport_.log.entries`` (totals are always kept).
    verbose : bool, default=True
        Print one line per round on stderr (train loss, accuracy, seconds); ``False``: silent.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process).

    Attributes
    ----------
    classes_ : ndarray
    history_ : dict of str to list
        Per round: ``round``, ``accuracy`` (with ``eval_set``), ``train_loss``,
        ``seconds``, ``train_seconds``, ``train_bytes``, ``batches``.
    transport_ : Transport
        The federation used for training (message log, bytes per party).
    run_stats_ : dict
        ``transport_.log.summary()`` at the end of ``fit`` (rounds, messages,
        bytes per party, crossings) plus totals: ``seconds``, ``train_seconds``,
        ``batches_per_round``, bytes per round and per batch, raw activation
        sizes and ``device``.
    data_owners_, label_owners_ : list of Party
        The party objects (``data_owner_d``, ``label_owner_k``); in this in-process
        simulation the estimator reads their state, which never crosses.
    server_ : Server
        The coordinator (named ``server``): global top model and round history.
    label_owner_samples_ : list of ndarray
        Training-row indices given to each label owner.
    strip_shapes_ : list of tuple
        ``(rows, width)`` of every data owner's strip; :meth:`predict` checks it.
    privacy_ : dict
        The privacy ledger of the run's defense per label owner (``epsilon``, ``delta``,
        accountant); empty without one.

    Notes
    -----
    ``fit`` draws the initial models from their own seeds (:func:`build_models`)
    and leaves the global torch, numpy and ``random`` states unchanged. As
    deployed, the top model has one output per class up to the largest class that
    a label owner holds labels of.
    """

    def __init__(
        self,
        n_data_owners: int = 4,
        n_label_owners: int = 5,
        optimizer: str = "fedavg",
        rounds: int = 10,
        local_epochs: int = 1,
        batch_size: int = 64,
        lr: float = 0.1,
        local_optimizer: str = "sgd",
        server_lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
        scenario: str = "iid",
        samples_per_owner: int | None = None,
        channels: int = 32,
        top_channels: int = 64,
        hidden: int = 128,
        init: str = "xavier",
        device: str = "auto",
        evaluate: bool = True,
        wire_activations: str = "none",
        wire_gradients: str = "none",
        topk_ratio: float = 0.1,
        defense: Any = None,
        random_state: int = 0,
        log_entries: bool = False,
        verbose: bool = True,
        transport: Any = None,
    ) -> None:
        store_params(self, locals())

    def _params(self) -> MultiVFLParams:
        """The run's :class:`MultiVFLParams` (validated) from this estimator's parameters."""
        check_positive_ints(self, ("n_data_owners", "n_label_owners"))
        params = estimator_params(MultiVFLParams, self)
        params.validate()
        return params

    def _label_owner_rows(
        self, y_enc: np.ndarray, ids_arr: np.ndarray, label_owner_ids: Sequence[Any] | None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """``(ids, rows)`` of the samples each label owner holds labels for."""
        n = len(ids_arr)
        if label_owner_ids is None:
            rng = np.random.default_rng(self.random_state)
            parts = partition_label_owners(
                y_enc, self.scenario, self.n_label_owners, self.samples_per_owner, rng
            )
            owner_ids = [ids_arr[p] for p in parts]
        else:
            if len(label_owner_ids) != self.n_label_owners:
                raise DataError(
                    f"label_owner_ids has {len(label_owner_ids)} entries, n_label_owners={self.n_label_owners}"
                )
            owner_ids = [np.asarray(a) for a in label_owner_ids]
        order = np.argsort(ids_arr, kind="stable")
        owner_rows = []
        for k, oid in enumerate(owner_ids):
            if len(oid) == 0:
                raise DataError(
                    f"label owner {k} has no samples; give every label owner at least one labelled sample"
                )
            rows = order[np.clip(np.searchsorted(ids_arr[order], oid), 0, n - 1)]
            if not np.array_equal(ids_arr[rows], oid):
                raise DataError(f"label_owner_ids[{k}] names samples that are not in ids")
            owner_rows.append(rows)
        return owner_ids, owner_rows

    def _eval_split(self, eval_set: tuple[Any, Any]) -> tuple[list[np.ndarray], np.ndarray]:
        """The eval set as the data owners' test strips and the encoded test labels."""
        Xt, yt = eval_set
        t_strips = self._check_predict_strips(Xt)
        yt_arr = np.asarray(yt)
        if yt_arr.shape != (len(t_strips[0]),):
            raise DataError(
                f"eval_set labels have shape {yt_arr.shape}, expected ({len(t_strips[0])},)"
            )
        unknown = np.setdiff1d(yt_arr, self.classes_)
        if len(unknown):
            raise DataError(
                f"eval_set has labels {unknown[:5].tolist()} that are not in the training labels"
            )
        return t_strips, np.searchsorted(self.classes_, yt_arr)

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        ids: Any = None,
        label_owner_ids: Sequence[Any] | None = None,
        eval_set: tuple[Any, Any] | None = None,
        callback: Callable[[int, dict[str, float]], None] | None = None,
        checkpoint: str | Path | None = None,
        checkpoint_every: int = 10,
    ) -> MultiVFL:
        """Train Multi-VFL.

        Parameters
        ----------
        X : ndarray (n, H, W) or list of D arrays (n, h_d, W)
            Training images (cut into ``D`` strips) or the data owners' strips.
            uint8 pixels are scaled to ``[0, 1]``.
        y : array-like (n,)
            Training labels.
        ids : array-like (n,), optional
            Sample IDs of the rows of ``X`` (default ``0..n-1``).
        label_owner_ids : sequence of K ID arrays, optional
            The samples each label owner holds labels for; overrides ``scenario``
            and ``samples_per_owner``. The data owners are aligned with each
            label owner by :func:`fedviews.data.align`.
        eval_set : (X_test, y_test), optional
            Held-out set: data owners hold the strips, ``label_owner_0`` the labels;
            the global model's accuracy on it is recorded every round.
        callback : callable(round, record), optional
            Called after every round (progress bars).
        checkpoint : path, optional
            A ``.npz`` file of every party's and the server's state: written every
            ``checkpoint_every`` rounds and after the last one; if it exists when
            ``fit`` starts, training continues after the rounds it holds (the same
            data and parameters give the same model as an uninterrupted fit;
            ``run_stats_`` then count the resumed rounds only). A checkpoint of a fit
            with other parameters (``device`` aside), ``random_state``, ``defense``
            or data raises :class:`ConfigError` (:class:`DataError` if only the
            data differ), one that cannot be read :class:`DataError`.
        checkpoint_every : int
            Rounds between two checkpoints (>= 1).
        """
        params = self._params()
        if not is_int(checkpoint_every, 1):
            raise ConfigError(
                f"checkpoint_every must be a positive integer, got {checkpoint_every!r}"
            )
        strips = _as_strips(X, self.n_data_owners, "X")
        n = len(strips[0])
        y_arr = np.asarray(y)
        if y_arr.shape != (n,):
            raise DataError(f"y has shape {y_arr.shape}, expected ({n},) to match X")
        self.classes_, y_enc = np.unique(y_arr, return_inverse=True)
        if len(self.classes_) < 2:
            raise DataError("y must contain at least two classes")
        ids_arr = np.arange(n) if ids is None else check_ids(ids)
        if len(ids_arr) != n:
            raise DataError(f"ids has {len(ids_arr)} entries, X has {n} samples")
        owner_ids, owner_rows = self._label_owner_rows(y_enc, ids_arr, label_owner_ids)
        self.label_owner_samples_ = owner_rows
        self.strip_shapes_ = [s.shape[1:] for s in strips]
        evaluate = bool(params.evaluate) and eval_set is not None
        params = replace(params, evaluate=evaluate)

        # every party's own data, as its file would hold it in a deployment
        do_names = tuple(f"data_owner_{d}" for d in range(self.n_data_owners))
        lo_names = tuple(f"label_owner_{k}" for k in range(self.n_label_owners))
        test: list[dict[str, Any]] = [{} for _ in do_names]
        lo_test: dict[str, Any] = {}
        if evaluate:
            assert eval_set is not None
            t_strips, yt_enc = self._eval_split(eval_set)
            t_ids = np.arange(len(yt_enc))
            test = [{"ids_test": t_ids, "X_test": s} for s in t_strips]
            lo_test = {"ids_test": t_ids, "y_test": yt_enc}
        datas = {name: PartyData(ids_arr, strips[d], **test[d]) for d, name in enumerate(do_names)}
        for k, name in enumerate(lo_names):
            extra = lo_test if k == 0 else {}
            datas[name] = PartyData(owner_ids[k], None, y_enc[owner_rows[k]], **extra)
        run = RunSpec(
            MULTIVFL_SPEC.name,
            params,
            Roster(do_names + lo_names, label_owners=lo_names, coordinator="server"),
            self.random_state,
            Defense.of(self.defense),
        )
        fed = build_in_process(run, datas, transport=self.transport, keep_entries=self.log_entries)
        fed.transport.log.keep_entries = self.log_entries
        server = fed.coordinator
        assert isinstance(server, Server)
        if checkpoint is not None and Path(checkpoint).is_file():
            fed.load_state(Path(checkpoint))

        def save(r: int) -> None:
            if checkpoint is not None and (r % checkpoint_every == 0 or r == self.rounds):
                fed.save_state(Path(checkpoint))

        server.callback = self._progress(callback, owner_rows)
        t0 = time.perf_counter()
        fed(save)
        seconds = time.perf_counter() - t0
        self.transport_ = fed.transport
        self.data_owners_ = [_as(DataOwner, fed.parties[p]) for p in do_names]
        self.label_owners_ = [_as(LabelOwner, fed.parties[p]) for p in lo_names]
        self.server_ = server
        self.privacy_ = fed.privacy
        self.history_ = history_columns(server.history)
        self.history_["round"] = [int(r) for r in self.history_["round"]]
        n_batches = sum(self.history_["batches"])
        heights = [s.shape[1] for s in strips]
        act = self.channels * sum(heights) * strips[0].shape[2] * 4  # float32 bytes per sample
        log = self.transport_.log
        self.run_stats_ = {
            **log.summary(),
            "seconds": seconds,
            "train_seconds": float(sum(self.history_["train_seconds"])),
            "rounds": self.rounds,
            "batches_per_round": n_batches / self.rounds,
            "train_bytes_per_round": float(np.mean(self.history_["train_bytes"])),
            "train_bytes_per_batch": float(sum(self.history_["train_bytes"]) / n_batches),
            "raw_activation_bytes_per_sample": act,
            "total_bytes": log.total_bytes,
            "messages": log.n_messages,
            "device": str(resolve_device(self.device)),
        }
        return self

    def _progress(
        self,
        callback: Callable[[int, dict[str, float]], None] | None,
        owner_rows: Sequence[np.ndarray],
    ) -> Callable[[int, dict[str, float]], None] | None:
        """``callback``, preceded by a line per round on stderr when ``verbose``."""
        if not self.verbose:
            return callback
        from fedviews._console import err_console

        sizes = sorted({len(r) for r in owner_rows})
        err_console.print(
            f"Multi-VFL: {self.n_data_owners} data owners, {self.n_label_owners} label owners "
            f"({'/'.join(map(str, sizes))} samples each), {self.rounds} rounds "
            "(verbose=False: silent)",
            highlight=False,
            soft_wrap=True,
        )

        def report(r: int, rec: dict[str, float]) -> None:
            err_console.print(
                f"round {r}/{self.rounds}: train loss {rec['train_loss']:.4f}{progress_tail(rec)}",
                highlight=False,
                soft_wrap=True,
            )
            if callback is not None:
                callback(r, rec)

        return report

    def _check_predict_strips(self, X: Any) -> list[np.ndarray]:
        strips = _as_strips(X, self.n_data_owners, "X")
        shapes = [s.shape[1:] for s in strips]
        if shapes != self.strip_shapes_:
            raise DataError(
                f"strip shapes {shapes} differ from the training strips {self.strip_shapes_}"
            )
        return strips

    def predict(self, X: Any) -> np.ndarray:
        """Predict labels: the data owners compute activations, ``label_owner_0`` the classes."""
        check_fitted(self, "server_", "strip_shapes_")
        strips = self._check_predict_strips(X)
        for do, s in zip(self.data_owners_, strips, strict=True):
            do.set_split("predict", s)
        return np.asarray(
            self.classes_[self.label_owners_[0].predict_split("predict", len(strips[0]))]
        )

    def score(self, X: Any, y: Any) -> float:
        """Accuracy of :meth:`predict` on ``(X, y)``."""
        return accuracy(self.predict(X), y)


P = TypeVar("P", bound=Party)


def _as(cls: type[P], party: Party) -> P:
    assert isinstance(party, cls)
    return party
