"""The V-FedMV parties (Che et al., Algorithm 2): the shared consensus party and the server
that holds (or receives) ``Y``; see :mod:`fedviews.linear.vfedmv` for the protocol."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedviews.linear._consensus import ConsensusParty, ConsensusServer

#: Data owner ``L_k`` of Algorithm 2: the shared consensus party
#: (:class:`~fedviews.linear._consensus.ConsensusParty`); a label owner that is a party
#: sends ``Y`` to the server once (``labels``) and scores the test consensus (``score``).
VFedMVParty = ConsensusParty


class VFedMVServer(ConsensusServer):
    """The V-FedMV server: holds ``Y`` (or receives it from ``label_owner``), computes
    ``Z`` (Eq. 10) and ``Z^test`` (Eq. 12)."""

    def __init__(
        self,
        parties: Sequence[str],
        Y: np.ndarray,
        eta: float,
        seed: np.random.SeedSequence,
        *,
        max_iter: int,
        tol: float,
        label_owner: str | None = None,
        test: tuple[int, float] | None = None,
        frac_bits: int | None = None,
        test_rows: int | None = None,
    ) -> None:
        n, c = Y.shape
        super().__init__(
            parties, n, c, seed, max_iter=max_iter, tol=tol, Y=Y, eta=eta,
            label_owner=label_owner, test=test, frac_bits=frac_bits, test_rows=test_rows,
        )  # fmt: skip
