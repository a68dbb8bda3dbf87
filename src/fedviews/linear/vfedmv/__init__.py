"""V-FedMV (Che et al., Algorithm 2): its spec, parties, estimator and reference.

Names load lazily: the estimator and baselines import scikit-learn; the spec and parties
do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.linear.vfedmv.estimator import VFedMV
    from fedviews.linear.vfedmv.parties import VFedMVParty, VFedMVServer
    from fedviews.linear.vfedmv.reference import vfedmv_centralized
    from fedviews.linear.vfedmv.spec import (
        VFEDMV_POLICY,
        VFEDMV_SPEC,
        VFedMVAlgorithm,
        VFedMVParams,
        vfedmv_policy,
    )

__all__ = [
    "VFEDMV_POLICY",
    "VFEDMV_SPEC",
    "VFedMV",
    "VFedMVAlgorithm",
    "VFedMVParams",
    "VFedMVParty",
    "VFedMVServer",
    "vfedmv_centralized",
    "vfedmv_policy",
]

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "estimator": "VFedMV",
            "parties": "VFedMVParty VFedMVServer",
            "reference": "vfedmv_centralized",
            "spec": "VFEDMV_POLICY VFEDMV_SPEC VFedMVAlgorithm VFedMVParams vfedmv_policy",
        }
    ),
)
