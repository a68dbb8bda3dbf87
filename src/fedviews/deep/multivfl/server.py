"""Multi-VFL's aggregation server (role ``coordinator``): the global top model, the server
optimizer and the round loop (Algorithm 1, lines 3-10 and 14-16; see
:mod:`fedviews.deep.multivfl.parties` for the protocol)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedviews.deep._common import (
    history_columns,
    history_records,
    history_summary,
    prefixed,
    progress_tail,
    state_arrays,
    unprefixed,
)
from fedviews.deep._serveropt import ServerOptimizer
from fedviews.deep.multivfl.parties import _meta, _received
from fedviews.deep.multivfl.protocol import round_seed
from fedviews.errors import DataError, MissingDependency
from fedviews.federation import (
    Coordinator,
    Message,
    reported_share,
    secure_sum_setup,
    unmask_sum,
)

try:
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

__all__ = ["Server"]


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
                rec["accuracy"] = reported_share(rep, "accuracy")
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
