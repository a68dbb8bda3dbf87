"""The MMVFL parties (Feng & Yu, Algorithm 1): the shared consensus party and the server of
Eq. (14); see :mod:`fedviews.linear.mmvfl` for the protocol."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedviews.linear._consensus import ConsensusParty, ConsensusServer

#: One MMVFL participant: its view ``X_k`` (and ``Y`` for the label owner) never leave it.
#: The shared consensus party; the label owner's Z_k step holds the label term
#: ``eta ||Z_l - Y||^2`` (Eq. 11).
MMVFLParty = ConsensusParty


class MMVFLServer(ConsensusServer):
    """The MMVFL server: ``Z = sum zeta_k Z_k / sum zeta_k`` (Eq. 14), the global objective."""

    def __init__(
        self,
        parties: Sequence[str],
        zeta: Sequence[float],
        n_samples: int,
        n_classes: int,
        seed: np.random.SeedSequence,
        *,
        max_iter: int,
        tol: float,
        frac_bits: int | None = None,
    ) -> None:
        super().__init__(
            parties, n_samples, n_classes, seed, max_iter=max_iter, tol=tol, zeta=zeta,
            frac_bits=frac_bits,
        )  # fmt: skip
