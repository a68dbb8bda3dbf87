"""The S-FedMV Table 3 experiment runs end to end from its committed config (tiny settings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fedviews.errors import ConfigError  # noqa: E402
from fedviews.experiments import load_config, run_experiment  # noqa: E402

CONFIG = Path(__file__).parents[2] / "configs" / "sfedmv_watch.toml"
TINY = [
    "params.n_repeats=1",
    "params.n_rounds=2",
    "params.local_epochs=1",
    "params.hidden_size=4",
    "params.max_per_client=25",
    "params.fusion_rounds=2",
    "params.n_clients=2",
]


def test_sfedmv_experiment_smoke(tmp_path: Path) -> None:
    out, result = run_experiment(load_config(CONFIG, TINY), out_dir=tmp_path, quiet=True)
    table = result.tables[0]
    assert [r[0] for r in table.rows] == [
        "S-FedMV",
        "Local Sequential H-FedMV",
        "Local Sequential LocalMV",
        "Centralized Sequential H-FedMV",
    ]
    assert "dropped by the length filter" in table.note
    metrics = json.loads((out / "metrics.json").read_text())
    for name, vals in metrics["summary"].items():
        assert 0.0 <= vals["accuracy"][0] <= 100.0, name
    curves = metrics["accuracy_per_round"]
    assert set(curves) == {"federated", "local", "centralized"}
    assert len(curves["federated"]) == 2 and len(curves["federated"][0]) == 2  # views x rounds
    assert (out / "accuracy_per_round.png").stat().st_size > 0
    crossed = {n for names in result.message_log["crossings"].values() for n in names}
    assert crossed and all(n.startswith(("view0/", "view1/")) for n in crossed)


def test_sfedmv_params_are_validated() -> None:
    with pytest.raises(ConfigError, match="split"):
        load_config(CONFIG, ["params.split=random"])
    with pytest.raises(ConfigError, match="methods"):
        load_config(CONFIG, ["params.methods=['sfedmv','fedprox']"])
