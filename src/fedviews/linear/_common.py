"""Helpers shared by the linear multi-view algorithms."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
from threadpoolctl import threadpool_limits

from fedviews.errors import ConfigError, DataError

__all__ = [
    "as_param",
    "check_weights",
    "orthonormal_nonnegative",
    "per_party",
    "select_top_features",
    "small_blas",
]


@contextlib.contextmanager
def small_blas() -> Iterator[None]:
    """Run BLAS single-threaded inside the IRLS loops.

    The loops factorise many small (d <= a few thousand) matrices; multi-threaded
    OpenBLAS spends more time synchronising than computing on them, and on a busy
    2-core machine it was measured 100x slower (0.7 ms vs 96 ms per Woodbury step
    on a 200 x 300 view).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def per_party(
    value: float | Sequence[float], n: int, name: str, *, positive: bool = True
) -> list[float]:
    """Broadcast a scalar hyper-parameter to ``n`` parties, or check a per-party list."""
    if isinstance(value, (list, tuple, np.ndarray)):
        vals = [float(v) for v in value]
        if len(vals) != n:
            raise ConfigError(f"{name} has {len(vals)} values but there are {n} parties")
    else:
        try:
            vals = [float(cast(float, value))] * n  # anything float() takes; else ConfigError
        except (TypeError, ValueError):
            raise ConfigError(
                f"{name} must be a number or a list of numbers, got {value!r}"
            ) from None
    for v in vals:
        if not np.isfinite(v) or (v <= 0 if positive else v < 0):
            raise ConfigError(f"{name} must be {'> 0' if positive else '>= 0'}, got {v}")
    return vals


def check_weights(params: Any, n: int | None = None) -> None:
    """Check a params dataclass's ``beta``/``zeta`` (one value, or one per party or view:
    ``n`` of them when ``n`` is known), ``eta > 0`` and ``eps > 0``."""
    for name in ("beta", "zeta"):
        value = getattr(params, name)
        count = n if n is not None else (len(value) if isinstance(value, tuple) else 1)
        per_party(value, count, name)
    per_party(params.eta, 1, "eta")
    if not params.eps > 0:
        raise ConfigError(f"eps must be > 0, got {params.eps}")


def as_param(value: Any) -> Any:
    """A per-party list as the tuple a frozen params dataclass holds; scalars as they are."""
    return tuple(value) if isinstance(value, (list, tuple, np.ndarray)) else value


def orthonormal_nonnegative(n: int, c: int, rng: np.random.Generator) -> np.ndarray:
    """A random ``(n, c)`` matrix with ``Z^T Z = I`` and ``Z >= 0`` (Algorithm 1, line 1).

    A random cluster-indicator matrix with columns scaled to unit norm: every row
    has one non-zero entry, every column at least one (when ``n >= c``).
    """
    if n < c:
        raise DataError(f"need at least as many samples ({n}) as classes ({c})")
    labels = np.concatenate([np.arange(c), rng.integers(0, c, size=n - c)])
    rng.shuffle(labels)
    Z = np.zeros((n, c))
    Z[np.arange(n), labels] = 1.0
    return Z / np.sqrt(Z.sum(axis=0, keepdims=True))


def select_top_features(importances: np.ndarray, percent: float) -> np.ndarray:
    """Indices of the top ``percent`` % features by importance (at least one), best first.

    Ties are broken by feature index (stable), so the selection is deterministic.
    """
    if not 0 < percent <= 100:
        raise ConfigError(f"percent must be in (0, 100], got {percent}")
    d = len(importances)
    k = max(1, int(round(d * percent / 100.0)))
    order = np.argsort(-np.asarray(importances), kind="stable")
    return order[:k]


class ConsensusState:
    """Checkpoint state of a server that keeps a consensus ``Z`` (MMVFL, V-FedMV).

    Mixed into the server: it has ``Z``, ``objective`` (one value per finished
    round) and ``converged``, and its ``run`` goes on after ``len(objective)``.
    """

    Z: np.ndarray
    objective: list[float]
    converged: bool

    def state_dict(self) -> dict[str, np.ndarray]:
        """The server's state after a round: ``Z``, the objective history, ``converged``."""
        return {
            "Z": self.Z,
            "objective": np.asarray(self.objective, dtype=np.float64),
            "converged": np.asarray(self.converged),
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`: ``run`` goes on with the next round."""
        if state["Z"].shape != self.Z.shape:
            raise DataError(
                f"the saved Z has shape {state['Z'].shape}, this run needs {self.Z.shape}; "
                "resume with the same data and config"
            )
        self.Z = np.array(state["Z"], dtype=np.float64)
        self.objective = [float(f) for f in state["objective"]]
        self.converged = bool(state["converged"])


def restored_w_z(
    party: str,
    x_shape: tuple[int, ...],
    z_shape: tuple[int, ...],
    state: Mapping[str, np.ndarray],
) -> tuple[np.ndarray | None, np.ndarray]:
    """A linear party's checkpointed ``(W, Z_k)``, checked against its data ``(n, d)``."""
    (n, d), c = x_shape, z_shape[1]
    W = state.get("W")
    if state["Z_k"].shape != (n, c) or (W is not None and W.shape != (d, c)):
        raise DataError(
            f"party {party!r}: the saved state does not fit this party's data "
            f"(Z_k {state['Z_k'].shape} vs {(n, c)}, W {None if W is None else W.shape} "
            f"vs {(d, c)}); resume with the same data and config"
        )
    return (
        None if W is None else np.array(W, dtype=np.float64),
        np.array(state["Z_k"], dtype=np.float64),
    )
