"""MMVFL deployed: one process per view owner, the coordinator aggregates ``Z``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.deploy._apps import DeployApp, Local, register_app, seeds, standardized
from fedviews.deploy._config import DeployConfig
from fedviews.errors import ConfigError
from fedviews.federation import Coordinator, Party, PrivacyPolicy

__all__ = ["MMVFLDeployParams"]


@dataclass(frozen=True)
class MMVFLDeployParams:
    """Hyper-parameters of :class:`fedviews.linear.MMVFL` (same names and defaults)."""

    beta: float = 1.0
    zeta: float = 1000.0
    eta: float = 1000.0
    max_iter: int = 50
    tol: float = 1e-6
    inner_max_iter: int = 20
    inner_tol: float = 1e-6
    eps: float = 1e-10
    standardize: bool = True

    def validate(self) -> None:
        if min(self.beta, self.zeta, self.eta) <= 0:
            raise ConfigError("params.beta, params.zeta and params.eta must be > 0")
        if self.max_iter < 1 or self.inner_max_iter < 1:
            raise ConfigError("params.max_iter and params.inner_max_iter must be >= 1")


class MMVFLApp(DeployApp):
    name = "mmvfl"
    params_cls = MMVFLDeployParams

    @property
    def policy(self) -> PrivacyPolicy:
        from fedviews.linear._mmvfl import MMVFL_POLICY

        return MMVFL_POLICY

    def build_party(
        self, cfg: DeployConfig, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:
        from fedviews.data._validation import one_hot
        from fedviews.linear._mmvfl import MMVFLParty, _Solver

        p: MMVFLDeployParams = cfg.params
        k = cfg.federation.parties.index(party)
        _, X, y = local.take("train")
        X = X.reshape(len(X), -1).astype(np.float64)
        if p.standardize:  # with this party's own statistics
            X = standardized(X)
        Y = None if y is None else one_hot(y)[0]
        return MMVFLParty(
            party,
            X,
            beta=p.beta,
            zeta=p.zeta,
            n_classes=int(setup["n_classes"]),
            seed=seeds(cfg)[1 + k],
            Y=Y,
            eta=p.eta if Y is not None else 0.0,
            solver=_Solver(p.inner_max_iter, p.inner_tol, p.eps),
        )

    def build_coordinator(self, cfg: DeployConfig, setup: Mapping[str, Any]) -> Coordinator:
        from fedviews.linear._mmvfl import MMVFLServer

        p: MMVFLDeployParams = cfg.params
        parties = list(cfg.federation.parties)
        return MMVFLServer(
            parties,
            [p.zeta] * len(parties),
            int(setup["n_samples"]),
            int(setup["n_classes"]),
            seeds(cfg)[0],
            max_iter=p.max_iter,
            tol=p.tol,
        )

    def run_coordinator(self, coord: Coordinator, on_round_end: Any) -> Any:
        return coord.run(on_round_end=on_round_end)  # type: ignore[call-arg]

    def progress(self, coord: Coordinator) -> list[str]:
        obj = list(coord.objective)  # type: ignore[attr-defined]
        return [f"round {r + 1}: objective {v:.6g}" for r, v in enumerate(obj)]

    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        from fedviews.linear._l21 import row_norms

        W = party.W  # type: ignore[attr-defined]
        return {"W": W, "Z_k": party.Z_k, "feature_importances": row_norms(W)}  # type: ignore[attr-defined]

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        obj = list(coord.objective)  # type: ignore[attr-defined]
        return (
            {"objective": obj, "n_iter": len(obj), "converged": bool(coord.converged)},  # type: ignore[attr-defined]
            {"Z": coord.Z},  # type: ignore[attr-defined]
        )


register_app(MMVFLApp())
