"""H-FedMV (Che et al., Algorithm 3): its spec, parties, estimator, baselines (MV w/o FL,
Single View FL) and reference.

Names load lazily: the estimator and baselines import scikit-learn; the spec and parties
do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.linear.hfedmv.baselines import LocalMVL, SingleViewFL, mvl_local
    from fedviews.linear.hfedmv.estimator import HFedMV
    from fedviews.linear.hfedmv.parties import HFedMVClient, HFedMVServer
    from fedviews.linear.hfedmv.reference import hfedmv_centralized
    from fedviews.linear.hfedmv.spec import (
        HFEDMV_SPEC,
        HFedMVAlgorithm,
        HFedMVParams,
        hfedmv_policy,
    )

__all__ = [
    "HFEDMV_SPEC",
    "HFedMV",
    "HFedMVAlgorithm",
    "HFedMVClient",
    "HFedMVParams",
    "HFedMVServer",
    "LocalMVL",
    "SingleViewFL",
    "hfedmv_centralized",
    "hfedmv_policy",
    "mvl_local",
]

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "baselines": "LocalMVL SingleViewFL mvl_local",
            "estimator": "HFedMV",
            "parties": "HFedMVClient HFedMVServer",
            "reference": "hfedmv_centralized",
            "spec": "HFEDMV_SPEC HFedMVAlgorithm HFedMVParams hfedmv_policy",
        }
    ),
)
