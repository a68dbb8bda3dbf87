"""The parties of the plain split NN (:mod:`fedviews.deep.splitnn.spec`, never imported here): torch lives here.

Networks come from :class:`SplitNets`: the bottom of every party is ``bottom(input_shape,
n_classes)`` (default :func:`bottom_mlp`), the label owner's top ``top(input_shape,
n_classes)`` on the parties' bottom outputs joined, its own first (default: none, the
logits are summed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.deep._common import (
    EVAL_BATCH,
    device_batches,
    load_module,
    module_arrays,
    to_numpy,
    to_tensor,
    zero_grads,
)
from fedviews.deep._common import as_strips as strips
from fedviews.deep._factory import build_network, logits, output_shape, resolve_factory
from fedviews.deep._fusedstep import stepping_with_staged
from fedviews.deep._split import SplitBottom
from fedviews.errors import MissingDependency, ProtocolError
from fedviews.federation import Blame, Message, handles, largest_input, lend

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc


def bottom_mlp(in_features: int, hidden: int, n_classes: int) -> nn.Module:
    """A bottom model: flatten, ``hidden`` ReLU units, ``n_classes`` logits."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, n_classes)
    )


@dataclass(frozen=True)
class SplitNets:
    """The networks of a split NN run: the ``bottom`` and ``top`` factories (callables or
    import paths, ``""``: the defaults), the number of classes and the default MLP's
    ``hidden`` units."""

    bottom: Any
    top: Any
    n_classes: int
    hidden: int

    def make_bottom(self, shape: tuple[int, ...], seed: int) -> nn.Module:
        """A party's bottom for per-sample inputs of ``shape``, drawn with ``seed``: it must
        return ``n_classes`` logits (summed without a top) or a vector (fed to the top)."""
        made = resolve_factory(self.bottom, "bottom")
        if made is None:
            made = lambda shape, n: bottom_mlp(math.prod(shape), self.hidden, n)  # noqa: E731
        n, summed = self.n_classes, not self.top

        def fits(out: tuple[int, ...]) -> str | None:
            if summed and out != (n,):
                return f"is {out}, not the ({n},) logits that the label owner sums (no top)"
            return None if len(out) == 1 else f"is {out}, not a vector (e,)"

        return build_network(
            made,
            (shape, n),
            field="bottom",
            seed=seed,
            input_shape=shape,
            output=fits,
            trained_alone=True,
        )

    def width(self, shape: tuple[int, ...]) -> int:
        """The width of what a bottom for per-sample inputs of ``shape`` returns (a module
        built for its shape only: the weights are its party's own)."""
        return output_shape(self.make_bottom(shape, 0), shape, "a bottom model")[0]

    def make_top(self, widths: list[int], seed: int) -> nn.Module | None:
        """The label owner's top on the joined ``(sum widths,)`` bottom outputs (None: the sum)."""
        made = resolve_factory(self.top, "top")
        if made is None:
            return None
        shape, n = (sum(widths),), self.n_classes
        return build_network(
            made,
            (shape, n),
            field="top",
            seed=seed,
            input_shape=shape,
            output=logits(n),
        )


class _MLPBottom(SplitBottom):
    """A split-NN party's features (training and test) and its bottom model with its own SGD."""

    def __init__(
        self,
        name: str,
        X: np.ndarray,
        X_test: np.ndarray | None,
        *,
        nets: SplitNets,
        seed: int,
        **sgd: Any,
    ) -> None:
        view = strips(X)
        super().__init__(name, view, lambda shape: nets.make_bottom(shape, seed), seed=seed, **sgd)
        self.n_classes = nets.n_classes
        self._X_test = None if X_test is None else to_tensor(strips(X_test), self.device)


class SplitNNPassive(_MLPBottom):
    """A passive party: its strip and bottom MLP; sends ``logits``, receives ``grad_logits``:
    the gradient of batch ``b`` with the request for batch ``b + 1`` (``splitnn.forward``),
    applied first, and the epoch's last one alone (``splitnn.backward``)."""

    gradient_kinds = {"splitnn.backward": "grad_logits"}
    carried_gradients = {"splitnn.forward": "grad_logits"}

    @handles("splitnn.epoch")
    def on_epoch(self, msg: Message) -> None:
        self.start_epoch(msg)

    @handles("splitnn.forward")
    def on_forward(self, msg: Message) -> Message:
        return self.forward_batch(msg, "logits")

    @handles("splitnn.backward")
    def on_backward(self, msg: Message) -> None:
        self.backward_batch(msg)

    @handles("splitnn.infer")
    def on_infer(self, msg: Message) -> Message:
        if self._X_test is None:
            raise ProtocolError(f"{self.name} holds no test strips")
        start, stop = int(msg.number("start")), int(msg.number("stop"))
        if not 0 <= start < stop <= len(self._X_test):
            raise ProtocolError(f"{msg.sender!r} asked for test rows {start}:{stop}")
        self.net.eval()
        with torch.no_grad():
            out = self.net(self._X_test[start:stop])
        return self.reply(msg, arrays={"logits": out})


class SplitNNActive(_MLPBottom):
    """The label owner: its features, bottom model and labels; its top model (the sum of the
    parties' logits by default).

    ``passives``: every passive party with the per-sample shape of its features (the setup's),
    from which it knows the width of the bottom outputs that party sends (checked on
    arrival); ``top_seed``: the initialisation seed of a user's top model.
    """

    def __init__(
        self,
        name: str,
        X: np.ndarray,
        y: np.ndarray,
        X_test: np.ndarray | None,
        y_test: np.ndarray | None,
        passives: Mapping[str, tuple[int, ...]],
        batch_size: int,
        *,
        nets: SplitNets,
        top_seed: int,
        **kw: Any,
    ) -> None:
        super().__init__(name, X, X_test, nets=nets, **kw)
        self.role = "active"
        self.y = to_tensor(np.asarray(y), self.device, torch.int64)
        self.y_test = None if y_test is None else np.asarray(y_test)
        self.passives, self.batch_size = list(passives), batch_size
        # what each passive party's bottom returns, from its input shape
        self.widths = {p: nets.width(shape) for p, shape in passives.items()}
        own = nets.width(tuple(self._X.shape[1:]))
        top = nets.make_top([own, *self.widths.values()], top_seed)
        self.top = None if top is None else top.to(self.device)
        #: the classes of its new rows (``fedviews predict``)
        self.predicted: np.ndarray | None = None
        if self.top is not None:
            self.opt.add_param_group({"params": list(self.top.parameters())})

    def _logits(self, replies: Mapping[str, Message], rows: int, grad: bool) -> list[Any]:
        return [
            replies[p]
            .tensor("logits", (rows, self.widths[p]), np.float32, self.device)
            .requires_grad_(grad)
            for p in self.passives
        ]

    def _joined(self, own: Any, theirs: list[Any]) -> Any:
        """The class logits: the top model on every party's output, or their sum."""
        if self.top is None:
            return own + sum(theirs)
        return self.top(torch.cat([own, *theirs], dim=1))

    def results(self) -> dict[str, np.ndarray]:
        """Its bottom network and its top model, if it has one."""
        top = {} if self.top is None else module_arrays("top", self.top)
        return {**super().results(), **top}

    def state_dict(self) -> dict[str, np.ndarray]:
        top = {} if self.top is None else module_arrays("top", self.top)
        return {**super().state_dict(), **top}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        super().load_state(state)
        if self.top is not None:
            load_module("top", self.top, state, self.name)

    @handles("splitnn.train")
    def on_train(self, msg: Message) -> Message:
        """One epoch; replies with its mean training loss and (``evaluate``) test accuracy."""
        seed = int(msg.number("shuffle_seed"))
        meta = {"shuffle_seed": seed, "batch_size": self.batch_size}
        self.broadcast(self.passives, "splitnn.epoch", meta=meta)
        self.net.train()
        if self.top is not None:
            self.top.train()
        # summed on the device, in float64 as Python would: no host sync per batch
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        rng = np.random.default_rng(seed)
        # the gradients of batch b travel with the request for batch b + 1: one round trip
        # per batch; each passive party applies them (and steps) before its forward of b + 1,
        # and this party steps before its own (in one process: one step for every party)
        grads: dict[str, dict[str, Any]] = {p: {} for p in self.passives}
        blame: Blame | None = None  # who made grads overflow, if they did
        # the largest |logits| of each party this epoch (its own too), on the device (no
        # sync): a party whose huge logits poisoned the top model, batches before the
        # gradients or the loss overflow, is still the largest input then
        seen: dict[str, Any] = {}
        stepping: list[torch.optim.Optimizer] = []  # its own step, once its gradients are in
        for b, idx in enumerate(device_batches(len(self._X), self.batch_size, rng, self.device)):
            with stepping_with_staged(stepping):
                got = self.scatter("splitnn.forward", grads, meta={"batch": b}, blame=blame)
            theirs = self._logits(got, len(idx), grad=True)
            own = self.net(self._X.index_select(0, idx))
            z = self._joined(own, theirs)
            loss = nn.functional.cross_entropy(z, self.y.index_select(0, idx))
            zero_grads(self.opt)
            loss.backward()
            grads = {  # lent: never read again here
                p: {"grad_logits": lend(t.grad)} for p, t in zip(self.passives, theirs, strict=True)
            }
            # (the largest input: a passive party's logits, or its own output)
            for p, t in [*zip(self.passives, theirs, strict=True), (self.name, own)]:
                top = t.detach().abs().amax()
                seen[p] = top if p not in seen else torch.maximum(seen[p], top)
            blame = largest_input(self.name, {p: {"logits": m} for p, m in seen.items()})
            stepping = [self.opt]
            total.add_(loss.detach(), alpha=len(idx))  # (in float64: exact, then rounded once)
        if stepping:  # the epoch's last batch
            with stepping_with_staged(stepping):
                self.scatter("splitnn.backward", grads, blame=blame)
        out: dict[str, Any] = {"epoch": msg.round, "loss": float(total) / len(self._X)}
        if not math.isfinite(out["loss"]) and blame is not None and (err := blame("loss")):
            raise err  # (else its receiver names this party for the loss it reports)
        if self._X_test is not None and self.y_test is not None:
            out["accuracy"] = float(np.mean(self.predict_test() == self.y_test))
        return self.reply(msg, meta=out)

    @handles("predict")
    def on_predict(self, msg: Message) -> None:
        """``fedviews predict``: the classes of the new rows it holds as its test rows."""
        self.predicted = self.predict_test()

    def predict_test(self) -> np.ndarray:
        """Class indices of the test rows: the argmax of :meth:`test_logits`."""
        return np.asarray(self.test_logits().argmax(1))

    def test_logits(self) -> np.ndarray:
        """The class logits of the test rows: its top model on every party's bottom output
        (the sum of every party's logits without one), the passive parties' asked for by
        ``splitnn.infer``."""
        assert self._X_test is not None
        self.net.eval()
        if self.top is not None:
            self.top.eval()
        out = []
        for start in range(0, len(self._X_test), EVAL_BATCH):
            stop = min(len(self._X_test), start + EVAL_BATCH)
            got = self.broadcast(
                self.passives, "splitnn.infer", meta={"start": start, "stop": stop}
            )
            with torch.no_grad():
                z = self._joined(
                    self.net(self._X_test[start:stop]), self._logits(got, stop - start, False)
                )
            out.append(to_numpy(z))
        return np.concatenate(out)
