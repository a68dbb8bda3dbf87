"""APFed-R / APFed-C (Liu et al.): active-passive split learning on image strips.

``spec`` (params, roles, policy, demo data, export; torch-free), ``parties`` (the active
and passive clients), ``estimator`` (:class:`APFed`), ``baselines`` (:class:`SingleVL`,
:class:`TVFL`). The roles and the epoch driver it shares with the split NN are in
:mod:`fedviews.deep._strips`, its networks in :mod:`fedviews.deep._apfed_nets`. Names
load lazily: the spec's need no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedviews._lazy import exports, lazy_names

if TYPE_CHECKING:
    from fedviews.deep.apfed.baselines import TVFL, SingleVL
    from fedviews.deep.apfed.estimator import APFed
    from fedviews.deep.apfed.parties import (
        ActiveClient,
        PassiveClient,
        contrastive_loss,
        reconstruction_loss,
    )
    from fedviews.deep.apfed.spec import (
        APFED_POLICY,
        APFED_SPEC,
        APFedAlgorithm,
        APFedParams,
        apfed_policy,
        export_apfed_model,
    )

__all__ = [
    "APFED_POLICY",
    "APFED_SPEC",
    "TVFL",
    "APFed",
    "APFedAlgorithm",
    "APFedParams",
    "ActiveClient",
    "PassiveClient",
    "SingleVL",
    "apfed_policy",
    "contrastive_loss",
    "export_apfed_model",
    "reconstruction_loss",
]

__getattr__ = lazy_names(
    __name__,
    exports(
        {
            "baselines": "SingleVL TVFL",
            "estimator": "APFed",
            "parties": "ActiveClient PassiveClient contrastive_loss reconstruction_loss",
            "spec": "APFED_POLICY APFED_SPEC APFedAlgorithm APFedParams apfed_policy "
            "export_apfed_model",
        }
    ),
)
