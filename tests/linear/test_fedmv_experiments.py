"""The FedMV experiment configs run end to end (tiny overrides)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedviews.errors import ConfigError
from fedviews.experiments import load_config, run_experiment

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FAST = [
    "params.n_repeats=2",
    "params.zetas=[8]",
    "params.etas=[16]",
    "params.max_iter=3",
    "params.inner_max_iter=2",
]


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("fedmv_vertical_handwritten_binary", []),
        ("fedmv_horizontal_handwritten_label_skew", ["params.n_rounds=2"]),
    ],
)
def test_fedmv_config_runs(tmp_path: Path, name: str, extra: list[str]) -> None:
    cfg = load_config(CONFIGS / f"{name}.toml", [*FAST, *extra])
    out, res = run_experiment(cfg, out_dir=tmp_path, quiet=True)
    metrics = json.loads((out / "metrics.json").read_text())
    main = "V-FedMV" if "vertical" in name else "H-FedMV"
    acc = metrics["results"][main]["accuracy"]
    assert 50.0 < acc[0] <= 100.0 and acc[1] >= 0.0
    assert len(res.tables) == 2  # ours + the paper's (context)
    log = json.loads((out / "message_log.json").read_text())
    crossed = {a for names in log["crossings"].values() for a in names}
    assert crossed <= (
        {"Z", "Z_k", "Z_test", "Z_k_test"}
        | {f"W_{k}" for k in range(5)}
        | {f"W_local_{k}" for k in range(5)}
    )


def test_fedmv_config_rejects_bad_method() -> None:
    with pytest.raises(ConfigError, match="unknown method"):
        load_config(CONFIGS / "fedmv_vertical_handwritten.toml", ['params.methods=["hfedmv"]'])


def test_unconverged_fits_are_recorded_and_said(tmp_path: Path) -> None:
    """An experiment whose V-FedMV fits stop at max_iter records converged: false and says so."""
    from rich.console import Console

    console = Console(record=True, width=200)
    cfg = load_config(CONFIGS / "fedmv_vertical_handwritten_binary.toml", FAST)
    out, _ = run_experiment(cfg, out_dir=tmp_path / "a", console=console)
    conv = json.loads((out / "metrics.json").read_text())["converged"]
    # the (zeta, eta) grid's one fit, then V-FedMV and the pairwise fits of every repeat
    assert conv["converged"] is False and conv["unconverged_fits"] >= 3
    assert "converged: false" in console.export_text()
    cfg = load_config(
        CONFIGS / "fedmv_vertical_handwritten_binary.toml", [*FAST, "params.max_iter=2000"]
    )
    out, _ = run_experiment(cfg, out_dir=tmp_path / "b", quiet=True)
    conv = json.loads((out / "metrics.json").read_text())["converged"]
    assert conv == {"unconverged_fits": 0, "converged": True}
