"""``defense_sweep``: the leakage audit rerun under several defenses, side by side.

One ``privacy_audit`` (same run, attackers, attacks and auxiliary knowledge) per
*setting*: a label, a ``[defense]`` table and overrides of the algorithm's params
(so the cheap baselines that are params, e.g. top-k gradients, sit beside the
defenses). Each setting is one resumable cell (``fedviews run --resume RUN_DIR``).
The result: the main task's accuracy, the privacy spent (``epsilon``, ``delta`` from
the run's ledger) and every attack's success per setting, and two trade-off plots
(accuracy against the strongest label attack, accuracy against ``epsilon``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedviews.errors import ConfigError
from fedviews.experiments._common import pyplot, save_figure
from fedviews.experiments._config import ExperimentConfig
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext, Table
from fedviews.experiments.privacy_audit import AuditParams, audit_once, deploy_config

__all__ = ["DefenseSweepParams"]

_SETTING_KEYS = ("label", "defense", "run")


@dataclass(frozen=True)
class DefenseSweepParams(AuditParams):
    """The ``[params]`` of ``defense_sweep``: those of ``privacy_audit`` (the run, the
    attackers, the attacks, the aux knowledge) plus ``settings``, one inline table each:
    ``label`` (its name in tables and plots), ``defense`` (a ``[defense]`` table; default
    none) and ``run`` (overrides of ``params.run``, e.g. ``{wire_gradients = "topk"}``).
    """

    settings: tuple[Mapping[str, Any], ...] = ()

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
    return f"{row['attacker']} ← {row['observation']}: {row['attack']} ({row['metric']})"


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


def _label_success(rows: list[Mapping[str, Any]]) -> tuple[float, float]:
    return _strongest(rows, "label recovery %")


def _feature_success(rows: list[Mapping[str, Any]]) -> tuple[float, float]:
    return _strongest(rows, "ssim")


_PANELS = (
    (_label_success, "strongest label attack: labels recovered (%)"),
    (_feature_success, "strongest feature attack: SSIM of the reconstructions"),
)


def _plot(cells: dict[str, dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    panels = [
        (fn, title)
        for fn, title in _PANELS
        if any(math.isfinite(fn(c["rows"])[0]) for c in cells.values())
    ]
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5 * (len(panels) + 1), 4))
    kinds = sorted({c["kind"] for c in cells.values()})
    colors = {k: f"C{i}" for i, k in enumerate(kinds)}
    finite = [c["epsilon"] for c in cells.values() if c["epsilon"] is not None]
    right = 2 * max(finite) if finite else 1.0  # where "no DP" (epsilon = inf) is drawn
    ax2 = axes[-1]
    for label, c in cells.items():
        acc, col = 100 * _num(c["accuracy"], math.nan), colors[c["kind"]]
        for ax, (fn, _) in zip(axes, panels, strict=False):
            value, chance = fn(c["rows"])
            ax.scatter(value, acc, color=col)
            ax.annotate(label, (value, acc), fontsize=7, xytext=(3, 3), textcoords="offset points")
            if math.isfinite(chance):
                ax.axvline(chance, color="grey", lw=0.8, ls=":")
        eps = _num(c["epsilon"], right)
        ax2.scatter(eps, acc, color=col, marker="o" if c["epsilon"] is not None else "x")
        ax2.annotate(label, (eps, acc), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for ax, (_, title) in zip(axes, panels, strict=False):
        ax.set_xlabel(title)
        ax.set_ylabel("main task: test accuracy (%)")
        ax.set_title("accuracy vs attack success (dotted: chance)", fontsize=9)
    ax1 = axes[0]
    ax2.set_xscale("log")
    ax2.set_xlabel("epsilon spent (log; x: no DP guarantee)")
    ax2.set_ylabel("main task: test accuracy (%)")
    ax2.set_title("accuracy vs epsilon", fontsize=9)
    for k, col in colors.items():
        ax1.scatter([], [], color=col, label=k)
    ax1.legend(fontsize=7, title="defense", title_fontsize=7)
    return save_figure(fig, path)


@register_experiment(
    "defense_sweep",
    DefenseSweepParams,
    description="Leakage under defenses: attack success, accuracy and epsilon per setting",
    default_dataset="mnist",
)
def run_defense_sweep(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    p: DefenseSweepParams = cfg.params
    deps = {
        s["label"]: deploy_config(cfg, p, s.get("defense") or {}, s.get("run") or {})
        for s in p.settings
    }  # every setting's config is checked before the first one trains
    cells: dict[str, dict[str, Any]] = {}
    with ctx.progress(len(deps), "defense settings") as advance:
        for label, dep in deps.items():

            def compute(dep: Any = dep, label: str = label) -> dict[str, Any]:
                ctx.log(f"setting {label!r}: defense {dataclasses.asdict(dep.defense)}")
                done = audit_once(dep, p, cfg.seed, ctx)
                eps, delta = _epsilon(done.privacy)
                return {
                    "kind": dep.defense.kind,
                    "defense": dataclasses.asdict(dep.defense),
                    "rows": [asdict(r) for r in done.rows],
                    "accuracy": done.accuracy,
                    "epsilon": eps if math.isfinite(eps) else None,  # None: no DP
                    "delta": delta,
                    "privacy": done.privacy,
                    "train_seconds": done.train_seconds,
                }

            cells[label] = ctx.cell(label, compute)
            advance(1)
    attacks = [
        (fn, head)
        for fn, head in ((_label_success, "label attack %"), (_feature_success, "feature SSIM"))
        if any(math.isfinite(fn(c["rows"])[0]) for c in cells.values())
    ]
    summary = Table(
        f"Defenses against the leakage of {p.algorithm}",
        ["setting", "defense", "epsilon", "delta", "accuracy %"]
        + [h for _, head in attacks for h in (head, "chance")],
        [
            [
                label,
                c["kind"],
                "∞" if c["epsilon"] is None else round(c["epsilon"], 3),
                f"{c['delta']:g}",
                round(100 * _num(c["accuracy"], math.nan), 2),
                *(round(v, 3) for fn, _ in attacks for v in fn(c["rows"])),
            ]
            for label, c in cells.items()
        ],
        note="label attack: the strongest label-recovery attack of any attacker; feature "
        "SSIM: the best reconstruction of any attacker (both on training rows not granted "
        "as aux); "
        "epsilon: the largest any party spent (∞: no DP guarantee).",
    )
    keys = list(dict.fromkeys(_attack_key(r) for c in cells.values() for r in c["rows"]))
    detail = Table(
        "Every attack per setting (value; chance in the leakage tables)",
        ["attack", *cells],
        [
            [
                k,
                *(
                    next(
                        (round(float(r["value"]), 3) for r in c["rows"] if _attack_key(r) == k),
                        "",
                    )
                    for c in cells.values()
                ),
            ]
            for k in keys
        ],
    )
    fig = _plot(cells, ctx.path("tradeoff.png"))
    return ExperimentResult(
        metrics={"settings": cells},
        tables=[summary, detail],
        figures=[fig],
        summary=f"{len(cells)} defense settings of {p.algorithm}",
    )
