"""Deploy apps: how one process builds *its own* party (or the coordinator) of an algorithm.

An app knows an algorithm's roles, privacy policy and hyper-parameters, and
builds exactly one party object from that party's aligned data, with the same
random streams as the in-process estimator, so that a deployed run gives the
in-process result.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from fedviews.errors import ConfigError
from fedviews.federation import Coordinator, Party, PrivacyPolicy

__all__ = ["DeployApp", "MMVFLDeployParams", "get_app", "register_app"]


class DeployApp(Protocol):
    name: ClassVar[str]
    params_cls: ClassVar[type]
    policy: ClassVar[PrivacyPolicy]
    round_message: ClassVar[str]  # a party's round ends when it has answered this kind

    def role(self, cfg: Any, party: str) -> str: ...

    def build_party(
        self, cfg: Any, party: str, X: np.ndarray, y: np.ndarray | None, setup: dict[str, Any]
    ) -> Party: ...

    def build_coordinator(self, cfg: Any, setup: dict[str, Any]) -> Coordinator: ...

    def label_info(self, y: np.ndarray) -> dict[str, Any]: ...

    def party_results(self, party: Party) -> dict[str, np.ndarray]: ...

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]: ...

    def party_state(self, party: Party) -> dict[str, np.ndarray]: ...

    def load_party_state(self, party: Party, state: dict[str, np.ndarray]) -> None: ...

    def coordinator_state(self, coord: Coordinator) -> dict[str, np.ndarray]: ...

    def load_coordinator_state(self, coord: Coordinator, state: dict[str, np.ndarray]) -> None: ...

    def run_coordinator(self, coord: Coordinator, on_round_end: Any) -> Any: ...


_APPS: dict[str, DeployApp] = {}


def register_app(app: DeployApp) -> DeployApp:
    _APPS[app.name] = app
    return app


def get_app(name: str) -> DeployApp:
    if name not in _APPS:
        match = difflib.get_close_matches(name, list(_APPS), n=1)
        hint = f"did you mean {match[0]!r}?" if match else f"deployable: {sorted(_APPS)}"
        raise ConfigError(f"algorithm {name!r} cannot be deployed yet; {hint}")
    return _APPS[name]


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


def _seeds(cfg: Any) -> list[np.random.SeedSequence]:
    """The streams of the in-process estimator: ``ss[0]`` server, ``ss[1 + k]`` party k."""
    return np.random.SeedSequence(cfg.seed).spawn(len(cfg.federation.parties) + 1)


class _MMVFLApp:
    name = "mmvfl"
    params_cls = MMVFLDeployParams
    round_message = "update"

    @property
    def policy(self) -> PrivacyPolicy:
        from fedviews.linear._mmvfl import MMVFL_POLICY

        return MMVFL_POLICY

    def role(self, cfg: Any, party: str) -> str:
        return "party"

    def label_info(self, y: np.ndarray) -> dict[str, Any]:
        return {"n_classes": int(len(np.unique(y)))}

    def build_party(
        self, cfg: Any, party: str, X: np.ndarray, y: np.ndarray | None, setup: dict[str, Any]
    ) -> Party:
        from fedviews.data._validation import one_hot
        from fedviews.linear._mmvfl import MMVFLParty, _Solver

        p: MMVFLDeployParams = cfg.params
        k = cfg.federation.parties.index(party)
        Y = None if y is None else one_hot(y)[0]
        return MMVFLParty(
            party,
            X,
            beta=p.beta,
            zeta=p.zeta,
            n_classes=int(setup["n_classes"]),
            seed=_seeds(cfg)[1 + k],
            Y=Y,
            eta=p.eta if Y is not None else 0.0,
            solver=_Solver(p.inner_max_iter, p.inner_tol, p.eps),
        )

    def build_coordinator(self, cfg: Any, setup: dict[str, Any]) -> Coordinator:
        from fedviews.linear._mmvfl import MMVFLServer

        p: MMVFLDeployParams = cfg.params
        parties = list(cfg.federation.parties)
        return MMVFLServer(
            parties,
            [p.zeta] * len(parties),
            int(setup["n_samples"]),
            int(setup["n_classes"]),
            _seeds(cfg)[0],
            max_iter=p.max_iter,
            tol=p.tol,
        )

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

    def party_state(self, party: Party) -> dict[str, np.ndarray]:
        return party.state_dict()  # type: ignore[attr-defined]

    def load_party_state(self, party: Party, state: dict[str, np.ndarray]) -> None:
        party.load_state(state)  # type: ignore[attr-defined]

    def coordinator_state(self, coord: Coordinator) -> dict[str, np.ndarray]:
        return coord.state_dict()  # type: ignore[attr-defined]

    def load_coordinator_state(self, coord: Coordinator, state: dict[str, np.ndarray]) -> None:
        coord.load_state(state)  # type: ignore[attr-defined]

    def run_coordinator(self, coord: Coordinator, on_round_end: Any) -> Any:
        return coord.run(on_round_end=on_round_end)  # type: ignore[call-arg]


register_app(_MMVFLApp())  # type: ignore[arg-type]
