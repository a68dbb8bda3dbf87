"""V-FedMV (Che et al., Algorithm 2): its spec, parties, estimator and reference."""

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
