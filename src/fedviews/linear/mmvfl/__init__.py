"""MMVFL (Feng & Yu): its spec, parties, estimator, supervised baselines and references."""

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
