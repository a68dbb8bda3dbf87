"""Multi-VFL deployed: data owners and label owners as real processes == in-process MultiVFL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grpc")
pytest.importorskip("rbcl")  # the PSI

from fedviews.deep.multivfl import MultiVFL  # noqa: E402
from fedviews.deploy import (  # noqa: E402
    load_deploy_config,
    load_party_data,
    write_demo_data,  # noqa: E402
)
from fedviews.errors import ConfigError, DataError  # noqa: E402
from fedviews.federation import build_in_process  # noqa: E402

DOS = ("top", "middle", "bottom")
LOS = ("bank", "clinic")
CONFIG = """
algorithm = "multivfl"
name = "deploy_multivfl_test"
seed = 2
[federation]
parties = ["top", "middle", "bottom", "bank", "clinic"]
label_owners = ["bank", "clinic"]
timeout = 30.0
[data]
dataset = "mnist"
n_per_class = 12
n_test = 60
scenario = "1niid"
samples_per_owner = 20
overlap = 0.95
[params]
optimizer = "fedadam"
server_lr = 0.01
rounds = 2
batch_size = 32
channels = 8
top_channels = 8
hidden = 16
device = "cpu"
"""


def _in_process(run: Path, cfg) -> MultiVFL:
    """The same federation in one process, from the same files (aligned as the PSI does)."""
    D = [load_party_data(run / "data" / f"{d}.npz") for d in DOS]
    L = [load_party_data(run / "data" / f"{lo}.npz") for lo in LOS]
    ids = np.sort(D[0].ids)
    for d in D[1:]:
        ids = np.intersect1d(ids, d.ids)
    strips = [d.X[np.argsort(d.ids)][np.searchsorted(np.sort(d.ids), ids)] for d in D]
    y = np.zeros(len(ids), dtype=np.int64)
    owner_ids = []
    for lo in L:
        keep = np.isin(lo.ids, ids)
        y[np.searchsorted(ids, lo.ids[keep])] = lo.y[keep]
        owner_ids.append(np.sort(lo.ids[keep]))
    test_ids = np.sort(D[0].ids_test)
    t_strips = [d.X_test[np.argsort(d.ids_test)] for d in D]
    y_test = L[0].y_test[np.argsort(L[0].ids_test)]
    assert np.array_equal(np.sort(L[0].ids_test), test_ids)
    p = cfg.params
    return MultiVFL(
        n_data_owners=len(DOS),
        n_label_owners=len(LOS),
        optimizer=p.optimizer,
        rounds=p.rounds,
        batch_size=p.batch_size,
        lr=p.lr,
        server_lr=p.server_lr,
        channels=p.channels,
        top_channels=p.top_channels,
        hidden=p.hidden,
        device="cpu",
        random_state=cfg.seed,
    ).fit(strips, y, ids=ids, label_owner_ids=owner_ids, eval_set=(t_strips, y_test))


def test_launch_equals_in_process_and_only_activations_cross(tmp_path, launch):
    config = tmp_path / "deploy.toml"
    config.write_text(CONFIG)
    run = tmp_path / "run"
    out = launch(config, run)
    assert "[coordinator] round 2: train loss" in out and "PSI bank" in out
    cfg = load_deploy_config(config)
    ref = _in_process(run, cfg)
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok" and res["rounds_done"] == 2
    np.testing.assert_allclose(res["history"]["train_loss"], ref.history_["train_loss"], rtol=1e-5)
    np.testing.assert_allclose(res["history"]["accuracy"], ref.history_["accuracy"], atol=1e-12)
    with np.load(run / "coordinator" / "result.npz") as z:
        for k, v in ref.server_.params.items():
            np.testing.assert_allclose(z[f"top/{k}"], v, rtol=1e-4, atol=1e-6)
    for d, owner in zip(DOS, ref.data_owners_, strict=True):
        with np.load(run / d / "result.npz") as z:
            for k, v in owner.state_dict().items():
                np.testing.assert_allclose(z[k], v, rtol=1e-4, atol=1e-6)
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    cross = log["crossings"]
    top_names = {f"top/{k}" for k in ref.server_.params}
    update_names = {f"update/{k}" for k in ref.server_.params}
    for d in DOS:
        assert set(cross[f"{d} -> coordinator"]) == {"psi_set"}
        for lo in LOS:  # only activations and their gradients between owners
            assert cross[f"{d} -> {lo}"] == ["activations"]
            assert cross[f"{lo} -> {d}"] == ["activation_grad"]
    for lo in LOS:
        assert set(cross[f"{lo} -> coordinator"]) == update_names | {"psi_set"}
        assert set(cross[f"coordinator -> {lo}"]) == top_names | {"psi_set", "psi_positions"}
    # raw strips, labels and bottom models stay home: no other array name ever crossed
    crossed = {n for names in cross.values() for n in names}
    assert crossed == {"activations", "activation_grad", "psi_set", "psi_positions"} | (
        top_names | update_names
    )


class _Stop(Exception):
    pass


def _federation(cfg, files):
    run = build_in_process(cfg, files)
    return run.algorithm, run.coordinator, run.parties


def test_deploy_app_state_resumes_bit_for_bit(tmp_path):
    """Kill after round 2 (states saved as the processes do), resume in fresh objects."""
    (tmp_path / "c.toml").write_text(CONFIG)
    cfg = load_deploy_config(tmp_path / "c.toml", ["params.rounds=4", "params.optimizer=fedyogi"])
    files_dir = tmp_path / "data"
    write_demo_data(cfg, files_dir)
    files = {p: load_party_data(files_dir / f"{p}.npz") for p in cfg.federation.parties}

    app, server, _ = _federation(cfg, files)
    app.run_coordinator(server, lambda r: None)
    uninterrupted = app.coordinator_results(server)

    app, server, parties = _federation(cfg, files)
    saved = {}

    def kill_after_2(r: int) -> None:
        if r == 2:
            saved["server"] = server.state_dict()
            saved.update({p: obj.state_dict() for p, obj in parties.items()})
            raise _Stop

    with pytest.raises(_Stop):
        app.run_coordinator(server, kill_after_2)
    app, server, parties = _federation(cfg, files)  # fresh "processes"
    server.load_state(saved["server"])
    for p, obj in parties.items():
        obj.load_state(saved[p])
    app.run_coordinator(server, lambda r: None)
    resumed = app.coordinator_results(server)
    assert resumed[0]["rounds_done"] == 4
    for key in ("train_loss", "accuracy"):
        assert resumed[0]["history"][key] == uninterrupted[0]["history"][key]
    for k, v in uninterrupted[1].items():
        np.testing.assert_array_equal(resumed[1][k], v)
    with pytest.raises(DataError, match="lacks the top-model arrays"):
        server.load_state({})


def test_multivfl_deploy_config_errors(tmp_path):
    base = {
        "algorithm": "multivfl",
        "federation": {"parties": ["a", "b", "lo"], "label_owners": ["lo"]},
    }
    cfg = load_deploy_config(base)
    assert cfg.roles() == {"a": "data_owner", "b": "data_owner", "lo": "label_owner"}
    with pytest.raises(ConfigError, match="label_owners"):
        load_deploy_config({**base, "federation": {"parties": ["a", "lo"], "label_owner": "lo"}})
    with pytest.raises(ConfigError, match="at least one data owner"):
        load_deploy_config({**base, "federation": {"parties": ["lo"], "label_owners": ["lo"]}})
