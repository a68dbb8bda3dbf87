"""What the H-FedMV client and the server's set-up share: the server's random initial
``W_k`` (Algorithm 3, line 1) and one data holder's local multi-view learning in the
order of Algorithm 3 (Eqs. 14-17), the loop of a client and of the "MV w/o FL" baseline."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedviews.linear._common import orthonormal_nonnegative
from fedviews.linear._consensus import IRLSOptions, z_step
from fedviews.linear._l21 import L21Problem, l21_norm
from fedviews.linear._testing_phase import sq, z_k_step


def init_W(dims: Sequence[int], c: int, seed: np.random.SeedSequence) -> list[np.ndarray]:
    """Server's random ``W_k`` (Algorithm 3, line 1): ``N(0, 1/d_k)`` entries."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((d, c)) / np.sqrt(d) for d in dims]


class LocalLearner:
    """One data holder's multi-view learning state in the order of Algorithm 3 (Eqs. 14-17)."""

    def __init__(
        self,
        Xs: Sequence[np.ndarray],
        Y: np.ndarray,
        *,
        betas: Sequence[float],
        zetas: Sequence[float],
        eta: float,
        seed: np.random.SeedSequence,
        solver: IRLSOptions,
    ) -> None:
        self.problems = [L21Problem(X, eps=solver.eps) for X in Xs]
        self.Y, self.betas, self.zetas, self.eta = Y, list(betas), list(zetas), eta
        self.solver = solver
        self.Z = orthonormal_nonnegative(Y.shape[0], Y.shape[1], np.random.default_rng(seed))
        self.objective: list[float] = []

    def passes(self, Ws: Sequence[np.ndarray], n_pass: int) -> list[np.ndarray]:
        """``n_pass`` passes of Z_k (16), Z (17), W (14-15) starting from ``Ws``."""
        Ws = list(Ws)
        for _ in range(n_pass):
            XW = [p.X @ W for p, W in zip(self.problems, Ws, strict=True)]
            Zk = [z_k_step(xw, self.Z, z) for xw, z in zip(XW, self.zetas, strict=True)]  # (16)
            self.Z = z_step(self.zetas, Zk, self.eta, self.Y)  # (17)
            Ws = [
                p.solve(zk, b, W0=W, max_iter=self.solver.max_iter, tol=self.solver.tol).W
                for p, zk, b, W in zip(self.problems, Zk, self.betas, Ws, strict=True)
            ]
            f = self.eta * sq(self.Z - self.Y)
            for p, W, zk, b, z in zip(self.problems, Ws, Zk, self.betas, self.zetas, strict=True):
                f += sq(p.X @ W - zk) + b * l21_norm(W) + z * sq(zk - self.Z)
            self.objective.append(f)
        return Ws
