"""Server optimizers for federated aggregation (FedOpt family), on dicts of arrays.

Every optimizer turns the clients' model *updates* into a new global model.
An update is ``delta_k = local_k - global`` (Algorithm 1 of Multi-VFL, line 9),
and the pseudo-gradient step direction is their mean::

    delta = mean_k delta_k

========================  =====================================================
``fedavg``                ``x <- x + delta``  (the average of the local models)
``fedadam``               ``m <- b1 m + (1 - b1) delta``;
                          ``v <- b2 v + (1 - b2) delta^2``
``fedyogi``               ``m`` as Adam; ``v <- v - (1 - b2) delta^2 sign(v - delta^2)``,
                          from ``v = tau^2`` (Reddi et al. 2021, Algorithm 2)
``feddemonadam``          ``b1_r = b1 (1 - r/R) / ((1 - b1) + b1 (1 - r/R))``;
                          ``m <- b1_r m + delta``; ``v`` as Adam
========================  =====================================================

The adaptive optimizers then step (Multi-VFL Algorithm 1, line 7, with the
bias correction of Adam)::

    x <- x + eta * c_r * m / (sqrt(v) + tau),   c_r = sqrt(1 - b2^r) / (1 - b1^r)

For FedDemonAdam ``m`` is a decayed *sum* (Demon, Chen et al.), not an
average, so only the second moment is bias-corrected: ``c_r = sqrt(1 - b2^r)``.
``r`` counts the server steps taken, from 1. The second moment uses
``delta^2`` as in Adam and Reddi et al. (2021); Algorithm 1 line 6 of the
Multi-VFL paper prints ``m^2``, which we read as a typo.

The functions work on numpy arrays or torch tensors alike (only ``+ - * /``,
``sqrt`` and ``sign`` through the array's own methods are used).
"""

from __future__ import annotations

import difflib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, DataError

Params = dict[str, Any]


def mean_update(updates: Sequence[Mapping[str, Any]]) -> Params:
    """Average the clients' updates name by name (the pseudo-gradient ``delta``).

    Raises
    ------
    DataError
        No updates, or updates that do not name the same arrays with the same shapes.
    """
    if not updates:
        raise DataError("the server received no model updates to aggregate")
    names = set(updates[0])
    for k, u in enumerate(updates[1:], start=1):
        if set(u) != names:
            raise DataError(
                f"update {k} names {sorted(u)} but update 0 names {sorted(names)}; "
                "every client must send the same model"
            )
    out: Params = {}
    for name in updates[0]:
        total = updates[0][name]
        for u in updates[1:]:
            if tuple(u[name].shape) != tuple(total.shape):
                raise DataError(
                    f"update {name!r}: shapes {tuple(u[name].shape)} and {tuple(total.shape)} differ"
                )
            total = total + u[name]
        out[name] = total / len(updates)
    return out


def _sqrt(a: Any) -> Any:
    return a.sqrt() if hasattr(a, "sqrt") else np.sqrt(a)


def _sign(a: Any) -> Any:
    return a.sign() if hasattr(a, "sign") else np.sign(a)


def demon_beta(beta1: float, r: int, total_rounds: int) -> float:
    """Demon's decayed momentum at round ``r`` of ``total_rounds`` (Algorithm 1, line 2).

    ``beta1 (1 - r/R) / ((1 - beta1) + beta1 (1 - r/R))``: ``beta1`` at ``r = 0``,
    ``0`` at ``r = R``. Computed from the initial ``beta1`` every round.
    """
    frac = max(0.0, 1.0 - r / total_rounds)
    den = (1.0 - beta1) + beta1 * frac
    return 0.0 if den == 0 else beta1 * frac / den


class ServerOptimizer(ABC):
    """Holds the server state (moments, step count) between rounds.

    Call :meth:`step` once per round with the current global parameters and
    the clients' updates; it returns the new global parameters (new arrays;
    the inputs are not modified).
    """

    name: str = ""

    def __init__(self) -> None:
        self.t = 0

    def step(self, params: Mapping[str, Any], updates: Sequence[Mapping[str, Any]]) -> Params:
        """One server round: ``params`` (global) + clients' ``updates`` → new global."""
        delta = mean_update(updates)
        missing = set(params) ^ set(delta)
        if missing:
            raise DataError(f"updates and global model disagree on arrays {sorted(missing)}")
        self.t += 1
        return self._apply(params, delta)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The optimizer's state as named arrays (checkpoints; see :meth:`load_state`)."""
        return {"t": np.array(self.t, dtype=np.int64)}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`: the next :meth:`step` equals the uninterrupted one."""
        if "t" not in state:
            raise DataError(f"{self.name} state lacks the step count 't'")
        self.t = int(state["t"])

    @abstractmethod
    def _apply(self, params: Mapping[str, Any], delta: Params) -> Params: ...


class FedAvg(ServerOptimizer):
    """Federated averaging: the new global model is the mean of the local models."""

    name = "fedavg"

    def _apply(self, params: Mapping[str, Any], delta: Params) -> Params:
        return {k: params[k] + delta[k] for k in params}


class FedAdam(ServerOptimizer):
    """FedAdam (Reddi et al. 2021) with Adam's bias correction (Multi-VFL Algorithm 1).

    Parameters
    ----------
    lr : float
        Server learning rate ``eta``.
    beta1, beta2 : float
        Moment decay rates, in ``[0, 1)``.
    tau : float
        Adaptivity (stability) constant added to ``sqrt(v)``.
    """

    name = "fedadam"

    def __init__(
        self, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3
    ) -> None:
        super().__init__()
        for key, val in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= val < 1.0:
                raise ConfigError(f"{key} must be in [0, 1), got {val}")
        if not (0 < lr < math.inf and 0 < tau < math.inf):  # NaN fails too
            raise ConfigError(f"server lr and tau must be positive, got lr={lr}, tau={tau}")
        self.lr, self.beta1, self.beta2, self.tau = lr, beta1, beta2, tau
        self.m: Params = {}
        self.v: Params = {}

    def _beta1(self) -> float:
        return self.beta1

    def _first_moment(self, name: str, d: Any) -> Any:
        b1 = self._beta1()
        return d * (1 - b1) if name not in self.m else self.m[name] * b1 + d * (1 - b1)

    def _second_moment(self, name: str, d: Any) -> Any:
        d2, b2 = d * d, self.beta2
        return d2 * (1 - b2) if name not in self.v else self.v[name] * b2 + d2 * (1 - b2)

    def _correction(self) -> float:
        return math.sqrt(1 - self.beta2**self.t) / (1 - self.beta1**self.t)

    def _apply(self, params: Mapping[str, Any], delta: Params) -> Params:
        c = self.lr * self._correction()
        out: Params = {}
        for k in params:
            self.m[k] = self._first_moment(k, delta[k])
            self.v[k] = self._second_moment(k, delta[k])
            out[k] = params[k] + self.m[k] * c / (_sqrt(self.v[k]) + self.tau)
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        return {
            **super().state_dict(),
            **{f"m/{k}": np.asarray(v) for k, v in self.m.items()},
            **{f"v/{k}": np.asarray(v) for k, v in self.v.items()},
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        super().load_state(state)
        self.m = {k[2:]: np.array(v) for k, v in state.items() if k.startswith("m/")}
        self.v = {k[2:]: np.array(v) for k, v in state.items() if k.startswith("v/")}


class FedYogi(FedAdam):
    """FedYogi: Adam with Yogi's additive second-moment update (Reddi et al. 2021).

    The second moment starts at ``tau^2`` as in Reddi et al.'s Algorithm 2
    (``v_{-1} >= tau^2``); FedAdam's starts at 0 as in Adam, whose bias
    correction both apply.
    """

    name = "fedyogi"

    def _second_moment(self, name: str, d: Any) -> Any:
        d2 = d * d
        # v starts at tau^2 (Reddi et al. 2021, Algorithm 2: v_{-1} >= tau^2), not at 0
        v = self.v[name] if name in self.v else d2 * 0 + self.tau**2
        return v - d2 * _sign(v - d2) * (1 - self.beta2)


class FedDemonAdam(FedAdam):
    """FedDemonAdam: FedAdam whose momentum decays over the rounds (Demon).

    Parameters
    ----------
    total_rounds : int
        ``R`` in the decay rule; ``beta1`` reaches 0 at round ``R``.
    lr, beta1, beta2, tau
        As :class:`FedAdam`; ``beta1`` is the initial momentum.
    """

    name = "feddemonadam"

    def __init__(
        self,
        total_rounds: int,
        lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
    ) -> None:
        super().__init__(lr, beta1, beta2, tau)
        if total_rounds < 1:
            raise ConfigError(f"total_rounds must be >= 1, got {total_rounds}")
        self.total_rounds = total_rounds

    def _beta1(self) -> float:
        return demon_beta(self.beta1, self.t, self.total_rounds)

    def _first_moment(self, name: str, d: Any) -> Any:
        return d if name not in self.m else self.m[name] * self._beta1() + d

    def _correction(self) -> float:
        return math.sqrt(1 - self.beta2**self.t)


SERVER_OPTIMIZERS: dict[str, type[ServerOptimizer]] = {
    "fedavg": FedAvg,
    "fedadam": FedAdam,
    "fedyogi": FedYogi,
    "feddemonadam": FedDemonAdam,
}


def make_server_optimizer(
    name: str,
    *,
    lr: float = 1e-3,
    beta1: float = 0.9,
    beta2: float = 0.99,
    tau: float = 1e-3,
    total_rounds: int = 1,
) -> ServerOptimizer:
    """Build a server optimizer by name (``fedavg``, ``fedadam``, ``fedyogi``, ``feddemonadam``).

    ``fedavg`` ignores ``lr``, ``beta1``, ``beta2`` and ``tau``.

    Raises
    ------
    ConfigError
        Unknown name (the message names the closest known one) or invalid hyper-parameters.
    """
    key = str(name).lower().replace("-", "").replace("_", "")
    if key not in SERVER_OPTIMIZERS:
        match = difflib.get_close_matches(key, list(SERVER_OPTIMIZERS), n=1, cutoff=0.3)
        hint = f"; did you mean {match[0]!r}?" if match else ""
        raise ConfigError(
            f"unknown server optimizer {name!r}{hint} (known: {sorted(SERVER_OPTIMIZERS)})"
        )
    if key == "fedavg":
        return FedAvg()
    if key == "feddemonadam":
        return FedDemonAdam(total_rounds, lr, beta1, beta2, tau)
    adam = FedYogi if key == "fedyogi" else FedAdam
    return adam(lr, beta1, beta2, tau)
