"""What every fedviews estimator shares, below the algorithm packages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


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
