"""Linear multi-view / vertical FL algorithms (numpy + scipy).

One package per algorithm (``mmvfl/`` with its supervised baselines supFL and supMVLFL,
``vfedmv/``, ``hfedmv/`` with MV w/o FL and Single View FL), each with the same files:
``spec.py`` (Params and the Algorithm), ``parties.py`` (its parties; they never import
the spec), ``estimator.py``, ``baselines.py``, ``reference.py``. Shared bases in modules of
their own: the ℓ2,1 solver (``_l21.py``), the consensus protocol of MMVFL and V-FedMV
(``_consensus.py`` parties, ``_consensus_spec.py``, ``_consensus_fit.py``), the
horizontal clients of H-FedMV and S-FedMV (``_horizontal.py``), the naive references
(``_reference.py``). Names load lazily: the specs, parameters and parties need no
scikit-learn (a config is checked, an algorithm looked up, without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.linear._common import LABEL_SCALES, scale_labels, select_top_features, small_blas
    from fedviews.linear._horizontal import HorizontalClients, view_dims_of
    from fedviews.linear._l21 import L21Problem, L21Result, l21_least_squares, l21_norm, row_norms
    from fedviews.linear._testing_phase import fedmv_consensus
    from fedviews.linear.hfedmv import (
        HFEDMV_SPEC,
        HFedMV,
        HFedMVClient,
        HFedMVParams,
        HFedMVServer,
        LocalMVL,
        SingleViewFL,
        hfedmv_centralized,
        hfedmv_policy,
        mvl_local,
    )
    from fedviews.linear.mmvfl import (
        MMVFL,
        MMVFL_POLICY,
        MMVFLParams,
        SupFL,
        SupMVLFL,
        mmvfl_centralized,
    )
    from fedviews.linear.vfedmv import VFEDMV_POLICY, VFedMV, VFedMVParams, vfedmv_centralized

__all__ = [
    "VFEDMV_POLICY",
    "HFedMV",
    "LocalMVL",
    "SingleViewFL",
    "VFedMV",
    "fedmv_consensus",
    "hfedmv_centralized",
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

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "_common": "LABEL_SCALES scale_labels select_top_features small_blas",
            "_testing_phase": "fedmv_consensus",
            "_horizontal": "HorizontalClients view_dims_of",
            "_l21": "L21Problem L21Result l21_least_squares l21_norm row_norms",
            "hfedmv": "HFEDMV_SPEC HFedMV HFedMVClient HFedMVParams HFedMVServer LocalMVL "
            "SingleViewFL hfedmv_centralized hfedmv_policy mvl_local",
            "mmvfl": "MMVFL MMVFL_POLICY MMVFLParams SupFL SupMVLFL mmvfl_centralized",
            "vfedmv": "VFEDMV_POLICY VFedMV VFedMVParams vfedmv_centralized",
        }
    ),
)
