"""The S-FedMV Table 3 experiment runs end to end from its committed config (tiny settings)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from fedviews.errors import ConfigError  # noqa: E402
from fedviews.experiments import ExperimentConfig, load_config, run_experiment  # noqa: E402

CONFIG = Path(__file__).parents[2] / "configs" / "sfedmv_watch.toml"
TINY = [  # small, and S-FedMV learns (43 % on 7 classes)
    "params.n_repeats=1",
    "params.n_rounds=4",
    "params.local_epochs=1",
    "params.hidden_size=16",
    "params.max_per_client=60",
    "params.fusion_rounds=5",
    "params.n_clients=2",
]


def _sfedmv_alone(cfg: ExperimentConfig) -> tuple[np.ndarray, np.ndarray]:
    """Test labels and S-FedMV's predictions of the first repeat, fitted directly on the
    experiment's clients (subjects dealt to clients, held-out test windows, at most
    ``max_per_client`` training windows each) with its params and seed."""
    import torch

    from fedviews.data import load_sequences
    from fedviews.deep import SFedMVParams, deal_subjects, evenly_spaced, holdout_mask
    from fedviews.deep.sfedmv import SFedMV

    p = cfg.params
    ds = deal_subjects(load_sequences(cfg.data.name, **dict(cfg.data.options)), p.n_clients, "")
    test = holdout_mask(ds, p.split, p.test_fraction, cfg.seed)
    train = [
        evenly_spaced(np.flatnonzero(~test & (ds.client_ids == c)), p.max_per_client)
        for c in range(p.n_clients)
    ]
    train_cl = ds.subset(np.concatenate(train)).by_client(list(range(p.n_clients)))
    test_cl = ds.subset(test).by_client(list(range(p.n_clients)))
    kw = {f.name: getattr(p, f.name) for f in fields(SFedMVParams)} | {"device": cfg.device}
    kw = {k: v for k, v in kw.items() if k in SFedMV().get_params()}
    threads = torch.get_num_threads()
    torch.set_num_threads(p.torch_threads)  # as the experiment trains
    try:
        est = SFedMV(extractors="federated", fusion="hfedmv", **kw, random_state=cfg.seed)
        est.fit(train_cl)
    finally:
        torch.set_num_threads(threads)
    y_pred = [est.predict(views, client=c) for c, (views, _) in enumerate(test_cl)]
    return np.concatenate([y for _, y in test_cl]), np.concatenate(y_pred)


def test_sfedmv_experiment_smoke(tmp_path: Path) -> None:
    cfg = load_config(CONFIG, TINY)
    out, result = run_experiment(cfg, out_dir=tmp_path, quiet=True)
    table = result.tables[0]
    assert [r[0] for r in table.rows] == [
        "S-FedMV",
        "Local Sequential H-FedMV",
        "Local Sequential LocalMV",
        "Centralized Sequential H-FedMV",
    ]
    assert "dropped by the length filter" in table.note
    metrics = json.loads((out / "metrics.json").read_text())
    # S-FedMV's row is its own test accuracy, fitted alone on the same clients and seed
    y_true, y_pred = _sfedmv_alone(cfg)
    acc = 100.0 * float(np.mean(y_pred == y_true))
    assert metrics["summary"]["S-FedMV"]["accuracy"] == [acc, None]  # one repeat: no std
    majority = 100.0 * np.bincount(y_true).max() / len(y_true)
    for name, vals in metrics["summary"].items():  # every method learns
        assert vals["accuracy"][0] > 2 * majority, name
    curves = metrics["accuracy_per_round"]
    assert set(curves) == {"federated", "local", "centralized"}
    assert len(curves["federated"]) == 2 and len(curves["federated"][0]) == 4  # views x rounds
    assert (out / "accuracy_per_round.png").stat().st_size > 0
    crossed = {n for names in result.message_log["crossings"].values() for n in names}
    assert crossed and all(n.startswith(("view0/", "view1/")) for n in crossed)


def test_sfedmv_params_are_validated() -> None:
    with pytest.raises(ConfigError, match="split"):
        load_config(CONFIG, ["params.split=random"])
    with pytest.raises(ConfigError, match="methods"):
        load_config(CONFIG, ["params.methods=['sfedmv','fedprox']"])
