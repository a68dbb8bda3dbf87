"""What every fedviews estimator shares, below the algorithm packages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
