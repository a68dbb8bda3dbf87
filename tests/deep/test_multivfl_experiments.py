"""The committed Multi-VFL configs load and run end to end (tiny overrides)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fedviews.errors import ConfigError  # noqa: E402
from fedviews.experiments import load_config, run_experiment  # noqa: E402

CONFIGS = sorted(Path(__file__).resolve().parents[2].joinpath("configs").glob("multivfl_*.toml"))
TINY = [
    "params.rounds=2",
    "params.samples_per_owner=40",
    "params.eval_samples=100",
    "params.batch_size=20",
]


def test_every_config_loads() -> None:
    assert len(CONFIGS) == 5
    for path in CONFIGS:
        cfg = load_config(path)
        assert cfg.experiment in ("multivfl_noniid", "multivfl_optimizers")


def test_config_runs(tmp_path: Path) -> None:
    path = next(p for p in CONFIGS if p.stem == "multivfl_fig3_fmnist")
    cfg = load_config(
        path,
        [
            *TINY,
            "params.optimizers=['fedavg', 'fedyogi']",
            "params.local_optimizers=['sgd', 'adam']",
        ],
    )
    out, result = run_experiment(cfg, quiet=True, out_dir=tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    assert sorted(metrics["accuracy"]) == [
        "4niid/fedavg/adam",
        "4niid/fedavg/sgd",
        "4niid/fedyogi/adam",
        "4niid/fedyogi/sgd",
    ]
    assert [r[2] for r in result.tables[0].rows] == ["sgd", "sgd", "adam", "adam"]
    assert not list((out / "checkpoints").glob("*.npz"))  # removed once a curve is stored
    assert len(json.loads((out / "cells.json").read_text())) == 4
    for curve in metrics["accuracy"].values():
        assert len(curve) == 2 and all(0.0 <= a <= 1.0 for a in curve)
    assert (out / "accuracy.png").is_file() and (out / "report.html").is_file()
    log = json.loads((out / "message_log.json").read_text())
    crossings = next(iter(log.values()))["crossings"]
    assert crossings["data_owner_0 -> label_owner_0"] == ["activations"]
    assert crossings["label_owner_0 -> data_owner_0"] == ["activation_grad"]
    report = (out / "report.html").read_text()  # one diagram, every logged run listed
    assert "Every logged run" in report and all(label in report for label in log)


def test_bad_params() -> None:
    with pytest.raises(ConfigError, match="did you mean 'fedavg'"):
        load_config(CONFIGS[0], ["params.optimizers=['fedavgg']"])
    with pytest.raises(ConfigError, match="rounds"):
        load_config(CONFIGS[0], ["params.rounds=0"])


def test_killed_before_its_first_cell_is_not_reused(tmp_path: Path, monkeypatch) -> None:
    """A run killed during its first curve has no cells.json yet, only config.json and a
    checkpoint: a new run with ``--out`` there is refused (it used to continue the killed
    run's checkpoint: 3-round curves of 2-round runs, or a model of other parameters), and
    ``--resume`` finishes the killed run as an uninterrupted one."""
    from fedviews.errors import FedViewsError
    from fedviews.experiments import RunContext, resume_experiment

    path = next(p for p in CONFIGS if p.stem == "multivfl_fig2_mnist")
    tiny = [*TINY, "params.scenarios=['iid']", "params.checkpoint_every=1", "device='cpu'"]
    cfg = load_config(path, [*tiny, "params.rounds=3"])
    _, whole = run_experiment(cfg, quiet=True, out_dir=tmp_path / "whole")

    real = RunContext.checkpoint

    def killed_in_round_3(self: RunContext, partial: dict) -> None:
        real(self, partial)
        if partial["round"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunContext, "checkpoint", killed_in_round_3)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, quiet=True, out_dir=tmp_path / "cut")
    monkeypatch.setattr(RunContext, "checkpoint", real)
    assert not (tmp_path / "cut" / "cells.json").exists()
    assert list((tmp_path / "cut" / "checkpoints").glob("*.npz"))
    other = load_config(path, [*tiny, "params.rounds=2"])
    with pytest.raises(FedViewsError, match="holds a run already"):
        run_experiment(other, quiet=True, out_dir=tmp_path / "cut")
    _, resumed = resume_experiment(tmp_path / "cut", quiet=True)
    assert resumed.tables[0].rows[0][3:5] == whole.tables[0].rows[0][3:5]
