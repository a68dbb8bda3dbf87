"""FedMV experiments (Che et al., Tables 1-2, Figs. 5-6) on public multi-view data.

The paper's data (BiAffect keystrokes) is private, so its numbers are shown as
context only, never as a reproduction target.

Protocol (``fedmv_vertical`` / ``fedmv_horizontal``), for each of ``n_repeats``
repetitions with seed ``seed + r``:

1. stratified split into train / validation / test (``test_size``, ``val_size``);
   optionally a binary task (``positive_classes`` -> 1, the rest -> 0);
2. features standardised with training statistics (vertical: every party with its
   own view's statistics; horizontal: the pooled training statistics, which a
   deployment would obtain as one more sample-weighted aggregate);
3. horizontal only: the training part is split among ``n_clients`` clients with
   :func:`fedviews.data.partition_clients` (``"iid"`` = class-balanced as in the
   paper, ``"label_skew"`` = non-IID);
4. every method is trained on the training part and scored on the test part
   (accuracy, precision, recall, F1 in %, ``average`` = macro, or binary for the
   binary task as in the paper).

ζ (shared by all views) and η are chosen from ``zetas`` x ``etas`` (paper:
{2^0..2^5}) by validation accuracy of the main method (V-FedMV / H-FedMV) on the
first repetition's split; the pairwise and local multi-view baselines reuse them.
β = 4 everywhere (paper).

``fedmv_hyperparams`` (Fig. 6) varies one hyper-parameter at a time over ``values``
(paper: 2^0..2^5) with the others at ``base`` (paper: 2^3): each view's ζ_k (the
weight of view k's consensus term ζ_k ||Z_k - Z||², one per view, not one shared ζ),
then η; V-FedMV only (H-FedMV's curves are not reproduced here).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedviews.errors import ConfigError
from fedviews.experiments._common import split_views, unconverged_fits
from fedviews.experiments._config import ExperimentConfig, check_choice
from fedviews.experiments._metrics import (
    METRICS,
    classification_metrics,
    metric_tables,
    paired_difference,
    pm,
)
from fedviews.experiments._metrics import summarize as _summarize
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.report import line_panels, pyplot, save_figure

__all__ = [
    "FedMVHorizontalParams",
    "FedMVHyperParams",
    "FedMVTSNEParams",
    "FedMVVerticalParams",
    "hyper_settings",
    "run_fedmv_horizontal",
    "run_fedmv_hyperparams",
    "run_fedmv_tsne",
    "run_fedmv_vertical",
]

VERTICAL_METHODS = ("vfedmv", "pairwise", "single_view")
HORIZONTAL_METHODS = ("hfedmv", "mv_local", "pairwise", "single_view_fl")
AVERAGES = ("macro", "binary")


def _check_average(p: Any) -> None:
    """ConfigError unless ``p.average`` is known and ``"binary"`` comes with a binary task."""
    check_choice("average", p.average, AVERAGES)
    if p.average == "binary" and not p.positive_classes:
        raise ConfigError(
            "params.average = 'binary' needs params.positive_classes (the binary task)"
        )


@dataclass(frozen=True)
class FedMVVerticalParams:
    methods: tuple[str, ...] = VERTICAL_METHODS
    """Methods to run: ``vfedmv``, ``pairwise`` (V-FedMV without one view), ``single_view`` (supFL on
    one view).
    """
    n_repeats: int = 10
    """Repetitions, each with its own stratified split (seed ``seed + r``); results are mean ± std.
    """
    test_size: float = 0.2
    """Test fraction of the stratified split."""
    val_size: float = 0.2
    """Validation fraction (chooses ζ and η on the first repetition)."""
    n_per_class: int = 0
    """Balanced subsample: samples per class (0 = every sample)."""
    positive_classes: tuple[int, ...] = ()
    """Non-empty: the binary task (these classes → 1, the rest → 0)."""
    average: str = "macro"
    """Metric averaging: ``"macro"`` or ``"binary"`` (positive-class metrics; needs
    ``positive_classes``).
    """
    beta: float = 4.0
    """ℓ2,1 strength β of every view (paper: 4)."""
    zetas: tuple[float, ...] = (1, 2, 4, 8, 16, 32)
    """Candidate ζ (shared by all views), chosen by validation accuracy (paper: 2^0..2^5)."""
    etas: tuple[float, ...] = (1, 2, 4, 8, 16, 32)
    """Candidate η, chosen by validation accuracy (paper: 2^0..2^5)."""
    max_iter: int = 30
    """Outer rounds of V-FedMV / H-FedMV."""
    inner_max_iter: int = 5
    """IRLS iterations per round (per local pass in H-FedMV)."""
    standardize: bool = True
    """Standardise features with training statistics (vertical: each party its own view)."""
    paper_table: str = "fedmv_table1_vertical"
    """Key of the paper's table printed beside the results as context ("" = none)."""

    #: the methods this experiment knows (``methods`` picks from them)
    METHODS: ClassVar[tuple[str, ...]] = VERTICAL_METHODS

    def validate(self) -> None:
        check_choice("methods", self.methods, self.METHODS)
        if self.n_repeats < 1:
            raise ConfigError("params.n_repeats must be >= 1")
        if not (
            0 < self.test_size < 1 and 0 < self.val_size < 1 and self.test_size + self.val_size < 1
        ):
            raise ConfigError(
                "params.test_size and params.val_size must lie in (0, 1) and sum to < 1"
            )
        _check_average(self)
        if not self.zetas or not self.etas or min((*self.zetas, *self.etas, self.beta)) <= 0:
            raise ConfigError(
                "params.zetas, params.etas and params.beta must be positive (non-empty)"
            )
        if self.max_iter < 1 or self.inner_max_iter < 1:
            raise ConfigError("params.max_iter and params.inner_max_iter must be >= 1")


@dataclass(frozen=True)
class FedMVHorizontalParams(FedMVVerticalParams):
    methods: tuple[str, ...] = HORIZONTAL_METHODS
    """Methods to run: ``hfedmv``, ``mv_local`` (each client alone), ``pairwise`` (H-FedMV without one
    view), ``single_view_fl`` (FedAvg of one view).
    """
    n_clients: int = 4
    """Clients the training part is dealt to (each holds every view of its samples)."""
    partition: str = "iid"
    """How the training part is dealt: ``"iid"`` (class-balanced, the paper), ``"label_skew"`` or
    ``"dirichlet"``."""
    classes_per_client: int = 2
    """Classes per client under ``partition = "label_skew"``."""
    dirichlet_alpha: float = 0.5
    """Concentration of ``partition = "dirichlet"`` (smaller: more skewed)."""
    n_rounds: int = 20
    """Communication rounds of H-FedMV and Single View FL."""
    local_iter: int = 1
    """Local passes per round (Algorithm 3 iterates to convergence; 1 = one pass per round)."""
    paper_table: str = "fedmv_table2_horizontal"
    METHODS: ClassVar[tuple[str, ...]] = HORIZONTAL_METHODS

    def validate(self) -> None:
        super().validate()
        if self.n_clients < 1 or self.n_rounds < 1 or self.local_iter < 1:
            raise ConfigError(
                "params.n_clients, params.n_rounds and params.local_iter must be >= 1"
            )
        check_choice("partition", self.partition, ("iid", "label_skew", "dirichlet"))


# --------------------------------------------------------------------------- data


@dataclass
class _Split:
    Xtr: list[np.ndarray]
    Xval: list[np.ndarray]
    Xte: list[np.ndarray]
    ytr: np.ndarray
    yval: np.ndarray
    yte: np.ndarray


def _load(cfg: ExperimentConfig, p: FedMVVerticalParams) -> Any:
    from fedviews.data import balanced_subsample, load

    ds = load(cfg.data.name, **dict(cfg.data.options))
    if p.n_per_class:
        ds = ds.subset(balanced_subsample(ds.y, p.n_per_class, random_state=cfg.seed))
    if p.positive_classes:
        known = set(np.unique(ds.y).tolist())
        bad = [c for c in p.positive_classes if c not in known]
        if bad:
            raise ConfigError(
                f"params.positive_classes {bad} are not labels of {ds.name} ({sorted(known)})"
            )
        y = np.isin(ds.y, list(p.positive_classes)).astype(np.int64)
    else:
        y = np.asarray(ds.y)
    return ds, y


def _split(views: list[np.ndarray], y: np.ndarray, p: FedMVVerticalParams, seed: int) -> _Split:
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    rest, te = train_test_split(idx, test_size=p.test_size, stratify=y, random_state=seed)
    tr, val = train_test_split(
        rest, test_size=p.val_size / (1 - p.test_size), stratify=y[rest], random_state=seed
    )
    Xtr, Xval, Xte = split_views(views, (tr, val, te), p.standardize)
    return _Split(Xtr, Xval, Xte, y[tr], y[val], y[te])


# --------------------------------------------------------------------------- methods


def _model(p: Any, zeta: float | list[float], eta: float, seed: int, horizontal: bool) -> Any:
    """H-FedMV (``horizontal``) or V-FedMV with ``p``'s beta, rounds and iteration counts
    (experiment, t-SNE or hyper-parameter params); ``zeta``: one value or one per view."""
    from fedviews.linear import HFedMV, VFedMV

    kw = {"beta": p.beta, "zeta": zeta, "eta": eta, "inner_max_iter": p.inner_max_iter}
    if horizontal:
        return HFedMV(n_rounds=p.n_rounds, local_iter=p.local_iter, random_state=seed, **kw)
    return VFedMV(max_iter=p.max_iter, random_state=seed, **kw)


def _clients(s: _Split, p: FedMVHorizontalParams, seed: int) -> list[Any]:
    from fedviews.data import partition_clients

    parts = partition_clients(
        s.ytr,
        p.n_clients,
        p.partition,
        alpha=p.dirichlet_alpha,
        classes_per_client=p.classes_per_client,
        random_state=seed,
    )
    return [([X[idx] for X in s.Xtr], s.ytr[idx]) for idx in parts]


def _fit_main(
    p: Any, s: _Split, zeta: float, eta: float, seed: int, horizontal: bool, views: Any = None
) -> Any:
    """V-FedMV (or, ``horizontal``, H-FedMV on ``s``'s clients) fitted on the training part,
    with the views ``views`` only (default: all)."""
    keep = list(range(len(s.Xtr))) if views is None else list(views)
    if horizontal:
        clients = [([Xs[k] for k in keep], y) for Xs, y in _clients(s, p, seed)]
        return _model(p, zeta, eta, seed, True).fit(clients)
    return _model(p, zeta, eta, seed, False).fit([s.Xtr[k] for k in keep], s.ytr)


def _tune(
    fit: Any, p: FedMVVerticalParams, s: _Split, advance: Any
) -> tuple[float, float, list[list[float]]]:
    """Grid over (zeta, eta) scored by validation accuracy of ``fit(zeta, eta)``; ties go to
    the first pair."""
    grid = np.zeros((len(p.zetas), len(p.etas)))
    for i, z in enumerate(p.zetas):
        for j, e in enumerate(p.etas):
            grid[i, j] = 100.0 * np.mean(fit(z, e).predict(s.Xval) == s.yval)
            advance(1)
    best = np.unravel_index(int(np.argmax(grid)), grid.shape)
    return float(p.zetas[int(best[0])]), float(p.etas[int(best[1])]), grid.tolist()


def _rows(
    p: Any,
    names: list[str],
    s: _Split,
    zeta: float,
    eta: float,
    seed: int,
    keep: dict[str, Any],
    horizontal: bool,
) -> dict[str, dict[str, float]]:
    """Test metrics of every method on one split: ``{row name: metrics}``; ``keep`` remembers
    the message log and objective (and client sizes) of the first main fit."""
    from fedviews.linear import LocalMVL, SingleViewFL, SupFL

    def score(model: Any, X: Any) -> dict[str, float]:
        return classification_metrics(s.yte, model.predict(X), p.average)

    out: dict[str, dict[str, float]] = {}
    K = len(names)
    clients = _clients(s, p, seed) if horizontal else []
    setting = "H-FedMV" if horizontal else "V-FedMV"
    if setting.replace("-", "").lower() in p.methods:
        m = _fit_main(p, s, zeta, eta, seed, horizontal)
        out[setting] = score(m, s.Xte)
        keep.setdefault("log", m.run_stats_)
        keep.setdefault("objective", m.objective_)
        if horizontal:
            keep.setdefault("client_sizes", m.client_sizes_)
    if "mv_local" in p.methods:
        classes = np.unique(s.ytr)
        per_client = []
        for Xs, y in clients:
            lm = LocalMVL(
                beta=p.beta,
                zeta=zeta,
                eta=eta,
                n_iter=p.n_rounds * p.local_iter,
                inner_max_iter=p.inner_max_iter,
                random_state=seed,
            ).fit(Xs, y, classes=classes)
            per_client.append(score(lm, s.Xte))
        out["MV w/o FL"] = {k: float(np.mean([c[k] for c in per_client])) for k in METRICS}
    if "pairwise" in p.methods and K > 2:  # leave each view out in turn
        for v in range(K):
            rest = [k for k in range(K) if k != v]
            m = _fit_main(p, s, zeta, eta, seed, horizontal, rest)
            out[f"Pairwise FL w/o {names[v]}"] = score(m, [s.Xte[k] for k in rest])
    for v in range(K) if {"single_view", "single_view_fl"} & set(p.methods) else []:
        if horizontal:
            sv = SingleViewFL(
                beta=p.beta,
                n_rounds=p.n_rounds,
                local_iter=p.local_iter * p.inner_max_iter,
                random_state=seed,
            ).fit([(Xs[v], y) for Xs, y in clients])
            out[f"Single View FL - {names[v]}"] = score(sv, s.Xte[v])
        else:
            sv = SupFL(beta=p.beta, max_iter=p.max_iter * p.inner_max_iter).fit([s.Xtr[v]], s.ytr)
            out[f"{names[v]} w/o FL"] = score(sv, s.Xte[v])
    return out


def _run(cfg: ExperimentConfig, ctx: RunContext, horizontal: bool) -> ExperimentResult:
    p = cfg.params
    ds, y = _load(cfg, p)
    names = list(ds.view_names)
    n_grid = len(p.zetas) * len(p.etas)
    ctx.log(
        f"{ds.name}: {len(y)} samples, views {dict(zip(names, ds.n_features, strict=True))}, "
        f"{len(np.unique(y))} classes; {p.n_repeats} repeats, grid {n_grid} (zeta, eta)"
    )
    s0 = _split(list(ds.views), y, p, cfg.seed)
    keep: dict[str, Any] = {}
    per_rep: list[dict[str, dict[str, float]]] = []
    seconds: list[float] = []
    with (
        ctx.progress(n_grid + p.n_repeats, "tuning (zeta, eta), then repeats") as advance,
        unconverged_fits(ctx, "V-FedMV", p.max_iter) as converged,
    ):
        t0 = time.perf_counter()
        zeta, eta, grid = _tune(
            lambda z, e: _fit_main(p, s0, z, e, cfg.seed, horizontal), p, s0, advance
        )
        tune_seconds = time.perf_counter() - t0
        ctx.log(f"selected zeta={zeta:g}, eta={eta:g} on validation ({tune_seconds:.1f}s)")
        for r in range(p.n_repeats):
            seed = cfg.seed + r
            s = s0 if r == 0 else _split(list(ds.views), y, p, seed)
            t0 = time.perf_counter()
            per_rep.append(_rows(p, names, s, zeta, eta, seed, keep, horizontal))
            seconds.append(time.perf_counter() - t0)
            ctx.checkpoint({"zeta": zeta, "eta": eta, "per_repeat": per_rep})
            advance(1)
    summary = {name: _summarize([rep[name] for rep in per_rep]) for name in per_rep[0]}
    setting = "H-FedMV" if horizontal else "V-FedMV"
    extra = (
        f"{p.n_clients} clients, partition={p.partition}, {p.n_rounds} rounds; "
        if horizontal
        else ""
    )
    task = (
        f"binary ({list(p.positive_classes)} vs rest)"
        if p.positive_classes
        else f"{len(np.unique(y))} classes"
    )
    note = (
        f"{ds.name}, {task}; mean ± std over {p.n_repeats} seeds; {extra}beta={p.beta:g}, "
        f"zeta={zeta:g}, eta={eta:g} (validation); {p.average} precision/recall/F1"
    )
    tables = metric_tables(
        summary,
        f"{setting} and baselines on {ds.name} (%)",
        note,
        p.paper_table,
        "Different (private) data with 3 views (alphanum, special, accel); positive-class precision/recall.",
    )
    best = max(summary, key=lambda n: summary[n]["accuracy"][0])
    metrics = {
        "dataset": ds.summary(),
        "task": task,
        "selected": {
            "zeta": zeta,
            "eta": eta,
            "validation_accuracy_grid": grid,
            "zetas": list(p.zetas),
            "etas": list(p.etas),
        },
        "results": summary,
        "per_repeat": per_rep,
        "seconds_tuning": tune_seconds,
        "seconds_per_repeat": seconds,
        "objective_first_fit": keep.get("objective", []),
        "client_sizes_first_fit": keep.get("client_sizes"),
    }
    if not horizontal:  # H-FedMV runs its n_rounds: no stopping rule to miss
        metrics["converged"] = converged
    msg = f"{setting}: acc {pm(*summary[setting]['accuracy'])}; " if setting in summary else ""
    return ExperimentResult(
        metrics=metrics,
        tables=tables,
        message_log=keep.get("log"),
        summary=f"{msg}best: {best} ({summary[best]['accuracy'][0]:.2f})",
    )


@register_experiment(
    "fedmv_vertical",
    FedMVVerticalParams,
    description="V-FedMV vs Pairwise FL and Single View w/o FL (FedMV paper, Table 1)",
)
def run_fedmv_vertical(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    return _run(cfg, ctx, horizontal=False)


@register_experiment(
    "fedmv_horizontal",
    FedMVHorizontalParams,
    description="H-FedMV vs MV w/o FL, Pairwise FL and Single View FL (FedMV paper, Table 2)",
)
def run_fedmv_horizontal(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    return _run(cfg, ctx, horizontal=True)


# --------------------------------------------------------------------------- t-SNE (Fig. 5)


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
    v = _model(p, p.zeta, p.eta, cfg.seed, False).fit(Xtr, ytr)
    parts = partition_clients(ytr, p.n_clients, "iid", random_state=cfg.seed)
    h = _model(p, p.zeta, p.eta, cfg.seed, True).fit([([X[i] for X in Xtr], ytr[i]) for i in parts])
    Xs_show = [X[show] for X in Xte]
    panels: list[tuple[str, np.ndarray]] = [
        (f"{n} (input)", X) for n, X in zip(names, Xs_show, strict=True)
    ]
    for label, model in (("V-FedMV", v), ("H-FedMV", h)):
        panels += [
            (f"{n}: X W ({label})", X @ W) for n, X, W in zip(names, Xs_show, model.W_, strict=True)
        ]
        panels.append((f"Z test ({label})", model.decision_function(Xs_show)))
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
    yy = y[te][show]
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
        metrics={"dataset": ds.summary(), "test_accuracy": acc, "n_shown": int(len(show))},
        figures=[path],
        message_log=v.run_stats_,
        summary=f"test accuracy V-FedMV {acc['V-FedMV']:.2f}, H-FedMV {acc['H-FedMV']:.2f}",
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
