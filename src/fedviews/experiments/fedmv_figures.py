"""FedMV figures (Che et al., Figs. 5-6) on public multi-view data: ``fedmv_tsne``
(t-SNE of the views and of the consensus ``Z_test``) and ``fedmv_hyperparams``.

``fedmv_tsne`` (Fig. 5) also measures what the figure shows: per panel, how well the true
classes separate in the panel's own space (silhouette, leave-one-out 1-NN accuracy), since
t-SNE distances are not metric and a picture cannot be checked.

``fedmv_hyperparams`` (Fig. 6) varies one hyper-parameter at a time over ``values``
(paper: 2^0..2^5) with the others at ``base`` (paper: 2^3): each view's ζ_k (the
weight of view k's consensus term ζ_k ||Z_k - Z||², one per view, not one shared ζ),
then η; V-FedMV only (H-FedMV's curves are not reproduced here). Data, splits and
models as the tables of :mod:`fedviews.experiments.fedmv`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.errors import ConfigError
from fedviews.experiments._common import split_views, unconverged_fits
from fedviews.experiments._config import ExperimentConfig
from fedviews.experiments._metrics import (
    METRICS,
    class_separation,
    classification_metrics,
    paired_difference,
    pm,
)
from fedviews.experiments._metrics import summarize as _summarize
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.experiments.fedmv import FedMVVerticalParams, _check_average, _load, _model
from fedviews.report import line_panels, pyplot, save_figure

__all__ = [
    "FedMVHyperParams",
    "FedMVTSNEParams",
    "hyper_settings",
    "run_fedmv_hyperparams",
    "run_fedmv_tsne",
]


@dataclass(frozen=True)
class FedMVTSNEParams:
    n_samples: int = 300  # test samples shown
    test_size: float = 0.3
    """Held-out fraction (stratified); the figure shows held-out samples."""
    positive_classes: tuple[int, ...] = ()
    """Classes of the positive label of a binary task (empty: all classes)."""
    beta: float = 4.0
    """ℓ2,1 strength β of every view."""
    zeta: float = 8.0
    """ζ of every view."""
    eta: float = 16.0
    """η (V-FedMV's label term)."""
    max_iter: int = 30
    """Outer rounds of V-FedMV."""
    inner_max_iter: int = 5
    """IRLS iterations per round of V-FedMV and per local pass of H-FedMV."""
    n_clients: int = 4
    """H-FedMV clients (class-balanced)."""
    n_rounds: int = 20
    """H-FedMV rounds."""
    local_iter: int = 1
    """H-FedMV local passes per round."""
    perplexity: float = 30.0
    """t-SNE perplexity."""
    standardize: bool = True
    """Standardise features with training statistics."""

    def validate(self) -> None:
        if self.n_samples < 10:
            raise ConfigError("params.n_samples must be >= 10")
        if not 0 < self.test_size < 1:
            raise ConfigError("params.test_size must lie in (0, 1)")
        if min(self.beta, self.zeta, self.eta, self.perplexity) <= 0:
            raise ConfigError("params.beta, zeta, eta and perplexity must be positive")


@register_experiment(
    "fedmv_tsne",
    FedMVTSNEParams,
    description="t-SNE of the views before learning and of X_k W_k and Z after V-/H-FedMV (FedMV paper, Fig. 5)",
)
def run_fedmv_tsne(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    from sklearn.manifold import TSNE
    from sklearn.model_selection import train_test_split

    from fedviews.data import partition_clients

    p: FedMVTSNEParams = cfg.params
    ds, y = _load(cfg, FedMVVerticalParams(positive_classes=p.positive_classes))
    names = list(ds.view_names)
    K = len(names)
    tr, te = train_test_split(
        np.arange(len(y)), test_size=p.test_size, stratify=y, random_state=cfg.seed
    )
    Xtr, Xte = split_views(ds.views, (tr, te), p.standardize)
    ytr, yte = y[tr], y[te]
    show = np.random.default_rng(cfg.seed).permutation(len(te))[: p.n_samples]
    parts = partition_clients(ytr, p.n_clients, "iid", random_state=cfg.seed)
    with unconverged_fits(ctx, "V-FedMV", p.max_iter) as converged:
        v = _model(p, p.zeta, p.eta, cfg.seed, False).fit(Xtr, ytr)
    h = _model(p, p.zeta, p.eta, cfg.seed, True).fit([([X[i] for X in Xtr], ytr[i]) for i in parts])
    Xs_show = [X[show] for X in Xte]
    yy = yte[show]
    # (method, panel, the panel's samples in its own space)
    spaces: list[tuple[str, str, np.ndarray]] = [
        ("input", n, X) for n, X in zip(names, Xs_show, strict=True)
    ]
    for label, model in (("V-FedMV", v), ("H-FedMV", h)):
        spaces += [
            (label, f"{n}: X W", X @ W) for n, X, W in zip(names, Xs_show, model.W_, strict=True)
        ]
        spaces.append((label, "Z test", model.decision_function(Xs_show)))
    panels = [(f"{panel} ({method})", A) for method, panel, A in spaces]
    rows: list[list[Any]] = []
    for method, panel, A in spaces:
        score = class_separation(A, yy)
        rows.append([method, panel, A.shape[1], score["silhouette"], score["knn1"]])
    separation = Table(
        f"{ds.name}: class separation of the {len(show)} test samples of each t-SNE panel, "
        "in the panel's own space",
        ["method", "panel", "dimension", "silhouette", "1-NN accuracy (%)"],
        rows,
        note="silhouette: mean silhouette coefficient with the true classes as clusters "
        "(Euclidean, -1..1, higher = better separated); 1-NN: leave-one-out nearest-neighbour "
        "accuracy among the shown samples; both on the arrays t-SNE embeds (input: the "
        "standardised view), not on the t-SNE coordinates",
    )
    acc = {
        n: float(np.mean(m.predict(Xte) == yte) * 100) for n, m in (("V-FedMV", v), ("H-FedMV", h))
    }
    emb: list[np.ndarray] = []
    with ctx.progress(len(panels), "t-SNE panels") as advance:
        for _, A in panels:
            perp = min(p.perplexity, (len(A) - 1) / 3)
            emb.append(
                TSNE(
                    n_components=2, perplexity=perp, init="pca", random_state=cfg.seed
                ).fit_transform(A)
            )
            advance(1)
    ncol = K + 1
    fig, axes = pyplot().subplots(3, ncol, figsize=(2.6 * ncol, 7.8))
    for r, start in enumerate((0, K, 2 * K + 1)):  # the views; then X_k W_k and Z per method
        for c, ax in enumerate(axes[r]):
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= (K if r == 0 else K + 1):
                ax.axis("off")
                continue
            E = emb[start + c]
            ax.scatter(E[:, 0], E[:, 1], c=yy, cmap="tab10", s=5)
            ax.set_title(panels[start + c][0], fontsize=8)
    fig.suptitle(
        f"{ds.name}: t-SNE of {len(show)} test samples (colour = class). Row 1: views; rows 2-3: X_k W_k and consensus Z^test",
        fontsize=9,
    )
    path = save_figure(fig, ctx.path("tsne.png"))
    return ExperimentResult(
        metrics={
            "dataset": ds.summary(),
            "test_accuracy": acc,
            "n_shown": int(len(show)),
            "converged": converged,
        },
        tables=[separation],
        figures=[path],
        message_log=v.run_stats_,
        summary=f"test accuracy V-FedMV {acc['V-FedMV']:.2f}, H-FedMV {acc['H-FedMV']:.2f}; "
        f"silhouette: best input view {max(r[3] for r in rows[:K]):.2f}, "
        + ", ".join(f"Z test ({r[0]}) {r[3]:.2f}" for r in rows if r[1] == "Z test"),
    )


# --------------------------------------------------------------------------- ζ_k, η (Fig. 6)


@dataclass(frozen=True)
class FedMVHyperParams:
    values: tuple[float, ...] = (1, 2, 4, 8, 16, 32)
    """Values each hyper-parameter takes in turn (paper: 2^0..2^5)."""
    base: float = 8.0
    """Value of the hyper-parameters not being varied (paper: 2^3)."""
    n_repeats: int = 5
    """Stratified splits (seed ``seed + r``); every point is mean ± std over them."""
    test_size: float = 0.2
    """Test fraction of each stratified split."""
    n_per_class: int = 0
    """Balanced subsample: samples per class (0 = every sample)."""
    positive_classes: tuple[int, ...] = ()
    """Non-empty: the binary task (these classes → 1, the rest → 0)."""
    average: str = "macro"
    """Precision/recall/F1 averaging: ``"macro"`` or ``"binary"`` (needs ``positive_classes``)."""
    beta: float = 4.0
    """ℓ2,1 strength β of every view (paper: 4)."""
    max_iter: int = 300
    """Outer rounds of V-FedMV at most (it stops earlier at its tol; 300: every fit of the
    Handwritten grid converges)."""
    inner_max_iter: int = 5
    """IRLS iterations per round."""
    standardize: bool = True
    """Standardise every view with its training statistics."""

    def validate(self) -> None:
        if not self.values or min((*self.values, self.base, self.beta)) <= 0:
            raise ConfigError("params.values (non-empty), params.base and params.beta must be > 0")
        if self.n_repeats < 1 or self.max_iter < 1 or self.inner_max_iter < 1:
            raise ConfigError("params.n_repeats, max_iter and inner_max_iter must be >= 1")
        if not 0 < self.test_size < 1:
            raise ConfigError("params.test_size must lie in (0, 1)")
        _check_average(self)


def hyper_settings(
    names: list[str], p: FedMVHyperParams
) -> dict[str, list[tuple[list[float], float]]]:
    """``{curve: [(zeta per view, eta) for each of p.values]}``: ``ζ_k (view)`` varies view k's
    ζ_k with every other ζ and η at ``p.base``; ``η`` varies η with every ζ_k at ``p.base``."""
    K = len(names)
    out = {
        f"ζ_{k + 1} ({n})": [
            ([v if j == k else p.base for j in range(K)], p.base) for v in p.values
        ]
        for k, n in enumerate(names)
    }
    out["η"] = [([p.base] * K, v) for v in p.values]
    return out


@register_experiment(
    "fedmv_hyperparams",
    FedMVHyperParams,
    description="V-FedMV accuracy, precision, recall, F1 against each zeta_k and eta (FedMV paper, Fig. 6)",
)
def run_fedmv_hyperparams(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    from sklearn.model_selection import train_test_split

    p: FedMVHyperParams = cfg.params
    ds, y = _load(
        cfg, FedMVVerticalParams(n_per_class=p.n_per_class, positive_classes=p.positive_classes)
    )
    names = list(ds.view_names)
    curves = hyper_settings(names, p)
    distinct = {(tuple(z), e) for pts in curves.values() for z, e in pts}
    ctx.log(
        f"{ds.name}: {len(y)} samples, views {names}; {len(curves)} curves x {len(p.values)} "
        f"values ({len(distinct)} distinct settings) x {p.n_repeats} splits"
    )
    # per_repeat[r][setting key] = metrics; the setting shared by the curves (all at base) runs once
    per_repeat: list[dict[str, dict[str, float]]] = []
    with (
        ctx.progress(len(distinct) * p.n_repeats, "V-FedMV fits") as advance,
        unconverged_fits(ctx, "V-FedMV", p.max_iter) as converged,
    ):
        for r in range(p.n_repeats):
            seed = cfg.seed + r
            tr, te = train_test_split(
                np.arange(len(y)), test_size=p.test_size, stratify=y, random_state=seed
            )
            Xtr, Xte = split_views(list(ds.views), (tr, te), p.standardize)
            rep: dict[str, dict[str, float]] = {}
            for z, e in sorted(distinct):
                m = _model(p, list(z), e, seed, False).fit(Xtr, y[tr])
                rep[_key(z, e)] = classification_metrics(y[te], m.predict(Xte), p.average)
                advance(1)
            per_repeat.append(rep)
            ctx.checkpoint({"per_repeat": per_repeat})
    # results[curve][metric] = [[mean, std] per value]
    results = {
        c: {
            k: [_summarize([rep[_key(z, e)] for rep in per_repeat])[k] for z, e in pts]
            for k in METRICS
        }
        for c, pts in curves.items()
    }
    cols = [f"{v:g}" for v in p.values]
    tables = []
    spread: dict[str, dict[str, Any]] = {}  # accuracy: best - worst value of each curve, paired
    for k in ("accuracy", "f1"):
        rows = []
        for c, pts in curves.items():
            means = [ms[0] for ms in results[c][k]]
            hi, lo = (pts[int(f(means))] for f in (np.argmax, np.argmin))
            d = paired_difference(
                [rep[_key(*hi)][k] for rep in per_repeat], [rep[_key(*lo)][k] for rep in per_repeat]
            )
            if k == "accuracy":
                spread[c] = d
            verdict = "best > worst" if d["verdict"] == "a > b" else "inconclusive"
            rows.append(
                [
                    c,
                    *[pm(*ms) for ms in results[c][k]],
                    cols[int(np.argmax(means))],
                    d["mean"],
                    f"[{d['low']:.2f}, {d['high']:.2f}]",
                    verdict,
                ]
            )
        tables.append(
            Table(
                f"V-FedMV {k} (%) on {ds.name}, one hyper-parameter varied, the others = {p.base:g}",
                ["varied", *cols, "best", "best − worst", "paired 95% CI", "verdict"],
                rows,
                note=f"mean ± std over {p.n_repeats} stratified splits (test {p.test_size:g}); "
                f"beta={p.beta:g}, max_iter={p.max_iter}; {p.average} F1; best − worst: the "
                "curve's best minus its worst value, paired by split (Student t; both picked on "
                "the same splits, so the interval is optimistic)",
            )
        )
    order = sorted(spread, key=lambda c: -spread[c]["mean"])
    real = [c for c in order if spread[c]["verdict"] == "a > b"]
    summary = (
        f"accuracy best − worst over {cols[0]}..{cols[-1]}: "
        + ", ".join(f"{c} {spread[c]['mean']:.2f}" for c in order)
        + f" points; most sensitive to {order[0]}, least to {order[-1]}; "
        + (
            f"beyond split noise (paired 95% CI > 0): {', '.join(real)}"
            if real
            else "none beyond split noise (paired 95% CI)"
        )
    )
    ctx.log(summary)
    x = list(p.values)
    path = line_panels(
        ctx.path("hyperparams.png"),
        x,
        {k: {c: [ms[0] for ms in results[c][k]] for c in curves} for k in METRICS},
        errors={k: {c: [ms[1] for ms in results[c][k]] for c in curves} for k in METRICS},
        xlabel=f"value of the varied hyper-parameter (others {p.base:g})",
        ylabel="%",
        title=f"V-FedMV on {ds.name}: hyper-parameter analysis (FedMV Fig. 6)",
        ncols=2,
        logx=True,
    )
    metrics = {
        "dataset": ds.summary(),
        "values": x,
        "base": p.base,
        "results": results,
        "per_repeat": per_repeat,
        "accuracy_best_minus_worst": spread,
        "converged": converged,
    }
    return ExperimentResult(metrics=metrics, tables=tables, figures=[path], summary=summary)


def _key(zeta: Any, eta: float) -> str:
    """A setting's key in ``per_repeat``: ``"zeta=8,1,8 eta=8"``."""
    return f"zeta={','.join(f'{z:g}' for z in zeta)} eta={eta:g}"
