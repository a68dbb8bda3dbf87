"""``defense_sweep``: the leakage audit rerun under several defenses, side by side.

One ``privacy_audit`` (same run, attackers, attacks and auxiliary knowledge) per
*setting*: a label, a ``[defense]`` table and overrides of the algorithm's params
(so the cheap baselines that are params, e.g. top-k gradients, sit beside the
defenses), run for every seed of ``seeds`` (data split, models, defense noise all
follow the seed). Each (setting, seed) is one resumable cell (``fedviews run --resume
RUN_DIR``); tables and plots show the mean and standard deviation over the seeds.
The result: the main task's accuracy, the privacy spent (``epsilon``, ``delta`` from
the run's ledger) and every attack's success per setting, and two trade-off plots
(accuracy against the strongest label attack, accuracy against ``epsilon``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.errors import ConfigError
from fedviews.experiments._config import ExperimentConfig, check_seed
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.experiments.privacy_audit import AuditParams, audit_once, deploy_config
from fedviews.report import pyplot, save_figure

__all__ = ["DefenseSweepParams"]

_SETTING_KEYS = ("label", "defense", "run")


@dataclass(frozen=True)
class DefenseSweepParams(AuditParams):
    """The ``[params]`` of ``defense_sweep``: those of ``privacy_audit`` (the run, the
    attackers, the attacks, the aux knowledge) plus the ``settings`` to compare.
    ``seeds``: the run seeds of every setting (default: the config's ``seed`` alone).
    """

    settings: tuple[Mapping[str, Any], ...] = ()
    """One inline table per setting: ``label`` (its name in tables and plots), ``defense`` (a
    ``[defense]`` table; default none) and ``run`` (overrides of ``params.run``, e.g.
    ``{wire_gradients = "topk"}``).
    """
    seeds: tuple[int, ...] = ()

    def validate(self) -> None:
        if not self.settings:
            raise ConfigError("defense_sweep: list the settings to compare in params.settings")
        labels = []
        for i, s in enumerate(self.settings):
            if not isinstance(s, Mapping):
                raise ConfigError(f"params.settings[{i}] must be a table, got {s!r}")
            unknown = set(s) - set(_SETTING_KEYS)
            if unknown:
                raise ConfigError(
                    f"params.settings[{i}]: unknown keys {sorted(unknown)}; a setting has "
                    f"{list(_SETTING_KEYS)}"
                )
            if not isinstance(s.get("label"), str) or not s["label"]:
                raise ConfigError(f"params.settings[{i}] needs a label (a string)")
            labels.append(s["label"])
        if len(set(labels)) != len(labels):
            raise ConfigError(f"params.settings: labels must differ, got {labels}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"params.seeds must differ, got {list(self.seeds)}")
        for seed in self.seeds:  # as the config's seed
            check_seed(seed, "params.seeds")


def _epsilon(privacy: Mapping[str, Any]) -> tuple[float, float]:
    """The largest ``(epsilon, delta)`` any party spent (``(inf, 0)`` without DP)."""
    parties = privacy.get("parties") or {}
    if not parties:
        return math.inf, 0.0
    worst = max(parties.values(), key=lambda e: float(e["epsilon"]))
    return float(worst["epsilon"]), float(worst["delta"])


def _num(value: Any, missing: float) -> float:
    """A number read back from ``cells.json`` (where JSON has no inf or NaN: ``None``)."""
    return missing if value is None else float(value)


def _attack_key(row: Mapping[str, Any]) -> str:
    """One attack of the detail table: an attacker can see one observation about several
    victims (H-FedMV: a client's global W about every other client), each a line."""
    return (
        f"{row['attacker']} ← {row['observation']}: {row['attack']}, {row['secret']} "
        f"({row['metric']})"
    )


#: the summarised attacks: key, the metric that scores them, the column and the plot axis
_ATTACKS = (
    ("label_attack", "label recovery %", "label attack %",
     "strongest label attack: labels recovered (%)"),
    ("feature_ssim", "ssim", "feature SSIM", "strongest feature attack: SSIM of the reconstructions"),
)  # fmt: skip


def _strongest(rows: list[Mapping[str, Any]], metric: str) -> tuple[float, float]:
    """The strongest attack of a setting by ``metric`` (``"label recovery %"``: labels;
    ``"ssim"``: reconstructed features) on training rows (what the defenses protect; a test
    row's label read off a released prediction is the model's output): ``(value, its
    chance)``; NaN where none ran."""
    scored = [r for r in rows if r["metric"] == metric and r.get("group", "train") != "test"]
    if not scored:
        return math.nan, math.nan
    best = max(scored, key=lambda r: float(r["value"]))
    return float(best["value"]), float(best["chance"])


def _stat(values: list[float]) -> tuple[float, float]:
    """Mean and (sample) standard deviation, NaN-aware; std 0 for one value."""
    a = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if not a.size:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def _fmt(mean: float, std: float, n: int, digits: int) -> Any:
    """``mean`` (one seed) or ``"mean ± std"`` (several) for a table cell."""
    if not math.isfinite(mean):
        return "—"
    return round(mean, digits) if n == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def _mean_cell(key: str, values: list[float]) -> Any:
    """A detail-table cell: the mean over the seeds; an MSE to 4 significant digits, as in
    the leakage table (feature scales differ: 0.004 would read 0.00)."""
    mean, std = _stat(values)
    if key.endswith("(mse)") and math.isfinite(mean):
        return f"{mean:.4g}"
    return _fmt(mean, std, 1, 3)


def _summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A setting over its seeds: mean and std of the accuracy and the strongest attacks."""
    out: dict[str, Any] = {"n_seeds": len(runs)}
    acc = [100 * _num(r["accuracy"], math.nan) for r in runs]
    out["accuracy"], out["accuracy_std"] = _stat(acc)
    for key, metric, _, _ in _ATTACKS:
        scored = [_strongest(r["rows"], metric) for r in runs]
        out[key], out[f"{key}_std"] = _stat([v for v, _ in scored])
        out[f"{key}_chance"] = _stat([c for _, c in scored])[0]
    return out


def _ran(settings: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """The :data:`_ATTACKS` that ran in some setting."""
    return [
        a for a in _ATTACKS if any(math.isfinite(c["summary"][a[0]]) for c in settings.values())
    ]


def _plot(settings: dict[str, dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    panels = [(key, title) for key, _, _, title in _ran(settings)]
    fig, grid = plt.subplots(1, len(panels) + 1, figsize=(5 * (len(panels) + 1), 4), squeeze=False)
    axes = grid[0]  # one row, also when no attack panel ran (only the epsilon one)
    kinds = sorted({c["kind"] for c in settings.values()})
    colors = {k: f"C{i}" for i, k in enumerate(kinds)}
    finite = [c["epsilon"] for c in settings.values() if c["epsilon"] is not None]
    right = 2 * max(finite) if finite else 1.0  # where "no DP" (epsilon = inf) is drawn
    ax2 = axes[-1]
    for label, c in settings.items():
        m, col = c["summary"], colors[c["kind"]]
        acc, acc_sd = m["accuracy"], m["accuracy_std"]
        for ax, (key, _) in zip(axes, panels, strict=False):
            x, x_sd = m[key], m[f"{key}_std"]
            ax.errorbar(x, acc, xerr=x_sd, yerr=acc_sd, fmt="o", color=col, capsize=2)
            ax.annotate(label, (x, acc), fontsize=7, xytext=(3, 3), textcoords="offset points")
            if math.isfinite(m[f"{key}_chance"]):
                ax.axvline(m[f"{key}_chance"], color="grey", lw=0.8, ls=":")
        eps = _num(c["epsilon"], right)
        marker = "o" if c["epsilon"] is not None else "x"
        ax2.errorbar(eps, acc, yerr=acc_sd, fmt=marker, color=col, capsize=2)
        ax2.annotate(label, (eps, acc), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for ax, (_, title) in zip(axes, panels, strict=False):
        ax.set_xlabel(title)
        ax.set_ylabel("main task: test accuracy (%)")
        ax.set_title("accuracy vs attack success (dotted: chance)", fontsize=9)
    ax2.set_xscale("log")
    ax2.set_xlabel("epsilon spent (log; x: no DP guarantee)")
    ax2.set_ylabel("main task: test accuracy (%)")
    ax2.set_title("accuracy vs epsilon", fontsize=9)
    for k, col in colors.items():
        axes[0].scatter([], [], color=col, label=k)
    axes[0].legend(fontsize=7, title="defense", title_fontsize=7)
    return save_figure(fig, path)


@register_experiment(
    "defense_sweep",
    DefenseSweepParams,
    description="Leakage under defenses: attack success, accuracy and epsilon per setting",
    default_dataset="mnist",
)
def run_defense_sweep(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    p: DefenseSweepParams = cfg.params
    seeds = list(p.seeds) or [cfg.seed]
    deps = {
        (s["label"], seed): deploy_config(
            cfg, p, s.get("defense") or {}, s.get("run") or {}, seed=seed
        )
        for s in p.settings
        for seed in seeds
    }  # every setting's config is checked before the first one trains

    logged: dict[str, Any] = {}  # the first training's message log that this process ran

    def compute(dep: Any, label: str, seed: int) -> dict[str, Any]:
        ctx.log(f"setting {label!r}, seed {seed}: {asdict(dep.defense)}")
        done = audit_once(dep, p, seed, ctx)
        if not logged and done.message_log:
            scope = f"one training: setting {label!r}, seed {seed} (of {len(deps)} in this run)"
            logged.update(done.message_log, scope=scope)
        eps, delta = _epsilon(done.privacy)
        return {
            "seed": seed,
            "kind": dep.defense.kind,
            "defense": asdict(dep.defense),
            "rows": [asdict(r) for r in done.rows],
            "accuracy": done.accuracy,
            "epsilon": eps if math.isfinite(eps) else None,  # None: no DP
            "delta": delta,
            "privacy": done.privacy,
            "train_seconds": done.train_seconds,
        }

    jobs = {f"{k[0]} @ seed {k[1]}": functools.partial(compute, dep, *k) for k, dep in deps.items()}
    runs: dict[str, list[dict[str, Any]]] = {s["label"]: [] for s in p.settings}
    for (label, _), out in zip(deps, ctx.run_cells("defense settings x seeds", jobs), strict=True):
        runs[label].append(out)
    settings = {
        label: {  # the ledger (epsilon, delta) depends on the config, not the seed
            **{k: rs[0][k] for k in ("kind", "defense", "epsilon", "delta", "privacy")},
            "summary": _summarise(rs),
            "runs": rs,
        }
        for label, rs in runs.items()
    }
    n = len(seeds)
    attacks = [(key, head) for key, _, head, _ in _ran(settings)]
    summary = Table(
        f"Defenses against the leakage of {p.algorithm}"
        + (f" (mean ± std over {n} seeds)" if n > 1 else ""),
        ["setting", "defense", "epsilon", "delta", "accuracy %"]
        + [h for _, head in attacks for h in (head, "chance")],
        [
            [
                label,
                c["kind"],
                "∞" if c["epsilon"] is None else round(c["epsilon"], 3),
                f"{c['delta']:g}",
                _fmt(c["summary"]["accuracy"], c["summary"]["accuracy_std"], n, 2),
                *(
                    v
                    for key, _ in attacks
                    for v in (
                        _fmt(c["summary"][key], c["summary"][f"{key}_std"], n, 3),
                        _fmt(c["summary"][f"{key}_chance"], 0.0, 1, 3),
                    )
                ),
            ]
            for label, c in settings.items()
        ],
        note="label attack: the strongest label-recovery attack of any attacker; feature "
        "SSIM: the best reconstruction of any attacker (both on training rows not granted "
        "as aux); epsilon: the largest any party spent (∞: no DP guarantee).",
    )
    values: dict[str, dict[str, list[float]]] = {}  # attack -> setting -> values over the seeds
    for label, rs in runs.items():
        for r in (r for x in rs for r in x["rows"]):
            values.setdefault(_attack_key(r), {}).setdefault(label, []).append(float(r["value"]))
    detail = Table(
        "Every attack per setting (value, mean over the seeds; chance in the leakage tables)",
        ["attack", *settings],
        [[k, *(_mean_cell(k, v.get(label, [])) for label in runs)] for k, v in values.items()],
    )
    fig = _plot(settings, ctx.path("tradeoff.png"))
    return ExperimentResult(
        metrics={"seeds": seeds, "settings": settings},
        tables=[summary, detail],
        figures=[fig],
        message_log=logged or None,  # none where every cell was restored from an earlier run
        summary=f"{len(settings)} defense settings of {p.algorithm}, {n} seed(s) each",
    )
