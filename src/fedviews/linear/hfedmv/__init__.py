"""H-FedMV (Che et al., Algorithm 3): its spec, parties, estimator, baselines (MV w/o FL,
Single View FL) and reference."""

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
