"""Deep (PyTorch) vertical FL algorithms: Multi-VFL, APFed, S-FedMV.

Requires the ``torch`` extra: ``pip install 'fedviews[torch]'``.
"""

from fedviews.deep._common import require_torch, resolve_device, seed_everything
from fedviews.deep._export import load_active_model, predict_exported
from fedviews.deep.apfed import TVFL, APFed, SingleVL
from fedviews.deep.multivfl import MultiVFL
from fedviews.deep.sfedmv import SFedMV

__all__ = [
    "APFed",
    "MultiVFL",
    "SFedMV",
    "SingleVL",
    "TVFL",
    "load_active_model",
    "predict_exported",
    "require_torch",
    "resolve_device",
    "seed_everything",
]
