"""FedMV experiments (Che et al., Tables 1-2) on public multi-view data.

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

The figures (Figs. 5-6: ``fedmv_tsne``, ``fedmv_hyperparams``) are in
:mod:`fedviews.experiments.fedmv_figures`.
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
    pm,
)
from fedviews.experiments._metrics import summarize as _summarize
from fedviews.experiments._paper import fedmv_paper_tables
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext

__all__ = [
    "FedMVHorizontalParams",
    "FedMVVerticalParams",
    "run_fedmv_horizontal",
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
        # (a misspelt table dropped the paper's numbers from the results without a word)
        check_choice("paper_table", self.paper_table, ["", *fedmv_paper_tables()])
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
        message_log=None
        if keep.get("log") is None  # the report and the summary line say whose traffic it is
        else {
            **keep["log"],
            "scope": f"the first repeat's {setting} fit (the run made more: "
            "the tuning grid's, one per repeat, the baselines')",
        },
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
