"""Linear multi-view / vertical FL algorithms (numpy + scipy).

MMVFL and its supervised baselines (supFL, supMVLFL), and the ℓ2,1 solver they share.
"""

from fedviews.linear._common import LABEL_SCALES, scale_labels, select_top_features, small_blas
from fedviews.linear._fedmv import LocalMVL, fedmv_consensus, mvl_local
from fedviews.linear._hfedmv import (
    HFEDMV_SPEC,
    HFedMV,
    HFedMVClient,
    HFedMVParams,
    HFedMVServer,
    HorizontalClients,
    SingleViewFL,
    hfedmv_policy,
    view_dims_of,
)
from fedviews.linear._l21 import L21Problem, L21Result, l21_least_squares, l21_norm, row_norms
from fedviews.linear._mmvfl import MMVFL, MMVFL_POLICY, MMVFLParams, mmvfl_centralized
from fedviews.linear._supervised import SupFL, SupMVLFL
from fedviews.linear._vfedmv import (
    VFEDMV_POLICY,
    VFedMV,
    VFedMVParams,
    vfedmv_centralized,
)

__all__ = [
    "VFEDMV_POLICY",
    "HFedMV",
    "LocalMVL",
    "SingleViewFL",
    "VFedMV",
    "fedmv_consensus",
    "hfedmv_policy",
    "mvl_local",
    "vfedmv_centralized",
    "MMVFL",
    "MMVFL_POLICY",
    "MMVFLParams",
    "VFedMVParams",
    "HFEDMV_SPEC",
    "HFedMVClient",
    "HFedMVParams",
    "HFedMVServer",
    "HorizontalClients",
    "view_dims_of",
    "L21Problem",
    "L21Result",
    "SupFL",
    "SupMVLFL",
    "l21_least_squares",
    "l21_norm",
    "mmvfl_centralized",
    "row_norms",
    "LABEL_SCALES",
    "scale_labels",
    "select_top_features",
    "small_blas",
]
