"""Per-batch split learning over Flower: the ServerApp relays the parties' own messages,
sealed end to end with the keys and checks of fedviews' gRPC hub.

The real ``server_app`` / ``client_app`` behind :class:`test_flower.LoopbackGrid` with
live parties (``fresh=False``: the simulation engine's surviving process), against the
same deployed session in one process (:class:`InProcessTransport`): models, losses,
footprint and policy equal; the bytes the ServerApp relays hold no activation or
gradient in the clear; a payload it alters is caught by its receiver.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")
pytest.importorskip("cryptography")

from _protocol import footprint  # noqa: E402
from test_flower import RUN_ID, LoopbackGrid, _task_identity  # noqa: E402, F401 (fixture)

from fedviews.deploy import _flower, _flower_transport, launch_flower  # noqa: E402
from fedviews.deploy import load_deploy_config, load_party_data  # noqa: E402
from fedviews.deploy._data import save_all  # noqa: E402
from fedviews.deploy._launch import make_certs  # noqa: E402
from fedviews.deploy._session import DeployCoordinator, DeployParty, session_policy  # noqa: E402
from fedviews.errors import ConfigError, RemoteError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    E2EKeys,
    InProcessTransport,
    Message,
    get_algorithm_spec,
)

CONFIGS = {
    "splitnn": """
algorithm = "splitnn"
name = "flower_splitnn_test"
seed = 2
[federation]
parties = ["top", "bottom"]
label_owner = "bottom"
alignment = "none"
[data]
dataset = "mnist"
n_per_class = 6
n_test = 20
[params]
epochs = 2
batch_size = 16
hidden = 8
device = "cpu"
""",
    "multivfl": """
algorithm = "multivfl"
name = "flower_multivfl_test"
seed = 2
[federation]
parties = ["top", "bottom", "bank"]
label_owners = ["bank"]
alignment = "none"
[data]
dataset = "mnist"
n_per_class = 6
n_test = 20
scenario = "iid"
samples_per_owner = 12
overlap = 1.0
[params]
rounds = 2
batch_size = 8
channels = 4
top_channels = 4
hidden = 8
device = "cpu"
""",
    "apfed": """
algorithm = "apfed"
name = "flower_apfed_test"
seed = 4
[federation]
parties = ["top", "bot"]
label_owner = "bot"
alignment = "none"
[data]
dataset = "mnist"
n_per_class = 4
n_test = 20
overlap = 1.0
[params]
variant = "R"
epochs = 2
batch_size = 16
device = "cpu"
""",
}


def _federation(root: Path, name: str) -> tuple[Path, Path, Path]:
    """A config of ``CONFIGS``, its pre-aligned party files and the nodes' certificates."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "deploy.toml"
    path.write_text(CONFIGS[name])
    cfg = load_deploy_config(path)
    write_aligned_data(cfg, root / "data")
    return path, root / "data", make_certs(root / "certs", cfg)


@pytest.fixture(scope="module")
def splitnn(tmp_path_factory):
    return _federation(tmp_path_factory.mktemp("flower-peers"), "splitnn")


def write_aligned_data(cfg: Any, out: Path) -> None:
    """The config's demo party files, every party cut to the samples all of them hold (in
    the order of the one that holds fewest): Flower runs without the PSI."""
    datas = get_algorithm_spec(cfg.algorithm).demo_data(cfg)
    common = min((d.ids for d in datas.values()), key=len)
    for p, d in datas.items():
        rows = {v: i for i, v in enumerate(d.ids.tolist())}
        idx = np.array([rows[v] for v in common.tolist()])
        y = None if d.y is None else d.y[idx]
        datas[p] = dataclasses.replace(d, ids=d.ids[idx], X=d.X[idx], y=y)
    save_all(datas, out)


def _in_process(path: Path, data: Path, out: Path) -> tuple[dict, InProcessTransport]:
    cfg = load_deploy_config(path)
    transport = InProcessTransport(session_policy(cfg))
    coord = DeployCoordinator(cfg, lambda line: None, out / "coordinator")
    transport.register(coord)
    for p in cfg.federation.parties:
        party = DeployParty(cfg, p, load_party_data(data / f"{p}.npz"), out / p, lambda _: None)
        transport.register(party)
    return coord.run(), transport


def _on_flower(path: Path, data: Path, certs: Path, run: Path, grid_type=LoopbackGrid, **kw):
    cfg = load_deploy_config(path)
    rc = {"deploy-config": str(path), "out-dir": str(run), "certs-dir": str(certs)}
    nodes = [
        {"party": p, "data": str(data / f"{p}.npz"), "out": str(run / p)}
        for p in cfg.federation.parties
    ]
    grid = grid_type(nodes, rc, fresh=False, **kw)
    try:
        return _flower.run_flower_coordinator(cfg, grid, run / "coordinator"), grid
    finally:
        grid.close()


def _results(run: Path, parties) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for p in parties:
        with np.load(run / p / "result.npz") as z:
            out[p] = {k: z[k] for k in z.files}
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_on_flower_equals_in_process(name, tmp_path):
    """The ServerApp relays the per-batch messages: every party's model, the coordinator's
    history and the footprint (who sent which arrays to whom, by kind) are the in-process
    session's; the ServerApp logged the party-to-party messages by their headers."""
    path, data, certs = _federation(tmp_path, name)
    cfg = load_deploy_config(path)
    ref, transport = _in_process(path, data, tmp_path / "ref")
    res, _ = _on_flower(path, data, certs, tmp_path / "run")
    assert res["status"] == "ok", res["status"]
    _same_history(res["history"], ref["history"])
    parties = cfg.federation.parties
    got, want = _results(tmp_path / "run", parties), _results(tmp_path / "ref", parties)
    for p in parties:
        assert sorted(got[p]) == sorted(want[p])
        for k, v in want[p].items():
            np.testing.assert_array_equal(got[p][k], v, err_msg=f"{p}: {k}")
    roles = {**cfg.roles(), cfg.federation.coordinator: "coordinator"}
    log = json.loads((tmp_path / "run" / "coordinator" / "message_log.json").read_text())
    seen = footprint(log["exchanges"], roles)
    assert seen == footprint(transport.log.exchanges(), roles)
    peers = [k for k in log["crossings"] if cfg.federation.coordinator not in k]
    assert peers  # the party-to-party messages crossed the ServerApp, headers logged
    for p in parties:  # every node's own log: its side of the same exchanges
        mine = json.loads((tmp_path / "run" / p / "message_log.json").read_text())
        assert {k: v for k, v in mine["crossings"].items() if k in log["crossings"]} == {
            k: log["crossings"][k] for k in mine["crossings"]
        }


def _same_history(got: dict, want: dict) -> None:
    """The same history, wall times aside; bytes more by the sealing (nonce, tag, header)."""
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        if k.endswith("bytes"):
            assert all(g > w for g, w in zip(got[k], v, strict=True)), k
        elif not k.endswith("seconds"):
            assert got[k] == v, k
