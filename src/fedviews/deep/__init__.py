"""Deep (PyTorch) vertical FL algorithms: Multi-VFL, APFed, S-FedMV.

Requires the ``torch`` extra: ``pip install 'fedviews[torch]'``.
"""

from fedviews.deep._common import require_torch, resolve_device, seed_everything

__all__ = ["require_torch", "resolve_device", "seed_everything"]
