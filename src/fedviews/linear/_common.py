"""Helpers shared by the linear multi-view algorithms."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from fedviews.errors import ConfigError, DataError

__all__ = ["orthonormal_nonnegative", "per_party", "select_top_features", "small_blas"]


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
            vals = [float(value)] * n  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(
                f"{name} must be a number or a list of numbers, got {value!r}"
            ) from None
    for v in vals:
        if not np.isfinite(v) or (v <= 0 if positive else v < 0):
            raise ConfigError(f"{name} must be {'> 0' if positive else '>= 0'}, got {v}")
    return vals


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
