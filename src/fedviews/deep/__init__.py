"""Deep (PyTorch) vertical FL algorithms: Multi-VFL, APFed, S-FedMV and the split NN.

One package per algorithm (``multivfl``, ``apfed``, ``sfedmv``, ``splitnn``: ``spec``,
``parties``, ``estimator``, ...); shared code in modules of their own (``_common``,
``_serveropt``, ``_split``, ``_strips``, ``_apfed_nets``, ``_export``).

Requires the ``torch`` extra: ``pip install 'fedviews[torch]'``. Names load lazily,
so ``import fedviews.deep`` works without torch and the first use of a class
raises :class:`~fedviews.errors.MissingDependency` with the install hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.deep._apfed_nets import parse_setting
    from fedviews.deep._common import require_torch, resolve_device, seed_everything
    from fedviews.deep._export import load_active_model, predict_exported
    from fedviews.deep._serveropt import make_server_optimizer
    from fedviews.deep.apfed.baselines import TVFL, SingleVL
    from fedviews.deep.apfed.estimator import APFed
    from fedviews.deep.apfed.spec import APFedParams, export_apfed_model
    from fedviews.deep.multivfl.estimator import MultiVFL
    from fedviews.deep.multivfl.protocol import partition_label_owners
    from fedviews.deep.multivfl.spec import MultiVFLParams
    from fedviews.deep.sfedmv.estimator import SFedMV
    from fedviews.deep.sfedmv.nets import sequence_logits
    from fedviews.deep.sfedmv.spec import SFedMVParams, deal_subjects, evenly_spaced, holdout_mask
    from fedviews.deep.splitnn.estimator import SplitNN
    from fedviews.deep.splitnn.spec import SplitNNParams

_WHERE = exports(
    {
        "_apfed_nets": "parse_setting",
        "_common": "require_torch resolve_device seed_everything",
        "_export": "load_active_model predict_exported",
        "_serveropt": "make_server_optimizer",
        "apfed.baselines": "SingleVL TVFL",
        "apfed.estimator": "APFed",
        "apfed.spec": "APFedParams export_apfed_model",
        "multivfl.estimator": "MultiVFL",
        "multivfl.protocol": "partition_label_owners",
        "multivfl.spec": "MultiVFLParams",
        "sfedmv.estimator": "SFedMV",
        "sfedmv.nets": "sequence_logits",
        "sfedmv.spec": "SFedMVParams deal_subjects evenly_spaced holdout_mask",
        "splitnn.estimator": "SplitNN",
        "splitnn.spec": "SplitNNParams",
    }
)
_load = lazy_names(__name__, _WHERE)

#: names that load without torch (hyper-parameters read by deployment configs, data splits)
_NO_TORCH = frozenset(
    {"MultiVFLParams", "APFedParams", "SFedMVParams", "SplitNNParams"}
    | {"make_server_optimizer", "parse_setting"}
    | {"deal_subjects", "evenly_spaced", "holdout_mask", "partition_label_owners"}
)

__all__ = [
    "APFed",
    "APFedParams",
    "MultiVFL",
    "MultiVFLParams",
    "SFedMV",
    "SFedMVParams",
    "SingleVL",
    "SplitNN",
    "SplitNNParams",
    "TVFL",
    "deal_subjects",
    "evenly_spaced",
    "export_apfed_model",
    "holdout_mask",
    "load_active_model",
    "make_server_optimizer",
    "parse_setting",
    "partition_label_owners",
    "predict_exported",
    "require_torch",
    "resolve_device",
    "seed_everything",
    "sequence_logits",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'fedviews.deep' has no attribute {name!r}")
    from fedviews.deep._common import require_torch

    if name not in _NO_TORCH:
        require_torch()  # MissingDependency with the pip hint when torch is absent
    return _load(name)
