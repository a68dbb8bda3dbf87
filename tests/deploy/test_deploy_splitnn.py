"""The plain split NN deployed: a real launch over gRPC exchanges exactly the in-process
protocol, its policy allows exactly that, and it trains to the in-process result."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grpc")
pytest.importorskip("rbcl")  # the PSI

from _protocol import assert_tight, footprint  # noqa: E402

from fedviews.deploy import load_deploy_config, load_party_data  # noqa: E402
from fedviews.federation import build_in_process, get_algorithm_spec  # noqa: E402

CONFIG = """
algorithm = "splitnn"
name = "deploy_splitnn_test"
seed = 2
[federation]
parties = ["top", "bottom"]
label_owner = "bottom"
timeout = 30.0
[data]
dataset = "mnist"
n_per_class = 12
n_test = 40
[params]
epochs = 2
batch_size = 32
hidden = 16
device = "cpu"
"""


def test_launch_equals_in_process(tmp_path, launch):
    config = tmp_path / "deploy.toml"
    config.write_text(CONFIG)
    run = tmp_path / "run"
    launch(config, run)
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok"
    # the run's total seconds (the per-epoch ones took the key) and every epoch's
    assert isinstance(res["seconds"], float) and len(res["epoch_seconds"]) == 2
    cfg = load_deploy_config(config)
    datas = {p: load_party_data(run / "data" / f"{p}.npz") for p in ("top", "bottom")}
    fed = build_in_process(cfg, datas)
    fed()
    np.testing.assert_allclose(res["loss"], [r["loss"] for r in fed.coordinator.history], rtol=1e-4)
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    assert log["crossings"]["top -> bottom"] == ["logits"]
    assert log["crossings"]["bottom -> top"] == ["grad_logits"]
    roles = {**cfg.roles(), "coordinator": "coordinator"}
    seen = footprint(log["exchanges"], roles)
    assert seen == footprint(fed.transport.log.exchanges(), roles)
    assert_tight(fed.transport.policy, seen)
    assert fed.transport.policy == get_algorithm_spec("splitnn").policy(cfg, fed.setup)
