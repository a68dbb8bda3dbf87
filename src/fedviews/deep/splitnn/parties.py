"""The parties of the plain split NN (:mod:`fedviews.deep.splitnn.spec`, never imported here): torch lives here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedviews.deep._common import (
    EVAL_BATCH,
    batches,
    to_numpy,
    to_tensor,
)
from fedviews.deep._common import as_strips as strips
from fedviews.deep._split import SplitBottom
from fedviews.errors import MissingDependency, ProtocolError
from fedviews.federation import Message, handles

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


class _MLPBottom(SplitBottom):
    """A split-NN party's strips (training and test) and its bottom MLP with its own SGD."""

    def __init__(
        self,
        name: str,
        X: np.ndarray,
        X_test: np.ndarray | None,
        *,
        hidden: int,
        n_classes: int,
        seed: int,
        **sgd: Any,
    ) -> None:
        view = strips(X)
        C = view.shape[1]
        factory = lambda hw: bottom_mlp(C * hw[0] * hw[1], hidden, n_classes)  # noqa: E731
        super().__init__(name, view, factory, seed=seed, **sgd)
        self.n_classes = n_classes
        self._X_test = None if X_test is None else to_tensor(strips(X_test), self.device)


class SplitNNPassive(_MLPBottom):
    """A passive party: its strip and bottom MLP; sends ``logits``, receives ``grad_logits``."""

    @handles("splitnn.epoch")
    def on_epoch(self, msg: Message) -> None:
        self.start_epoch(msg)

    @handles("splitnn.forward")
    def on_forward(self, msg: Message) -> Message:
        return self.forward_batch(msg, "logits")

    @handles("splitnn.backward")
    def on_backward(self, msg: Message) -> None:
        self.backward_batch(msg, "grad_logits")

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
    """The label owner: its strip, bottom MLP and labels; the top model is the sum of logits."""

    def __init__(
        self,
        name: str,
        X: np.ndarray,
        y: np.ndarray,
        X_test: np.ndarray | None,
        y_test: np.ndarray | None,
        passives: Sequence[str],
        batch_size: int,
        **kw: Any,
    ) -> None:
        super().__init__(name, X, X_test, **kw)
        self.role = "active"
        self.y = to_tensor(np.asarray(y), self.device, torch.int64)
        self.y_test = None if y_test is None else np.asarray(y_test)
        self.passives, self.batch_size = list(passives), batch_size

    def _logits(self, replies: Mapping[str, Message], rows: int, grad: bool) -> list[Any]:
        shape = (rows, self.n_classes)
        return [
            replies[p].tensor("logits", shape, np.float32, self.device).requires_grad_(grad)
            for p in self.passives
        ]

    @handles("splitnn.train")
    def on_train(self, msg: Message) -> Message:
        """One epoch; replies with its mean training loss and (``evaluate``) test accuracy."""
        seed = int(msg.number("shuffle_seed"))
        meta = {"shuffle_seed": seed, "batch_size": self.batch_size}
        self.broadcast(self.passives, "splitnn.epoch", meta=meta)
        self.net.train()
        # summed on the device, in float64 as Python would: no host sync per batch
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        order = batches(len(self._X), self.batch_size, np.random.default_rng(seed))
        for b, idx in enumerate(order):
            got = self.broadcast(self.passives, "splitnn.forward", meta={"batch": b})
            theirs = self._logits(got, len(idx), grad=True)
            z = self.net(self._X[idx]) + sum(theirs)
            loss = nn.functional.cross_entropy(z, self.y[idx])
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            grads = {p: {"grad_logits": t.grad} for p, t in zip(self.passives, theirs, strict=True)}
            self.scatter("splitnn.backward", grads)
            total += loss.detach().double() * len(idx)
        out: dict[str, Any] = {"epoch": msg.round, "loss": float(total) / len(self._X)}
        if self._X_test is not None and self.y_test is not None:
            out["accuracy"] = float(np.mean(self.predict_test() == self.y_test))
        return self.reply(msg, meta=out)

    def predict_test(self) -> np.ndarray:
        """Class indices of the test rows: the sum of every party's logits."""
        assert self._X_test is not None
        self.net.eval()
        preds = []
        for start in range(0, len(self._X_test), EVAL_BATCH):
            stop = min(len(self._X_test), start + EVAL_BATCH)
            got = self.broadcast(
                self.passives, "splitnn.infer", meta={"start": start, "stop": stop}
            )
            with torch.no_grad():
                z = self.net(self._X_test[start:stop]) + sum(self._logits(got, stop - start, False))
            preds.append(to_numpy(z.argmax(1)))
        return np.concatenate(preds)
