"""What every fedviews estimator shares, below the algorithm packages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedviews.errors import DataError


def store_params(est: Any, args: Mapping[str, Any]) -> None:
    """scikit-learn's ``__init__`` contract: store every parameter as given, unvalidated.

    An estimator's ``__init__`` calls ``store_params(self, locals())`` first; the
    parameters of its signature (scikit-learn's ``_get_param_names``) are stored in
    signature order, anything else in ``args`` (``self``) is skipped. Validation and
    derived state belong to ``fit``.
    """
    names = set(est._get_param_names())
    for name, value in args.items():
        if name in names:
            setattr(est, name, value)


def is_int(value: Any, low: int) -> bool:
    """``value`` is an integer ``>= low`` (a bool or a float is not): for hyper-parameter checks."""
    return (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and bool(value >= low)
    )


def is_real(value: Any, *, finite: bool = True) -> bool:
    """``value`` is a real number (a bool is not), finite unless ``finite=False``."""
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, (bool, np.bool_))
        and (not finite or bool(np.isfinite(value)))
    )


def accuracy(predicted: np.ndarray, y: Any, sample_weight: Any = None) -> float:
    """The (``sample_weight``-weighted) fraction of ``predicted`` equal to ``y``; a
    :class:`DataError` unless ``y`` (and the weights) hold one entry per prediction."""
    yy = np.asarray(y)
    if yy.ndim == 2 and yy.shape[1] == 1:
        yy = yy.ravel()
    if yy.shape != predicted.shape:
        raise DataError(
            f"y has shape {yy.shape}, expected ({len(predicted)},): one label per sample"
        )
    if sample_weight is None:
        return float(np.mean(predicted == yy))
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        w = np.full(0, np.nan)  # not numbers: the DataError below
    if w.shape != yy.shape or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        raise DataError(
            f"sample_weight must be {len(yy)} finite weights >= 0, not all zero (one per "
            f"sample), got shape {w.shape}"
        )
    return float(np.average(predicted == yy, weights=w))
