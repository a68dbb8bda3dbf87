"""APFed-R / APFed-C (Liu et al., "Active-Passive Federated Learning for
Vertically Partitioned Multi-view Data") and the TVFL-0/A/R and SingleVL baselines.

Protocol (``m-i`` setting: images cut horizontally into ``m`` strips; strip
``i`` and all labels on the active client, every other strip on its own
passive client):

* The **active client** (a :class:`~fedviews.federation.Coordinator`, role
  ``"active"``) holds ``f_A`` and ``g_T`` and drives the epochs. Per batch it
  computes ``h_A = f_A(x_A)`` and sends ``h_A`` to every passive client.
* A **passive client** (role ``"passive"``) computes its loss ``L_p`` on the
  batch of its own strip: APFed-R reconstructs the strip from ``h_A`` with a
  decoder (mean squared error); APFed-C encodes its strip to ``h_p`` and uses
  the contrastive loss of Eq. 14/16 with temperature ``tau``. It updates its
  own parameters with the *unscaled* ``∂L_p/∂Θ_p`` (Eq. 10) and replies with
  ``grad_h_A = λ_p ∂L_p/∂h_A``.
* **Where λ is applied**: ``λ_p`` belongs to the active client's objective
  (Eq. 8); it is sent as a scalar in the metadata of each ``h_A`` message and
  the passive client multiplies its gradient by it before replying. The active
  client back-propagates ``∂L_A/∂h_A + Σ_p λ_p ∂L_p/∂h_A`` (Eq. 9) through
  ``f_A``; ``g_T`` sees only ``L_A``.
* Only ``h_A`` (active → passive) and ``grad_h_A`` (passive → active) cross the
  privacy barrier. Both sides derive each epoch's batch order from a seed sent
  in a control message, so no sample indices are sent as arrays.
* After training the active client predicts alone (Eq. 11); see
  :meth:`APFed.export` and :func:`fedviews.deep._export.load_active_model`.
* **Deployed** (``fedviews launch``, algorithm ``"apfed"``, see
  :mod:`fedviews.deploy._app_apfed`): the active client is a party process; a
  data-less driver asks it for one epoch at a time (``apfed.train``, handled by
  :meth:`ActiveClient.train_epoch`), then sends ``apfed.epoch_done`` to the
  passive clients; both sides checkpoint there (``state_dict``/``load_state``).
  Same messages and random streams as in-process, so the same result.

Weight decay (``r_A``, ``r_a``, ``r_p`` of Eqs. 6-7) is the optimiser's L2
weight decay. ``λ = 0`` reproduces :class:`SingleVL` bit for bit: both draw
the same seeds, initialise ``f_A``/``g_T`` identically and add an exact zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._registry import register_estimator
from fedviews.deep._apfed_nets import (
    ActiveNet,
    Decoder,
    Encoder,
    Head,
    NetSpec,
    as_images,
    check_setting,
    cut_strips,
    get_arch,
)
from fedviews.deep._common import batches, resolve_device, to_numpy, to_tensor, torch_seed
from fedviews.errors import ConfigError, DataError, MissingDependency, ProtocolError, check_fitted
from fedviews.federation import Coordinator, Message, Party, PrivacyPolicy, federate, handles

try:
    import torch
    from torch.nn import functional as F
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

__all__ = [
    "APFED_POLICY",
    "TVFL_POLICY",
    "APFed",
    "ActiveClient",
    "PassiveClient",
    "SingleVL",
    "TVFL",
    "TVFLActiveClient",
    "TVFLPassiveClient",
    "contrastive_loss",
]

APFED_POLICY = PrivacyPolicy.of(
    "apfed", {("active", "passive"): ["h_A"], ("passive", "active"): ["grad_h_A"]}
)
TVFL_POLICY = PrivacyPolicy.of(
    "tvfl", {("passive", "active"): ["h_p"], ("active", "passive"): ["grad_h_p"]}
)
_EVAL_BATCH = 1024


# -- losses --------------------------------------------------------------------
def contrastive_loss(h_a: Any, h_p: Any, tau: float) -> Any:
    """Eq. 14 averaged over the batch (Eq. 16).

    For anchor ``i`` the positive is ``(h_a[i], h_p[i])``; the denominator sums
    ``exp(s(h_a[i], h_a[j]) / tau)`` over ``j != i`` and ``exp(s(h_a[i], h_p[j]) / tau)``
    over all ``j``; ``s`` is the cosine similarity (Eq. 15). Representations are
    flattened first.
    """
    za = F.normalize(h_a.flatten(1), dim=1)
    zp = F.normalize(h_p.flatten(1), dim=1)
    s_aa = za @ za.T / tau
    s_ap = za @ zp.T / tau
    eye = torch.eye(len(za), dtype=torch.bool, device=za.device)
    s_aa = s_aa.masked_fill(eye, float("-inf"))
    log_den = torch.logsumexp(torch.cat([s_aa, s_ap], dim=1), dim=1)
    return (log_den - s_ap.diagonal()).mean()


def _meta(msg: Message, key: str) -> float:
    """A numeric metadata value of ``msg`` (ProtocolError when absent)."""
    v = msg.meta.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError(f"message {msg.kind!r} from {msg.sender!r} lacks numeric meta[{key!r}]")
    return v


def _sgd(params: Any, lr: float, momentum: float, weight_decay: float) -> Any:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


def _seeds(random_state: int, n: int) -> list[int]:
    """Independent seeds for the active party (index 0) and each passive party."""
    ss = np.random.SeedSequence(int(random_state))
    return [int(c.generate_state(1)[0]) for c in ss.spawn(n)]


def _build(seed: int, factory: Any, device: Any) -> Any:
    """Build a module with its own torch seed, leaving the global RNG untouched."""
    with torch_seed(seed):
        module = factory()
    return module.to(device)


def _copy(t: Any) -> np.ndarray:
    return np.array(to_numpy(t), copy=True)


def _module_arrays(prefix: str, module: Any) -> dict[str, np.ndarray]:
    return {f"{prefix}/{k}": _copy(v) for k, v in module.state_dict().items()}


def _optimizer_arrays(prefix: str, opt: Any) -> dict[str, np.ndarray]:
    """The tensors of an optimiser's per-parameter state (SGD: the momentum buffers)."""
    out: dict[str, np.ndarray] = {}
    for idx, st in opt.state_dict()["state"].items():
        for key, val in st.items():
            if torch.is_tensor(val):
                out[f"{prefix}/{idx}/{key}"] = _copy(val)
    return out


def _load_module(prefix: str, module: Any, state: Mapping[str, np.ndarray], who: str) -> None:
    own = module.state_dict()
    got = {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + "/")}
    bad = sorted(
        k
        for k in set(own) | set(got)
        if k not in got or k not in own or tuple(own[k].shape) != got[k].shape
    )
    if bad:
        raise DataError(f"{who}: checkpointed {prefix!r} does not fit its network ({bad})")
    module.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in got.items()})


def _load_optimizer(prefix: str, opt: Any, state: Mapping[str, np.ndarray]) -> None:
    sd = opt.state_dict()
    per: dict[int, dict[str, Any]] = {}
    for key, val in state.items():
        if key.startswith(prefix + "/"):
            idx, name = key[len(prefix) + 1 :].split("/", 1)
            per.setdefault(int(idx), {})[name] = torch.as_tensor(np.asarray(val))
    sd["state"] = per
    opt.load_state_dict(sd)


def _net_logits(net: Any, strip: np.ndarray, device: Any) -> np.ndarray:
    """Logits of ``net`` (eval mode, no gradient) on a strip, in batches of ``_EVAL_BATCH``."""
    net.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(strip), _EVAL_BATCH):
            out.append(
                to_numpy(net(to_tensor(strip[start : start + _EVAL_BATCH], device, torch.float32)))
            )
    return np.concatenate(out).astype(np.float64)


# -- APFed parties -----------------------------------------------------------
class PassiveClient(Party):
    """A passive client: its own strip and decoder (APFed-R) or encoder (APFed-C).

    Parameters
    ----------
    name : str
    view : ndarray, shape (n, C, h, W)
        Its strip, aligned with the active client's samples.
    variant : {"R", "C"}
    spec : NetSpec
    seed : int
        Initialisation seed of its network.
    tau : float
        Contrastive temperature (APFed-C).
    lr, momentum, weight_decay : float
        Its own SGD settings.
    device : torch.device
    """

    def __init__(
        self,
        name: str,
        view: np.ndarray,
        variant: str,
        spec: NetSpec,
        *,
        seed: int,
        tau: float = 0.5,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        device: Any = "cpu",
    ) -> None:
        super().__init__(name, role="passive")
        self.variant = variant
        self.tau = tau
        self.device = torch.device(device)
        self._X = to_tensor(view, self.device, torch.float32)
        hw = (view.shape[2], view.shape[3])
        factory = (lambda: Decoder(spec, hw)) if variant == "R" else (lambda: Encoder(spec, hw))
        self.net = _build(seed, factory, self.device)
        self.opt = _sgd(self.net.parameters(), lr, momentum, weight_decay)
        self._order: list[np.ndarray] = []
        self.losses: list[float] = []
        self.epochs_done = 0

    def local_loss(self, h_a: Any, x: Any) -> Any:
        """``L_p`` of Eq. 7 without the weight decay term (that is in the optimiser)."""
        if self.variant == "R":
            return F.mse_loss(self.net(h_a), x)
        return contrastive_loss(h_a, self.net(x), self.tau)

    @handles("apfed.epoch")
    def _on_epoch(self, msg: Message) -> None:
        rng = np.random.default_rng(int(_meta(msg, "shuffle_seed")))
        self._order = list(batches(len(self._X), int(_meta(msg, "batch_size")), rng))

    @handles("apfed.forward")
    def _on_forward(self, msg: Message) -> Message:
        b = int(_meta(msg, "batch"))
        if not 0 <= b < len(self._order):
            raise ProtocolError(f"{self.name}: batch {b} is not in the current epoch")
        idx = self._order[b]
        h = to_tensor(msg.arrays["h_A"], self.device, torch.float32).requires_grad_(True)
        if h.shape[0] != len(idx):
            raise ProtocolError(f"{self.name}: h_A has {h.shape[0]} rows for a batch of {len(idx)}")
        self.net.train()
        loss = self.local_loss(h, self._X[idx])
        self.opt.zero_grad()
        loss.backward()
        assert h.grad is not None
        grad = h.grad * _meta(msg, "lam")
        self.opt.step()
        self.losses.append(float(loss.detach()))
        return self.reply(msg, arrays={"grad_h_A": to_numpy(grad)})

    @handles("apfed.epoch_done")
    def _on_epoch_done(self, msg: Message) -> None:
        """Epoch ``msg.round`` is over (sent by a deployment's driver: checkpoint here)."""
        self.epochs_done = int(msg.round)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Its network, optimiser state and losses (a checkpoint at an epoch boundary)."""
        return {
            **_module_arrays("net", self.net),
            **_optimizer_arrays("opt", self.opt),
            "losses": np.asarray(self.losses, dtype=np.float64),
            "epochs_done": np.asarray(self.epochs_done, dtype=np.int64),
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict` (raises DataError if it does not fit)."""
        _load_module("net", self.net, state, self.name)
        _load_optimizer("opt", self.opt, state)
        self.losses = [float(v) for v in np.asarray(state.get("losses", []))]
        self.epochs_done = int(state.get("epochs_done", 0))


class ActiveClient(Coordinator):
    """The active client: strip ``i``, all labels, ``f_A`` and ``g_T``; drives training.

    With no passive clients it is SingleVL.

    Parameters
    ----------
    view : ndarray, shape (n, C, h, W)
    y : ndarray of int, shape (n,)
        Class indices ``0..n_classes-1``.
    n_classes : int
    spec : NetSpec
    passives : list of str
        Names of the passive clients.
    lams : list of float
        ``λ_p`` for each passive client.
    seed : int
        Seed of its network initialisation and of the batch order.
    """

    def __init__(
        self,
        view: np.ndarray,
        y: np.ndarray,
        n_classes: int,
        spec: NetSpec,
        *,
        passives: Sequence[str] = (),
        lams: Sequence[float] = (),
        seed: int,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        device: Any = "cpu",
        name: str = "active",
    ) -> None:
        super().__init__(name, role="active")
        self.passives = list(passives)
        self.lams = [float(v) for v in lams]
        self.epochs = epochs
        self.batch_size = batch_size
        self.device = torch.device(device)
        self._X = to_tensor(view, self.device, torch.float32)
        self._y = to_tensor(y, self.device, torch.int64)
        hw = (view.shape[2], view.shape[3])
        self.net = _build(seed, lambda: ActiveNet(spec, hw, n_classes), self.device)
        self.opt = _sgd(self.net.parameters(), lr, momentum, weight_decay)
        self.spec = spec
        self.classes = np.arange(n_classes)  # the labels of the class indices
        self.model_info: dict[str, Any] = {}  # a description kept with its model (deployment)
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self.history: list[float] = []
        self.steps = 0  # batches trained so far (the round number of in-process messages)
        self._test: tuple[np.ndarray, np.ndarray] | None = None

    def run(self) -> list[float]:
        """Train until ``epochs`` epochs are done; return the mean ``L_A`` of each epoch.

        After :meth:`load_state` it goes on with the epochs left.
        """
        while len(self.history) < self.epochs:
            self.train_epoch()
        return self.history

    def train_epoch(self, round: int | None = None) -> float:
        """One epoch over all batches; return its mean ``L_A``.

        ``round``: the round number of its messages (default: the batch counter;
        a deployment numbers them by epoch).
        """
        epoch = len(self.history)
        shuffle_seed = int(self._rng.integers(2**31))
        for p in self.passives:
            self.send(
                p,
                "apfed.epoch",
                meta={"shuffle_seed": shuffle_seed, "batch_size": self.batch_size},
                round=self.steps if round is None else round,
            )
        order = batches(len(self._X), self.batch_size, np.random.default_rng(shuffle_seed))
        total = 0.0
        for b, idx in enumerate(order):
            total += self._step(epoch, b, idx, self.steps if round is None else round) * len(idx)
            self.steps += 1
        self.history.append(total / len(self._X))
        return self.history[-1]

    # -- deployment: a driver asks for each epoch, the active client evaluates alone
    def set_test(self, view: np.ndarray, y: np.ndarray) -> None:
        """Its own strip of held-out images and their class indices (``-1``: unseen class)."""
        if len(view) != len(y):
            raise DataError(f"{len(view)} test strips but {len(y)} test labels")
        self._test = (np.asarray(view, dtype=np.float32), np.asarray(y, dtype=np.int64))

    def logits(self, view: np.ndarray) -> np.ndarray:
        """Logits of ``g_T(f_A(x))`` on strips of its own view (no passive client needed)."""
        return _net_logits(self.net, view, self.device)

    def test_accuracy(self) -> float:
        """Accuracy on :meth:`set_test`'s strips, predicted alone (Eq. 11)."""
        if self._test is None:
            raise ProtocolError(f"{self.name}: no test split (set_test)")
        view, y = self._test
        return float(np.mean(np.argmax(self.logits(view), axis=1) == y))

    @handles("apfed.train")
    def _on_train(self, msg: Message) -> Message:
        """Train epoch ``msg.round`` (1-based); reply with its scalar metrics only."""
        if msg.round != len(self.history) + 1:
            raise ProtocolError(
                f"{self.name}: asked for epoch {msg.round} after {len(self.history)} epochs"
            )
        loss = self.train_epoch(round=msg.round)
        meta: dict[str, Any] = {"epoch": len(self.history), "loss": loss}
        if self._test is not None:
            meta["accuracy"] = self.test_accuracy()
        return self.reply(msg, meta=meta)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Network, optimiser state and per-epoch losses (a checkpoint at an epoch boundary)."""
        return {
            **_module_arrays("net", self.net),
            **_optimizer_arrays("opt", self.opt),
            "history": np.asarray(self.history, dtype=np.float64),
            "steps": np.asarray(self.steps, dtype=np.int64),
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`; the epochs' shuffle seeds go on where they stopped."""
        _load_module("net", self.net, state, self.name)
        _load_optimizer("opt", self.opt, state)
        self.history = [float(v) for v in np.asarray(state["history"])]
        self.steps = int(state["steps"])
        self._rng = np.random.default_rng(self._seed)
        for _ in self.history:  # one shuffle seed drawn per finished epoch
            self._rng.integers(2**31)

    def _step(self, epoch: int, b: int, idx: np.ndarray, step: int) -> float:
        self.net.train()
        h = self.net.encoder(self._X[idx])
        h_cut = h.detach().requires_grad_(True)
        loss = F.cross_entropy(self.net.head(h_cut), self._y[idx])
        received = []
        if self.passives:
            h_np = to_numpy(h)
            # every passive party at once (over gRPC they compute in parallel)
            replies = self.scatter(
                "apfed.forward",
                {p: {"h_A": h_np} for p in self.passives},
                meta={"epoch": epoch, "batch": b},
                meta_for={p: {"lam": lam} for p, lam in zip(self.passives, self.lams, strict=True)},
                round=step,
            )
            received = [replies[p].arrays["grad_h_A"] for p in self.passives]
        self.opt.zero_grad()
        loss.backward()
        assert h_cut.grad is not None
        grad = h_cut.grad
        for g in received:
            grad = grad + to_tensor(g, self.device, torch.float32)
        h.backward(grad)
        self.opt.step()
        return float(loss.detach())


# -- TVFL parties ----------------------------------------------------------------
class TVFLPassiveClient(Party):
    """A TVFL client: its strip and encoder; sends ``h_p``, receives ``grad_h_p``."""

    def __init__(
        self,
        name: str,
        view: np.ndarray,
        spec: NetSpec,
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
        hw = (view.shape[2], view.shape[3])
        self.net = _build(seed, lambda: Encoder(spec, hw), self.device)
        self.opt = _sgd(self.net.parameters(), lr, momentum, weight_decay)
        self._order: list[np.ndarray] = []
        self._pending: Any = None

    @handles("tvfl.epoch")
    def _on_epoch(self, msg: Message) -> None:
        rng = np.random.default_rng(int(_meta(msg, "shuffle_seed")))
        self._order = list(batches(len(self._X), int(_meta(msg, "batch_size")), rng))

    @handles("tvfl.forward")
    def _on_forward(self, msg: Message) -> Message:
        self.net.train()
        self._pending = self.net(self._X[self._order[int(_meta(msg, "batch"))]])
        return self.reply(msg, arrays={"h_p": to_numpy(self._pending)})

    @handles("tvfl.backward")
    def _on_backward(self, msg: Message) -> None:
        if self._pending is None:
            raise ProtocolError(f"{self.name}: gradient received before a forward pass")
        self.opt.zero_grad()
        self._pending.backward(to_tensor(msg.arrays["grad_h_p"], self.device, torch.float32))
        self.opt.step()
        self._pending = None

    @handles("tvfl.represent")
    def _on_represent(self, msg: Message) -> Message:
        """Representations of training rows ``[start, stop)`` (used for TVFL-A's mean)."""
        self.net.eval()
        with torch.no_grad():
            h = self.net(self._X[int(_meta(msg, "start")) : int(_meta(msg, "stop"))])
        return self.reply(msg, arrays={"h_p": to_numpy(h)})


class TVFLActiveClient(Coordinator):
    """The TVFL label owner: its own strip ``i`` and encoder, and the head on all ``m`` representations.

    At inference without the passive clients, their representations are
    replaced by zeros (TVFL-0), their training mean (TVFL-A, collected at the
    end of training) or standard-normal noise (TVFL-R).
    """

    def __init__(
        self,
        view: np.ndarray,
        y: np.ndarray,
        n_classes: int,
        spec: NetSpec,
        *,
        passives: Sequence[str],
        position: int,
        seed: int,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        device: Any = "cpu",
        name: str = "active",
    ) -> None:
        super().__init__(name, role="active")
        self.passives = list(passives)
        self.position = position  # index of the active strip among the m views
        self.epochs = epochs
        self.batch_size = batch_size
        self.device = torch.device(device)
        self._X = to_tensor(view, self.device, torch.float32)
        self._y = to_tensor(y, self.device, torch.int64)
        hw = (view.shape[2], view.shape[3])
        m = len(self.passives) + 1
        self.rep_shape = spec.out_shape(*hw)
        self.encoder = _build(seed, lambda: Encoder(spec, hw), self.device)
        self.head = _build(
            seed + 1, lambda: Head(m * spec.feature_dim(*hw), spec.hidden, n_classes), self.device
        )
        params = [*self.encoder.parameters(), *self.head.parameters()]
        self.opt = _sgd(params, lr, momentum, weight_decay)
        self._rng = np.random.default_rng(seed)
        self.history: list[float] = []
        self.passive_mean: list[Any] = []

    def _join(self, h_a: Any, others: list[Any]) -> Any:
        hs = list(others)
        hs.insert(self.position, h_a)
        return torch.cat([h.flatten(1) for h in hs], dim=1)

    def run(self) -> list[float]:
        step = 0
        for _ in range(self.epochs):
            shuffle_seed = int(self._rng.integers(2**31))
            for p in self.passives:
                self.send(
                    p,
                    "tvfl.epoch",
                    meta={"shuffle_seed": shuffle_seed, "batch_size": self.batch_size},
                    round=step,
                )
            total = 0.0
            for b, idx in enumerate(
                batches(len(self._X), self.batch_size, np.random.default_rng(shuffle_seed))
            ):
                self.encoder.train()
                self.head.train()
                h_a = self.encoder(self._X[idx])
                hps = [
                    to_tensor(
                        self.send(p, "tvfl.forward", meta={"batch": b}, round=step).arrays["h_p"],
                        self.device,
                        torch.float32,
                    ).requires_grad_(True)
                    for p in self.passives
                ]
                loss = F.cross_entropy(self.head(self._join(h_a, hps)), self._y[idx])
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                for p, hp in zip(self.passives, hps, strict=True):
                    assert hp.grad is not None
                    self.send(
                        p, "tvfl.backward", arrays={"grad_h_p": to_numpy(hp.grad)}, round=step
                    )
                total += float(loss.detach()) * len(idx)
                step += 1
            self.history.append(total / len(self._X))
        self._collect_means(step)
        return self.history

    def _collect_means(self, step: int) -> None:
        """Last training step: average each passive client's representation over the training set."""
        n = len(self._X)
        self.passive_mean = []
        for p in self.passives:
            acc = torch.zeros(self.rep_shape, dtype=torch.float64, device=self.device)
            for start in range(0, n, _EVAL_BATCH):
                meta = {"start": start, "stop": min(start + _EVAL_BATCH, n)}
                h = self.send(p, "tvfl.represent", meta=meta, round=step).arrays["h_p"]
                acc += to_tensor(h, self.device, torch.float64).sum(0)
            self.passive_mean.append((acc / n).float())

    def logits_alone(self, x: Any, fill: str, generator: Any) -> Any:
        """Logits from the active strip only; passive representations replaced per ``fill``."""
        h_a = self.encoder(x)
        shape = (len(x), *self.rep_shape)
        if fill == "zero":
            others = [torch.zeros(shape, device=self.device) for _ in self.passives]
        elif fill == "mean":
            others = [mu.expand(shape) for mu in self.passive_mean]
        else:
            others = [
                torch.randn(shape, generator=generator).to(self.device) for _ in self.passives
            ]
        return self.head(self._join(h_a, others))


# -- estimators ------------------------------------------------------------------
class _StripEstimator(BaseEstimator):
    """Shared pieces: validation, strips, label encoding, active-only prediction.

    Every estimator here runs a federation (SingleVL one of the active client
    alone), so a fitted one has ``transport_``, ``run_stats_`` (its
    ``log.summary()``, also ``message_log_``) and ``history_`` (mean loss per epoch).
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
    random_state: int

    def _validate(self) -> None:
        check_setting(self.m, self.i)
        if int(self.epochs) != self.epochs or self.epochs < 1:
            raise ConfigError(f"epochs must be a positive integer, got {self.epochs!r}")
        if int(self.batch_size) != self.batch_size or self.batch_size < 2:
            raise ConfigError(f"batch_size must be an integer >= 2, got {self.batch_size!r}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be positive, got {self.lr!r}")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ConfigError("momentum must be in [0, 1) and weight_decay >= 0")

    def _prepare(self, images: Any, y: Any) -> tuple[list[np.ndarray], np.ndarray, NetSpec]:
        self._validate()
        X = as_images(images)
        yy = np.asarray(y)
        if yy.ndim != 1 or len(yy) != len(X):
            raise DataError(
                f"y must be 1-D with one label per image ({len(X)}), got shape {yy.shape}"
            )
        self.classes_, y_idx = np.unique(yy, return_inverse=True)
        if len(self.classes_) < 2:
            raise DataError("y must contain at least two classes")
        views = cut_strips(X, self.m, pad=self.pad)
        self.image_shape_ = tuple(int(s) for s in X.shape[1:])
        self.strip_hw_ = (int(views[0].shape[2]), int(views[0].shape[3]))
        self.spec_ = get_arch(self.arch, X.shape[1])
        self.device_ = resolve_device(self.device)
        return views, y_idx.astype(np.int64), self.spec_

    def _active_strip(self, images: Any) -> np.ndarray:
        """The active strip of full images (strips of other clients are discarded)."""
        check_fitted(self, "active_", "image_shape_")
        X = as_images(images)
        if tuple(X.shape[1:]) != self.image_shape_:
            raise DataError(
                f"images have shape {X.shape[1:]}, the model was fit on {self.image_shape_}"
            )
        return cut_strips(X, self.m, pad=self.pad)[self.i - 1]

    def _logits(self, strip: np.ndarray) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def predict_proba(self, images: Any) -> np.ndarray:
        """Class probabilities from the active client's strip alone."""
        logits = self._logits(self._active_strip(images))
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, images: Any) -> np.ndarray:
        """Labels predicted by the active client alone (Eq. 11)."""
        logits = self._logits(self._active_strip(images))
        return np.asarray(self.classes_[np.argmax(logits, axis=1)])

    def score(self, images: Any, y: Any) -> float:
        """Accuracy of :meth:`predict`."""
        return float(np.mean(self.predict(images) == np.asarray(y)))


class _ActiveOnly(_StripEstimator):
    """APFed and SingleVL: the active client ends with a self-contained model."""

    active_: ActiveClient

    def _fit_parties(
        self,
        views: list[np.ndarray],
        y: np.ndarray,
        spec: NetSpec,
        variant: str,
        lams: list[float],
        tau: float,
    ) -> None:
        m, i = self.m, self.i
        seeds = _seeds(self.random_state, m)
        common: dict[str, Any] = {
            "lr": self.lr,
            "momentum": self.momentum,
            "weight_decay": self.weight_decay,
            "device": self.device_,
        }
        passives: list[PassiveClient] = []
        if variant != "single":
            for k in range(m):
                if k != i - 1:
                    name = f"passive{k + 1}"
                    passives.append(
                        PassiveClient(
                            name,
                            views[k],
                            variant,
                            spec,
                            seed=seeds[len(passives) + 1],
                            tau=tau,
                            **common,
                        )
                    )
        active = ActiveClient(
            views[i - 1],
            y,
            len(self.classes_),
            spec,
            passives=[p.name for p in passives],
            lams=lams,
            seed=seeds[0],
            epochs=self.epochs,
            batch_size=self.batch_size,
            **common,
        )
        self.transport_ = federate([active, *passives], APFED_POLICY)
        self.history_ = active.run()
        self.active_ = active
        self.passives_ = passives
        self.run_stats_ = self.message_log_ = self.transport_.log.summary()

    def _logits(self, strip: np.ndarray) -> np.ndarray:
        return _net_logits(self.active_.net, strip, self.device_)

    def export(self, path: str | Path, *, torchscript: bool = False) -> Path:
        """Write the active client's standalone model to the folder ``path``.

        See :func:`fedviews.deep._export.export_active_model`; load it with
        :func:`fedviews.deep._export.load_active_model` (no passive client needed).
        """
        from fedviews.deep._export import export_active_model

        check_fitted(self, "active_", "image_shape_")
        settings = {
            k: v for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")
        }
        return export_active_model(
            path,
            self.active_.net,
            spec=self.spec_,
            strip_hw=self.strip_hw_,
            image_shape=self.image_shape_,
            m=self.m,
            i=self.i,
            pad=self.pad,
            classes=self.classes_,
            method=type(self).__name__ if not isinstance(self, APFed) else f"APFed-{self.variant}",
            settings=settings,
            torchscript=torchscript,
        )


@register_estimator("apfed")
class APFed(_ActiveOnly):
    """APFed-R / APFed-C: train with passive clients, predict with the active client alone.

    Parameters
    ----------
    variant : {"R", "C"}
        Passive loss: reconstruction (decoder, MSE) or contrastive (encoder, Eq. 14).
    m, i : int
        ``m-i`` setting: ``m`` horizontal strips, strip ``i`` (1-based) is active.
    lam : float or sequence of float
        ``λ_p`` (Eq. 8), one value for all ``m - 1`` passive clients or one each; ``>= 0``.
    tau : float
        Contrastive temperature (APFed-C).
    epochs, batch_size, lr, momentum, weight_decay
        SGD settings of every party (paper: lr 1e-3, momentum 0.9, weight decay 1e-4).
    pad : bool
        Zero-pad images at the bottom when their height is not a multiple of ``m``.
    arch : {"auto", "table3", "table4"}
        Networks of the paper's Table 3 (1 channel) or Table 4 (3 channels).
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    random_state : int

    Attributes
    ----------
    classes_ : ndarray
    active_ : ActiveClient
        The trained active client (``active_.net`` is ``g_T ∘ f_A``).
    passives_ : list of PassiveClient
    history_ : list of float
        Mean ``L_A`` per epoch.
    transport_ : Transport
        The federation (its ``log`` records every message).
    run_stats_, message_log_ : dict
        ``transport_.log.summary()``.

    Examples
    --------
    >>> model = APFed(variant="C", m=2, i=1, lam=1.0, epochs=5).fit(images, y)  # doctest: +SKIP
    >>> model.predict(new_images)                                              # doctest: +SKIP
    >>> model.export("model_dir")                                              # doctest: +SKIP
    """

    def __init__(
        self,
        variant: str = "R",
        m: int = 2,
        i: int = 1,
        lam: float | Sequence[float] = 1.0,
        tau: float = 0.5,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        pad: bool = False,
        arch: str = "auto",
        device: str = "auto",
        random_state: int = 0,
    ) -> None:
        self.variant = variant
        self.m = m
        self.i = i
        self.lam = lam
        self.tau = tau
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.pad = pad
        self.arch = arch
        self.device = device
        self.random_state = random_state

    def _lams(self) -> list[float]:
        lam = self.lam
        lams = (
            [float(lam)] * (self.m - 1)
            if isinstance(lam, (int, float))
            else [float(v) for v in lam]
        )
        if len(lams) != self.m - 1:
            raise ConfigError(f"lam has {len(lams)} values for {self.m - 1} passive clients")
        if any(not np.isfinite(v) or v < 0 for v in lams):
            raise ConfigError(
                f"lam (the trade-off λ of Eq. 8) must be finite and >= 0, got {self.lam!r}"
            )
        return lams

    def fit(self, images: Any, y: Any) -> APFed:
        """Train the active and passive clients together on full images.

        Parameters
        ----------
        images : array, shape (n, H, W) or (n, C, H, W)
            Aligned images; strip ``k`` of each goes to client ``k``.
        y : array, shape (n,)
            Labels (held by the active client only).
        """
        if self.variant not in ("R", "C"):
            raise ConfigError(
                f"variant must be 'R' (reconstruction) or 'C' (contrastive), got {self.variant!r}"
            )
        if self.tau <= 0:
            raise ConfigError(f"tau must be positive, got {self.tau!r}")
        check_setting(self.m, self.i)
        lams = self._lams()
        views, y_idx, spec = self._prepare(images, y)
        self._fit_parties(views, y_idx, spec, self.variant, lams, self.tau)
        return self


@register_estimator("singlevl")
class SingleVL(_ActiveOnly):
    """SingleVL baseline: the active client trained on its own strip alone.

    Same parameters as :class:`APFed` without ``variant``, ``lam`` and ``tau``;
    it is exactly APFed with ``λ = 0``. It still runs the federation runtime, with
    the active client as its only party: ``transport_`` (an empty message log),
    ``run_stats_`` and ``history_`` are those of :class:`APFed`.
    """

    def __init__(
        self,
        m: int = 2,
        i: int = 1,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        pad: bool = False,
        arch: str = "auto",
        device: str = "auto",
        random_state: int = 0,
    ) -> None:
        self.m = m
        self.i = i
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.pad = pad
        self.arch = arch
        self.device = device
        self.random_state = random_state

    def fit(self, images: Any, y: Any) -> SingleVL:
        """Train ``g_T ∘ f_A`` on the active strip of ``images``."""
        views, y_idx, spec = self._prepare(images, y)
        self._fit_parties(views, y_idx, spec, "single", [], 1.0)
        return self


_FILLS = ("zero", "mean", "random")


@register_estimator("tvfl")
class TVFL(_StripEstimator):
    """Typical split-learning VFL trained on all ``m`` strips; predicts with the active strip only.

    Parameters
    ----------
    fill : {"zero", "mean", "random"}
        Default replacement for the passive representations at inference:
        TVFL-0, TVFL-A (training mean) or TVFL-R (standard normal).
    m, i, epochs, batch_size, lr, momentum, weight_decay, pad, arch, device, random_state
        As in :class:`APFed`.

    Attributes
    ----------
    classes_ : ndarray
    active_ : TVFLActiveClient
    passives_ : list of TVFLPassiveClient
    history_ : list of float
        Mean training loss per epoch.
    transport_ : Transport
        The federation (its ``log`` records every message).
    run_stats_, message_log_ : dict
        ``transport_.log.summary()``.
    """

    def __init__(
        self,
        fill: str = "zero",
        m: int = 2,
        i: int = 1,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        pad: bool = False,
        arch: str = "auto",
        device: str = "auto",
        random_state: int = 0,
    ) -> None:
        self.fill = fill
        self.m = m
        self.i = i
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.pad = pad
        self.arch = arch
        self.device = device
        self.random_state = random_state

    def fit(self, images: Any, y: Any) -> TVFL:
        """Train all ``m`` clients together (split learning, labels on the active client)."""
        if self.fill not in _FILLS:
            raise ConfigError(f"fill must be one of {_FILLS}, got {self.fill!r}")
        views, y_idx, spec = self._prepare(images, y)
        seeds = _seeds(self.random_state, self.m)
        common: dict[str, Any] = {
            "lr": self.lr,
            "momentum": self.momentum,
            "weight_decay": self.weight_decay,
            "device": self.device_,
        }
        passives = [
            TVFLPassiveClient(f"passive{k + 1}", views[k], spec, seed=seeds[n + 1], **common)
            for n, k in enumerate(k for k in range(self.m) if k != self.i - 1)
        ]
        active = TVFLActiveClient(
            views[self.i - 1],
            y_idx,
            len(self.classes_),
            spec,
            passives=[p.name for p in passives],
            position=self.i - 1,
            seed=seeds[0],
            epochs=self.epochs,
            batch_size=self.batch_size,
            **common,
        )
        self.transport_ = federate([active, *passives], TVFL_POLICY)
        self.history_ = active.run()
        self.active_ = active
        self.passives_ = passives
        self.run_stats_ = self.message_log_ = self.transport_.log.summary()
        return self

    def _logits(self, strip: np.ndarray, fill: str | None = None) -> np.ndarray:
        fill = self.fill if fill is None else fill
        if fill not in _FILLS:
            raise ConfigError(f"fill must be one of {_FILLS}, got {fill!r}")
        a = self.active_
        a.encoder.eval()
        a.head.eval()
        gen = torch.Generator().manual_seed(int(self.random_state))
        out = []
        with torch.no_grad():
            for start in range(0, len(strip), _EVAL_BATCH):
                x = to_tensor(strip[start : start + _EVAL_BATCH], self.device_, torch.float32)
                out.append(to_numpy(a.logits_alone(x, fill, gen)))
        return np.concatenate(out).astype(np.float64)

    def predict(self, images: Any, fill: str | None = None) -> np.ndarray:
        """Labels from the active strip alone, passive representations replaced per ``fill``."""
        logits = self._logits(self._active_strip(images), fill)
        return np.asarray(self.classes_[np.argmax(logits, axis=1)])

    def score(self, images: Any, y: Any, fill: str | None = None) -> float:
        return float(np.mean(self.predict(images, fill) == np.asarray(y)))
