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

The algorithm is defined once (:class:`~fedviews.deep.multivfl.spec.MultiVFLAlgorithm`:
params, roles, alignment, policy); it builds these parties from each one's own data, in one
process (:class:`~fedviews.deep.multivfl.MultiVFL`) as in a deployed party process. This
module never imports the spec: what both need is in :mod:`fedviews.deep.multivfl.protocol`.

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

The privacy barrier is :func:`~fedviews.deep.multivfl.spec.multivfl_policy`, enforced by the transport: raw strips,
labels and bottom-model weights never leave their owner. Sample-ID alignment between the data
owners and each label owner goes through :func:`fedviews.data.align`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from fedviews.deep._common import (
    load_module,
    module_arrays,
    prefixed,
    preload_optimizers,
    state_arrays,
    to_numpy,
    to_tensor,
    zero_grads,
)
from fedviews.deep._fusedstep import staged_backward, step_optimizers
from fedviews.deep.multivfl.dp import (
    GradDP,
    clip_rows,
    gaussian_noise,
    private_bottom_gradients,
    private_gradients,
)
from fedviews.deep.multivfl.nets import combine_activations, split_activations
from fedviews.deep.multivfl.protocol import epoch_order, model_input
from fedviews.errors import DataError, MissingDependency, ProtocolError
from fedviews.federation import (
    Array,
    Backward,
    Blame,
    Codec,
    Message,
    MetaValue,
    Party,
    SecureSumParty,
    handles,
    largest_input,
)

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

__all__ = ["DataOwner", "GradDP", "LabelOwner"]

T = TypeVar("T")
_EVAL_BATCH = 1000


def _meta(msg: Message, key: str, kind: type[T]) -> T:
    """``msg.meta[key]`` checked to be of type ``kind`` (ints are accepted as floats; a float
    must be finite: a NaN loss or accuracy would be reported as a result)."""
    val = msg.meta.get(key)
    if kind is float and isinstance(val, int) and not isinstance(val, bool):
        val = float(val)
    if not isinstance(val, kind) or (isinstance(val, float) and not math.isfinite(val)):
        raise ProtocolError(
            f"{msg.kind!r} from {msg.sender!r}: meta[{key!r}] must be {kind.__name__}, got {val!r}",
            party=msg.sender,
        )
    return val


def _whole(msg: Message, key: str) -> int:
    """``msg.meta[key]``, a part of a seed of numpy's generators (the seed, the epoch): a
    whole number ``>= 0`` (a negative one raised numpy's ValueError in the receiver's thread)."""
    val = _meta(msg, key, int)
    if isinstance(val, bool) or not 0 <= val < 2**64:
        raise ProtocolError(
            f"{msg.kind!r} from {msg.sender!r}: meta[{key!r}] must be a whole number >= 0, "
            f"got {val!r}",
            party=msg.sender,
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
    owners: Mapping[str, tuple[int, ...]],
    rows: int,
    device: torch.device,
    codec: Codec,
) -> list[torch.Tensor]:
    """The data owners' activations of one batch as tensors on ``device``, checked by the
    label owner: the batch's rows, and each owner's per-sample shape of the setup
    (``owners``)."""
    return [
        codec.tensor(replies[d], "activations", (rows, *shape), device)
        for d, shape in owners.items()
    ]


def _local_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=lr) if name == "adam" else torch.optim.SGD(params, lr=lr)


# --------------------------------------------------------------------------- parties


class DataOwner(Party):
    """Holds one strip of every image and ``K`` copies of its bottom model."""

    _transient: ClassVar[Mapping[str, Callable[[], Any]]] = {"_stepped": dict}

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
        self.x = {k: to_tensor(model_input(strips[pos]), device) for k, pos in positions.items()}
        self.copies = {k: copy.deepcopy(bottom).to(device) for k in positions}
        self.local_optimizer, self.lr = local_optimizer, lr
        self.optims: dict[str, torch.optim.Optimizer] = {}
        self._new_optimizers()
        self.split_x: dict[str, torch.Tensor] = {}
        self._order: dict[str, torch.Tensor] = {}  # each label owner's epoch, on the device
        self._pending: dict[str, torch.Tensor] = {}
        # by label owner: the gradient it applied last (who its next activations name)
        self._stepped: dict[str, torch.Tensor] = {}
        self._batch: dict[str, tuple[torch.Tensor, int, int]] = {}  # act_dp: x, epoch, batch
        self._epoch: dict[str, int] = {}
        # a request whose backward pass ran in the transport (stage) and its batch's rows
        self._staged: tuple[Message, torch.Tensor | None] | None = None

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
        """Hold evaluation/prediction features locally (never sent)."""
        self.split_x[split] = to_tensor(model_input(strips), self.device)

    @handles("begin_epoch")
    def begin_epoch(self, msg: Message) -> None:
        n, epoch = len(self.x[msg.sender]), _whole(msg, "epoch")
        order = epoch_order(_whole(msg, "seed"), msg.round, epoch, n)
        self._order[msg.sender] = torch.as_tensor(order, device=self.device)
        self._epoch[msg.sender] = epoch

    def _gen(self, msg: Message, k: str, epoch: int, batch: int, phase: int) -> torch.Generator:
        assert self.dp is not None
        key = [msg.round, self.owner_index[k], epoch, batch, phase]
        return self.dp.generator(key, self.device)

    @handles("forward")
    def forward(self, msg: Message) -> Message:
        """The activations of batch ``batch``, after applying the gradient of the previous
        batch when the request carries it (``activation_grad``): the whole request is
        checked before that gradient changes anything."""
        rows = self._checked(msg)
        assert rows is not None
        k, b = msg.sender, _meta(msg, "batch", int)
        x = self.x[k].index_select(0, rows)
        if self.dp is None:
            out = self.copies[k](x)
        else:
            epoch = self._epoch.get(k, 0)
            with torch.no_grad():  # the release: clipped rows plus Gaussian noise
                out = clip_rows(self.copies[k](x), self.dp.clip)
                out = out + gaussian_noise(
                    self.dp.sigma, out.shape, out, self._gen(msg, k, epoch, b, 0)
                )
            self._batch[k] = (x, epoch, b)
        self._pending[k] = out
        # lent: it never writes them (it keeps them for their graph), the receiver reads them
        arrays = self.act_codec.pack("activations", out, lent=True)
        return self.reply(msg, arrays, blame=self._blame(k, x))

    def _blame(self, k: str, x: torch.Tensor) -> Blame | None:
        """Who its activations on ``x`` for label owner ``k`` name if they are not finite:
        ``k``, where the gradient it applied last is huge and larger than ``x`` (it made this
        copy's weights overflow), or itself."""
        grad = self._stepped.pop(k, None)
        if grad is None:
            return None
        return largest_input(self.name, {k: {"activation_grad": grad}, self.name: {"features": x}})

    def _request(self, msg: Message) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Every check of a ``forward`` or ``backward`` request, before anything changes:
        ``(rows, grad)``, the rows of the batch that a ``forward`` asks for (its meta, and
        the batch within the epoch of ``begin_epoch``; ``None`` for a ``backward``) and the
        gradient of the pending activations that it carries (its name, shape, dtype and
        values checked; ``None`` for a ``forward`` without one). A request without the
        gradient of activations still pending, or with one for none, is refused."""
        k, b, rows = msg.sender, None, None
        if msg.kind == "forward":
            b, bs = _meta(msg, "batch", int), _meta(msg, "batch_size", int)
            order = self._order.get(k)
            if order is None or bs < 1 or not 0 <= b * bs < len(order):
                raise ProtocolError(
                    f"{k!r} asked for batch {b} of size {bs}, which its epoch does not have "
                    + ("(no begin_epoch yet)" if order is None else f"({len(order)} samples)"),
                    party=k,
                )
            rows = order[b * bs : (b + 1) * bs]
        out = self._pending.get(k)
        if msg.kind == "backward" or self._carries_grad(msg):
            if out is None:
                raise ProtocolError(
                    f"{k!r} sent a gradient for activations it never asked for", party=k
                )
            return rows, self.grad_codec.tensor(
                msg, "activation_grad", tuple(out.shape), self.device
            )
        if out is not None:
            raise ProtocolError(
                f"{k!r} asked for the activations of batch {b} without "
                "returning the gradient of the previous batch",
                party=k,
            )
        return rows, None

    def _carries_grad(self, msg: Message) -> bool:
        return any(n in msg.arrays for n in self.grad_codec.names("activation_grad"))

    def stage(self, msg: Message) -> Backward | None:
        """The backward pass of a gradient that ``msg`` (``forward`` or ``backward``) carries,
        to run with the other data owners' in one process (not under ``act_dp``: its
        gradients are its own computation), once the whole request passed its checks
        (:meth:`_request`); the handler then skips both."""
        if self.dp is not None or msg.kind not in ("forward", "backward"):
            return None
        if not self._carries_grad(msg):
            return None
        rows, grad = self._request(msg)
        assert grad is not None
        out, opt = self._take(msg.sender, grad)
        self._staged = (msg, rows)
        return staged_backward(out, grad, opt)

    def _take(self, k: str, grad: torch.Tensor) -> tuple[torch.Tensor, torch.optim.Optimizer]:
        """The pending activations of label owner ``k`` (no longer pending) and the optimizer
        of that bottom copy, its gradients zeroed; ``grad``, the gradient about to be applied,
        is kept for :meth:`_blame`."""
        self._stepped[k] = grad
        opt = self.optims[k]
        zero_grads(opt)
        return self._pending.pop(k), opt

    def _checked(self, msg: Message) -> torch.Tensor | None:
        """The rows that request ``msg`` asks for (:meth:`_request`), after every check of it
        and then the step of the gradient it carries (which the transport ran if it was
        staged: :meth:`stage` checked it then)."""
        if self._staged is not None and self._staged[0] is msg:
            rows, self._staged = self._staged[1], None
            return rows
        rows, grad = self._request(msg)
        if grad is None:
            return rows
        k = msg.sender
        out, opt = self._take(k, grad)
        if self.dp is None:
            out.backward(grad)
        else:
            x, epoch, b = self._batch.pop(k)
            model = self.copies[k]
            gen = self._gen(msg, k, epoch, b, 1)
            g = private_bottom_gradients(model, x, grad, self.dp, gen)
            for name, param in model.named_parameters():
                param.grad = g[name]
        step_optimizers([opt])
        return rows

    @handles("backward")
    def backward(self, msg: Message) -> None:
        """Apply the gradient of an epoch's last batch (the request checked first)."""
        self._checked(msg)

    @handles("average_bottoms")
    def average_bottoms(self, msg: Message) -> None:
        states = [m.state_dict() for m in self.copies.values()]
        mean = {n: _mean([s[n] for s in states]) for n in states[0]}
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
        if split in self.owner_index and split != msg.sender:  # a label owner's new rows
            raise ProtocolError(
                f"{msg.sender!r} asked for the activations of {split!r}'s rows to predict"
            )
        rows = self.split_x.get(split)
        if rows is None or not 0 <= start < stop <= len(rows):
            raise ProtocolError(
                f"{msg.sender!r} asked for rows {start}:{stop} of the {split!r} split, which "
                f"{self.name!r} " + ("does not hold" if rows is None else f"has {len(rows)} of")
            )
        x = rows[start:stop]
        bottom, training = self.bottom, self.bottom.training
        bottom.eval()  # dropout off, batch norm's running statistics (and not updated)
        try:
            with torch.no_grad():
                out = bottom(x)
        finally:
            bottom.train(training)
        with torch.no_grad():
            if self.dp is not None:  # evaluation rows: clipped as in training, not noised
                out = clip_rows(out, self.dp.clip)
        return self.reply(msg, self.act_codec.pack("activations", out))


def _mean(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The average of one state entry over the bottom copies: floating point as it is, an
    integer buffer (batch norm's ``num_batches_tracked``) rounded back to its type, a bool
    one as the first copy's."""
    t = torch.stack(tensors)
    if t.is_floating_point() or t.is_complex():
        return t.mean(0)
    if t.dtype == torch.bool:
        return t[0]
    return t.double().mean(0).round().to(t.dtype)


class LabelOwner(SecureSumParty):
    """Holds the labels of its samples and the top model; drives its batches.

    ``data_owners``: the data owners in strip order, each with the per-sample shape of the
    activations it sends (checked on arrival).

    ``secure``: its top-model update leaves only masked for the server's secure sum
    (``defense.kind = "secagg"``, as ``masked_update/<name>``)."""

    def __init__(
        self,
        name: str,
        y: np.ndarray,
        top: nn.Module,
        data_owners: Mapping[str, tuple[int, ...]],
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
        self.activation_shapes = dict(data_owners)
        self.batch_size, self.local_epochs = batch_size, local_epochs
        self.local_optimizer, self.lr = local_optimizer, lr
        self.split_y: dict[str, np.ndarray] = {}
        #: ``fedviews predict``: how many new rows the data owners hold for it (their split
        #: named after it), and the classes predicted for them
        self.n_predict = 0
        self.predicted: np.ndarray | None = None
        self._global: dict[str, np.ndarray] = {}
        preload_optimizers()  # the data owners build theirs now; this one, every round

    @handles("set_top")
    def set_top(self, msg: Message) -> None:
        self._global = _received(msg, self.top.state_dict(), "top/")
        self.top.load_state_dict({k: to_tensor(v, self.device) for k, v in self._global.items()})

    @handles("train_round")
    def train_round(self, msg: Message) -> Message:
        seed, n, bs = _whole(msg, "seed"), len(self.y), self.batch_size
        opt = _local_optimizer(self.local_optimizer, self.top.parameters(), self.lr)
        self.top.train()
        # the loss summed on the device (in float64, as Python would): no host sync per batch
        total, n_batches = torch.zeros((), dtype=torch.float64, device=self.device), 0
        gen: torch.Generator | None = None  # grad_dp's noise of this round
        for epoch in range(self.local_epochs):
            self.broadcast(self.data_owners, "begin_epoch", meta={"seed": seed, "epoch": epoch})
            order = torch.as_tensor(epoch_order(seed, msg.round, epoch, n), device=self.device)
            # the gradients of batch b travel with the request for batch b + 1: one round
            # trip per batch instead of two; each data owner still applies them first
            grads_out: dict[str, dict[str, Array]] = {d: {} for d in self.data_owners}
            blame: Blame | None = None  # who made grads_out overflow, if they did
            for b in range((n + bs - 1) // bs):
                # every data owner at once (over gRPC they compute in parallel)
                at = {"batch": b, "batch_size": bs}
                got = self.scatter("forward", grads_out, meta=at, blame=blame)
                rows = len(order[b * bs : (b + 1) * bs])
                acts = _activations(got, self.activation_shapes, rows, self.device, self.act_codec)
                target = self.y.index_select(0, order[b * bs : (b + 1) * bs])
                zero_grads(opt)
                if self.dp is None:
                    # the joined activations are the leaf: each data owner's gradient is a
                    # view of its gradient (no copy, as the plain loop's backward through cat)
                    joined = combine_activations(acts).requires_grad_(True)
                    loss = nn.functional.cross_entropy(self.top(joined), target)
                    loss.backward()
                    grads = split_activations(_grad(joined), acts)
                    total += loss.detach().to(torch.float64)
                else:
                    gen = gen or self.dp.generator([msg.round], self.device)
                    g_par, grads = private_gradients(self.top, acts, target, self.dp, gen)
                    for k, param in self.top.named_parameters():
                        param.grad = g_par[k]
                blame = self._blame(acts)
                step_optimizers([opt])
                grads_out = {
                    d: self.grad_codec.pack("activation_grad", g, lent=True)  # never read again
                    for d, g in zip(self.data_owners, grads, strict=True)
                }
                n_batches += 1
            if n:  # the epoch's last batch
                self.scatter("backward", grads_out, blame=blame)
        update = {f"update/{k}": v - self._global[k] for k, v in state_arrays(self.top).items()}
        if self.secure:
            masked = {f"masked_{k}": v for k, v in update.items()}
            update = self.keyed_sum("its update").mask(masked, msg.round)
        meta: dict[str, MetaValue] = {"n_batches": n_batches}
        if self.dp is None:  # under grad_dp the loss of the true labels is not released
            meta["train_loss"] = float(total) / max(n_batches, 1)
        return self.reply(msg, update, meta=meta)

    def _blame(self, acts: Sequence[torch.Tensor]) -> Blame:
        """Who is named if the gradients of ``acts`` are not finite: the data owner whose
        activations are the largest, if they are huge (``largest_input``); else this label
        owner (its own top model diverged)."""
        inputs: dict[str, dict[str, Array]] = {
            d: {"activations": a} for d, a in zip(self.data_owners, acts, strict=True)
        }
        return largest_input(self.name, inputs)

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
                    got, self.activation_shapes, stop - start, self.device, self.act_codec
                )
                preds.append(to_numpy(self.top(combine_activations(acts)).argmax(1)))
        return np.concatenate(preds)

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        split = _meta(msg, "split", str)
        y = self.split_y[split]
        acc = float(np.mean(self.predict_split(split, len(y)) == y))
        return self.reply(msg, meta={"accuracy": acc})

    @handles("predict")
    def on_predict(self, msg: Message) -> None:
        """``fedviews predict``: the classes of this label owner's new rows, from the data
        owners' activations of their rows of its split and its (global) top model."""
        self.predicted = self.predict_split(self.name, self.n_predict)
