"""fedviews: multi-party vertical federated learning and multi-view learning.

Subpackages
-----------
fedviews.data        real multi-view datasets, view splitting, sample-ID alignment
fedviews.linear      MMVFL, FedMV (V/H), supFL, supMVLFL and the l2,1 solver (numpy/scipy)
fedviews.deep        Multi-VFL, APFed, S-FedMV (PyTorch, ``pip install 'fedviews[torch]'``)
fedviews.federation  parties, messages, transports, privacy policy, message log
fedviews.experiments TOML configs, the algorithm/experiment registry and the runner
"""

from fedviews import errors

__version__ = "0.1.0"
__all__ = ["__version__", "errors"]
