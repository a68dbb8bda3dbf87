"""Multi-VFL (Mugunthan et al., Algorithm 1): D data owners x K label owners split learning.

``spec`` (params, roles, policy; torch-free), ``protocol`` (seeds and label dealing both
sides share), ``parties`` (data owners, label owners), ``server`` (the aggregation server), ``dp`` (the Gaussian
defenses inside a party's step), ``nets`` (the split network), ``estimator``
(:class:`MultiVFL`). Names load lazily: the spec's need no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.deep.multivfl.estimator import MultiVFL
    from fedviews.deep.multivfl.nets import build_bottom, build_models, build_top
    from fedviews.deep.multivfl.parties import DataOwner, LabelOwner
    from fedviews.deep.multivfl.protocol import (
        epoch_order,
        label_owner_classes,
        partition_label_owners,
        round_seed,
    )
    from fedviews.deep.multivfl.server import Server
    from fedviews.deep.multivfl.spec import (
        MULTIVFL_SPEC,
        MultiVFLAlgorithm,
        MultiVFLParams,
        multivfl_policy,
    )

__all__ = [
    "MULTIVFL_SPEC",
    "DataOwner",
    "LabelOwner",
    "MultiVFL",
    "MultiVFLAlgorithm",
    "MultiVFLParams",
    "Server",
    "build_bottom",
    "build_models",
    "build_top",
    "epoch_order",
    "label_owner_classes",
    "multivfl_policy",
    "partition_label_owners",
    "round_seed",
]

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "estimator": "MultiVFL",
            "nets": "build_bottom build_models build_top",
            "parties": "DataOwner LabelOwner",
            "server": "Server",
            "protocol": "epoch_order label_owner_classes partition_label_owners round_seed",
            "spec": "MULTIVFL_SPEC MultiVFLAlgorithm MultiVFLParams multivfl_policy",
        }
    ),
)
