"""Split learning on image strips, shared by APFed, its TVFL baselines and the split NN (torch-free).

The active party (``federation.label_owner``) and passive parties each hold their
strip of every image (:class:`ActivePassive`); a small coordinator that holds no data
drives the epochs (:class:`EpochDriver`). Every party's initial weights come from
its own stream (:func:`party_seeds`) and it trains with the same SGD settings
(:func:`check_training`, :func:`sgd_settings`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedviews._params import COUNT, POSITIVE, check_value, spec
from fedviews.data import PartyData, check_numeric
from fedviews.deep._common import history_columns, history_records, history_summary, progress_tail
from fedviews.errors import DataError, ProtocolError
from fedviews.federation import Algorithm, Coordinator, RunSpec, reported_share, spawn_streams

#: SGD settings of a split-learning party: ``epochs``, ``batch_size``, ``lr``, ``momentum``
#: and ``weight_decay`` (APFed, SingleVL, TVFL, split NN)
EPOCHS = COUNT
BATCH_SIZE = spec(int, low=2)
MOMENTUM = spec(float, low=0, high=1, high_open=True)
WEIGHT_DECAY = spec(float, low=0)


def check_training(
    epochs: Any, batch_size: Any, lr: float, momentum: float, weight_decay: float
) -> None:
    """The SGD settings of an estimator without ``Params`` (TVFL), checked as the ``Params``
    fields declare them (ConfigError if bad)."""
    for name, value, meta in (
        ("epochs", epochs, EPOCHS),
        ("batch_size", batch_size, BATCH_SIZE),
        ("lr", lr, POSITIVE),
        ("momentum", momentum, MOMENTUM),
        ("weight_decay", weight_decay, WEIGHT_DECAY),
    ):
        check_value(name, value, meta)


def sgd_settings(p: Any, device: Any) -> dict[str, Any]:
    """The keyword arguments every party's constructor takes: ``p``'s SGD settings, ``device``."""
    return {"lr": p.lr, "momentum": p.momentum, "weight_decay": p.weight_decay, "device": device}


def party_seeds(seed: int | None, n: int) -> list[int]:
    """One initialisation seed per stream of ``spawn_streams(seed, n)`` (APFed: ``[0]`` the
    active party, ``[1 + j]`` the ``j``-th passive party; split NN: ``parties[j]``'s)."""
    return [int(s.generate_state(1)[0]) for s in spawn_streams(seed, n)]


def active_of(run: RunSpec) -> str:
    return run.federation.owners()[0]


class ActivePassive(Algorithm):
    """Split learning on image strips: the active party (``federation.label_owner``) and
    passive parties, each holding its strip ``(n, h, W)`` or ``(n, C, h, W)`` of every image
    (or, where ``tables`` is set, its columns ``(n, k)`` of a table)."""

    peer_to_peer = True  # the active party and the passive parties exchange every batch
    #: the parties may hold table columns ``(n, k)`` as well as image strips
    tables = False

    def role(self, run: RunSpec, party: str) -> str:
        return "active" if party == active_of(run) else "passive"

    def planned_rounds(self, run: RunSpec, setup: Mapping[str, Any]) -> int:
        return int(run.params.epochs)

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(run, party, data)
        if data.features.ndim not in ((2, 3, 4) if self.tables else (3, 4)):
            columns = " or table columns (n, k)" if self.tables else ""
            raise DataError(
                f"{party!r} must hold image strips (n, h, W) or (n, C, h, W){columns}, got X "
                f"of shape {data.features.shape}"
            )


def cut_images(X: np.ndarray, m: int, pad: bool) -> list[np.ndarray]:
    """Images cut into ``m`` equal strips, top to bottom, as
    :func:`fedviews.deep._apfed_nets.cut_strips` (grey ``(n, H, W)`` images: ``(n, h, W)``)."""
    from fedviews.deep._apfed_nets import cut_strips

    arr = np.asarray(X)
    strips = cut_strips(arr[:, None] if arr.ndim == 3 else arr, m, pad=pad)
    return [s[:, 0] if arr.ndim == 3 else s for s in strips]


def party_features(X: Sequence[Any], n: int, name: str, count: str) -> list[np.ndarray]:
    """A list of ``n`` parties' features (strips ``(n, rows, W)``, table columns ``(n, k)``,
    any non-empty ``(n_samples, ...)``), validated: numeric, finite, one array per party, the
    same samples in each (a :class:`DataError` naming ``name``, the party's index and the
    parameter ``count`` else)."""
    if len(X) != n:
        raise DataError(
            f"{name} has {len(X)} arrays but {count}={n}; pass one array of features per party"
        )
    arrays = [check_numeric(a, f"{name}[{k}]") for k, a in enumerate(X)]
    for k, a in enumerate(arrays):
        if a.ndim < 2 or 0 in a.shape:
            raise DataError(
                f"{name}[{k}] must be a non-empty (n_samples, ...) array: a strip (n, rows, "
                f"width) or table columns (n, k), got shape {a.shape}"
            )
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise DataError(f"{name}[{k}] (party {k}'s features) contains NaN or infinite values")
    shapes = [a.shape for a in arrays]
    if len({s[0] for s in shapes}) != 1:
        raise DataError(
            f"mismatched shapes {shapes}: every party needs the same samples, in the same "
            "order; align the parties by sample ID first"
        )
    return arrays


def passives_of(run: RunSpec) -> list[str]:
    active = active_of(run)
    return [p for p in run.federation.parties if p != active]


# --------------------------------------------------------------------------- the driver


class EpochDriver(Coordinator):
    """The coordinator of split learning on strips (APFed, the split NN): asks the active
    party for one epoch at a time (``train``, round = epoch).

    It holds no data and no model; it receives only the scalar metrics of each
    epoch (``history``: loss, the test accuracy where the active party reports it)
    and tells the passive parties when an epoch is over (``done``, where a deployment
    checkpoints). ``shuffle(epoch)``: the epoch's shuffle seed, sent along (the active
    party draws its own when it is None).
    """

    def __init__(
        self,
        name: str,
        active: str,
        epochs: int,
        *,
        train: str,
        passives: Sequence[str] = (),
        done: str | None = None,
        shuffle: Callable[[int], int] | None = None,
    ) -> None:
        super().__init__(name)
        self.active, self.passives, self.epochs = active, list(passives), int(epochs)
        self.train, self.done, self.shuffle = train, done, shuffle
        self.history: list[dict[str, float]] = []

    def run(self, on_round_end: Callable[[int], None] | None = None) -> list[dict[str, float]]:
        """Train the epochs left; ``on_round_end(epoch)`` after each (the checkpoint point)."""
        while len(self.history) < self.epochs:
            epoch = len(self.history) + 1
            t0 = time.perf_counter()
            meta = {} if self.shuffle is None else {"shuffle_seed": self.shuffle(epoch)}
            reply = self.send(self.active, self.train, meta=meta, round=epoch)
            if reply.number("epoch") != epoch:
                raise ProtocolError(
                    f"{self.active!r} reported epoch {reply.meta.get('epoch')!r}, expected {epoch}",
                    party=self.active,
                )
            rec = {"epoch": float(epoch), "loss": reply.number("loss")}
            if "accuracy" in reply.meta:
                rec["accuracy"] = reported_share(reply, "accuracy")
            if self.done and self.passives:
                self.broadcast(self.passives, self.done, round=epoch)
            rec["seconds"] = time.perf_counter() - t0
            self.history.append(rec)
            if on_round_end is not None:
                on_round_end(epoch)
        return self.history

    def progress(self) -> list[str]:
        """One line per finished epoch."""
        return [
            f"epoch {int(rec['epoch'])}: loss {rec['loss']:.4f}{progress_tail(rec)}"
            for rec in list(self.history)
        ]

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics, arrays)``: the per-epoch records and the final accuracy."""
        metrics = history_summary(self.history, "epochs_done")
        return metrics, {k: np.asarray(v) for k, v in metrics["history"].items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v, np.float64) for k, v in history_columns(self.history).items()}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.history = history_records(state)
