"""MMVFL feature-selection experiment (Section 6 of the MMVFL paper).

Protocol, per dataset:

1. balanced subsample of ``n_per_class`` samples per class (Handwritten: 160;
   Caltech7: 25), split into ``n_folds`` stratified, class-balanced folds;
2. for every fold and every β, fit MMVFL (labels at one party only), supFL and
   supMVLFL (labels at every party) on the training part; features are
   standardised with training statistics when ``standardize`` is on;
3. every party ranks its own features by the row norms of its ``W_k`` and keeps the
   top p %; a classifier (``classifier``, default 1-NN, the same for every
   algorithm) trained on the party's selected training features is scored on
   the held-out fold;
4. as in the paper, the best β is picked per (p, fold, view, algorithm) on that
   held-out fold, then accuracies are averaged over folds.

The paper's "120 training + 40 validation per class" cannot come from a 5-fold
split of one pool (4/5 of 160 is 128); we follow its 5-fold description with 160
per class (128 train / 32 validation per fold). Set ``n_per_class = 200`` for
160 / 40.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.errors import ConfigError
from fedviews.experiments._common import split_views, unconverged_fits
from fedviews.experiments._config import ExperimentConfig, check_choice
from fedviews.experiments._metrics import (
    CLASSIFIERS,
    VERDICT_WORDS,
    make_classifier,
    paired_difference,
    verdict_line,
)
from fedviews.experiments._paper import mmvfl_paper_rows, paper_tables
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.report import pyplot, save_figure

__all__ = ["MMVFLParams", "run_mmvfl_feature_selection"]

ALGORITHMS = ("mmvfl", "supfl", "supmvlfl")


@dataclass(frozen=True)
class MMVFLParams:
    algorithms: tuple[str, ...] = ALGORITHMS
    """Algorithms compared: ``mmvfl`` (labels at one party), ``supfl`` and ``supmvlfl`` (labels at
    every party).
    """
    n_per_class: int = 160
    """Balanced subsample: samples per class (the pool the folds are cut from)."""
    n_folds: int = 5
    """Stratified, class-balanced folds."""
    percents: tuple[float, ...] = (2, 4, 6, 8, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
    """The p % of each party's features kept (ranked by the row norms of its ``W_k``)."""
    betas: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
    """Candidate β; the best is chosen per (p, fold, view, algorithm) on the held-out fold, as in the
    paper.
    """
    zeta: float = 1000.0
    """ζ of MMVFL (every party)."""
    eta: float = 1000.0
    """η of MMVFL."""
    label_owner: int = 0
    """Index of the view whose party holds the labels."""
    max_iter: int = 30
    """MMVFL's outer rounds."""
    tol: float = 1e-5
    """Relative objective change that stops MMVFL."""
    label_scale: str = "onehot"
    """The label target ``Y`` of all three algorithms (the paper's Eq. 15 and 16 use MMVFL's ``Y``):
    ``onehot`` or ``orthonormal`` (``Y^T Y = I``, Sec. 4.4).
    """
    inner_max_iter: int = 20
    """IRLS iterations per round (supFL / supMVLFL run five times as many in total)."""
    inner_tol: float = 1e-5
    """IRLS stopping rule."""
    classifier: str = "knn1"
    """Scores the selected features: ``knn1`` (1-NN), ``linear_svm`` or ``logreg``."""
    standardize: bool = True
    """Standardise features with training statistics first."""
    zeta_sweep: tuple[float, ...] = ()
    """Also run MMVFL with ζ = η set to each of these values (the ζ sweep figure); empty: no sweep.
    """
    paper_table: str = ""
    """Which of the paper's Table 2 rows to print beside the results (default: the dataset's name).
    """

    def validate(self) -> None:
        from fedviews.linear import LABEL_SCALES

        check_choice("algorithms", self.algorithms, ALGORITHMS)
        check_choice("classifier", self.classifier, CLASSIFIERS)
        check_choice("label_scale", self.label_scale, LABEL_SCALES)
        check_choice("paper_table", self.paper_table, ["", *mmvfl_paper_rows()])
        if self.n_folds < 2:
            raise ConfigError("params.n_folds must be >= 2")
        if not self.betas or any(b <= 0 for b in self.betas):
            raise ConfigError("params.betas must be a non-empty list of positive numbers")
        if not self.percents or any(not 0 < p <= 100 for p in self.percents):
            raise ConfigError("params.percents must lie in (0, 100]")
        if self.zeta <= 0 or self.eta <= 0 or any(z <= 0 for z in self.zeta_sweep):
            raise ConfigError("params.zeta, params.eta and params.zeta_sweep must be positive")


def _fit(
    alg: str,
    Xs: list[np.ndarray],
    y: np.ndarray,
    beta: float,
    p: MMVFLParams,
    zeta: float,
    eta: float,
    seed: int,
) -> Any:
    """``alg`` fitted on the training views (its ``feature_importances_`` rank each party's)."""
    from fedviews.linear import MMVFL, SupFL, SupMVLFL

    if alg != "mmvfl":  # labels at every party, five times MMVFL's IRLS iterations per round
        Sup = SupFL if alg == "supfl" else SupMVLFL
        return Sup(
            beta=beta, max_iter=p.inner_max_iter * 5, tol=p.inner_tol, label_scale=p.label_scale
        ).fit(Xs, y)
    return MMVFL(
        beta=beta,
        zeta=zeta,
        eta=eta,
        label_owner=p.label_owner,
        max_iter=p.max_iter,
        tol=p.tol,
        inner_max_iter=p.inner_max_iter,
        inner_tol=p.inner_tol,
        label_scale=p.label_scale,
        random_state=seed,
    ).fit(Xs, y)


def _knn1_curve(
    Xtr: np.ndarray,
    ytr: np.ndarray,
    Xte: np.ndarray,
    yte: np.ndarray,
    order: np.ndarray,
    ks: list[int],
) -> list[float]:
    """1-NN accuracy on the top-k ranked features, for every k in ``ks`` (ascending).

    The top-k sets are nested, so squared distances are accumulated chunk by chunk
    (``|a|^2 - 2 a.b + |b|^2`` over the newly added features): one pass over the
    features instead of one k-NN fit per k. Ties go to the lowest training index.
    """
    D = np.zeros((Xte.shape[0], Xtr.shape[0]))
    out, start = [], 0
    for k in ks:
        cols = order[start:k]
        if len(cols):
            A, B = Xte[:, cols], Xtr[:, cols]
            D += (A * A).sum(1)[:, None] - 2.0 * (A @ B.T) + (B * B).sum(1)[None, :]
        start = k
        out.append(float(100.0 * np.mean(ytr[np.argmin(D, axis=1)] == yte)))
    return out


def _score_curve(
    clf_name: str,
    Xtr: np.ndarray,
    ytr: np.ndarray,
    Xte: np.ndarray,
    yte: np.ndarray,
    imp: np.ndarray,
    percents: tuple[float, ...],
    seed: int,
) -> list[float]:
    """Accuracy of the classifier on the top-p % features, for every p."""
    from fedviews.linear import select_top_features

    sels = [select_top_features(imp, pct) for pct in percents]  # prefixes of one ranking
    if clf_name == "knn1":
        order = max(sels, key=len)
        ks = sorted({len(x) for x in sels})
        by_k = dict(zip(ks, _knn1_curve(Xtr, ytr, Xte, yte, order, ks), strict=True))
        return [by_k[len(x)] for x in sels]
    out = []
    for sel in sels:
        clf = make_classifier(clf_name, seed)
        clf.fit(Xtr[:, sel], ytr)
        out.append(float(100.0 * np.mean(clf.predict(Xte[:, sel]) == yte)))
    return out


def _sweep(
    ds: Any,
    folds: list[tuple[np.ndarray, np.ndarray]],
    algs: tuple[str, ...],
    p: MMVFLParams,
    zeta: float,
    eta: float,
    seed: int,
    advance: Any,
    keep: dict[str, Any],
) -> np.ndarray:
    """Accuracy array [alg, beta, fold, view, percent]; ``keep``: the message log and the
    objective of the first MMVFL fit."""
    V, P = ds.n_views, len(p.percents)
    acc = np.full((len(algs), len(p.betas), len(folds), V, P), np.nan)
    for f, (tr, te) in enumerate(folds):
        Xtr, Xte = split_views(ds.views, (tr, te), p.standardize)
        ytr, yte = ds.y[tr], ds.y[te]
        for b, beta in enumerate(p.betas):
            for a, alg in enumerate(algs):
                model = _fit(alg, Xtr, ytr, beta, p, zeta, eta, seed + f)
                if alg == "mmvfl" and "log" not in keep:
                    keep.update(log=model.run_stats_, objective=model.objective_)
                for v, imp in enumerate(model.feature_importances_):
                    acc[a, b, f, v, :] = _score_curve(
                        p.classifier, Xtr[v], ytr, Xte[v], yte, imp, p.percents, seed
                    )
            advance(1)
    return acc


@register_experiment(
    "mmvfl_feature_selection",
    MMVFLParams,
    description="MMVFL vs supFL / supMVLFL: per-party accuracy vs % of selected features (MMVFL paper, Sec. 6)",
)
def run_mmvfl_feature_selection(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    from fedviews.data import balanced_subsample, load, stratified_kfold
    from fedviews.linear import small_blas
    from fedviews.report import line_panels, method_name

    p: MMVFLParams = cfg.params
    ds = load(cfg.data.name, **dict(cfg.data.options))
    if not 0 <= p.label_owner < ds.n_views:
        raise ConfigError(f"params.label_owner={p.label_owner} out of range for {ds.n_views} views")
    ds = ds.subset(balanced_subsample(ds.y, p.n_per_class, random_state=cfg.seed))
    folds = stratified_kfold(ds.y, p.n_folds, random_state=cfg.seed)
    algs = tuple(p.algorithms)
    ctx.log(
        f"{ds.name}: {ds.n_samples} samples, views {dict(zip(ds.view_names, ds.n_features, strict=True))}, "
        f"{p.n_folds} folds x {len(p.betas)} betas x {len(algs)} algorithms, classifier={p.classifier}"
    )
    keep: dict[str, Any] = {}
    n_units = len(folds) * len(p.betas) * (1 + len(p.zeta_sweep))
    with (
        ctx.progress(n_units, "folds x beta (x zeta)") as advance,
        small_blas(),
        unconverged_fits(ctx, "MMVFL", p.max_iter) as converged,
    ):
        acc = _sweep(ds, folds, algs, p, p.zeta, p.eta, cfg.seed, advance, keep)
        ctx.checkpoint({"accuracy_raw": acc, "algorithms": algs})
        sweep_acc = []
        for z in p.zeta_sweep:
            sweep_acc.append(_sweep(ds, folds, ("mmvfl",), p, z, z, cfg.seed, advance, {}))
            ctx.checkpoint({"accuracy_raw": acc, "zeta_sweep_raw": sweep_acc})

    best = np.nanmax(acc, axis=1)  # best beta per (alg, fold, view, p): paper protocol
    mean, std = best.mean(axis=1), best.std(axis=1)  # [alg, view, p]
    views = ds.view_names
    # the parties as the message log and the diagram name them (the estimator's party{k})
    parts = [f"party{i} ({v})" for i, v in enumerate(views)]
    pct = list(p.percents)
    metrics: dict[str, Any] = {
        "dataset": ds.summary(),
        "percents": pct,
        "betas": list(p.betas),
        "classifier": p.classifier,
        "accuracy": {
            alg: {
                v: {"mean": mean[a, i].tolist(), "std": std[a, i].tolist()}
                for i, v in enumerate(views)
            }
            for a, alg in enumerate(algs)
        },
        "best_beta_index": {
            alg: np.nanargmax(acc[a], axis=0).tolist() for a, alg in enumerate(algs)
        },
        "mmvfl_objective_first_fit": keep.get("objective", []),
        "mmvfl_converged": converged,
    }
    by_view = mean.mean(axis=2)  # [alg, view]: averaged over p
    tables = [
        Table(
            "Accuracy (%) averaged over p, per party",
            ["party (view)", *[method_name(a) for a in algs]],
            [[part, *[float(x) for x in by_view[:, i]]] for i, part in enumerate(parts)],
            note=f"classifier {p.classifier}; best beta per (p, fold, view, algorithm) as in the paper; "
            f"label owner = {parts[p.label_owner]}; supFL and supMVLFL see the labels at "
            "every party",
        )
    ]

    def panels(arr: np.ndarray) -> dict[str, dict[str, Any]]:
        """``{party: {algorithm: arr[algorithm, party]}}`` for the figure."""
        return {
            part: {method_name(a): arr[k, i] for k, a in enumerate(algs)}
            for i, part in enumerate(parts)
        }

    figures = [
        line_panels(
            ctx.path("accuracy_vs_percent.png"),
            pct,
            panels(mean),
            errors=panels(std),
            xlabel="features selected p (%)",
            ylabel="accuracy (%)",
            title=f"{ds.name}: accuracy vs % selected features (mean ± std over folds)",
        )
    ]
    diffs: dict[str, list[float]] = {}
    if "mmvfl" in algs:
        m = algs.index("mmvfl")
        paper = paper_tables()["mmvfl_table2_performance_differences"].get(p.paper_table or ds.name)
        diffs = {
            base: [
                float((mean[m, i] - mean[algs.index(base), i]).mean()) for i in range(len(views))
            ]
            for base in ("supfl", "supmvlfl")
            if base in algs
        }
        metrics["table2_differences"] = diffs
        trows = []
        for base, d in diffs.items():
            key = f"mmvfl_minus_{base}"
            pap = paper.get(key) if paper else None
            avg = float(np.mean(d))
            trows.append([f"MMVFL - {method_name(base)} (ours)", *d, avg])
            if pap is not None and len(pap) == len(d):
                pavg = paper[f"avg_vs_{base}"]
                trows.append([f"MMVFL - {method_name(base)} (paper)", *pap, pavg])
                trows.append(
                    ["  ours - paper", *[x - y for x, y in zip(d, pap, strict=True)], avg - pavg]
                )
        tables.append(
            Table(
                "Table 2: performance differences (%), averaged over p",
                ["", *parts, "avg"],
                trows,
                note="positive = MMVFL better. supFL/supMVLFL are non-federated and assume labels at every party.",
            )
        )
    if p.zeta_sweep:
        # [zeta, view]: the best beta, averaged over folds, then over p
        sm = np.array([np.nanmax(sa, axis=1).mean(axis=1)[0].mean(axis=1) for sa in sweep_acc])
        metrics["zeta_sweep"] = {"zeta_eta": list(p.zeta_sweep), "accuracy_avg_over_p": sm.tolist()}
        srows = [[f"{z:g}", *sm[j].tolist()] for j, z in enumerate(p.zeta_sweep)]
        if "supfl" in algs:
            srows.append([method_name("supfl"), *[float(x) for x in by_view[algs.index("supfl")]]])
        tables.append(
            Table(
                "MMVFL accuracy (%) averaged over p vs zeta = eta",
                ["zeta = eta", *parts],
                srows,
            )
        )
        fig, ax = pyplot().subplots(figsize=(6.5, 4))
        for i, part in enumerate(parts):
            ax.plot(p.zeta_sweep, sm[:, i], marker="o", label=part)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("zeta = eta")
        ax.set_ylabel("MMVFL accuracy, avg over p (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        figures.append(save_figure(fig, ctx.path("zeta_sweep.png")))
    verdicts = []
    if diffs:
        paired = _paired_by_fold(best, algs, diffs)
        metrics["paired_by_fold"] = paired
        verdicts = [verdict_line(f"MMVFL - {method_name(b)}", d) for b, d in paired.items()]
        pap_avg = [paper.get(f"avg_vs_{b}") if paper else None for b in paired]
        tables.append(
            Table(
                "MMVFL minus baseline, paired by fold (accuracy points, averaged over views and p)",
                ["comparison", "mean", "95% low", "95% high", "folds", "verdict", "paper avg"],
                [
                    [f"MMVFL - {method_name(b)}", *[d[k] for k in ("mean", "low", "high", "n")]]
                    + [VERDICT_WORDS[d["verdict"]], "-" if pa is None else pa]
                    for (b, d), pa in zip(paired.items(), pap_avg, strict=True)
                ],
                note="Student-t interval over folds of the per-fold difference; verdict: higher / "
                "lower when the interval excludes 0, else not distinguishable. The paper reports "
                f"one average, no interval. MMVFL fits stopped at max_iter={p.max_iter} before "
                f"tol={p.tol:g} held: {converged['unconverged_fits']} of {n_units}.",
            )
        )
    summary = "; ".join(verdicts)
    log = keep.get("log")
    if log is not None:  # the report and the run's summary line say whose traffic it is
        log = {**log, "scope": f"the first of this run's {n_units} MMVFL fits"}
    return ExperimentResult(metrics, tables, figures, log, summary)


def _paired_by_fold(
    best: np.ndarray, algs: tuple[str, ...], bases: Any
) -> dict[str, dict[str, Any]]:
    """MMVFL − each baseline in ``bases``, paired by fold (:func:`paired_difference`): every
    fold's accuracy, averaged over views and p, of the best β per (algorithm, fold, view, p)
    (``best[alg, fold, view, p]``); the mean over folds is the Table 2 average."""
    per_fold = best.mean(axis=(2, 3))  # [alg, fold]
    m = algs.index("mmvfl")
    return {b: paired_difference(per_fold[m], per_fold[algs.index(b)]) for b in bases}
