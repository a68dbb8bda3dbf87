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
    from fedviews.deep._multivfl_spec import MultiVFLParams
    from fedviews.deep._serveropt import make_server_optimizer
    from fedviews.deep._sfedmv_spec import SFedMVParams, deal_subjects, evenly_spaced, holdout_mask
    from fedviews.deep._tvfl import TVFL
    from fedviews.deep.apfed import APFed, SingleVL
    from fedviews.deep.multivfl import MultiVFL
    from fedviews.deep.sfedmv import SFedMV

_WHERE = {
    "APFed": "fedviews.deep.apfed",
    "APFedParams": "fedviews.deep._apfed_spec",
    "SingleVL": "fedviews.deep.apfed",
    "TVFL": "fedviews.deep._tvfl",
    "export_apfed_model": "fedviews.deep._apfed_spec",
    "MultiVFL": "fedviews.deep.multivfl",
    "MultiVFLParams": "fedviews.deep._multivfl_spec",
    "SFedMV": "fedviews.deep.sfedmv",
    "make_server_optimizer": "fedviews.deep._serveropt",
    "parse_setting": "fedviews.deep._apfed_nets",
    "sequence_logits": "fedviews.deep._gru",
    "SFedMVParams": "fedviews.deep._sfedmv_spec",
    "deal_subjects": "fedviews.deep._sfedmv_spec",
    "evenly_spaced": "fedviews.deep._sfedmv_spec",
    "holdout_mask": "fedviews.deep._sfedmv_spec",
    "load_active_model": "fedviews.deep._export",
    "predict_exported": "fedviews.deep._export",
    "require_torch": "fedviews.deep._common",
    "resolve_device": "fedviews.deep._common",
    "seed_everything": "fedviews.deep._common",
}

#: names that load without torch (hyper-parameters read by deployment configs, data splits)
_NO_TORCH = frozenset(
    {"MultiVFLParams", "APFedParams", "SFedMVParams", "make_server_optimizer", "parse_setting"}
    | {"deal_subjects", "evenly_spaced", "holdout_mask"}
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
