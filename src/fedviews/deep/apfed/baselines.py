"""The APFed paper's baselines: SingleVL and TVFL-0 / TVFL-A / TVFL-R.

:class:`SingleVL`: the active client trained on its own strip alone (the ``apfed`` spec
with the active party only; exactly APFed with ``λ = 0``).

TVFL, the typical split-learning VFL baselines:

Every client encodes its own strip (:class:`TVFLPassiveClient`, a
:class:`~fedviews.deep._split.SplitBottom` that sends ``h_p`` and receives
``grad_h_p``); the label owner (:class:`TVFLActiveClient`, which drives the
epochs) encodes its strip too and trains a head on all ``m`` representations.
At inference without the passive clients their representations are replaced by
self-generated ones (APFed paper, Sec. 5.2): zeros (TVFL-0), "the average of the
active client's representations" (TVFL-A: the mean of the active encoder's
output over its training strip, computed locally at the end of training) or
standard-normal noise (TVFL-R). Only ``h_p`` (passive → active) and
``grad_h_p`` (active → passive) cross the privacy barrier (:data:`TVFL_POLICY`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedviews._classifier import accuracy, round_progress
from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.deep._apfed_nets import Encoder, Head, NetSpec, check_setting
from fedviews.deep._common import EVAL_BATCH, net_logits, train_mode, zero_grads
from fedviews.deep._fusedstep import step_optimizers
from fedviews.deep._split import SplitBottom, SplitTop, StripEstimator, build_module, sgd
from fedviews.deep._strips import check_training, party_seeds, sgd_settings
from fedviews.deep.apfed.estimator import ActiveOnly
from fedviews.errors import ConfigError, MissingDependency
from fedviews.federation import Coordinator, Message, PrivacyPolicy, federate, handles

try:
    import torch
    from torch.nn import functional as F
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

#: only the representations and their gradients cross; the label owner drives every step
TVFL_POLICY = PrivacyPolicy.of(
    "tvfl",
    {("passive", "active"): ["h_p"], ("active", "passive"): ["grad_h_p"]},
    kinds={("active", "passive"): ["tvfl.epoch", "tvfl.forward", "tvfl.backward"]},
)
_FILLS = ("zero", "mean", "random")


def _check_fill(fill: str) -> str:
    """``fill`` if it names a replacement of the passive representations (ConfigError if not)."""
    if fill not in _FILLS:
        raise ConfigError(f"fill must be one of {_FILLS}, got {fill!r}")
    return fill


class TVFLPassiveClient(SplitBottom):
    """A TVFL client: its strip and encoder; sends ``h_p``, receives ``grad_h_p``: the gradient
    of batch ``b`` with the request for batch ``b + 1`` (``tvfl.forward``), applied first, and
    the epoch's last one alone (``tvfl.backward``).

    ``seed``, ``lr``, ``momentum``, ``weight_decay``, ``device``: as in
    :class:`~fedviews.deep._split.SplitBottom`.
    """

    gradient_kinds = {"tvfl.backward": "grad_h_p"}
    carried_gradients = {"tvfl.forward": "grad_h_p"}

    def __init__(self, name: str, view: np.ndarray, spec: NetSpec, **kw: Any) -> None:
        super().__init__(name, view, lambda shape: Encoder(spec, (shape[1], shape[2])), **kw)

    @handles("tvfl.epoch")
    def _on_epoch(self, msg: Message) -> None:
        self.start_epoch(msg)

    @handles("tvfl.forward")
    def _on_forward(self, msg: Message) -> Message:
        return self.forward_batch(msg, "h_p")

    @handles("tvfl.backward")
    def _on_backward(self, msg: Message) -> None:
        self.backward_batch(msg)


class TVFLActiveClient(SplitTop, Coordinator):
    """The TVFL label owner: its own strip ``i`` and encoder, and the head on all ``m`` representations.

    At inference without the passive clients, their representations are
    replaced by zeros (TVFL-0), the mean of the active encoder's training
    representations (TVFL-A, :attr:`active_mean`) or standard-normal noise (TVFL-R).
    ``position``: the index of its strip among the ``m``; the other keywords as in
    :class:`~fedviews.deep._split.SplitTop`.
    """

    def __init__(
        self,
        view: np.ndarray,
        y: np.ndarray,
        n_classes: int,
        spec: NetSpec,
        *,
        position: int,
        name: str = "active",
        **kw: Any,
    ) -> None:
        super().__init__(name, view, y, **kw)
        self.position = position  # index of the active strip among the m views
        h, w = self.strip_hw  # TVFL's parties hold image strips
        hw = (h, w)
        m = len(self.passives) + 1
        self.rep_shape = spec.out_shape(*hw)
        self.encoder = build_module(self._seed, lambda: Encoder(spec, hw), self.device)
        self.head = build_module(
            self._seed + 1,
            lambda: Head(m * spec.feature_dim(*hw), spec.hidden, n_classes),
            self.device,
        )
        self.opt = sgd([*self.encoder.parameters(), *self.head.parameters()], **self.sgd)
        self.active_mean: Any = None

    def _join(self, h_a: Any, others: list[Any]) -> Any:
        hs = list(others)
        hs.insert(self.position, h_a)
        return torch.cat([h.flatten(1) for h in hs], dim=1)

    def run(self, on_epoch_end: Callable[[int], None] | None = None) -> list[float]:
        """Train every epoch; ``on_epoch_end(epoch)`` after each."""
        step = 0
        for _ in range(self.epochs):
            # summed on the device, in float64 as Python would: no host sync per batch
            total = torch.zeros((), dtype=torch.float64, device=self.device)
            # the gradients of batch b travel with the request for batch b + 1 (one round trip
            # per batch); each passive party applies them before its forward of b + 1
            grads: dict[str, dict[str, Any]] = {p: {} for p in self.passives}
            for b, idx in self.epoch_batches("tvfl.epoch", step):
                train_mode(self.encoder)
                train_mode(self.head)
                h_a = self.encoder(self._X.index_select(0, idx))
                shape = (len(idx), *self.rep_shape)
                got = self.scatter("tvfl.forward", grads, meta={"batch": b}, round=step)
                hps = [
                    got[p].tensor("h_p", shape, np.float32, self.device).requires_grad_(True)
                    for p in self.passives
                ]
                loss = F.cross_entropy(
                    self.head(self._join(h_a, hps)), self._y.index_select(0, idx)
                )
                zero_grads(self.opt)
                loss.backward()
                step_optimizers([self.opt])
                grads = {}
                for p, hp in zip(self.passives, hps, strict=True):
                    assert hp.grad is not None
                    grads[p] = {"grad_h_p": hp.grad}
                total += loss.detach().double() * len(idx)
                step += 1
            if any(grads.values()):  # the epoch's last batch
                self.scatter("tvfl.backward", grads, round=step - 1)
            self.history.append(float(total) / len(self._X))
            if on_epoch_end is not None:
                on_epoch_end(len(self.history))
        self.active_mean = self._mean_representation()
        return self.history

    def progress(self) -> list[str]:
        """One line per finished epoch."""
        return [f"epoch {e}: loss {v:.4f}" for e, v in enumerate(self.history, start=1)]

    def _mean_representation(self) -> Any:
        """TVFL-A's fill: the trained active encoder's output averaged over its training strip."""
        self.encoder.eval()
        acc = torch.zeros(self.rep_shape, dtype=torch.float64, device=self.device)
        with torch.no_grad():
            for start in range(0, len(self._X), EVAL_BATCH):
                acc += self.encoder(self._X[start : start + EVAL_BATCH]).double().sum(0)
        return (acc / len(self._X)).float()

    def logits_alone(self, x: Any, fill: str, generator: Any) -> Any:
        """Logits from the active strip only; passive representations replaced per ``fill``."""
        h_a = self.encoder(x)
        shape = (len(x), *self.rep_shape)
        if fill == "zero":
            others = [torch.zeros(shape, device=self.device) for _ in self.passives]
        elif fill == "mean":
            others = [self.active_mean.expand(shape) for _ in self.passives]
        else:
            others = [
                torch.randn(shape, generator=generator).to(self.device) for _ in self.passives
            ]
        return self.head(self._join(h_a, others))


@register_estimator("tvfl")
class TVFL(StripEstimator):
    """Typical split-learning VFL trained on all ``m`` strips; predicts with the active strip only.

    Parameters
    ----------
    fill : {"zero", "mean", "random"}
        Default replacement for the passive representations at inference:
        TVFL-0, TVFL-A (mean of the active client's training representations)
        or TVFL-R (standard normal).
    m, i, epochs, batch_size, lr, momentum, weight_decay, pad, arch, device, random_state, verbose
        As in :class:`~fedviews.deep.APFed`.

    Attributes
    ----------
    active_ : TVFLActiveClient
    passives_ : list of TVFLPassiveClient
    classes_, history_, transport_, run_stats_, message_log_
        As in :class:`~fedviews.deep.APFed` (``history_``: mean training loss per epoch).
    """

    fill: str
    random_state: int
    active_: TVFLActiveClient

    def __init__(
        self,
        fill: str = "zero",
        m: int = 2,
        i: int = 1,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        pad: bool = False,
        arch: str = "auto",
        device: str = "auto",
        random_state: int = 0,
        verbose: bool = False,
    ) -> None:
        store_params(self, locals())

    def fit(self, images: Any, y: Any) -> TVFL:
        """Train all ``m`` clients together (split learning, labels on the active client)."""
        _check_fill(self.fill)
        check_setting(self.m, self.i)
        check_training(self.epochs, self.batch_size, self.lr, self.momentum, self.weight_decay)
        views, labels = self._prepare(images, y)
        y_idx = np.searchsorted(self.classes_, labels).astype(np.int64)
        seeds = party_seeds(self.random_state, self.m)
        #: the seed of the random fill at predict (``random_state``, or a fresh one for None)
        self.fill_seed_ = (
            party_seeds(None, 1)[0] if self.random_state is None else int(self.random_state)
        )
        common = sgd_settings(self, self.device_)
        spec = self.spec_
        assert spec is not None  # TVFL runs the paper's networks (_prepare's get_arch)
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
            epochs=int(self.epochs),
            batch_size=int(self.batch_size),
            **common,
        )
        transport = federate([active, *passives], TVFL_POLICY)
        with round_progress("TVFL", self.epochs, active.progress, self.verbose) as on_epoch:
            active.run(on_epoch)
        self._keep_run(active, passives, transport)
        return self

    _active_nets = ("encoder", "head")

    def _live_state(self) -> dict[str, Any]:
        fill = {"passives": self.active_.passives, "active_mean": self.active_.active_mean}
        return {**super()._live_state(), **fill}

    def _trained_active(self, view: np.ndarray, state: dict[str, Any]) -> TVFLActiveClient:
        assert self.spec_ is not None  # TVFL runs the paper's networks
        active = TVFLActiveClient(
            view,
            np.zeros(0, np.int64),
            len(self.classes_),
            self.spec_,
            passives=state["passives"],
            position=self.setting_[1] - 1,
            seed=0,
            device=self.device_,
        )
        mean = state["active_mean"]
        active.active_mean = None if mean is None else mean.to(self.device_)
        return active

    def _logits(self, strip: np.ndarray, fill: str | None = None) -> np.ndarray:
        how = _check_fill(self.fill if fill is None else fill)
        a = self.active_
        a.encoder.eval()
        a.head.eval()
        gen = torch.Generator().manual_seed(self.fill_seed_)
        return net_logits(lambda x: a.logits_alone(x, how, gen), strip, self.device_)

    def predict(self, images: Any, fill: str | None = None) -> np.ndarray:
        """Labels from the active strip alone, passive representations replaced per ``fill``."""
        logits = self._logits(self._active_strip(images), fill)
        return np.asarray(self.classes_[np.argmax(logits, axis=1)])

    def score(
        self, images: Any, y: Any, sample_weight: Any = None, fill: str | None = None
    ) -> float:
        """Accuracy of :meth:`predict` with ``fill`` (scikit-learn's ``score``)."""
        return accuracy(self.predict(images, fill), y, sample_weight)


@register_estimator("singlevl")
class SingleVL(ActiveOnly):
    """SingleVL baseline: the active client trained on its own strip alone.

    Same parameters as :class:`APFed` without ``variant``, ``recon_loss``, ``lam``,
    ``tau``, ``decoder`` and ``passive_encoder`` (``verbose``: a bar per epoch on stderr); it is exactly APFed with ``λ = 0``. It runs the same protocol with the active
    client as the only party (the driver still asks it for every epoch), so
    ``transport_``, ``run_stats_`` and ``history_`` are those of :class:`APFed`.
    """

    def __init__(
        self,
        m: int = 2,
        i: int = 1,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        pad: bool = False,
        arch: str = "auto",
        encoder: Any = "",
        head: Any = "",
        device: str = "auto",
        random_state: int | None = 0,
        transport: Any = None,
        verbose: bool = False,
    ) -> None:
        store_params(self, locals())

    def fit(self, images: Any, y: Any) -> SingleVL:
        """Train ``g_T ∘ f_A`` on the active strip of ``images`` (or, ``images`` a list of the
        ``m`` parties' own features, as :meth:`APFed.fit` takes it, on the active party's)."""
        self._fit(
            images, y, passives=False, variant="R", lam=0.0, tau=0.5, recon_loss="l2",
            wire_activations="none", wire_gradients="none", topk_ratio=0.1,
            decoder="", passive_encoder="",
        )  # fmt: skip
        return self
