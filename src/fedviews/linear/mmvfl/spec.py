r"""MMVFL (Feng & Yu): multi-participant multi-class VFL by label sharing through Z.

Objective (Eq. 4), K parties, party ``l`` (the label owner) holds the one-hot ``Y``:

.. math::
    \sum_k \|X_k W_k - Z_k\|_F^2 + \beta_k \|W_k\|_{2,1} + \zeta_k \|Z_k - Z\|_F^2
    + \eta \|Z_l - Y\|_F^2

Algorithm 1, one round:

1. every party runs IRLS (Eqs. 7-8) on ``min ||X_k W_k - Z_k||^2 + beta_k ||W_k||_{2,1}``,
   warm-started from its previous ``W_k`` (its Gram matrix is cached);
2. every party updates ``Z_k`` in closed form (Eq. 12; Eq. 11 for the label owner);
3. parties send ``Z_k`` to the coordinator, which computes ``Z = sum zeta_k Z_k / sum zeta_k``
   (Eq. 14) and sends ``Z`` back.

Every update is an exact block minimisation (or an IRLS majorisation step), so the
objective is non-increasing over rounds. Only ``Z_k`` (party → coordinator) and
``Z`` (coordinator → party) cross the privacy barrier; parties also report the
scalar value of their local terms in message metadata so that the coordinator can
track the global objective.

Initialisation (line 1 of Algorithm 1): ``Z`` and every ``Z_k`` are random
non-negative matrices with orthonormal columns (random cluster indicators),
drawn from independent streams spawned from ``random_state``. Instead of a random
``W_k`` the first IRLS iteration starts from ``A = I`` (the ridge solution), the
usual choice for this solver (Nie et al., 2010); later rounds warm-start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fedviews._params import COUNT, FLAG, POSITIVE, TOL, WEIGHTS, Checked, spec
from fedviews.data import one_hot
from fedviews.federation import (
    Local,
    PrivacyPolicy,
    RunSpec,
    register_algorithm_spec,
    spawn_streams,
)
from fedviews.linear._common import LABEL_SCALES, per_party, scale_labels
from fedviews.linear._consensus_spec import ConsensusAlgorithm
from fedviews.linear.mmvfl.parties import MMVFLParty, MMVFLServer

MMVFL_POLICY = PrivacyPolicy.of(
    "mmvfl",
    {
        ("party", "coordinator"): ["Z_k"],
        ("coordinator", "party"): ["Z"],
    },
    kinds={("coordinator", "party"): ["update"]},
)


@dataclass(frozen=True)
class MMVFLParams(Checked):
    """Hyper-parameters of MMVFL: the one declaration used by :class:`MMVFL`, experiments
    and deployments (the ``[params]`` table).

    ``beta`` and ``zeta`` take one value for every party or one per party (in the
    order of the parties). ``standardize``: every party scales its own view with
    its own column means and standard deviations before training (no statistics
    cross the barrier); off by default, as in the paper.
    """

    beta: float | tuple[float, ...] = field(default=1.0, metadata=WEIGHTS)
    zeta: float | tuple[float, ...] = field(default=1000.0, metadata=WEIGHTS)
    eta: float = field(default=1000.0, metadata=POSITIVE)
    max_iter: int = field(default=200, metadata=COUNT)
    tol: float = field(default=1e-6, metadata=TOL)
    inner_max_iter: int = field(default=20, metadata=COUNT)
    inner_tol: float = field(default=1e-6, metadata=TOL)
    eps: float = field(default=1e-10, metadata=POSITIVE)
    standardize: bool = field(default=False, metadata=FLAG)
    label_scale: str = field(default="onehot", metadata=spec(str, choices=LABEL_SCALES))


class MMVFLAlgorithm(ConsensusAlgorithm):
    """MMVFL as a federated algorithm: every party a view owner, one of them the label owner."""

    name = "mmvfl"
    predicts_alone = (
        "every MMVFL party predicts alone with its own W_k: argmax of its rows (scaled with "
        "x_mean/x_scale where it standardized) times W, all in its result.npz (the label owner's "
        "also maps the columns to its classes), as MMVFL.predict does"
    )
    Params = MMVFLParams

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return self.secured(run, MMVFL_POLICY)

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> MMVFLParty:
        y, _, kwargs = self.party_inputs(run, party, local, setup)
        Y, classes = (None, None) if y is None else one_hot(y)  # the label owner's Eq. (11)
        if Y is not None:
            Y = scale_labels(Y, run.params.label_scale)
        eta = run.params.eta if Y is not None else 0.0
        return MMVFLParty(party, Y=Y, eta=eta, classes=classes, **kwargs)

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> MMVFLServer:
        p: MMVFLParams = run.params
        parties = run.federation.parties
        return MMVFLServer(
            parties,
            per_party(p.zeta, len(parties), "zeta"),
            int(setup["n_samples"]),
            int(setup["n_classes"]),
            spawn_streams(run.seed, len(parties) + 1)[0],
            max_iter=p.max_iter,
            tol=p.tol,
            frac_bits=run.defense.secagg_bits,
        )


MMVFL_SPEC = register_algorithm_spec(MMVFLAlgorithm())
