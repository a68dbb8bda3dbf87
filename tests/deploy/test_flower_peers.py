"""Per-batch split learning over Flower: the ServerApp relays the parties' own messages,
sealed end to end with the keys and checks of fedviews' gRPC hub.

The real ``server_app`` / ``client_app`` behind :class:`test_flower.LoopbackGrid` with
live parties (``fresh=False``: the simulation engine's surviving process), against the
same deployed session in one process (:class:`InProcessTransport`): models, losses,
footprint and policy equal; the bytes the ServerApp relays hold no activation or
gradient in the clear; a payload it alters is caught by its receiver.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")
pytest.importorskip("cryptography")

from _protocol import assert_tight, footprint  # noqa: E402
from test_flower import RUN_ID, LoopbackGrid, _task_identity  # noqa: E402, F401 (fixture)

from fedviews.deploy import _flower, _flower_transport, launch_flower  # noqa: E402
from fedviews.deploy import load_deploy_config, load_party_data  # noqa: E402
from fedviews.deploy._data import write_demo_data  # noqa: E402
from fedviews.deploy._launch import make_certs  # noqa: E402
from fedviews.deploy._session import DeployCoordinator, DeployParty, session_policy  # noqa: E402
from fedviews.errors import ConfigError, RemoteError  # noqa: E402
from fedviews.federation import E2EKeys, InProcessTransport, Message  # noqa: E402

SPLITNN = """
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
"""


@pytest.fixture(scope="module")
def splitnn(tmp_path_factory):
    """A split NN config, its pre-aligned party files and the nodes' certificates."""
    root = tmp_path_factory.mktemp("flower-peers")
    path = root / "deploy.toml"
    path.write_text(SPLITNN)
    cfg = load_deploy_config(path)
    write_demo_data(cfg, root / "data")
    return path, root / "data", make_certs(root / "certs", cfg)


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
