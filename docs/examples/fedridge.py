r"""FedRidge: ridge regression over vertically partitioned views (docs/adding-an-algorithm.md).

Party k holds the view ``X_k`` and keeps its weights ``w_k``; the label owner (a view
holder too) also keeps ``y``. Block Gauss-Seidel on ``||y - sum_k X_k w_k||^2 + alpha
sum_k ||w_k||^2``: every round the label owner turns the summed partial predictions into
the residual ``r``, then each party in turn solves its block exactly,
``w_k = (X_k^T X_k + alpha I)^{-1} X_k^T (r + X_k w_k)``, and returns ``X_k w_k``. Each
step minimises a strictly convex quadratic exactly, so the rounds converge to the
centralized ridge solution ``(X^T X + alpha I)^{-1} X^T y`` of the concatenated views.

One file stands for the package a built-in algorithm has (e.g. ``fedviews/linear/vfedmv/``);
its sections, in import order, are the package's modules::

    fedridge/
      parties.py    RidgeParty, RidgeCoordinator: handlers only, never the spec
      spec.py       FedRidgeParams, POLICY, FedRidgeAlgorithm (builds the parties), registered
      estimator.py  FedRidge: arrays -> each party's data -> the one runner -> coef_
      __init__.py   re-exports FedRidge, FedRidgeParams, FedRidgeAlgorithm

(no ``protocol.py``: the parties and the spec share no helper; no ``baselines.py``; the
test compares with the closed form instead of a ``reference.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from sklearn.base import BaseEstimator

from fedviews import federation as fv
from fedviews.data import PartyData, load, standardized

# --------------------------------------------------------------------------- parties.py


class RidgeParty(fv.Party):
    """A view owner: ``X`` and ``w`` never leave it (nor ``y``, at the label owner)."""

    def __init__(self, name: str, role: str, X: np.ndarray, y: Any, alpha: float) -> None:
        super().__init__(name, role)
        self.X, self.y, self.w = X, y, np.zeros(X.shape[1])
        self.gram = cho_factor(X.T @ X + alpha * np.eye(X.shape[1]))  # factorised once

    @fv.handles("update")
    def on_update(self, msg: fv.Message) -> fv.Message:
        target = msg.arrays["residual"] + self.X @ self.w  # what this block has to explain
        self.w = cho_solve(self.gram, self.X.T @ target)
        return self.reply(msg, arrays={"Xw": self.X @ self.w}, meta={"w2": float(self.w @ self.w)})

    @fv.handles("residual")
    def on_residual(self, msg: fv.Message) -> fv.Message:
        return self.reply(msg, arrays={"residual": self.y - msg.arrays["prediction"]})

    def state_dict(self) -> dict[str, np.ndarray]:  # a checkpoint (it never leaves)
        return {"w": self.w}

    def load_state(self, state: Any) -> None:
        self.w = np.array(state["w"], dtype=np.float64)

    def results(self) -> dict[str, np.ndarray]:  # what a deployed party writes at the end
        return {"w": self.w}


class RidgeCoordinator(fv.Coordinator):
    """Drives the rounds; sees partial predictions and residuals, never ``X_k`` or ``w_k``."""

    def __init__(
        self,
        parties: tuple[str, ...],
        owner: str,
        n: int,
        *,
        alpha: float,
        max_iter: int,
        tol: float,
    ) -> None:
        super().__init__()
        self.parties, self.owner = parties, owner
        self.alpha, self.max_iter, self.tol = alpha, max_iter, tol
        self.Xw, self.w2 = np.zeros((len(parties), n)), np.zeros(len(parties))
        self.objective: list[float] = []
        self.converged = False

    def run(self, on_round_end: Any = None) -> np.ndarray:
        for rnd in range(len(self.objective) + 1, self.max_iter + 1):
            before = self.Xw.sum(0)
            ask = self.send(self.owner, "residual", {"prediction": before}, round=rnd)
            r = ask.arrays["residual"]
            for k, name in enumerate(self.parties):
                reply = self.send(name, "update", {"residual": r}, round=rnd)
                r = r - (reply.arrays["Xw"] - self.Xw[k])  # keep the residual current
                self.Xw[k], self.w2[k] = reply.arrays["Xw"], reply.meta["w2"]
            self.objective.append(float(r @ r + self.alpha * self.w2.sum()))
            change = np.linalg.norm(self.Xw.sum(0) - before)
            self.converged = bool(change <= self.tol * np.linalg.norm(self.Xw.sum(0)))
            if on_round_end is not None:
                on_round_end(rnd)
            if self.converged:
                break
        return self.Xw.sum(0)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"Xw": self.Xw, "w2": self.w2, "objective": np.asarray(self.objective)}

    def load_state(self, state: Any) -> None:
        self.Xw, self.w2 = np.array(state["Xw"]), np.array(state["w2"])
        self.objective = [float(f) for f in state["objective"]]

    def progress(self) -> list[str]:
        return [f"round {r + 1}: objective {f:.10g}" for r, f in enumerate(list(self.objective))]

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        metrics = {"objective": self.objective, "converged": self.converged}
        return metrics, {"prediction": self.Xw.sum(0)}


# --------------------------------------------------------------------------- spec.py

POLICY = fv.PrivacyPolicy.of(  # (sender role, receiver role): what may go that way
    "fedridge",
    {
        ("party", "coordinator"): ["Xw"],
        ("label_owner", "coordinator"): ["Xw", "residual"],
        ("coordinator", "party"): ["residual"],
        ("coordinator", "label_owner"): ["residual", "prediction"],
    },
    kinds={
        ("coordinator", "party"): ["update"],
        ("coordinator", "label_owner"): ["update", "residual"],
    },
)
TARGET = ("mor", 3)  # demo data: the label owner's y is this column of this view


@dataclass(frozen=True)
class FedRidgeParams(fv.Checked):
    """The ``[params]`` table: ridge penalty, rounds (one sweep over every party each) and
    ``tol`` (stop once a round changes the prediction by at most ``tol`` times its norm).
    Each field declares what it allows (``fv.spec``); one validator checks them all."""

    alpha: float = field(default=1.0, metadata=fv.spec(float, low=0, low_open=True))
    max_iter: int = field(default=100, metadata=fv.spec(int, low=1))
    tol: float = field(default=1e-12, metadata=fv.spec(float, low=0, finite=False))


class FedRidgeAlgorithm(fv.Algorithm):
    """The spec; the defaults give one label owner and one alignment group of all parties."""

    name = "fedridge"
    Params = FedRidgeParams

    def role(self, run: fv.RunSpec, party: str) -> str:
        return "label_owner" if party in run.federation.owners() else "party"

    def policy(self, run: fv.RunSpec, setup: Any) -> fv.PrivacyPolicy:
        return POLICY

    def build_party(self, run: fv.RunSpec, party: str, local: fv.Local, setup: Any) -> RidgeParty:
        _, X, y = local.take("train")  # this party's aligned rows, in the common order
        y = None if y is None else y.astype(np.float64)
        X = X.reshape(len(X), -1).astype(np.float64)
        return RidgeParty(party, self.role(run, party), X, y, run.params.alpha)

    def build_coordinator(self, run: fv.RunSpec, setup: Any, local: Any = None) -> RidgeCoordinator:
        fed, p = run.federation, run.params
        return RidgeCoordinator(
            fed.parties, fed.owners()[0], setup["n_samples"], alpha=p.alpha, max_iter=p.max_iter,
            tol=p.tol,
        )  # fmt: skip

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """``[data]`` views dealt to the parties, each standardised with its own statistics;
        the label owner's ``y`` is ``TARGET``, centred (so no intercept is needed)."""
        dealt = super().demo_data(cfg)  # each party's view, a random share of the samples
        src = load(cfg.data.dataset, views=[TARGET[0]])
        value = dict(zip(src.ids, src.views[0][:, TARGET[1]], strict=True))
        out = {}
        for name, pd in dealt.items():  # replace the owner's class labels by the target
            y = None if pd.y is None else np.array([value[i] for i in pd.ids])
            y = None if y is None else y - y.mean()
            out[name] = PartyData(pd.ids, standardized(pd.features), y)
        return out


fv.register_algorithm_spec(FedRidgeAlgorithm())


# --------------------------------------------------------------------------- estimator.py


class FedRidge(BaseEstimator):
    """Every party in this process, party 0 holds ``y``. ``coef_``: each party's ``w_k``
    (read from the party objects, never sent); ``objective_`` per round; ``transport_``."""

    def __init__(self, alpha: float = 1.0, max_iter: int = 100, tol: float = 1e-12) -> None:
        self.alpha, self.max_iter, self.tol = alpha, max_iter, tol

    def fit(self, Xs: list[np.ndarray], y: np.ndarray) -> FedRidge:
        names, ids = tuple(f"party{k}" for k in range(len(Xs))), np.arange(len(Xs[0]))
        datas = {
            p: PartyData(ids, X, y if p == names[0] else None)
            for p, X in zip(names, Xs, strict=True)
        }
        params = fv.estimator_params(FedRidgeParams, self)  # the Params fields, from get_params
        fed = fv.build_in_process(fv.RunSpec("fedridge", params, fv.Roster(names, names[0])), datas)
        fed()  # the runner: the algorithm's run_coordinator, as a deployment runs it
        self.coef_ = [p.w for p in fed.parties.values() if isinstance(p, RidgeParty)]
        assert isinstance(fed.coordinator, RidgeCoordinator)
        self.objective_ = list(fed.coordinator.objective)
        self.transport_ = fed.transport
        return self

    def predict(self, Xs: list[np.ndarray]) -> np.ndarray:
        return np.sum([X @ w for X, w in zip(Xs, self.coef_, strict=True)], axis=0)
