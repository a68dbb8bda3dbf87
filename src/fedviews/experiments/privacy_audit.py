"""``privacy_audit``: train one algorithm in-process, record what each attacker received, attack it.

The run is described as a deployment is (``algorithm``, ``federation``, the
algorithm's ``params``, how the dataset is dealt to the parties), so the audited
protocol is exactly the one ``fedviews launch`` deploys. Every chosen attacker (a
party or the coordinator) records the messages delivered to it
(:class:`~fedviews.federation.Recording`); after training, the algorithm reads
per-sample observations out of each recording
(:meth:`~fedviews.federation.Algorithm.observations`) and every applicable attack of
:mod:`fedviews.privacy.attacks` runs on them with the declared auxiliary knowledge.
The recordings and the answer key are saved in the run folder, so
``fedviews audit RUN_DIR`` re-runs the attacks without training.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, DataError
from fedviews.experiments._config import ExperimentConfig
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.federation import Recording, build_in_process, get_algorithm_spec
from fedviews.privacy.attacks import (
    AuxKnowledge,
    LeakageRow,
    Reconstruction,
    Truth,
    audit,
    check_attacks,
)
from fedviews.report import pyplot, save_figure

__all__ = [
    "AuditParams",
    "Audited",
    "audit_once",
    "deploy_config",
    "leakage_table",
    "main_accuracy",
    "reaudit",
]

RECORDINGS = "recordings"
TRUTH = "truth.npz"
#: what ``fedviews audit`` may change of the run it re-attacks
_REAUDIT_KEYS = ("params.attacks", "params.attackers", "params.labelled",
                 "params.known_features", "seed")  # fmt: skip


@dataclass(frozen=True)
class AuditParams:
    """The ``[params]`` of ``privacy_audit``.

    ``algorithm``, ``federation``, ``run`` and ``split`` describe the run.
    ``attackers``: who records and attacks (default: every party and the
    coordinator). ``attacks``: which of :data:`~fedviews.privacy.attacks.ATTACKS` to run
    (default: every one that applies). ``labelled`` and ``known_features`` are the auxiliary
    knowledge granted to every attacker (:class:`~fedviews.privacy.attacks.AuxKnowledge`). ``defense``: the
    run's defense (a deployment's ``[defense]`` table, e.g. ``{kind = "secagg"}``).
    """

    algorithm: str = "mmvfl"
    """The algorithm audited (a deployment's ``algorithm``)."""
    federation: Mapping[str, Any] = field(default_factory=dict)
    """A deployment's ``[federation]`` table: ``parties``, ``label_owner`` or ``label_owners``."""
    run: Mapping[str, Any] = field(default_factory=dict)
    """The algorithm's params, as a deployment's ``[params]``."""
    defense: Mapping[str, Any] = field(default_factory=dict)
    split: Mapping[str, Any] = field(default_factory=dict)
    """A deployment's ``[data]`` table without ``dataset``, which is the config's ``[data] name``.
    """
    attackers: tuple[str, ...] = ()
    attacks: tuple[str, ...] = ()
    labelled: int = 40
    """Rows whose label every attacker knows (auxiliary knowledge)."""
    known_features: int = 500
    """Rows whose raw features every attacker knows (auxiliary knowledge)."""


def deploy_config(
    cfg: ExperimentConfig,
    p: AuditParams,
    defense: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> Any:
    """The deployment config an audit runs (``defense`` / ``run``: a setting's own defense
    table and overrides of ``params.run``; ``seed``: instead of the config's)."""
    from fedviews.deploy import load_deploy_config

    if cfg.data.options:
        raise ConfigError("privacy_audit: put the data options in params.split, not [data]")
    return load_deploy_config(
        {
            "algorithm": p.algorithm,
            "name": cfg.name,
            "seed": cfg.seed if seed is None else seed,
            "federation": dict(p.federation),
            "params": {**dict(p.run), **dict(run or {})},
            "defense": dict(p.defense if defense is None else defense),
            "data": {"dataset": cfg.data.name, **dict(p.split)},
        }
    )


def leakage_table(rows: Sequence[LeakageRow], title: str, accuracy: str) -> Table:
    return Table(
        title,
        ["attacker", "role", "observes", "attack", "secret", "aux", "metric", "value", "chance"],
        [
            [r.attacker, r.role, r.observation, r.attack, r.secret, r.aux, r.metric]
            + [f"{v:.4g}" if r.metric == "mse" else round(v, 2) for v in (r.value, r.chance)]
            for r in rows
        ],
        note=f"main task: {accuracy}. 'chance': the most common label (recovery) or the "
        "mean image of the aux rows (reconstruction). Scored on rows not granted as aux.",
    )


def _figure(examples: Sequence[Reconstruction], path: Path) -> Path | None:
    if not examples:
        return None
    plt = pyplot()
    k = max(len(e.true) for e in examples)
    shapes = [np.asarray(e.true[0]).reshape(-1, e.true[0].shape[-1]).shape for e in examples]
    heights = [r for h, w in shapes for r in (h / w, h / w)]  # true and attack rows
    fig, axes = plt.subplots(
        2 * len(examples),
        k,
        figsize=(1.3 * k, 1.3 * sum(heights) + 0.3 * len(heights)),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for i, e in enumerate(examples):
        for j in range(k):
            for r, (img, label) in enumerate(((e.true, "true"), (e.guess, "attack"))):
                ax = axes[2 * i + r][j]
                ax.axis("off")
                if j < len(img):
                    pic = np.asarray(img[j], dtype=float).reshape(-1, img[j].shape[-1])
                    ax.imshow(pic, cmap="gray", vmin=0, vmax=1)
                if j == 0:
                    ax.set_title(f"{e.title}: {label}", fontsize=7, loc="left")
    return save_figure(fig, path)


def _accuracy_key(metrics: Mapping[str, Any]) -> str | None:
    keys = [k for k in metrics if "accuracy" in k and np.ndim(metrics[k]) <= 1]
    if not keys:
        return None
    return min(keys, key=lambda k: (k != "final_accuracy", k != "test_accuracy", k))


def main_accuracy(metrics: Mapping[str, Any]) -> float:
    """The trained model's final accuracy in ``[0, 1]`` as the coordinator reports it
    (NaN where it reports none)."""
    k = _accuracy_key(metrics)
    if k is None:
        return float("nan")
    v = np.asarray(metrics[k], dtype=float).ravel()
    last = float(v[-1]) if v.size else float("nan")
    return last / 100 if last > 1 else last


def _main_task(metrics: Mapping[str, Any]) -> str:
    """The trained model's accuracy as the coordinator reports it (its final value)."""
    k = _accuracy_key(metrics)
    if k is None:
        return "no accuracy reported"
    return f"{k} {100 * main_accuracy(metrics):.2f} %"


def _finish(
    out_dir: Path,
    title: str,
    rows: list[LeakageRow],
    examples: list[Reconstruction],
    task: str,
    prefix: str = "",
) -> ExperimentResult:
    fig = _figure(examples, out_dir / f"{prefix}reconstructions.png")
    return ExperimentResult(
        metrics={"leakage": [asdict(r) for r in rows], "main_task": task},
        tables=[leakage_table(rows, title, task)],
        figures=[fig] if fig else [],
    )


@register_experiment(
    "privacy_audit",
    AuditParams,
    description="Leakage: attacks on what each party and the coordinator received",
    default_dataset="handwritten",
)
def run_privacy_audit(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    p: AuditParams = cfg.params
    dep = deploy_config(cfg, p)
    examples: list[Reconstruction] = []
    done = audit_once(dep, p, cfg.seed, ctx, examples, save=True)
    result = _finish(
        ctx.out_dir, f"What leaks: {dep.algorithm}", done.rows, examples, done.main_task
    )
    result.metrics |= {
        "train_seconds": done.train_seconds,
        "setup": done.setup,
        "attackers": done.attackers,
        "defense": asdict(dep.defense),
        "privacy": done.privacy,
    }
    result.message_log = done.message_log
    return result


@dataclass
class Audited:
    """One audited run: its leakage rows, main task and what its defense spent."""

    rows: list[LeakageRow]
    main_task: str
    accuracy: float  # the main task's final accuracy in [0, 1] (NaN: none reported)
    privacy: dict[str, Any]
    train_seconds: float
    setup: dict[str, Any]
    attackers: list[str]
    message_log: dict[str, Any]


def audit_once(
    dep: Any,
    p: AuditParams,
    seed: int,
    ctx: RunContext,
    examples: list[Reconstruction] | None = None,
    *,
    save: bool = False,
) -> Audited:
    """Train ``dep`` (a deployment config) in one process, record ``p.attackers`` and attack
    what they received; ``save``: keep the recordings and the answer key in the run folder
    (what ``fedviews audit`` re-attacks)."""
    algo = get_algorithm_spec(dep.algorithm)
    aux = AuxKnowledge(p.labelled, p.known_features, seed)
    check_attacks(p.attacks, aux)
    datas = algo.demo_data(dep)
    fed = build_in_process(dep, datas)
    members = [*fed.parties, fed.coordinator.name]
    attackers = list(p.attackers) or members
    recordings = fed.record(attackers, rounds=algo.audit_rounds(dep))
    t0 = time.perf_counter()
    ctx.log(f"training {dep.algorithm} ({len(fed.parties)} parties), recording {attackers}")
    fed()
    train_s = time.perf_counter() - t0
    metrics, _ = algo.coordinator_results(fed.coordinator)
    truth = Truth.of_run(fed.locals)
    if save:
        out = ctx.path(RECORDINGS)
        out.mkdir(exist_ok=True)
        for name, rec in recordings.items():
            rec.save(out / f"{name}.npz")
        truth.save(ctx.path(TRUTH))
    t1 = time.perf_counter()
    rows = audit(algo, dep, fed.setup, recordings, truth, aux, attacks=p.attacks, examples=examples)
    ctx.log(f"trained in {train_s:.1f} s, attacked in {time.perf_counter() - t1:.1f} s")
    return Audited(
        rows,
        _main_task(metrics),
        main_accuracy(metrics),
        fed.privacy,
        train_s,
        dict(fed.setup),
        attackers,
        fed.transport.log.summary(),
    )


def reaudit(run_dir: Path, overrides: Sequence[str] = ()) -> ExperimentResult:
    """The attacks of a finished ``privacy_audit`` run again, on its saved recordings only
    (no training, no party): its own config with ``overrides`` of what the attacks use
    (``params.attacks``, ``params.attackers`` among those recorded, the aux counts, ``seed``
    of the aux draw); the run itself cannot change (a :class:`ConfigError`). Writes
    ``reaudit.json`` and ``reaudit_reconstructions.png``."""
    from fedviews.experiments._config import load_config

    run_dir = Path(run_dir)
    folder = run_dir / RECORDINGS
    paths = [run_dir / n for n in ("config.json", "metrics.json", TRUTH)]
    if not folder.is_dir() or not all(p.is_file() for p in paths):
        raise DataError(
            f"{run_dir} is not a finished privacy_audit run (it needs {RECORDINGS}/, "
            f"config.json, metrics.json and {TRUTH})"
        )
    try:
        raw = json.loads(paths[0].read_text(encoding="utf-8"))
        metrics = json.loads(paths[1].read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DataError(f"{run_dir}: unreadable run files: {exc}") from None
    base, cfg = load_config(raw), load_config(raw, overrides)
    if cfg.experiment != "privacy_audit":
        raise ConfigError(f"{run_dir} is a {cfg.experiment!r} run, not a privacy_audit run")
    p: AuditParams = cfg.params
    changed = [
        f"params.{key}"
        for key in ("algorithm", "federation", "run", "defense", "split")
        if getattr(p, key) != getattr(base.params, key)
    ] + (["data"] if cfg.data != base.data else [])
    if changed:  # the recordings are of the run as it ran: they would be misread
        raise ConfigError(
            f"{', '.join(changed)}: the recordings are of the run as it ran; an audit can "
            f"change only {', '.join(_REAUDIT_KEYS)}"
        )
    dep = deploy_config(cfg, p)
    algo = get_algorithm_spec(dep.algorithm)
    recorded = metrics.get("attackers") or sorted(f.stem for f in folder.glob("*.npz"))
    order = list(p.attackers) if p.attackers != base.params.attackers else recorded
    if not set(order) <= set(recorded):
        raise ConfigError(
            f"params.attackers: {sorted(set(order) - set(recorded))} recorded nothing in "
            f"{run_dir}; the recorded attackers are {recorded}"
        )
    recordings = {a: Recording.load(folder / f"{a}.npz") for a in order}
    aux = AuxKnowledge(p.labelled, p.known_features, cfg.seed)
    examples: list[Reconstruction] = []
    truth = Truth.load(run_dir / TRUTH)
    setup = metrics.get("setup", {})
    rows = audit(algo, dep, setup, recordings, truth, aux, attacks=p.attacks, examples=examples)
    result = _finish(run_dir, f"What leaks: {dep.algorithm} (re-audit)", rows, examples,
                     metrics.get("main_task", ""), "reaudit_")  # fmt: skip
    (run_dir / "reaudit.json").write_text(json.dumps(result.metrics, indent=2), encoding="utf-8")
    return result
