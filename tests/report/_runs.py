"""Tiny finished runs for the report tests (an experiment in-process, a deployment config)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner, Result

from fedviews.experiments import load_config, run_experiment

ROOT = Path(__file__).resolve().parents[2]
#: a small MMVFL experiment: 2 folds, 2 betas, 3 feature percentages (~5 s)
TINY = ["params.n_folds=2", "params.betas=[0.1,1]", "params.percents=[10,50,100]"]
#: the MMVFL deployment demo made tiny: 12 samples per class, 3 rounds (~10 s)
DEPLOY = ROOT / "configs" / "deploy_mmvfl_handwritten.toml"
DEPLOY_OVERRIDES = ["data.n_per_class=12", "params.max_iter=3", "params.inner_max_iter=10"]


def experiment_run(out: Path, *overrides: str) -> Path:
    """The tiny MMVFL experiment run in-process into ``out``."""
    cfg = load_config(ROOT / "configs" / "mmvfl_handwritten.toml", [*TINY, *overrides])
    run_experiment(cfg, console=Console(quiet=True), quiet=True, out_dir=out)
    return out


def fedviews(*args: str | Path) -> Result:
    """``fedviews ARGS`` run in this process as the command line runs it (exit code,
    ``stdout`` and ``stderr`` of the result)."""
    from fedviews.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])
