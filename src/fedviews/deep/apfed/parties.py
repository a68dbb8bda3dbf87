"""APFed-R / APFed-C (Liu et al., "Active-Passive Federated Learning for
Vertically Partitioned Multi-view Data") and the SingleVL baseline.

``m-i`` setting: images cut horizontally into ``m`` strips; strip ``i`` and all
labels on the active client, every other strip on its own passive client. The
algorithm is defined once (:class:`~fedviews.deep.apfed.spec.APFedAlgorithm`: params,
roles, policy, the epoch driver, the messages); it builds these parties from each one's
own data, in one process (:class:`~fedviews.deep.apfed.APFed`) as in a deployed party
process. This module never imports the spec.

* The **active client** (:class:`ActiveClient`, role ``"active"``) holds ``f_A``
  and ``g_T``. Per batch it computes ``h_A = f_A(x_A)`` and sends ``h_A`` to
  every passive client.
* A **passive client** (:class:`PassiveClient`, role ``"passive"``) computes its
  loss ``L_p`` on the batch of its own strip: APFed-R reconstructs the strip from
  ``h_A`` with a decoder (Eq. 12's per-sample L2 norm by default, ``recon_loss``);
  APFed-C encodes its strip to ``h_p`` and uses the contrastive loss of Eq. 14/16 with temperature ``tau``. It
  updates its own parameters with the *unscaled* ``∂L_p/∂Θ_p`` (Eq. 10) and
  replies with ``grad_h_A = λ_p ∂L_p/∂h_A``.
* **Where λ is applied**: ``λ_p`` belongs to the active client's objective
  (Eq. 8); it is sent as a scalar in the metadata of each ``h_A`` message and
  the passive client multiplies its gradient by it before replying. The active
  client back-propagates ``∂L_A/∂h_A + Σ_p λ_p ∂L_p/∂h_A`` (Eq. 9) through
  ``f_A``; ``g_T`` sees only ``L_A``.
* After training the active client predicts alone (Eq. 11); see
  :meth:`APFed.export` and :func:`fedviews.deep.load_active_model`.

Weight decay (``r_A``, ``r_a``, ``r_p`` of Eqs. 6-7) is the optimiser's L2
weight decay. ``λ = 0`` reproduces :class:`SingleVL` bit for bit: both draw
the same seeds, initialise ``f_A``/``g_T`` identically and add an exact zero.
SingleVL and the TVFL baselines are in :mod:`fedviews.deep.apfed.baselines`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fedviews.deep._apfed_nets import APFedNets
from fedviews.deep._common import (
    load_module,
    load_optimizer,
    module_arrays,
    net_logits,
    optimizer_arrays,
    train_mode,
    zero_grads,
)
from fedviews.deep._factory import factory_name
from fedviews.deep._fusedstep import step_optimizers
from fedviews.deep._split import SplitBottom, SplitTop, sgd
from fedviews.errors import DataError, MissingDependency, ProtocolError
from fedviews.federation import (
    Blame,
    Codec,
    Message,
    handles,
    largest_input,
)

try:
    import torch
    from torch.nn import functional as F
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

__all__ = ["ActiveClient", "PassiveClient", "contrastive_loss", "reconstruction_loss"]


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


def reconstruction_loss(x_hat: Any, x: Any, kind: str = "l2") -> Any:
    """APFed-R's ``ℓ_p`` (Eq. 12) averaged over the batch (Eq. 7).

    ``"l2"``: ``mean_i ||x_i − x̂_i||_2`` (the ``L_q`` norm of each sample's
    residual with ``q = 2``; the paper does not give ``q``). ``"mse"``: the mean
    of the squared residual over every pixel of the batch (``F.mse_loss``).
    """
    if kind == "mse":
        return F.mse_loss(x_hat, x)
    return torch.linalg.vector_norm((x - x_hat).flatten(1), ord=2, dim=1).mean()


# -- APFed parties -----------------------------------------------------------
class PassiveClient(SplitBottom):
    """A passive client: its own strip (or table columns) and decoder (APFed-R) or encoder
    (APFed-C).

    Parameters
    ----------
    variant : {"R", "C"}
    nets : APFedNets
        Its network: ``nets.passive(variant, strip, rep_shape)``.
    rep_shape : tuple of int
        The per-sample shape of the ``h_A`` it receives (the setup's, from the active
        party's ``f_A``).
    tau : float
        Contrastive temperature (APFed-C).
    recon_loss : {"l2", "mse"}
        APFed-R's ``ℓ_p`` (:func:`reconstruction_loss`).
    codecs : (Codec, Codec)
        How ``h_A`` arrives and ``grad_h_A`` leaves.
    name, view, seed, lr, momentum, weight_decay, device
        As in :class:`~fedviews.deep._split.SplitBottom`.
    """

    def __init__(
        self,
        name: str,
        view: np.ndarray,
        variant: str,
        nets: APFedNets,
        rep_shape: tuple[int, ...],
        *,
        tau: float = 0.5,
        recon_loss: str = "l2",
        codecs: tuple[Codec, Codec] = (Codec(), Codec()),
        **kw: Any,
    ) -> None:
        super().__init__(name, view, lambda shape: nets.passive(variant, shape, rep_shape), **kw)
        self.variant = variant
        self.tau = tau
        self.recon_loss = recon_loss
        self.act_codec, self.grad_codec = codecs  # how h_A arrives and grad_h_A leaves
        self.rep_shape = tuple(rep_shape)
        self.losses: list[float] = []
        self._unread: list[torch.Tensor] = []  # losses not in ``losses`` yet: no sync per batch
        self.epochs_done = 0

    def local_loss(self, h_a: Any, x: Any) -> Any:
        """``L_p`` of Eq. 7 without the weight decay term (that is in the optimiser)."""
        if self.variant == "R":
            return reconstruction_loss(self.net(h_a), x, self.recon_loss)
        return contrastive_loss(h_a, self.net(x), self.tau)

    @handles("apfed.epoch")
    def _on_epoch(self, msg: Message) -> None:
        self.start_epoch(msg)

    @handles("apfed.forward")
    def _on_forward(self, msg: Message) -> Message:
        idx = self.batch_rows(msg)
        shape = (len(idx), *self.rep_shape)
        h = self.act_codec.tensor(msg, "h_A", shape, self.device).requires_grad_(True)
        train_mode(self.net)
        x = self._X.index_select(0, idx)
        loss = self.local_loss(h, x)
        zero_grads(self.opt)
        loss.backward()
        assert h.grad is not None
        lam = msg.number("lam")
        grad = h.grad * lam
        # (the largest input: the active party's h_A or lam, or its own features)
        blame = largest_input(
            self.name,
            {
                msg.sender: {"h_A": h, "lam": np.asarray(lam, dtype=np.float64)},
                self.name: {"features": x},
            },
        )
        step_optimizers([self.opt])
        self._unread.append(loss.detach())
        arrays = self.grad_codec.pack("grad_h_A", grad, lent=True)
        return self.reply(msg, arrays=arrays, blame=blame)

    @handles("apfed.epoch_done")
    def _on_epoch_done(self, msg: Message) -> None:
        """Epoch ``msg.round`` is over (a deployment checkpoints here)."""
        self.epochs_done = int(msg.round)
        self._read_losses()

    def _read_losses(self) -> None:
        """Move the losses of the batches so far to :attr:`losses` (one host sync)."""
        if self._unread:
            self.losses += [float(v) for v in torch.stack(self._unread).tolist()]
            self._unread.clear()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Its network, optimiser state and losses (a checkpoint at an epoch boundary)."""
        self._read_losses()
        return {
            **super().state_dict(),
            "losses": np.asarray(self.losses, dtype=np.float64),
            "epochs_done": np.asarray(self.epochs_done, dtype=np.int64),
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict` (raises DataError if it does not fit)."""
        super().load_state(state)
        self.losses = [float(v) for v in np.asarray(state.get("losses", []))]
        self._unread.clear()
        self.epochs_done = int(state.get("epochs_done", 0))


class ActiveClient(SplitTop):
    """The active client: strip ``i`` (or its table columns), all labels, ``f_A`` and ``g_T``; trains one epoch per
    ``apfed.train`` of the driver. With no passive clients it is SingleVL.

    Parameters
    ----------
    view, y : ndarray
        Its strip ``(n, C, h, W)`` (or its table columns ``(n, k)``) and the class indices
        ``0..n_classes-1``.
    n_classes : int
    nets : APFedNets
        Its networks ``f_A`` and ``g_T`` (:meth:`APFedNets.active`).
    lams : list of float
        ``λ_p`` for each passive client.
    codecs : (Codec, Codec)
        How ``h_A`` leaves and ``grad_h_A`` arrives.
    passives, seed, epochs, batch_size, lr, momentum, weight_decay, device
        As in :class:`~fedviews.deep._split.SplitTop`.
    """

    _transient: ClassVar[Mapping[str, Callable[[], Any]]] = {"_blame_next": lambda: None}

    def __init__(
        self,
        view: np.ndarray,
        y: np.ndarray,
        n_classes: int,
        nets: APFedNets,
        *,
        lams: Sequence[float] = (),
        name: str = "active",
        codecs: tuple[Codec, Codec] = (Codec(), Codec()),
        **kw: Any,
    ) -> None:
        super().__init__(name, view, y, **kw)
        self.act_codec, self.grad_codec = codecs  # how h_A leaves and grad_h_A arrives
        self.lams = [float(v) for v in lams]
        self.net = nets.active(self.input_shape, n_classes, self._seed).to(self.device)
        self.opt = sgd(self.net.parameters(), **self.sgd)
        self.nets = nets
        self.classes = np.arange(n_classes)  # the labels of the class indices
        #: how its export describes the model (m-i setting, image shape, settings)
        self.model_info: dict[str, Any] = {}
        self._test: tuple[np.ndarray, np.ndarray] | None = None
        self._blame_next: Blame | None = None  # who its next h_A names if it is not finite

    @handles("apfed.train")
    def _on_train(self, msg: Message) -> Message:
        """Train epoch ``msg.round`` (1-based); reply with its scalar metrics only."""
        if msg.round != len(self.history) + 1:
            raise ProtocolError(
                f"{self.name}: asked for epoch {msg.round} after {len(self.history)} epochs"
            )
        loss = self.train_epoch(msg.round)
        meta: dict[str, Any] = {"epoch": len(self.history), "loss": loss}
        if self._test is not None:
            meta["accuracy"] = self.test_accuracy()
        return self.reply(msg, meta=meta)

    def train_epoch(self, round: int) -> float:
        """One epoch over all batches (its messages numbered ``round``); its mean ``L_A``."""
        epoch = len(self.history)
        # summed on the device, in float64 as Python would: no host sync per batch
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for b, idx in self.epoch_batches("apfed.epoch", round):
            total += self._step(epoch, b, idx, round).double() * len(idx)
        self.history.append(float(total) / len(self._X))
        return self.history[-1]

    def _step(self, epoch: int, b: int, idx: torch.Tensor, step: int) -> torch.Tensor:
        """One batch; its loss ``L_A`` (a detached tensor on the device)."""
        train_mode(self.net)
        h = self.net.encoder(self._X.index_select(0, idx))
        h_cut = h.detach().requires_grad_(True)
        loss = F.cross_entropy(self.net.head(h_cut), self._y.index_select(0, idx))
        received = []
        if self.passives:
            # every passive party at once (over gRPC they compute in parallel)
            replies = self.scatter(
                "apfed.forward",
                # lent: it never writes h (kept for its graph), the passive parties read it
                {p: self.act_codec.pack("h_A", h, lent=True) for p in self.passives},
                meta={"epoch": epoch, "batch": b},
                meta_for={p: {"lam": lam} for p, lam in zip(self.passives, self.lams, strict=True)},
                round=step,
                blame=self._blame_next,
            )
            shape = tuple(h.shape)
            received = [
                self.grad_codec.tensor(replies[p], "grad_h_A", shape, self.device)
                for p in self.passives
            ]
        zero_grads(self.opt)
        loss.backward()
        assert h_cut.grad is not None
        grad = h_cut.grad
        for g in received:
            grad = grad + g
        h.backward(grad)
        # who its next h_A names if it is not finite: a passive party whose huge gradient
        # made its weights overflow in this step
        inputs = {p: {"grad_h_A": g} for p, g in zip(self.passives, received, strict=True)}
        self._blame_next = largest_input(self.name, inputs) if received else None
        step_optimizers([self.opt])
        return loss.detach()

    # -- evaluating alone (Eq. 11) ----------------------------------------------------
    def set_test(self, view: np.ndarray, y: np.ndarray) -> None:
        """Its own strip of held-out images and their class indices (``-1``: unseen class)."""
        if len(view) != len(y):
            raise DataError(f"{len(view)} test strips but {len(y)} test labels")
        self._test = (np.asarray(view, dtype=np.float32), np.asarray(y, dtype=np.int64))

    def logits(self, view: np.ndarray) -> np.ndarray:
        """Logits of ``g_T(f_A(x))`` on strips of its own view (no passive client needed)."""
        return net_logits(self.net, view, self.device)

    def test_accuracy(self) -> float:
        """Accuracy on :meth:`set_test`'s strips, predicted alone (Eq. 11)."""
        if self._test is None:
            raise ProtocolError(f"{self.name}: no test split (set_test)")
        view, y = self._test
        return float(np.mean(np.argmax(self.logits(view), axis=1) == y))

    # -- its model ------------------------------------------------------------------------
    def model_meta(self, **override: Any) -> dict[str, Any]:
        """``model.json`` of its export: :attr:`model_info` (``override`` wins), networks (the
        paper's ``arch``, the import paths of user factories), classes."""
        from fedviews.deep._export import FORMAT

        arch = self.nets.paper_arch()
        return {
            "format": FORMAT,
            **self.model_info,
            **override,
            "arch": None if arch is None else asdict(arch),
            "networks": {
                k: factory_name(v) for k in ("encoder", "head") if (v := getattr(self.nets, k))
            },
            # table columns: their per-sample shape (k,); a strip: its (h, W)
            **(
                {"strip_hw": None, "input_shape": list(self.input_shape)}
                if self.nets.table
                else {"strip_hw": list(self.strip_hw)}
            ),
            "classes": np.asarray(self.classes).tolist(),
        }

    def export(self, folder: str | Path, *, torchscript: bool = False, **override: Any) -> Path:
        """Write its standalone model to ``folder`` (see :meth:`model_meta` for ``override``:
        ``method``, ``m``, ``i``, ``pad``, ``image_shape``, ``settings``)."""
        from fedviews.deep._export import export_active_model

        meta = self.model_meta(**override)
        return export_active_model(folder, self.net, meta, torchscript=torchscript)

    def results(self) -> dict[str, np.ndarray]:
        """Its complete model (``net/*``, ``classes``, ``model_json``) and per-epoch losses."""
        return {
            **module_arrays("net", self.net),
            "classes": np.asarray(self.classes),
            "history": np.asarray(self.history, dtype=np.float64),
            "model_json": np.asarray(json.dumps(self.model_meta())),
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        """Network, optimiser state and per-epoch losses (a checkpoint at an epoch boundary)."""
        return {
            **module_arrays("net", self.net),
            **optimizer_arrays("opt", self.opt),
            "history": np.asarray(self.history, dtype=np.float64),
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`; the epochs' shuffle seeds go on where they stopped."""
        load_module("net", self.net, state, self.name)
        load_optimizer("opt", self.opt, state)
        self.history = [float(v) for v in np.asarray(state["history"])]
        self._rng = np.random.default_rng(self._seed)
        for _ in self.history:  # one shuffle seed drawn per finished epoch
            self._rng.integers(2**31)
