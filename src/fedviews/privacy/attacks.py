"""Leakage attacks that see only what their attacker received (plus declared aux knowledge).

The numerical attacks (:mod:`fedviews.privacy._attacks`) take arrays; the audit
(:mod:`fedviews.privacy._audit`) takes the observations an algorithm reads out of
an attacker's :class:`~fedviews.federation.Recording` and scores every applicable
attack against the experimenter's answer key. See docs/privacy/leakage.md.
"""

from fedviews.privacy._attacks import (
    auc,
    binary_scores,
    chance_level,
    label_recovery,
    labels_by_completion,
    labels_by_direction,
    labels_from_consensus,
    labels_from_softmax_gradient,
    reconstruct_features,
    reconstruction_quality,
)
from fedviews.privacy._audit import (
    ATTACKS,
    Attack,
    AuxKnowledge,
    LeakageRow,
    Reconstruction,
    Truth,
    attack_observations,
    audit,
    check_attacks,
)

__all__ = [
    "ATTACKS",
    "Attack",
    "AuxKnowledge",
    "LeakageRow",
    "Reconstruction",
    "Truth",
    "attack_observations",
    "audit",
    "check_attacks",
    "auc",
    "binary_scores",
    "chance_level",
    "label_recovery",
    "labels_by_completion",
    "labels_by_direction",
    "labels_from_consensus",
    "labels_from_softmax_gradient",
    "reconstruct_features",
    "reconstruction_quality",
]
