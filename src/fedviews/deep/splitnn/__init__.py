"""A plain split neural network: the baseline the leakage audit compares with.

``spec`` (params, roles, policy, demo data; torch-free), ``parties`` (the active and
passive parties with their bottom models) and ``estimator`` (:class:`SplitNN`). The roles
and the epoch driver it shares with APFed are in :mod:`fedviews.deep._strips`. Names load
lazily: the spec's need no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.deep.splitnn.estimator import SplitNN
    from fedviews.deep.splitnn.parties import SplitNNActive, SplitNNPassive, bottom_mlp
    from fedviews.deep.splitnn.spec import (
        SPLITNN_SPEC,
        SplitNNAlgorithm,
        SplitNNParams,
        splitnn_policy,
    )

__all__ = [
    "SPLITNN_SPEC",
    "SplitNN",
    "SplitNNActive",
    "SplitNNAlgorithm",
    "SplitNNParams",
    "SplitNNPassive",
    "bottom_mlp",
    "splitnn_policy",
]

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "estimator": "SplitNN",
            "parties": "SplitNNActive SplitNNPassive bottom_mlp",
            "spec": "SPLITNN_SPEC SplitNNAlgorithm SplitNNParams splitnn_policy",
        }
    ),
)
