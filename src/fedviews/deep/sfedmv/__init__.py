"""S-FedMV (Che et al., Section 6): federated per-view GRU extractors, then H-FedMV fusion.

``spec`` (params, roles, policy, demo data; torch-free), ``protocol`` (the GRU config,
seeds, parameter names and FedAvg both sides share), ``parties`` (clients and the
server of both stages), ``nets`` (the bidirectional GRU), ``baselines`` (local and
centralized extractors), ``estimator`` (:class:`SFedMV`). Names load lazily: the
spec's and protocol's need no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.deep.sfedmv.baselines import train_local_extractors
    from fedviews.deep.sfedmv.estimator import (
        EXTRACTOR_MODES,
        FUSIONS,
        SFedMV,
        check_sequence_clients,
    )
    from fedviews.deep.sfedmv.parties import (
        SequenceClient,
        SequenceServer,
        SFedMVClient,
        SFedMVServer,
    )
    from fedviews.deep.sfedmv.protocol import GRUConfig, view_seeds
    from fedviews.deep.sfedmv.spec import SFEDMV_SPEC, SFedMVParams, sequence_policy

__all__ = [
    "EXTRACTOR_MODES",
    "FUSIONS",
    "SFEDMV_SPEC",
    "GRUConfig",
    "SFedMV",
    "SFedMVClient",
    "SFedMVParams",
    "SFedMVServer",
    "SequenceClient",
    "SequenceServer",
    "check_sequence_clients",
    "sequence_policy",
    "train_local_extractors",
    "view_seeds",
]

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "baselines": "train_local_extractors",
            "estimator": "EXTRACTOR_MODES FUSIONS SFedMV check_sequence_clients",
            "parties": "SFedMVClient SFedMVServer SequenceClient SequenceServer",
            "protocol": "GRUConfig view_seeds",
            "spec": "SFEDMV_SPEC SFedMVParams sequence_policy",
        }
    ),
)
