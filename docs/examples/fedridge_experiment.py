"""The ``fedridge_views`` experiment: FedRidge on a real multi-view dataset.

Regresses one continuous column of one view (default: column 3 of Handwritten's
morphological view ``mor``, a shape measure) on other views, one party per view; the
first view's party holds the target. Samples are split at random into training and
test rows; every party standardises its own view with its own training statistics
and the label owner centres the target with its training mean (nothing crosses).
For every ``alpha`` the table shows the federated fit next to the centralized
closed form on the concatenated views, and the label owner's view alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from fedridge import TARGET, FedRidge  # registers the "fedridge" algorithm too

from fedviews.data import load
from fedviews.errors import ConfigError
from fedviews.experiments import (
    ExperimentConfig,
    ExperimentResult,
    RunContext,
    Table,
    register_experiment,
)


@dataclass(frozen=True)
class FedRidgeViewsParams:
    """The ``[params]`` table of the experiment.

    Parameters
    ----------
    views : tuple of str
        One party per view; the first one's party holds the target.
    target_view, target_column : str, int
        The column regressed on ``views`` (it must not be one of them).
    alphas : tuple of float
        Ridge penalties, one federated fit each.
    test_fraction : float
        Share of the samples held out for the test R².
    max_iter, tol : int, float
        Rounds and stopping rule of every fit (:class:`fedridge.FedRidgeParams`).
    """

    views: tuple[str, ...] = ("fou", "zer", "kar")
    target_view: str = TARGET[0]
    target_column: int = TARGET[1]
    alphas: tuple[float, ...] = (1.0, 10.0, 100.0)
    test_fraction: float = 0.25
    max_iter: int = 2000
    tol: float = 1e-12

    def validate(self) -> None:
        if not self.views or self.target_view in self.views:
            raise ConfigError("params.views: name at least one view, not the target's view")
        if not self.alphas or min(self.alphas) <= 0 or not 0 < self.test_fraction < 1:
            raise ConfigError("need positive params.alphas and 0 < params.test_fraction < 1")


def _r2(y: np.ndarray, pred: np.ndarray) -> str:
    return f"{1.0 - float(((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()):.4f}"


def _ridge(X: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    """The centralized closed form ``(X^T X + alpha I)^{-1} X^T y``."""
    return np.linalg.solve(X.T @ X + alpha * np.eye(X.shape[1]), X.T @ y)


@register_experiment(
    "fedridge_views",
    FedRidgeViewsParams,
    description="FedRidge (docs/examples): federated vs centralized ridge on real views",
)
def run_fedridge_views(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    p: FedRidgeViewsParams = cfg.params
    ds = load(cfg.data.name, **dict(cfg.data.options))
    missing = sorted({*p.views, p.target_view} - set(ds.view_names))
    if missing:
        raise ConfigError(f"views {missing} are not in {ds.name}: {ds.view_names}")
    y = ds.views[ds.view_names.index(p.target_view)][:, p.target_column].astype(np.float64)
    order = np.random.default_rng(cfg.seed).permutation(ds.n_samples)
    te, tr = np.split(order, [int(round(p.test_fraction * ds.n_samples))])
    Xtr, Xte = [], []
    for v in p.views:  # every party scales its own view with its own training statistics
        X = ds.views[ds.view_names.index(v)].astype(np.float64)
        mu, sd = X[tr].mean(0), np.where(X[tr].std(0) < 1e-12, 1.0, X[tr].std(0))
        Xtr.append((X[tr] - mu) / sd)
        Xte.append((X[te] - mu) / sd)
    y_mean = y[tr].mean()  # the label owner's own statistic
    ytr, yte = y[tr] - y_mean, y[te] - y_mean
    ctx.log(f"{ds.name}: {len(tr)} train / {len(te)} test, views {list(p.views)}")
    rows, runs, gaps, log = [], [], [], None
    with ctx.progress(len(p.alphas), "alphas") as advance:
        for alpha in p.alphas:
            fed = FedRidge(alpha=alpha, max_iter=p.max_iter, tol=p.tol).fit(Xtr, ytr)
            w_star = _ridge(np.hstack(Xtr), ytr, alpha)
            gap = float(np.abs(np.concatenate(fed.coef_) - w_star).max())
            gaps.append(gap)
            alone = Xte[0] @ _ridge(Xtr[0], ytr, alpha)
            n_iter, log = len(fed.objective_), log or fed.transport_.log.summary()
            r2 = [_r2(yte, fed.predict(Xte)), _r2(yte, np.hstack(Xte) @ w_star), _r2(yte, alone)]
            rows.append([f"{alpha:g}", n_iter, f"{gap:.1e}", *r2])
            runs.append({"alpha": alpha, "rounds": n_iter, "max_abs_w_gap": gap, "test_r2": r2})
            advance(1)
    target = f"{p.target_view}[:, {p.target_column}]"
    table = Table(
        f"FedRidge on {ds.name}: predict {target} from {', '.join(p.views)}",
        [
            "alpha",
            "rounds",
            "max |w - w*|",
            "test R² fed",
            "test R² central",
            f"R² {p.views[0]} alone",
        ],
        rows,
        note="w*: closed form on the concatenated views; a round = one sweep over all parties",
    )
    return ExperimentResult(
        metrics={"target": target, "views": list(p.views), "runs": runs},
        tables=[table],
        message_log=log,
        summary=f"largest |w - w*| over all alphas: {max(gaps):.1e}",
    )
