"""Split learning on image strips: what APFed, SingleVL, TVFL and the split NN share.

* :class:`SplitBottom` — the bottom (passive) party of split learning: its own
  strip and network, its own SGD, the batch order of each epoch (derived from a
  seed the label owner sends, so no sample index crosses), the forward and
  backward pass of a batch and its checkpoint. APFed's
  :class:`~fedviews.deep.apfed.PassiveClient`, TVFL's
  :class:`~fedviews.deep.apfed.baselines.TVFLPassiveClient` and the split NN's parties add
  only their protocol.
* :class:`SplitTop` — the label owner's common part (APFed's active client, TVFL's):
  its strip, the class indices, and the epochs it starts at the passive parties.
* :class:`StripEstimator` — the estimators' common part: their hyper-parameters,
  images cut into ``m`` strips, label encoding, the fitted federation's
  attributes, prediction from the active strip alone.
* Helpers: seeded construction of a network, SGD.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from scipy.special import softmax

from fedviews._classifier import Classifier
from fedviews._persist import Persistent
from fedviews.data import check_classes
from fedviews.deep._apfed_nets import NetSpec, as_images, cut_strips, get_arch
from fedviews.deep._common import (
    as_strips,
    device_batches,
    load_module,
    load_optimizer,
    module_arrays,
    optimizer_arrays,
    resolve_device,
    to_tensor,
    torch_seed,
    train_mode,
    zero_grads,
)
from fedviews.deep._fusedstep import staged_backward
from fedviews.deep._strips import party_features
from fedviews.errors import DataError, MissingDependency, ProtocolError, check_fitted
from fedviews.federation import Backward, Blame, Message, Party, largest_input, lend

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

# --------------------------------------------------------------------------- helpers


def sgd(params: Any, lr: float, momentum: float, weight_decay: float) -> Any:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


def build_module(seed: int, factory: Callable[[], Any], device: Any) -> Any:
    """Build a module with its own torch seed, leaving the global RNG untouched."""
    with torch_seed(seed):
        module = factory()
    return module.to(device)


# --------------------------------------------------------------------------- the bottom party


class SplitBottom(Party):
    """The bottom (passive) party of split learning on its features (an image strip).

    It holds its features and its network (built by ``factory(shape)`` with its
    own seed) and trains it with its own SGD. Each epoch's batch order comes from
    the label owner's shuffle seed (:meth:`start_epoch`), so the two sides draw
    the same batches without any sample index crossing. Subclasses register the
    handlers of their protocol.

    Parameters
    ----------
    name : str
    view : ndarray, shape (n, ...)
        Its features (a strip ``(n, C, h, W)``), aligned with the label owner's samples.
    factory : callable
        ``factory(view.shape[1:])`` builds its network (a strip's ``(C, h, W)``).
    seed : int
        Initialisation seed of its network.
    lr, momentum, weight_decay : float
        Its own SGD settings.
    device : torch.device or str
    """

    def __init__(
        self,
        name: str,
        view: np.ndarray,
        factory: Callable[[tuple[int, ...]], Any],
        *,
        seed: int,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        device: Any = "cpu",
    ) -> None:
        super().__init__(name, role="passive")
        self.device = torch.device(device)
        self._X = to_tensor(view, self.device, torch.float32)
        shape = tuple(int(s) for s in view.shape[1:])
        self.net = build_module(seed, lambda: factory(shape), self.device)
        self.opt = sgd(self.net.parameters(), lr, momentum, weight_decay)
        self._order: list[torch.Tensor] = []  # the batches' rows, on its device
        self._pending: Any = None  # the output of the batch whose gradient is awaited
        # a request whose backward pass ran in the transport (stage), and the rows it asks for
        self._staged: tuple[Message, torch.Tensor | None] | None = None
        # the last gradient it applied (sender, message kind, values): who its next output
        # names if that is not finite (``largest_input``)
        self._stepped: tuple[str, str, torch.Tensor] | None = None

    _transient: ClassVar[Mapping[str, Callable[[], Any]]] = {"_stepped": lambda: None}

    #: the message kinds that carry only the gradient of its output, with the gradient's
    #: array name (their handler calls :meth:`backward_batch`)
    gradient_kinds: ClassVar[Mapping[str, str]] = {}
    #: the forward kinds (their handler calls :meth:`forward_batch`) whose request carries
    #: the gradient of the previous batch's output, with the gradient's array name: one round
    #: trip per batch; such a request without the gradient still pending is refused
    carried_gradients: ClassVar[Mapping[str, str]] = {}

    def start_epoch(self, msg: Message) -> None:
        """The batches of a new epoch, from ``meta["shuffle_seed"]`` and ``meta["batch_size"]``."""
        rng = np.random.default_rng(int(msg.number("shuffle_seed")))
        self._order = device_batches(len(self._X), int(msg.number("batch_size")), rng, self.device)

    def batch_rows(self, msg: Message) -> torch.Tensor:
        """The rows of batch ``meta["batch"]`` of the current epoch (an index tensor on its
        device)."""
        b = msg.number("batch")
        if b != int(b) or not 0 <= b < len(self._order):
            raise ProtocolError(
                f"{self.name}: {msg.sender!r} asked for batch {b!r}, not in the current epoch",
                party=msg.sender,
            )
        return self._order[int(b)]

    def forward_batch(self, msg: Message, name: str) -> Message:
        """Reply with its network's output on batch ``meta["batch"]`` as array ``name``, after
        the backward pass and SGD step of the previous batch's gradient where the request
        carries it (:attr:`carried_gradients`): the whole request is checked before that
        gradient changes anything."""
        rows = self._applied(msg, forward=True)
        assert rows is not None
        train_mode(self.net)
        x = self._X.index_select(0, rows)
        self._pending = self.net(x)
        # lent: it never writes its output (kept for its graph), the receiver reads it
        return self.reply(msg, arrays={name: lend(self._pending)}, blame=self._blame(x))

    def _blame(self, x: torch.Tensor) -> Blame | None:
        """Who its output on ``x`` names if it is not finite: the sender of the gradient it
        applied last, where that gradient is huge and larger than ``x`` (it made its weights
        overflow), or itself."""
        if self._stepped is None:
            return None
        sender, kind, grad = self._stepped
        name = self._gradient_name(kind)
        assert name is not None  # (only a message that carries a gradient steps)
        return largest_input(self.name, {sender: {name: grad}, self.name: {"features": x}})

    def _gradient_name(self, kind: str) -> str | None:
        """The array name of the gradient that a message of ``kind`` carries, if any."""
        return self.carried_gradients.get(kind) or self.gradient_kinds.get(kind)

    def backward_batch(self, msg: Message) -> None:
        """Back-propagate the received gradient of that output (the array that
        :attr:`gradient_kinds` names for its kind); one SGD step."""
        self._applied(msg, forward=False)

    def stage(self, msg: Message) -> Backward | None:
        """The backward pass of the gradient that a message of :attr:`gradient_kinds` or
        :attr:`carried_gradients` carries, to run with other parties' in one process once
        the whole request passed its checks (:meth:`_request`); its handler then skips both."""
        forward = msg.kind in self.carried_gradients
        name = self._gradient_name(msg.kind)
        if name is None or (forward and name not in msg.arrays):
            return None
        rows, grad = self._request(msg, forward)
        assert grad is not None
        self._staged = (msg, rows)
        return self._backward(grad, msg)

    def _request(
        self, msg: Message, forward: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Every check of a forward (``forward``) or backward request, before anything
        changes: ``(rows, grad)``, the rows of the batch that a forward asks for (``None``
        for a backward) and the gradient of the pending output that it carries (its name,
        shape and dtype checked; ``None`` for a forward without one). A gradient for no
        pending output is refused, and so is a forward of a protocol that carries the
        gradient (:attr:`carried_gradients`) while one is still pending."""
        rows = self.batch_rows(msg) if forward else None
        name = (self.carried_gradients if forward else self.gradient_kinds).get(msg.kind)
        if name is not None and (not forward or name in msg.arrays):
            if self._pending is None:
                raise ProtocolError(
                    f"{self.name}: {msg.sender!r} sent a gradient before a forward",
                    party=msg.sender,
                )
            shape = tuple(self._pending.shape)
            return rows, msg.tensor(name, shape, np.float32, self.device)
        if name is not None and self._pending is not None:
            raise ProtocolError(
                f"{self.name}: {msg.sender!r} asked for batch {int(msg.number('batch'))} "
                f"without returning the gradient {name!r} of the previous batch",
                party=msg.sender,
            )
        return rows, None

    def _applied(self, msg: Message, forward: bool) -> torch.Tensor | None:
        """The rows that request ``msg`` asks for (:meth:`_request`), after every check of it
        and then the backward pass and SGD step of the gradient it carries (which the
        transport ran if it was staged: :meth:`stage` checked it then)."""
        if self._staged is not None and self._staged[0] is msg:
            rows, self._staged = self._staged[1], None
            return rows
        rows, grad = self._request(msg, forward)
        if grad is not None:
            staged = self._backward(grad, msg)
            torch.autograd.backward(staged.outputs, staged.grads)
            staged.then()
        return rows

    def _backward(self, grad: torch.Tensor, msg: Message) -> Backward:
        """The backward pass of the checked gradient ``grad`` (that ``msg`` carries) through
        the pending output (no longer pending), then one SGD step (its gradients zeroed
        now)."""
        out, self._pending = self._pending, None
        self._stepped = (msg.sender, msg.kind, grad)
        zero_grads(self.opt)
        return staged_backward(out, grad, self.opt)

    def results(self) -> dict[str, np.ndarray]:
        """What it keeps at the end: its network."""
        return module_arrays("net", self.net)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Its network and optimiser state (a checkpoint at an epoch boundary)."""
        return {**module_arrays("net", self.net), **optimizer_arrays("opt", self.opt)}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict` (raises DataError if it does not fit)."""
        load_module("net", self.net, state, self.name)
        load_optimizer("opt", self.opt, state)


# --------------------------------------------------------------------------- the label owner


class SplitTop(Party):
    """The label owner of split learning on image strips (role ``"active"``).

    It holds its strip and the class indices of its samples, and starts every
    epoch: it draws the epoch's shuffle seed from its own stream and sends it to
    the passive parties (:meth:`epoch_batches`), so both sides cut the same
    batches. Subclasses build their networks and optimiser with :attr:`sgd`.

    Parameters
    ----------
    name : str
    view : ndarray, shape (n, C, h, W) or (n, k)
        Its strip, or its table columns (APFed).
    y : ndarray of int, shape (n,)
        Class indices ``0..n_classes-1``.
    passives : list of str
        Names of the passive parties.
    seed : int
        Seed of its network initialisation and of the batch order.
    epochs, batch_size : int
    lr, momentum, weight_decay : float
        Its SGD settings (:attr:`sgd`).
    device : torch.device or str
    """

    def __init__(
        self,
        name: str,
        view: np.ndarray,
        y: np.ndarray,
        *,
        passives: Sequence[str] = (),
        seed: int,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        device: Any = "cpu",
    ) -> None:
        super().__init__(name, role="active")
        self.passives = list(passives)
        self.epochs = epochs
        self.batch_size = batch_size
        self.sgd = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay}
        self.device = torch.device(device)
        self._X = to_tensor(view, self.device, torch.float32)
        self._y = to_tensor(y, self.device, torch.int64)
        #: the per-sample shape of its features; ``strip_hw``: a strip's ``(h, W)``
        self.input_shape = tuple(int(s) for s in view.shape[1:])
        self.strip_hw = self.input_shape[1:]
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self.history: list[float] = []

    def epoch_batches(self, kind: str, round: int) -> Iterator[tuple[int, torch.Tensor]]:
        """Start an epoch: send its shuffle seed to every passive party (message ``kind``);
        return its numbered batches (index tensors on its device)."""
        seed = int(self._rng.integers(2**31))
        meta = {"shuffle_seed": seed, "batch_size": self.batch_size}
        for p in self.passives:
            self.send(p, kind, meta=meta, round=round)
        rng = np.random.default_rng(seed)
        return enumerate(device_batches(len(self._X), self.batch_size, rng, self.device))


# --------------------------------------------------------------------------- estimators


class StripEstimator(Persistent, Classifier):
    """Shared pieces of APFed, SingleVL and TVFL: hyper-parameters, strips, label encoding, the
    fitted federation, active-only prediction.

    A subclass lists its hyper-parameters in ``__init__``, which stores them
    with :meth:`_set_params`. Every estimator here runs a federation, so a
    fitted one has ``transport_``, ``run_stats_`` (its ``log.summary()``, also
    ``message_log_``), ``history_`` (mean loss per epoch), ``active_`` and
    ``passives_`` (see :meth:`_keep_run`).
    """

    m: int
    i: int
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    pad: bool
    arch: str
    device: str
    random_state: int | None
    verbose: bool
    active_: Any
    passives_: list[Any]
    spec_: NetSpec | None
    history_: list[float]

    #: saved as the active client's networks (prediction is the active client's alone);
    #: the passive clients' models are not saved (pickling keeps them)
    _live = ("active_", "passives_", "spec_", "device_")
    #: the active client's networks, by attribute
    _active_nets: tuple[str, ...] = ("net",)

    def _live_state(self) -> dict[str, Any]:
        # each network's arrays with its structure, which loading checks (load_module)
        arrays: dict[str, Any] = {}
        for k in self._active_nets:
            arrays.update(module_arrays(k, getattr(self.active_, k)))
        spec = None if self.spec_ is None else dataclasses.asdict(self.spec_)
        return {"spec": spec, "modules": arrays}

    def _restore_live(self, state: dict[str, Any]) -> None:
        self.spec_ = None if state["spec"] is None else NetSpec(**state["spec"])
        self.device_ = resolve_device(self.device)
        if not hasattr(self, "input_shapes_"):
            # saved (or pickled) before fits kept it, when fits took images only: the
            # strips' shapes follow from the images' shape and the setting
            m, _, pad = self.setting_
            assert self.image_shape_ is not None
            one = np.zeros((1, *self.image_shape_), np.float32)
            strips = cut_strips(one, m, pad=pad)
            self.input_shapes_ = [tuple(int(s) for s in v.shape[1:]) for v in strips]
        view = np.zeros((0, *self.input_shapes_[self.setting_[1] - 1]), np.float32)
        self.active_ = self._trained_active(view, state)
        if "modules" in state:
            arrays = {k: np.asarray(v) for k, v in state["modules"].items()}
            for k in self._active_nets:
                load_module(k, getattr(self.active_, k), arrays, "the saved active model")
        else:  # (saved before networks kept their structure: torch state dicts, unchecked)
            for k, sd in state["nets"].items():
                getattr(self.active_, k).load_state_dict(sd)
        self.active_.history = self.history_
        self.passives_ = []

    def _trained_active(self, view: np.ndarray, state: dict[str, Any]) -> Any:
        """The active client of a loaded estimator, built as the fit builds it (with no
        training rows, ``view`` of shape ``(0, C, h, W)``) before its networks are loaded."""
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    def _keep_run(self, active: Any, passives: Sequence[Any], transport: Any) -> None:
        """The fitted federation: its parties, transport, per-epoch losses and message summary."""
        self.active_ = active
        self.passives_ = list(passives)
        self.transport_ = transport
        self.history_ = active.history
        self.run_stats_ = self.message_log_ = transport.log.summary()

    def _prepare(self, images: Any, y: Any) -> tuple[list[np.ndarray], np.ndarray]:
        """The ``m`` parties' features and the labels; sets the shape and class attributes.

        ``images``: images, cut into ``m`` strips; where :attr:`_tables` allows, a list of the
        ``m`` parties' own features (e.g. table columns ``(n, k_p)``), taken as they are."""
        if isinstance(images, (list, tuple)):
            views = self._party_features(images)
            n, self.image_shape_, self.strip_hw_ = len(views[0]), None, None
        else:
            X = as_images(images)
            views = cut_strips(X, self.m, pad=self.pad)
            n, self.image_shape_ = len(X), tuple(int(s) for s in X.shape[1:])
            self.strip_hw_ = (int(views[0].shape[2]), int(views[0].shape[3]))
        yy = check_classes(y, n)
        self.classes_ = np.unique(yy)
        if len(self.classes_) < 2:
            raise DataError("y must contain at least two classes")
        #: ``(m, i, pad)`` of the fit: how predict and export cut the active strip
        self.setting_ = (int(self.m), int(self.i), bool(self.pad))
        #: every party's per-sample feature shape (a strip's ``(C, h, W)``, columns' ``(k,)``)
        self.input_shapes_ = [tuple(int(s) for s in v.shape[1:]) for v in views]
        self.spec_ = self._paper_arch(None if self.image_shape_ is None else self.image_shape_[0])
        self.device_ = resolve_device(self.device)
        return views, yy

    #: ``fit`` takes a list of the parties' own features (table columns) as well as images
    _tables = False

    def _party_features(self, X: Sequence[Any]) -> list[np.ndarray]:
        """The ``m`` parties' features given as a list, as float32 (uint8 pixels / 255),
        checked: numeric, finite, the same samples (:func:`party_features`)."""
        if not self._tables:
            raise DataError(
                f"{type(self).__name__} takes images (n, H, W) or (n, C, H, W), not a list of "
                "the parties' features"
            )
        return [as_strips(v) for v in party_features(X, self.m, "X", "m")]

    def _paper_arch(self, channels: int | None) -> NetSpec | None:
        """The paper's networks (``arch``) for images of ``channels`` channels (``None``: table
        columns): a :class:`ConfigError` where it has none; ``None`` where the fit uses none of
        them."""
        assert channels is not None  # only estimators with _tables take table columns
        return get_arch(self.arch, channels)

    def _active_strip(self, images: Any) -> np.ndarray:
        """The active party's features: the active strip of full images (strips of other
        clients are discarded), cut as in the fit (``setting_``; a later ``set_params`` of
        ``m``, ``i``, ``pad`` waits for a refit), or its own of the list of every party's
        features where the fit took one."""
        check_fitted(self, "active_", "setting_")
        m, i, pad = self.setting_
        if self.image_shape_ is None:
            views = self._party_features(images)
            shapes = [v.shape[1:] for v in views]
            if shapes != self.input_shapes_:
                raise DataError(
                    f"the parties' features have per-sample shapes {shapes}, the model was fit "
                    f"on {self.input_shapes_}"
                )
            return views[i - 1]
        X = as_images(images)
        if tuple(X.shape[1:]) != self.image_shape_:
            raise DataError(
                f"images have shape {X.shape[1:]}, the model was fit on {self.image_shape_}"
            )
        return cut_strips(X, m, pad=pad)[i - 1]

    def _logits(self, strip: np.ndarray) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def predict_proba(self, images: Any) -> np.ndarray:
        """Class probabilities from the active client's strip alone."""
        return softmax(self._logits(self._active_strip(images)), axis=1)

    def predict(self, images: Any) -> np.ndarray:
        """Labels predicted by the active client alone (Eq. 11)."""
        logits = self._logits(self._active_strip(images))
        return np.asarray(self.classes_[np.argmax(logits, axis=1)])
