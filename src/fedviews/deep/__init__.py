"""Deep (PyTorch) vertical FL algorithms: Multi-VFL, APFed, S-FedMV.

Requires the ``torch`` extra: ``pip install 'fedviews[torch]'``. Names load lazily,
so ``import fedviews.deep`` works without torch and the first use of a class
raises :class:`~fedviews.errors.MissingDependency` with the install hint.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedviews.deep._apfed_nets import parse_setting
    from fedviews.deep._apfed_spec import APFedParams, export_apfed_model
    from fedviews.deep._common import require_torch, resolve_device, seed_everything
    from fedviews.deep._export import load_active_model, predict_exported
    from fedviews.deep._gru import sequence_logits
    from fedviews.deep._multivfl_spec import MultiVFLParams, partition_label_owners
    from fedviews.deep._serveropt import make_server_optimizer
    from fedviews.deep._sfedmv_spec import SFedMVParams, deal_subjects, evenly_spaced, holdout_mask
    from fedviews.deep._tvfl import TVFL
    from fedviews.deep.apfed import APFed, SingleVL
    from fedviews.deep.multivfl import MultiVFL
    from fedviews.deep.sfedmv import SFedMV

_WHERE = {
    name: f"fedviews.deep.{module}"
    for module, names in [
        ("_apfed_nets", "parse_setting"),
        ("_apfed_spec", "APFedParams export_apfed_model"),
        ("_common", "require_torch resolve_device seed_everything"),
        ("_export", "load_active_model predict_exported"),
        ("_gru", "sequence_logits"),
        ("_multivfl_spec", "MultiVFLParams partition_label_owners"),
        ("_serveropt", "make_server_optimizer"),
        ("_sfedmv_spec", "SFedMVParams deal_subjects evenly_spaced holdout_mask"),
        ("_tvfl", "TVFL"),
        ("apfed", "APFed SingleVL"),
        ("multivfl", "MultiVFL"),
        ("sfedmv", "SFedMV"),
    ]
    for name in names.split()
}

#: names that load without torch (hyper-parameters read by deployment configs, data splits)
_NO_TORCH = frozenset(
    {"MultiVFLParams", "APFedParams", "SFedMVParams", "make_server_optimizer", "parse_setting"}
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
    return getattr(importlib.import_module(_WHERE[name]), name)
