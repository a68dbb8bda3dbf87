"""fedviews: multi-party vertical federated learning and multi-view learning.

Subpackages
-----------
fedviews.data        real multi-view datasets, view splitting, sample-ID alignment
fedviews.linear      MMVFL, FedMV (V/H), supFL, supMVLFL and the l2,1 solver (numpy/scipy)
fedviews.deep        Multi-VFL, APFed, S-FedMV (PyTorch, ``pip install 'fedviews[torch]'``)
fedviews.federation  parties, messages, transports, privacy policy, message log
fedviews.experiments TOML configs, the algorithm/experiment registry and the runner
"""

import importlib
from typing import Any

from fedviews import errors

__version__ = "0.1.0"
__all__ = ["__version__", "errors"]

#: the subpackages, imported on first use: ``import fedviews; fedviews.data.load(...)``
#: works as ``import fedviews.data`` does, without importing torch or grpc up front
_SUBPACKAGES = frozenset(
    {"data", "linear", "deep", "federation", "privacy", "experiments", "deploy", "report"}
)


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"fedviews.{name}")
    raise AttributeError(f"module 'fedviews' has no attribute {name!r}")
