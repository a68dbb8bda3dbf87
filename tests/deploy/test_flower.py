"""Flower (flwr 1.41) as the transport of the deployed session: MMVFL through Flower == in-process.

* ``test_loopback_grid_*``: the real ``server_app`` / ``client_app`` behind a Flower
  ``Grid`` that plays the SuperLink and the SuperNodes in this process, every node
  with its own ``Context`` (node config ``party=... data=... out=...``) and, as in
  the deployment engine, a fresh party object for every message (rebuilt from
  ``Context.state``). Fast, no Ray, no processes.
* ``test_simulation_engine_equals_in_process``: Flower's simulation engine
  (``flower-superlink --simulation`` + ``flwr run``, Ray) on loopback.
* ``test_deployment_engine_equals_in_process``: ``flower-superlink`` + one
  ``flower-supernode`` per party + ``flwr run``: a Flower message costs seconds
  there (a new ClientApp process per message), so the run takes minutes on a
  small machine; it runs only with ``FEDVIEWS_TEST_FLOWER_DEPLOYMENT=1``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402

from fedviews.deploy import (  # noqa: E402
    _flower,
    _flower_node,
    _flower_transport,
    launch_flower,
    load_deploy_config,
    load_party_data,
    split_dataset,
)
from fedviews.deploy._session import DeployCoordinator, DeployParty, session_policy  # noqa: E402
from fedviews.errors import (  # noqa: E402
    ConfigError,
    PartyUnavailable,
    PrivacyError,
    ProtocolError,
    RemoteError,
)
from fedviews.federation import InProcessTransport, PrivacyPolicy  # noqa: E402
from fedviews.federation import Message as FVMessage  # noqa: E402

PARTIES = ("pix", "fou", "zer")
OWNER = "fou"
RUN_ID = 4242


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    """What a Flower engine sets in the ServerApp process before it builds messages."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", RUN_ID), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Three pre-aligned party files of Handwritten (Flower refuses the PSI) and a config."""
    root = tmp_path_factory.mktemp("flower")
    data = root / "data"
    split_dataset("handwritten", data, views=PARTIES, label_owner=OWNER, n_per_class=10, seed=0)
    path = root / "deploy.toml"
    path.write_text(
        f"""
algorithm = "mmvfl"
name = "flower_test"
seed = 3
[federation]
parties = {json.dumps(list(PARTIES))}
label_owner = "{OWNER}"
alignment = "none"
connect_timeout = 60.0  # Ray starts the simulation nodes slowly on a loaded machine
[params]
standardize = true
beta = 0.5
max_iter = 3
tol = 0.0
inner_max_iter = 10
"""
    )
    return path, data


@pytest.fixture(scope="module")
def reference(deployment, tmp_path_factory):
    """The same deployment in one process (InProcessTransport): objective and W per party."""
    path, data = deployment
    out = tmp_path_factory.mktemp("in-process")
    cfg = load_deploy_config(path)
    transport = InProcessTransport(session_policy(cfg))
    coord = DeployCoordinator(cfg, lambda line: None, out / "coordinator")
    transport.register(coord)
    for p in PARTIES:
        party = DeployParty(cfg, p, load_party_data(data / f"{p}.npz"), out / p, lambda _: None)
        transport.register(party)
    res = coord.run()
    W = {}
    for p in PARTIES:
        with np.load(out / p / "result.npz") as z:
            W[p] = z["W"]
    return res, W


def _check_against(reference, run: Path, res: dict) -> None:
    ref, W = reference
    assert res["status"] == "ok", res["status"]
    assert res["transport"] == "flower" and sorted(res["nodes"]) == sorted(PARTIES)
    assert len(res["objective"]) == 3
    np.testing.assert_allclose(res["objective"], ref["objective"], rtol=1e-10)
    for p in PARTIES:
        with np.load(run / p / "result.npz") as z:
            np.testing.assert_allclose(z["W"], W[p], rtol=1e-10, atol=1e-12)
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    for p in PARTIES:  # only the policy's arrays crossed, in both directions
        assert log["crossings"][f"{p} -> coordinator"] == ["Z_k"]
        assert log["crossings"][f"coordinator -> {p}"] == ["Z"]
    assert not [k for k in log["crossings"] if "coordinator" not in k]  # no party-to-party
    for p in PARTIES:  # every node's own log (kept across its fresh processes) agrees
        mine = json.loads((run / p / "message_log.json").read_text())
        assert mine["crossings"] == {
            f"{p} -> coordinator": ["Z_k"],
            f"coordinator -> {p}": ["Z"],
        }
        # both legs of every exchange, but the reply to deploy:finish (written before it left)
        assert mine["messages"] == log["messages"] // len(PARTIES) - 1


class LoopbackGrid(Grid):
    """A Flower Grid that plays the SuperLink and one SuperNode per node config, here.

    Each pushed message goes to the real ``client_app`` with its node's ``Context``
    (state kept between messages, one message at a time per node, nodes in
    parallel). ``fresh=True`` drops the node's live party before every message, as
    the deployment engine starts a new ClientApp process for every message.
    """

    def __init__(self, node_configs: Iterable[dict], run_config: dict, *, fresh: bool = True):
        self.run_id = RUN_ID
        self.fresh = fresh
        self.contexts = {
            1000 + k: Context(self.run_id, 1000 + k, dict(nc), RecordDict(), dict(run_config))
            for k, nc in enumerate(node_configs)
        }
        self.workers = {n: ThreadPoolExecutor(max_workers=1) for n in self.contexts}
        self.replies: dict[str, Message] = {}
        self.lock = threading.Lock()
        self.delivered = 0

    def set_run(self, run):  # pragma: no cover - not used by the ServerApp
        raise NotImplementedError

    @property
    def run(self):  # pragma: no cover - not used by the ServerApp
        raise NotImplementedError

    def create_message(self, *args, **kwargs):  # pragma: no cover - not used
        raise NotImplementedError

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for m in messages:
            mid = uuid.uuid4().hex
            m.metadata.__dict__["_message_id"] = mid
            self.workers[m.metadata.dst_node_id].submit(self._deliver, m)
            ids.append(mid)
        return ids

    def _deliver(self, m: Message) -> None:
        node = m.metadata.dst_node_id
        if self.fresh:
            with _flower_node._LIVE_LOCK:
                _flower_node._LIVE.pop((self.run_id, node), None)
        reply = _flower.client_app(m, self.contexts[node])
        reply.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        with self.lock:
            self.replies[m.metadata.message_id] = reply
            self.delivered += 1

    def pull_messages(self, message_ids):
        with self.lock:
            return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):  # pragma: no cover - not used
        raise NotImplementedError

    def close(self):
        for w in self.workers.values():
            w.shutdown(wait=True)


def _node_configs(data: Path, run: Path, parties=PARTIES) -> list[dict]:
    return [{"party": p, "data": str(data / f"{p}.npz"), "out": str(run / p)} for p in parties]


def test_loopback_grid_equals_in_process(deployment, reference, tmp_path):
    """server_app + client_app (a fresh party per message) == the session in one process."""
    path, data = deployment
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run)}
    # node order != party order: the hello maps them
    grid = LoopbackGrid(reversed(_node_configs(data, run)), rc)
    try:
        _flower.server_app(grid, Context(0, 0, {}, RecordDict(), rc))
    finally:
        grid.close()
    res = json.loads((run / "coordinator" / "results.json").read_text())
    _check_against(reference, run, res)
    assert res["nodes"] == {"zer": "1000", "fou": "1001", "pix": "1002"}
    assert grid.delivered >= 3 * 7  # hello, setup, build, 3 rounds, finish


def test_loopback_grid_reuses_live_party(deployment, reference, tmp_path, monkeypatch):
    """Where the ClientApp process survives (Ray actors), the live party is reused."""
    path, data = deployment
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run)}
    grid = LoopbackGrid(_node_configs(data, run), rc, fresh=False)
    restored = []
    monkeypatch.setattr(_flower_node._Node, "restore", lambda self, state: restored.append(state))
    try:
        res = _flower.run_flower_coordinator(load_deploy_config(path), grid, run / "coordinator")
    finally:
        grid.close()
    _check_against(reference, run, res)
    assert restored == []  # never rebuilt from Context.state


def _with_secagg(path: Path, tmp_path: Path) -> Path:
    secure = tmp_path / "secagg.toml"
    secure.write_text(path.read_text() + '\n[defense]\nkind = "secagg"\n')
    return secure


def test_secure_aggregation_on_flower_needs_a_live_party(deployment, reference, tmp_path):
    """With the party alive across messages (the simulation engine) secagg gives the plain
    run's result; rebuilt from its node state for every message (the deployment engine) it
    would draw a new key whose masks no longer cancel, so the node refuses, as does
    ``launch_flower`` with the deployment engine (before anything starts)."""
    path, data = deployment
    secure = _with_secagg(path, tmp_path)
    for fresh in (False, True):
        run = tmp_path / f"run-{fresh}"
        rc = {"deploy-config": str(secure), "out-dir": str(run)}
        grid = LoopbackGrid(_node_configs(data, run), rc, fresh=fresh)
        try:
            if fresh:
                with pytest.raises(  # the node's report
                    RemoteError, match="reported ConfigError: .*engine starts a new ClientApp"
                ):
                    _flower.run_flower_coordinator(load_deploy_config(secure), grid, run / "c")
            else:
                res = _flower.run_flower_coordinator(load_deploy_config(secure), grid, run / "c")
        finally:
            grid.close()
    np.testing.assert_allclose(res["objective"], reference[0]["objective"], rtol=1e-6)
    with pytest.raises(ConfigError, match="use the simulation engine or fedviews launch"):
        launch_flower(secure, tmp_path / "launched", engine="deployment", data_dir=data)
    assert not (tmp_path / "launched").exists()


def test_an_interrupted_flower_run_is_not_recorded_as_ok(deployment, tmp_path, monkeypatch):
    """Ctrl-C (or any BaseException) in the ServerApp: results.json says so, no report."""
    path, data = deployment
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run)}
    grid = LoopbackGrid(_node_configs(data, run), rc)

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(DeployCoordinator, "run", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            _flower.run_flower_coordinator(load_deploy_config(path), grid, run / "coordinator")
    finally:
        grid.close()
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"].startswith("KeyboardInterrupt")
    assert not (run / "coordinator" / "report.html").exists()


@pytest.mark.parametrize(
    ("nodes", "error", "match"),
    [
        (
            [{"party": "pix"}, {"party": "bob"}],
            RemoteError,
            "'Flower node 100.' reported ConfigError: party 'bob'.* is not one of",
        ),
        ([{"party": "pix"}, {"party": "pix"}], ConfigError, "both declare party 'pix'"),
        (
            [{"data": "x.npz"}],
            RemoteError,
            "'Flower node 1000' reported ConfigError: .*does not say which party",
        ),
        ([{"party": "pix"}, {"party": "fou"}], PartyUnavailable, "'zer' is unavailable"),
    ],
)
def test_loopback_grid_node_errors(deployment, tmp_path, nodes, error, match):
    """Unknown, duplicate, undeclared and missing parties are clear fedviews errors."""
    path, data = deployment
    cfg = load_deploy_config(path)
    for nc in nodes:
        if "party" in nc:
            nc["data"] = str(data / f"{nc['party']}.npz")
    grid = LoopbackGrid(nodes, {"deploy-config": str(path)})
    opts = _flower.FlowerOptions(join_timeout=0.5)
    try:
        with pytest.raises(error, match=match):
            _flower.run_flower_coordinator(cfg, grid, tmp_path / "coordinator", options=opts)
    finally:
        grid.close()
    res = json.loads((tmp_path / "coordinator" / "results.json").read_text())
    assert res["status"].startswith(error.__name__)


def test_node_with_another_config_is_refused(deployment, tmp_path):
    path, data = deployment
    other = tmp_path / "other.toml"
    other.write_text(path.read_text().replace("seed = 3", "seed = 4"))
    nodes = [{"party": p, "data": str(data / f"{p}.npz")} for p in PARTIES]
    nodes[1]["config"] = str(other)  # this node's own copy of the config differs
    grid = LoopbackGrid(nodes, {"deploy-config": str(path)})
    try:
        with pytest.raises(ConfigError, match="'fou'.*another deployment config"):
            _flower.run_flower_coordinator(load_deploy_config(path), grid, tmp_path / "c")
    finally:
        grid.close()


def test_a_party_sends_only_from_a_handler_with_keys():
    """A party's own message (per-batch split learning) leaves a node only sealed, while
    the party answers one (the relay of ``test_flower_peers``); otherwise it is refused."""
    split = PrivacyPolicy.of(
        "split", {("data_owner", "label_owner"): ["activations"], ("party", "coordinator"): ["x"]}
    )
    node = _flower_transport.FlowerNodeTransport(
        split, {"b": "label_owner", "coordinator": "coordinator"}
    )
    with pytest.raises(ProtocolError, match="outside a handler or without end-to-end keys"):
        node.request(FVMessage("forward", sender="a", receiver="b"))


def test_wire_round_trip_has_no_pickle():
    msg = FVMessage(
        "update", "coordinator", "pix", 2, arrays={"Z": np.arange(6.0).reshape(3, 2)}, meta={"k": 1}
    )
    content = _flower_transport.pack(msg.encode())
    arr = content.array_records["fedviews"]["message"]
    assert arr.stype == _flower_transport.STYPE and arr.dtype == "uint8"
    back = FVMessage.decode(_flower_transport.unpack(content))
    np.testing.assert_array_equal(back.arrays["Z"], msg.arrays["Z"])
    assert (back.kind, back.round, dict(back.meta)) == ("update", 2, {"k": 1})
    with pytest.raises(ProtocolError, match="no fedviews message"):
        _flower_transport.unpack(RecordDict())


@pytest.mark.slow
def test_simulation_engine_equals_in_process(deployment, reference, tmp_path):
    """flower-superlink --simulation (Ray) + flwr run on loopback == in-process."""
    pytest.importorskip("ray")
    path, data = deployment
    run = tmp_path / "run"
    lines: list[str] = []
    res = launch_flower(
        path, run, engine="simulation", data_dir=data, timeout=150, echo=lines.append
    )
    _check_against(reference, run, res)
    assert any(line.startswith("[coordinator] round 3/3: objective") for line in lines), lines


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FEDVIEWS_TEST_FLOWER_DEPLOYMENT") != "1",
    reason="minutes: set FEDVIEWS_TEST_FLOWER_DEPLOYMENT=1 to run the deployment engine",
)
def test_deployment_engine_equals_in_process(deployment, reference, tmp_path):
    """flower-superlink + one flower-supernode per party (node config) + flwr run == in-process."""
    path, data = deployment
    run = tmp_path / "run"
    res = launch_flower(path, run, engine="deployment", data_dir=data, timeout=900)
    _check_against(reference, run, res)


def test_flower_cli_writes_the_app_and_refuses_unknown_engines(tmp_path):
    from typer.testing import CliRunner

    from fedviews.cli import app

    runner = CliRunner()
    config = Path(__file__).resolve().parents[2] / "configs" / "deploy_mmvfl_flower.toml"
    res = runner.invoke(app, ["flower", "app", str(tmp_path / "fa"), "--config", str(config)])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "fa" / "pyproject.toml").read_text()
    assert f'deploy-config = "{config}"' in text and "fedviews.deploy._flower:server_app" in text
    bad = runner.invoke(
        app, ["flower", "launch", str(config), "--out", str(tmp_path / "r")] + ["--engine", "ray"]
    )
    assert bad.exit_code == 2 and "--engine must be" in bad.output


def test_direct_links_are_refused_on_flower(deployment, tmp_path):
    """``[federation.listen]`` cannot apply to Flower (every message goes through its
    SuperLink): the ServerApp, ``flower launch`` and ``flower app`` refuse it before
    anything starts, saying why and what to do; the CLI in one line, exit status 2."""
    from typer.testing import CliRunner

    from fedviews.cli import app

    path, data = deployment
    config = tmp_path / "listen.toml"
    config.write_text(path.read_text() + '[federation.listen]\nfou = "127.0.0.1:7101"\n')
    cfg = load_deploy_config(config)
    why = r"federation.listen .* for fou, .*SuperLink.*remove the federation.listen table.*gRPC"
    with pytest.raises(ConfigError, match=why):
        _flower.check_flower_config(cfg)
    _flower.check_flower_config(load_deploy_config(path))  # without it: fine
    with pytest.raises(ConfigError, match=why):  # before a process or a folder is made
        launch_flower(config, tmp_path / "run", engine="simulation", data_dir=data)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=why):  # the ServerApp, before it waits for nodes
        _flower.run_flower_coordinator(cfg, None, tmp_path / "coord")  # type: ignore[arg-type]
    assert not (tmp_path / "coord").exists()
    runner = CliRunner()
    for args in (
        ["flower", "launch", str(config), "--out", str(tmp_path / "r")],
        ["flower", "app", str(tmp_path / "fa"), "--config", str(config)],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and re.match("error: ConfigError: " + why, lines[0])
    assert not (tmp_path / "r").exists() and not (tmp_path / "fa").exists()


def test_a_flower_node_is_never_a_psi_oracle(deployment, tmp_path):
    """Flower's nodes have no end-to-end keys, so a PSI chain cannot be sealed there and a
    node would re-blind whatever the ServerApp sends (a review had one node re-blind a
    2,000-ID dictionary three times and recovered a party's IDs). The PSI is refused:
    the ServerApp, ``flower launch`` and ``flower app`` refuse ``alignment = "psi"``
    before anything starts, a node refuses to serve such a config, and a node of a
    pre-aligned run (``alignment = "none"``) refuses the attack's ``psi:*`` requests."""
    from typer.testing import CliRunner

    from fedviews.cli import app
    from fedviews.privacy import hash_ids

    path, data = deployment
    psi = tmp_path / "psi.toml"
    psi.write_text(path.read_text().replace('alignment = "none"', 'alignment = "psi"'))
    why = r'federation.alignment = "psi" cannot run on Flower.*set federation.alignment = "none"'
    with pytest.raises(ConfigError, match=why):
        _flower.check_flower_config(load_deploy_config(psi))
    with pytest.raises(ConfigError, match=why):  # the ServerApp, before it waits for nodes
        _flower.run_flower_coordinator(load_deploy_config(psi), None, tmp_path / "c")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=why):
        launch_flower(psi, tmp_path / "run", engine="simulation", data_dir=data)
    res = CliRunner().invoke(app, ["flower", "app", str(tmp_path / "fa"), "--config", str(psi)])
    assert res.exit_code == 2 and "cannot run on Flower" in res.output, res.output
    assert not [p for p in ("c", "run", "fa") if (tmp_path / p).exists()]

    def context(config: Path, node_id: int) -> Context:
        nc = {"party": "pix", "data": str(data / "pix.npz"), "out": str(tmp_path / "pix")}
        return Context(RUN_ID, node_id, {**nc, "config": str(config)}, RecordDict(), {})

    with pytest.raises(ConfigError, match=why):  # whatever the ServerApp sends
        _flower_node.node_for(context(psi, 2001))
    node = _flower_node.node_for(context(path, 2002))
    group = {"group": "train"}
    blind = FVMessage("psi:blind", "coordinator", "pix", meta={**group, "next": "fou"})
    with pytest.raises(PrivacyError, match="'pix' runs no PSI: .*alignment = 'none'"):
        node.handle(blind.encode())
    dictionary = {"psi_set": hash_ids(np.arange(2000))}
    for _ in range(3):
        reblind = FVMessage("psi:reblind", "coordinator", "pix", arrays=dictionary, meta=group)
        with pytest.raises(ProtocolError, match="'psi:reblind' of group 'train' before psi:blind"):
            node.handle(reblind.encode())
    _flower_node.forget(context(path, 2002))
