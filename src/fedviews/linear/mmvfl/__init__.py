"""MMVFL (Feng & Yu): its spec, parties, estimator, supervised baselines and references.

Names load lazily: the estimator and baselines import scikit-learn; the spec and parties
do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.linear.mmvfl.baselines import SupFL, SupMVLFL
    from fedviews.linear.mmvfl.estimator import MMVFL
    from fedviews.linear.mmvfl.parties import MMVFLParty, MMVFLServer
    from fedviews.linear.mmvfl.reference import mmvfl_centralized
    from fedviews.linear.mmvfl.spec import MMVFL_POLICY, MMVFL_SPEC, MMVFLAlgorithm, MMVFLParams

__all__ = [
    "MMVFL",
    "MMVFL_POLICY",
    "MMVFL_SPEC",
    "MMVFLAlgorithm",
    "MMVFLParams",
    "MMVFLParty",
    "MMVFLServer",
    "SupFL",
    "SupMVLFL",
    "mmvfl_centralized",
]

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "baselines": "SupFL SupMVLFL",
            "estimator": "MMVFL",
            "parties": "MMVFLParty MMVFLServer",
            "reference": "mmvfl_centralized",
            "spec": "MMVFL_POLICY MMVFL_SPEC MMVFLAlgorithm MMVFLParams",
        }
    ),
)
