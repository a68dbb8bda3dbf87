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

import base64
import dataclasses
import io
import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from _protocol import in_process_session  # noqa: E402
from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.proto.node_pb2 import NodeInfo  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402

from fedviews.deploy import (  # noqa: E402
    _flower,
    _flower_node,
    _flower_transport,
    _flower_wire,
    _roles,
    launch_flower,
    load_deploy_config,
    split_dataset,
    write_demo_data,
)
from fedviews.deploy._launch import make_certs  # noqa: E402
from fedviews.deploy._session import DeployCoordinator, session_policy  # noqa: E402
from fedviews.errors import (  # noqa: E402
    ConfigError,
    PartyUnavailable,
    PrivacyError,
    ProtocolError,
    RemoteError,
)
from fedviews.federation import Message as FVMessage  # noqa: E402
from fedviews.federation import PrivacyPolicy, SecureSum  # noqa: E402

#: the real deployment engine: minutes per test on a small machine, so only on request
deployment_engine = pytest.mark.skipif(
    os.environ.get("FEDVIEWS_TEST_FLOWER_DEPLOYMENT") != "1",
    reason="minutes: set FEDVIEWS_TEST_FLOWER_DEPLOYMENT=1 to run the deployment engine",
)
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


def _in_process(path: Path, data: Path, out: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """:func:`in_process_session`'s results and the coordinator's final arrays."""
    coord, res, _ = in_process_session(path, data, out)
    return res, dict(coord.app.coordinator_results(coord.server)[1])


@pytest.fixture(scope="module")
def reference(deployment, tmp_path_factory):
    """The same deployment in one process (InProcessTransport): objective and W per party."""
    path, data = deployment
    out = tmp_path_factory.mktemp("in-process")
    res, _ = _in_process(path, data, out)
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
        # both legs of every exchange, but the replies a party sends after writing its log:
        # to deploy:finish, and (a resumed run's log is every session's) to the round message
        # of the checkpoint it resumed from (the checkpoint, with its log, goes first)
        assert mine["messages"] == log["messages"] // len(PARTIES) - log.get("sessions", 1)


S_CLIENTS = ("left", "right")
SFEDMV = """
algorithm = "sfedmv"
name = "flower_sfedmv_test"
seed = 5
[federation]
parties = ["left", "right"]
label_owners = ["left", "right"]
alignment = "none"
connect_timeout = 60.0
[data]
dataset = "watch"
n_per_class = 4
n_test = 10
[params]
hidden_size = 8
n_rounds = 2
local_epochs = 1
batch_size = 16
fusion_rounds = 3
local_iter = 1
torch_threads = 1
evaluate = true
"""


@pytest.fixture(scope="module", params=["plain", "secagg"])
def sfedmv(request, tmp_path_factory):
    """S-FedMV (2 clients of the smartwatch sequences, 2 GRU rounds per view, 3 fusion
    rounds), plain and with secure aggregation: its config, data folder, run folder in one
    process, results and the coordinator's final arrays."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("sfedmv")
    path = root / "sfedmv.toml"
    secure = '[defense]\nkind = "secagg"\n' if request.param == "secagg" else ""
    path.write_text(SFEDMV + secure)
    write_demo_data(load_deploy_config(path), root / "data")
    res, final = _in_process(path, root / "data", root / "in-process")
    return path, root / "data", root / "in-process", res, final


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _check_sfedmv(sfedmv, run: Path) -> None:
    """S-FedMV through Flower == in one process: losses, fusion objective, every array."""
    _, _, ref, want, final = sfedmv
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok", res["status"]
    assert res["transport"] == "flower" and sorted(res["nodes"]) == sorted(S_CLIENTS)
    assert np.shape(res["round_loss"]) == (2, 2) and len(res["fusion_objective"]) == 3
    for key in ("round_loss", "fusion_objective", "test_accuracy"):
        np.testing.assert_allclose(res[key], want[key], rtol=1e-10)
    for who in ("coordinator", *S_CLIENTS):
        got = _npz(run / who / "result.npz")
        exp = final if who == "coordinator" else _npz(ref / who / "result.npz")
        assert sorted(got) == sorted(exp)
        for k in exp:
            np.testing.assert_allclose(got[k], exp[k], rtol=1e-10, atol=1e-12, err_msg=k)


class LoopbackGrid(Grid):
    """A Flower Grid that plays the SuperLink and one SuperNode per node config, here.

    Each pushed message goes to the real ``client_app`` with its node's ``Context``
    (state kept between messages, one message at a time per node, nodes in
    parallel). ``fresh=True`` drops the node's live party before every message, as
    the deployment engine starts a new ClientApp process for every message. Every
    node's key is registered under the party of its node config (``registered``:
    other names, by node ID; ``""``: registered under no name), as ``flwr supernode
    register --name PARTY`` does with ``flower-superlink --enable-supernode-auth``.
    ``parallel=False`` delivers one message at a time over all nodes: S-FedMV's training
    draws from torch's process-wide generator (a node of a Flower engine is a process
    of its own, a thread here is not). ``kill_at=(kind, round)``: the ServerApp dies
    (KeyboardInterrupt) as it pushes that fedviews message. A node takes the paths its
    node config leaves out from the run config (``run-config-paths``, as ``fedviews flower
    launch`` starts its nodes) unless its node config says otherwise.
    """

    def __init__(
        self,
        node_configs: Iterable[dict],
        run_config: dict,
        *,
        fresh: bool = True,
        registered: dict[int, str] | None = None,
        parallel: bool = True,
        kill_at: tuple[str, int] | None = None,
    ):
        self.run_id = RUN_ID
        self.fresh, self.kill_at = fresh, kill_at
        self.contexts = {
            1000 + k: Context(
                self.run_id,
                1000 + k,
                {_flower_node.RUN_CONFIG_PATHS: True, **nc},
                RecordDict(),
                dict(run_config),
            )
            for k, nc in enumerate(node_configs)
        }
        self.names = {n: str(c.node_config.get("party", "")) for n, c in self.contexts.items()}
        self.names.update(registered or {})
        one = ThreadPoolExecutor(max_workers=1)
        self.workers = {
            n: ThreadPoolExecutor(max_workers=1) if parallel else one for n in self.contexts
        }
        self.replies: dict[str, Message] = {}
        self.lock = threading.Lock()
        self.delivered = 0
        self.wires: list[bytes] = []  # every fedviews message that crossed, both ways
        self.sent: dict[str, Message] = {}  # every message pushed, by its ID
        self.deliveries: list[Future] = []  # a delivery that raised fails the next pull

    def set_run(self, run):  # pragma: no cover - not used by the ServerApp
        raise NotImplementedError

    @property
    def run(self):  # pragma: no cover - not used by the ServerApp
        raise NotImplementedError

    def create_message(self, *args, **kwargs):  # pragma: no cover - not used
        raise NotImplementedError

    def get_node_ids(self):
        return list(self.contexts)

    def get_nodes(self):
        return [NodeInfo(node_id=n, name=self.names[n]) for n in self.contexts]

    def push_messages(self, messages):
        for m in messages:  # the ServerApp killed as it sends this fedviews message
            if m.metadata.message_type == f"query.{_flower_wire.ACTION}":
                sent = FVMessage.peek(_flower_wire.unpack(m.content))
                if (sent.kind, sent.round) == self.kill_at:
                    raise KeyboardInterrupt
        ids = []
        for m in messages:
            mid = uuid.uuid4().hex
            m.metadata.__dict__["_message_id"] = mid
            self.sent[mid] = m
            self.deliveries.append(self.workers[m.metadata.dst_node_id].submit(self._deliver, m))
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
            for content in (m.content, reply.content):
                if "fedviews" in content.array_records:
                    self.wires.append(_flower_wire.unpack(content))
            self.replies[m.metadata.message_id] = reply
            self.delivered += 1

    def pull_messages(self, message_ids):
        # A delivery that raised in its worker thread is not a node's answer (a ClientApp's
        # failure is an error reply): it is this grid's own failure (e.g. installing the
        # FAB), which would otherwise show only as a node that never answered.
        for f in self.deliveries:
            if f.done() and f.exception() is not None:
                raise RuntimeError("a delivery of the test grid failed") from f.exception()
        with self.lock:
            return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):  # pragma: no cover - not used
        raise NotImplementedError

    def close(self):
        for w in self.workers.values():
            w.shutdown(wait=True)


def tagged_by_its_node(grid: LoopbackGrid, reply: Message) -> Message:
    """``reply`` tagged anew by the node it comes from (its key of the hello), as a
    dishonest node tags what it says in its own name."""
    meta = reply.metadata
    records = grid.contexts[meta.src_node_id].state.config_records
    for _ in range(1000):  # (a node of this grid may still be answering its hello)
        if _flower._REPLY_KEY_STATE in records:
            break
        time.sleep(0.01)
    key = records[_flower._REPLY_KEY_STATE]["key"]
    tag = _flower_wire.reply_tag(key, meta.reply_to_message_id, meta.message_type, reply.content)
    reply.content[_flower_wire.AUTH] = ConfigRecord({"mac": tag})
    return reply


def refused(grid: LoopbackGrid, path: Path, out: Path, error: type[Exception]):
    """The ``error`` that stops the ServerApp of ``path`` on ``grid`` (closed after)."""
    try:
        with pytest.raises(error) as caught:
            _flower.run_flower_coordinator(load_deploy_config(path), grid, out)
    finally:
        grid.close()
    return caught


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


def test_loopback_grid_sfedmv_equals_in_process(sfedmv, tmp_path):
    """S-FedMV with a fresh party per message (rebuilt from ``Context.state``, whose
    state holds 0-d arrays: the RNG state as JSON text) == the session in one process."""
    path, data, *_ = sfedmv
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run)}
    grid = LoopbackGrid(_node_configs(data, run, S_CLIENTS), rc, parallel=False)
    try:
        _flower.server_app(grid, Context(0, 0, {}, RecordDict(), rc))
    finally:
        grid.close()
    _check_sfedmv(sfedmv, run)


def test_node_state_keeps_every_shape_and_dtype(sfedmv, reference, tmp_path):
    """A party's state through ``Context.state`` and Flower's serialisation (what the
    deployment engine stores between two ClientApp processes) comes back with every shape
    and dtype: 0-d text (S-FedMV's RNG state as JSON), 0-d integers and flags (MMVFL's
    inner iterations), empty and non-contiguous arrays, and every array of the round
    checkpoints (= ``state_dict``) of an S-FedMV and an MMVFL run. Objects, which Flower
    cannot carry without pickle, and an array that no longer matches its recorded shape
    are refused by name."""
    from flwr.app import Array, ArrayRecord
    from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

    def through_flower(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        state = RecordDict({"algo": _flower_node._arrays(values, "pix")})
        back = recorddict_from_proto(recorddict_to_proto(state)).array_records["algo"]
        return _flower_node._numpy(back, "pix")

    states = {
        "kinds": {
            "rng_numpy": np.array(json.dumps({"state": {"state": 2**100, "inc": 7}})),
            "inner_iterations": np.asarray(12, np.int64),
            "converged": np.asarray(False),
            "t": np.array(3.5, np.float16),
            "empty": np.zeros((0, 3)),
            "transposed": np.arange(6, dtype=np.float32).reshape(2, 3).T,
            "names": np.array(["a", "bb"]),
            "bytes": np.frombuffer(b"\x00\xff", np.uint8),
        }
    }
    # the in-process runs' checkpoints: S-FedMV's, MMVFL's (fixture ``reference``)
    for run in (sfedmv[2], *tmp_path.parent.glob("in-process*")):
        for ckpt in sorted(run.glob("*/checkpoints/round-*.npz")):
            states[str(ckpt)] = _npz(ckpt)
    assert {"sfedmv" in k for k in states if k != "kinds"} == {True, False}  # both runs
    for name, values in states.items():
        back = through_flower(values)
        assert sorted(back) == sorted(values), name
        for k, a in values.items():
            assert (back[k].shape, back[k].dtype) == (a.shape, a.dtype), (name, k)
            np.testing.assert_array_equal(back[k], a, err_msg=f"{name}: {k}")
    assert json.loads(str(through_flower(states["kinds"])["rng_numpy"]))["state"]["inc"] == 7
    with pytest.raises(ProtocolError, match="'pix'.* 'hook' holds Python objects"):
        _flower_node._arrays({"hook": np.array([None, 1], dtype=object)}, "pix")
    bad = Array(np.array(1.5))
    bad.shape = (1,)
    with pytest.raises(ProtocolError, match="corrupt .* 'pix': 'x' is float64\\[\\], recorded"):
        _flower_node._numpy(ArrayRecord({"x": bad}), "pix")


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


def _run_grid(
    config: Path, nodes: list[dict], run: Path, grid_type: type[LoopbackGrid] = LoopbackGrid, **kw
) -> tuple[dict, LoopbackGrid]:
    """The ServerApp's work on a ``grid_type`` of ``nodes`` (coordinator folder ``run/c``): its
    results and the grid (``kw``: the grid's options)."""
    grid = grid_type(nodes, {"deploy-config": str(config), "out-dir": str(run)}, **kw)
    try:
        return _flower.run_flower_coordinator(load_deploy_config(config), grid, run / "c"), grid
    finally:
        grid.close()


def _secrets(grid: LoopbackGrid) -> list[bytes]:
    """Every node's X25519 private key, as it keeps it in its ``Context.state``."""
    keys = []
    for ctx in grid.contexts.values():
        kept = json.loads(str(ctx.state.config_records[_flower_node._STATE]["secagg"]))
        keys.append(bytes.fromhex(kept["secret"]))
    return keys


def test_secure_aggregation_on_flower_equals_the_plain_run(deployment, reference, tmp_path):
    """Secure aggregation with the party alive across messages (the simulation engine) and
    rebuilt from its node state for every message (the deployment engine) gives the plain
    run's result: the rebuilt party keeps its key in ``Context.state``, so the masks still
    cancel. No message carries a private key (in any encoding), and the coordinator gets
    only the masked arrays."""
    path, data = deployment
    secure = _with_secagg(path, tmp_path)
    for fresh in (False, True):
        run = tmp_path / f"run-{fresh}"
        res, grid = _run_grid(secure, _node_configs(data, run), run, fresh=fresh)
        np.testing.assert_allclose(res["objective"], reference[0]["objective"], rtol=1e-6)
        for p in PARTIES:
            with np.load(run / p / "result.npz") as z:
                np.testing.assert_allclose(z["W"], reference[1][p], rtol=1e-6, atol=1e-9)
        keys = _secrets(grid)
        assert len(set(keys)) == len(PARTIES) and all(len(k) == 32 for k in keys)
        sent = b"\0".join(grid.wires)
        for key in keys:
            for form in (key, key.hex().encode(), base64.b64encode(key)):
                assert form not in sent
        log = json.loads((run / "c" / "message_log.json").read_text())
        for p in PARTIES:
            assert log["crossings"][f"{p} -> coordinator"] == [
                "masked_stats_Z_k",
                "masked_zeta_Z_k",
            ]


class KeySwapGrid(LoopbackGrid):
    """A dishonest ServerApp: in the secure-aggregation peers it hands to 'pix', 'fou''s key
    is one of its own (``fou``'s certificate and signature kept)."""

    def push_messages(self, messages):
        messages = list(messages)
        for m in messages:
            if m.metadata.message_type != f"query.{_flower_wire.ACTION}":
                continue
            sent = FVMessage.decode(_flower_wire.unpack(m.content))
            if (sent.kind, sent.receiver) != ("secagg:peers", "pix"):
                continue
            bundles = json.loads(str(sent.meta["bundles"]))
            bundles["fou"]["x25519"] = SecureSum("coordinator").bundle()["x25519"]
            meta = {**sent.meta, "bundles": json.dumps(bundles)}
            wire = dataclasses.replace(sent, meta=meta).encode()
            m.content.array_records["fedviews"] = _flower_wire.pack(wire)["fedviews"]
        return super().push_messages(messages)


def test_secure_aggregation_keys_are_signed_where_the_nodes_have_certificates(
    deployment, reference, tmp_path
):
    """Nodes with their fedviews certificates (``certs=`` in the node config, or the run
    config's ``certs-dir``) sign their secure-aggregation keys and check the peers' against
    the federation CA, as on gRPC with TLS: the run equals the plain one, with live and
    rebuilt parties, and a key that the ServerApp substitutes in a party's name is refused
    by the node it is handed to."""
    path, data = deployment
    secure = _with_secagg(path, tmp_path)
    certs = make_certs(tmp_path / "certs", load_deploy_config(secure))

    def nodes(run: Path) -> list[dict]:
        return [{**nc, "certs": str(certs)} for nc in _node_configs(data, run)]

    for fresh in (False, True):
        run = tmp_path / f"run-{fresh}"
        res, grid = _run_grid(secure, nodes(run), run, fresh=fresh)
        np.testing.assert_allclose(res["objective"], reference[0]["objective"], rtol=1e-6)
        bundles = [
            json.loads(str(m.meta["bundle"]))
            for m in map(FVMessage.decode, grid.wires)
            if m.kind == "secagg:keys:reply"
        ]
        assert len(bundles) == len(PARTIES)
        assert all(sorted(b) == ["cert", "sig", "x25519"] for b in bundles)
        swapped = tmp_path / f"swapped-{fresh}"
        with pytest.raises(RemoteError) as caught:
            _run_grid(secure, nodes(swapped), swapped, KeySwapGrid, fresh=fresh)
        assert caught.value.reported_by == "pix"
        assert str(caught.value) == (
            "'pix' reported PrivacyError: a signature claimed to be 'fou''s does not verify"
        )


def test_a_rebuilt_flower_party_keeps_its_private_draw(deployment, tmp_path, monkeypatch):
    """Randomized response (``label_rr`` without a seed): the label owner draws its
    randomness once and keeps it in ``Context.state``; rebuilt for every message it does
    not draw again (a second draw would randomize the labels anew and spend the budget
    twice), so the run equals the one with a live party."""
    path, data = deployment
    config = tmp_path / "rr.toml"
    config.write_text(path.read_text() + '[defense]\nkind = "label_rr"\nepsilon = 1.0\n')
    draws: list[int] = []

    def randbits(k: int) -> int:  # a new value per draw, the same in both runs
        draws.append(k)
        return 10**30 + len(draws) % 2

    monkeypatch.setattr(_roles.secrets, "randbits", randbits)
    objectives = []
    for fresh in (False, True):
        draws.clear()
        run = tmp_path / f"run-{fresh}"
        res, grid = _run_grid(config, _node_configs(data, run), run, fresh=fresh)
        assert draws == [128]  # the label owner, once
        kept = {
            ctx.node_config["party"]: str(ctx.state.config_records[_flower_node._STATE]["entropy"])
            for ctx in grid.contexts.values()
        }
        assert kept == {"pix": "", "fou": str(10**30 + 1), "zer": ""}
        assert (run / OWNER / "label_rr_entropy.txt").read_text().strip() == kept[OWNER]
        objectives.append(res["objective"])
    np.testing.assert_array_equal(objectives[0], objectives[1])


@pytest.mark.parametrize("engine", ["deployment", "simulation"])
def test_a_killed_flower_run_resumes_to_the_uninterrupted_result(
    deployment, reference, tmp_path, engine
):
    """A Flower run killed after round 2 (every party and the coordinator had checkpointed
    it), resumed as a new Flower run (a fresh party per message) == the uninterrupted run:
    objective history and every W_k. Run config ``resume``: the killed coordinator folder;
    deployment-engine nodes say ``resume=DIR`` in their node config, simulation-engine
    nodes (``partition-id`` only) resume from their party's folder beside it."""
    path, data = deployment
    killed, resumed = tmp_path / "killed", tmp_path / "resumed"

    def nodes(run: Path, resume: bool) -> list[dict]:
        if engine == "simulation":
            return [{"partition-id": k} for k in range(len(PARTIES))]
        ncs = _node_configs(data, run)
        return [{**nc, "resume": str(killed / nc["party"])} for nc in ncs] if resume else ncs

    rc: dict[str, Any] = {"deploy-config": str(path), "out-dir": str(killed), "data-dir": str(data)}
    if engine == "simulation":  # virtual nodes have no registered keys (as flower launch sets)
        rc["node-auth"] = False
    grid = LoopbackGrid(nodes(killed, False), rc, kill_at=("update", 3))
    try:
        with pytest.raises(KeyboardInterrupt):
            _flower.server_app(grid, Context(0, 0, {}, RecordDict(), rc))
    finally:
        grid.close()
    first = json.loads((killed / "coordinator" / "results.json").read_text())
    assert first["status"].startswith("KeyboardInterrupt") and first["n_iter"] == 2
    rc = {**rc, "out-dir": str(resumed), "resume": str(killed / "coordinator")}
    grid = LoopbackGrid(nodes(resumed, True), rc)
    try:
        _flower.server_app(grid, Context(0, 0, {}, RecordDict(), rc))
    finally:
        grid.close()
    res = json.loads((resumed / "coordinator" / "results.json").read_text())
    assert res["resumed_from_round"] == 2
    _check_against(reference, resumed, res)


class SilentGrid(LoopbackGrid):
    """``zer``'s node answers no round message (its ClientApp hangs, its host is gone)."""

    def _deliver(self, m: Message) -> None:
        action = m.metadata.message_type == f"query.{_flower_wire.ACTION}"
        if action and self.names[m.metadata.dst_node_id] == "zer":
            if FVMessage.peek(_flower_wire.unpack(m.content)).kind == "update":
                return
        super()._deliver(m)


def test_a_silent_flower_node_is_unavailable_after_the_request_timeout(deployment, tmp_path):
    """The ServerApp waited FlowerOptions' hour whatever federation.request_timeout said."""
    path, data = deployment
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run)}
    cfg = load_deploy_config(path, ["federation.request_timeout=3"])
    grid = SilentGrid(_node_configs(data, run), rc)
    t0 = time.monotonic()
    try:
        with pytest.raises(PartyUnavailable, match="'zer'") as err:
            _flower.run_flower_coordinator(cfg, grid, run / "coordinator")
    finally:
        grid.close()
    assert err.value.party == "zer" and time.monotonic() - t0 < 60


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


def test_a_node_cannot_claim_another_partys_name(deployment, tmp_path):
    """Issue #34's must-show: a SuperNode whose key is registered as 'zer' presents party
    'pix' (its own node config says so) after the real 'pix' joined: the ServerApp refuses
    it, naming that node, and neither 'pix' nor 'zer' is blamed."""
    path, data = deployment
    nodes = _node_configs(data, tmp_path, ("pix", "fou", "pix"))  # node 1002: the impostor
    grid = LoopbackGrid(nodes, {"deploy-config": str(path)}, registered={1002: "zer"})
    opts = _flower.FlowerOptions(join_timeout=5.0, node_auth=True)
    try:
        with pytest.raises(ProtocolError) as caught:
            _flower.run_flower_coordinator(
                load_deploy_config(path), grid, tmp_path / "coordinator", options=opts
            )
    finally:
        grid.close()
    why = (
        "Flower node 1002 declares party 'pix' but its SuperNode key is registered as 'zer': "
        "refused (a node cannot claim another party's name; 'pix' is not blamed)"
    )
    assert str(caught.value) == why
    assert caught.value.party == "Flower node 1002"
    res = json.loads((tmp_path / "coordinator" / "results.json").read_text())
    assert res["status"] == f"ProtocolError: {why}"
    assert res["nodes"] == {"pix": "1000", "fou": "1001"}  # the honest nodes stayed mapped


def test_node_auth_refuses_a_node_registered_under_no_name(deployment, tmp_path):
    """With node-auth (the app's default) a node whose key has no registered name is refused
    (nothing binds its claim); without it (simulation engine, --insecure) it is mapped."""
    path, data = deployment
    cfg = load_deploy_config(path)
    for node_auth in (True, False):
        grid = LoopbackGrid(
            _node_configs(data, tmp_path), {"deploy-config": str(path)}, registered={1001: ""}
        )
        opts = _flower.FlowerOptions(join_timeout=5.0, node_auth=node_auth)
        transport = _flower_transport.FlowerGridTransport(
            session_policy(cfg), cfg.roles(), grid, options=opts
        )
        try:
            if node_auth:
                with pytest.raises(
                    ConfigError,
                    match="Flower node 1001 declares party 'fou' but its key is "
                    "registered under no name.*--name PARTY",
                ):
                    transport.connect()
            else:
                assert transport.connect() == {"pix": 1000, "fou": 1001, "zer": 1002}
        finally:
            grid.close()


def test_a_party_sends_only_from_a_handler_with_keys():
    """A party's own message (per-batch split learning) leaves a node only sealed, while
    the party answers one (the relay of ``test_flower_peers``); otherwise it is refused."""
    split = PrivacyPolicy.of(
        "split", {("data_owner", "label_owner"): ["activations"], ("party", "coordinator"): ["x"]}
    )
    node = _flower_node.FlowerNodeTransport(
        split, {"b": "label_owner", "coordinator": "coordinator"}
    )
    with pytest.raises(ProtocolError, match="outside a handler or without end-to-end keys"):
        node.request(FVMessage("forward", sender="a", receiver="b"))


def test_a_reply_tag_covers_the_message_and_every_field_of_the_content():
    """The tag of a reply changes with the key, the ID and type of the message it answers
    and every field of its content (array bytes, dtype, shape, serialisation type; record
    names and types; config values and their types), not with its own tag record; it
    survives Flower's protobuf round trip."""
    from flwr.app import Array, ArrayRecord, MetricRecord
    from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

    def content(
        data=b"abcd", dtype="uint8", shape=(4,), stype=_flower_wire.STYPE, extra=None
    ) -> RecordDict:
        arr = Array(dtype=dtype, shape=shape, stype=stype, data=data)
        said = {"x": 1, "b": b"\x00", "l": [1.5, 2.0]} if extra is None else extra
        return RecordDict({"fedviews": ArrayRecord({"message": arr}), "c": ConfigRecord(said)})

    key, tag = bytes(32), _flower_wire.reply_tag
    base = tag(key, "m1", "query.fedviews", content())
    assert tag(key, "m1", "query.fedviews", content()) == base
    variants = {
        "key": tag(b"\x01" * 32, "m1", "query.fedviews", content()),
        "message ID": tag(key, "m2", "query.fedviews", content()),
        "type": tag(key, "m1", "query.fedviews_ping", content()),
        "bytes": tag(key, "m1", "query.fedviews", content(data=b"abce")),
        "dtype": tag(key, "m1", "query.fedviews", content(dtype="int8")),
        "shape": tag(key, "m1", "query.fedviews", content(shape=(2, 2))),
        "stype": tag(key, "m1", "query.fedviews", content(stype="numpy.ndarray")),
        "an int as a bool": tag(
            key, "m1", "query.fedviews", content(extra={"x": True, "b": b"\x00", "l": [1.5, 2.0]})
        ),
        "bytes as text": tag(
            key, "m1", "query.fedviews", content(extra={"x": 1, "b": "00", "l": [1.5, 2.0]})
        ),
        "a list value": tag(
            key, "m1", "query.fedviews", content(extra={"x": 1, "b": b"\x00", "l": [1.5]})
        ),
    }
    moved = content()
    moved["d"] = moved.pop("c")
    variants["a record's name"] = tag(key, "m1", "query.fedviews", moved)
    metric = content()
    metric["c"] = MetricRecord({"x": 1, "l": [1.5, 2.0]})
    variants["a record's type"] = tag(key, "m1", "query.fedviews", metric)
    assert [k for k, v in variants.items() if v == base] == []
    signed = content()
    signed[_flower_wire.AUTH] = ConfigRecord({"mac": base})
    assert tag(key, "m1", "query.fedviews", signed) == base
    carried = recorddict_from_proto(recorddict_to_proto(signed))
    assert tag(key, "m1", "query.fedviews", carried) == base


def test_wire_round_trip_has_no_pickle():
    msg = FVMessage(
        "update", "coordinator", "pix", 2, arrays={"Z": np.arange(6.0).reshape(3, 2)}, meta={"k": 1}
    )
    content = _flower_wire.pack(msg.encode())
    arr = content.array_records["fedviews"]["message"]
    assert arr.stype == _flower_wire.STYPE and arr.dtype == "uint8"
    back = FVMessage.decode(_flower_wire.unpack(content))
    np.testing.assert_array_equal(back.arrays["Z"], msg.arrays["Z"])
    assert (back.kind, back.round, dict(back.meta)) == ("update", 2, {"k": 1})
    with pytest.raises(ProtocolError, match="no fedviews message"):
        _flower_wire.unpack(RecordDict())


def test_pings_are_echoed_and_a_malformed_one_is_reported(deployment, tmp_path):
    """Run config ``ping``/``ping-bytes`` time echo round trips (one node, then all at once);
    a ping without a fedviews payload is answered with the node's report, as every other
    request is, instead of raising in the ClientApp; a count that is no whole number >= 0
    is a ConfigError."""
    path, data = deployment
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run), "ping": "2", "ping-bytes": 100}
    grid = LoopbackGrid(_node_configs(data, run), rc)
    try:
        _flower.server_app(grid, Context(0, 0, {}, RecordDict(), rc))
        ping = Message(RecordDict(), dst_node_id=1000, message_type="query.fedviews_ping", ttl=60.0)
        ping.metadata.__dict__["_message_id"] = "m1"
        reply = _flower.client_app(ping, grid.contexts[1000])
    finally:
        grid.close()
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok" and "objective" not in res
    assert {k: len(v) for k, v in res["ping_seconds"].items()} == {"single": 2, "broadcast": 2}
    with pytest.raises(RemoteError) as caught:
        _flower_wire.node_error("Flower node 1000", "ping", reply)
    assert str(caught.value) == (
        "'Flower node 1000' reported ProtocolError: the Flower message carries no fedviews message"
    )
    for bad in ("x", "-1", -1, 2.5, True):
        why = f"the run config's ping must be a whole number >= 0, not {bad!r}"
        with pytest.raises(ConfigError, match=re.escape(why)):
            _flower.server_app(grid, Context(0, 0, {}, RecordDict(), {**rc, "ping": bad}))


class LyingGrid(LoopbackGrid):
    """A loopback grid whose node ``liar`` answers its first fedviews request of ``kind``
    with ``lie(honest reply's bytes)``: what a dishonest SuperNode can send the ServerApp."""

    def __init__(self, *args, liar: int, kind: str, lie, **kw):
        super().__init__(*args, **kw)
        self.liar, self.kind, self.lie, self.done = liar, kind, lie, False

    def pull_messages(self, message_ids):
        got = super().pull_messages(message_ids)
        for r in got:
            content = r.content if not r.has_error() else RecordDict()
            if self.done or r.metadata.src_node_id != self.liar or "fedviews" not in content:
                continue
            wire = _flower_wire.unpack(content)
            if FVMessage.peek(wire).kind == f"{self.kind}:reply":
                lie = _flower_wire.pack(self.lie(wire))
                content.array_records["fedviews"]["message"] = lie["fedviews"]["message"]
                tagged_by_its_node(self, r)
                self.done = True
        return got


def _claiming(sender: str):
    """A lie: the honest reply, its header claiming that ``sender`` sent it."""
    return lambda wire: dataclasses.replace(FVMessage.decode(wire), sender=sender).encode()


#: what node 1001 ('fou') answers instead of its reply, and what the ServerApp says
LIES = {
    "truncated": (
        lambda wire: wire[:-1],
        "the reply to 'update' from 'fou': truncated message payload",
    ),
    "garbage": (
        lambda wire: b"garbage" * 3,
        "the reply to 'update' from 'fou': not a fedviews message (bad magic)",
    ),
    "claims-zer": (_claiming("zer"), "party 'fou' replied with a misaddressed message"),
    "claims-coordinator": (
        _claiming("coordinator"),
        "party 'fou' replied with a misaddressed message",
    ),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_corrupt_reply_names_the_node_it_came_from(deployment, tmp_path, lie):
    """A reply that cannot be read, or whose header claims another sender, is refused naming
    the party of the node it came from ('fou', node 1001; ``party`` and ``culprit`` in
    results.json), never the honest parties nor the sender its header claims."""
    path, data = deployment
    make, why = LIES[lie]
    rc = {"deploy-config": str(path)}
    grid = LyingGrid(_node_configs(data, tmp_path), rc, liar=1001, kind="update", lie=make)
    caught = refused(grid, path, tmp_path / "c", ProtocolError)
    assert grid.done and not isinstance(caught.value, RemoteError)
    assert caught.value.party == "fou" and str(caught.value) == why
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert res["culprit"] == "fou" and "unavailable_party" not in res


class MisroutedGrid(LoopbackGrid):
    """A loopback grid where the first reply of node ``node`` to a message of type ``kind``
    arrives as ``forge(reply, sent)`` makes it: from another node (a dishonest node answering
    in another's place, or replaying its reply), of another type, or the SuperLink's own
    error reply."""

    def __init__(self, *args, node: int, kind: str, forge, **kw):
        super().__init__(*args, **kw)
        self.node, self.kind, self.forge, self.done = node, kind, forge, False

    def pull_messages(self, message_ids):
        got = super().pull_messages(message_ids)
        for k, r in enumerate(got):
            meta = r.metadata
            if not self.done and meta.src_node_id == self.node and meta.message_type == self.kind:
                got[k] = self.forge(r, self.sent[meta.reply_to_message_id])
                if not got[k].has_error() and got[k].metadata.src_node_id in self.contexts:
                    tagged_by_its_node(self, got[k])  # the node that sent it tags it
                self.done = True
        return got


def _from_node(node: int):
    def forge(reply: Message, sent: Message) -> Message:
        reply.metadata.__dict__["_src_node_id"] = node
        return reply

    return forge


def _of_type(kind: str):
    def forge(reply: Message, sent: Message) -> Message:
        reply.metadata.message_type = kind
        return reply

    return forge


def _superlink_error(reply: Message, sent: Message) -> Message:
    """What the SuperLink answers in the node's place when the node went away."""
    from flwr.server.superlink.linkstate.utils import (
        create_message_error_unavailable_res_message,
    )

    return create_message_error_unavailable_res_message(sent.metadata, "node_unavail")


_ACTION, _HELLO = "query.fedviews", "query.fedviews_hello"
#: node 1001 ('fou')'s first reply of a type, forged; the error, its party, its text
MISROUTED = {
    "from-another-party": (
        _ACTION,
        _from_node(1002),
        ProtocolError,
        "zer",
        "'zer' (Flower node 1002) answered the 'query.fedviews' message sent to 'fou' "
        "(Flower node 1001): refused (a node answers only what was sent to it; 'fou' is not "
        "blamed)",
    ),
    "from-an-unknown-node": (  # no key of its own to tag with: who pushed it is unknown
        _ACTION,
        _from_node(4711),
        ProtocolError,
        None,
        "a reply to the 'query.fedviews' message sent to 'fou' (Flower node 1001) came in "
        "the name of unknown Flower node 4711 without that node's tag: refused, naming no one "
        "(its pusher is unknown; 'fou' is not blamed)",
    ),
    "hello-from-another-node": (
        _HELLO,
        _from_node(1002),
        ProtocolError,
        "Flower node 1002",
        "Flower node 1002 answered the 'query.fedviews_hello' message sent to Flower node "
        "1001: refused (a node answers only what was sent to it; 'Flower node 1001' is not "
        "blamed)",
    ),
    "of-another-type": (
        _ACTION,
        _of_type("query.fedviews_ping"),
        ProtocolError,
        "fou",
        "'fou' (Flower node 1001) answered a 'query.fedviews' message with a "
        "'query.fedviews_ping' one",
    ),
    "the-superlinks-error": (
        _ACTION,
        _superlink_error,
        PartyUnavailable,
        "fou",
        None,  # Flower's own text (its version's)
    ),
}


@pytest.mark.parametrize("case", sorted(MISROUTED))
def test_a_reply_is_taken_only_from_the_node_it_was_sent_to(deployment, tmp_path, case):
    """A reply that names a message of node 1001 ('fou') but comes from another node that
    tagged it (a party's), or that is of another message type, is refused naming the node
    that tagged it (``party``, ``culprit``), never 'fou'; one in the name of a node that
    has no key (the SuperLink never listed it) names no one; the SuperLink's own error reply
    (a node that went away) still says that 'fou' is unavailable."""
    path, data = deployment
    kind, forge, error, who, why = MISROUTED[case]
    rc = {"deploy-config": str(path)}
    grid = MisroutedGrid(_node_configs(data, tmp_path), rc, node=1001, kind=kind, forge=forge)
    caught = refused(grid, path, tmp_path / "c", ProtocolError)
    assert grid.done and type(caught.value) is error
    assert caught.value.party == who
    if why is None:
        assert str(caught.value).startswith("party 'fou' is unavailable: Flower error ")
    else:
        assert str(caught.value) == why
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    if error is PartyUnavailable:
        assert res["unavailable_party"] == who and "culprit" not in res
    elif who is None:
        assert "culprit" not in res and "unavailable_party" not in res
    else:
        assert res["culprit"] == who and "unavailable_party" not in res


class ForgingGrid(LoopbackGrid):
    """A loopback grid where another node answers node 1001's ('fou') first message of type
    ``kind`` in its name, before 'fou' does: the reply bears 'fou''s node ID (the SuperLink
    lets that through from any authenticated node) and what ``forge`` makes of 'fou''s
    honest reply (``replies``: the node's earlier replies, by type)."""

    def __init__(self, *args, kind: str, forge, **kw):
        super().__init__(*args, **kw)
        self.kind, self.forge, self.done = kind, forge, False
        self.earlier: dict[str, list[Message]] = {}

    def pull_messages(self, message_ids):
        got = super().pull_messages(message_ids)
        for k, r in enumerate(got):
            meta = r.metadata
            if meta.src_node_id != 1001:
                continue
            if not self.done and meta.message_type == self.kind:
                self.done = True  # (the forgery may wait for a later message)
                got[k] = self.forge(self, r)
            self.earlier.setdefault(meta.message_type, []).append(r)
        return got


def _a_report_in_its_name(grid: ForgingGrid, reply: Message) -> Message:
    """Another node's error report, as if 'fou' had failed ('zer' tags it with its own key)."""
    reply.content = _flower_wire.error_content(ProtocolError("I refuse to go on", party="fou"))
    reply.metadata.__dict__["_src_node_id"] = 1002
    tagged_by_its_node(grid, reply)
    reply.metadata.__dict__["_src_node_id"] = 1001
    return reply


def _untagged(grid: ForgingGrid, reply: Message) -> Message:
    del reply.content[_flower_wire.AUTH]
    return reply


def _altered(grid: ForgingGrid, reply: Message) -> Message:
    """'fou''s reply and tag, with one byte of its fedviews message changed."""
    arr = reply.content.array_records["fedviews"]["message"]
    data = bytearray(arr.data)
    data[-1] ^= 1
    arr.data = bytes(data)
    return reply


def _an_earlier_reply(grid: ForgingGrid, reply: Message) -> Message:
    """'fou''s own, tagged reply to its previous message of this type, replayed."""
    old = grid.earlier[reply.metadata.message_type][-1]
    reply.content = old.content
    return reply


def _a_flower_error(reply: Message) -> Message:
    """What a SuperNode answers when its ClientApp fails: an error code, no content."""
    from flwr.app import Error
    from flwr.common.constant import ErrorCode

    error = Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="ClientApp failed")
    reply.__dict__.update(_content=None, _error=error)
    return reply


def _a_flower_error_in_its_name(grid: ForgingGrid, reply: Message) -> Message:
    return _a_flower_error(reply)


_NOT_ITS_TAG = (
    "the reply to the 'query.fedviews' message sent to 'fou' (Flower node 1001) carries "
    "a tag that is not its node's for that message"
)
#: how another node answers in 'fou''s name: its type, the forgery, the text's start
FORGED = {
    "a-report-tagged-by-another-node": (_ACTION, _a_report_in_its_name, _NOT_ITS_TAG),
    "a-hello-without-tag": (
        _HELLO,
        _untagged,
        "the reply to the 'query.fedviews_hello' message sent to Flower node 1001 carries "
        "no tag for that message",
    ),
    "an-altered-reply": (_ACTION, _altered, _NOT_ITS_TAG),
    "a-replayed-reply": (
        _ACTION,
        None,  # (set below: the second message's reply is the first's)
        _NOT_ITS_TAG,
    ),
    "a-flower-error-in-its-name": (
        _ACTION,
        _a_flower_error_in_its_name,
        "a Flower error reply (code 2: ClientApp failed) came to the 'query.fedviews' "
        "message sent to 'fou' (Flower node 1001), whose node answers a ping",
    ),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_reply_in_another_nodes_name_is_refused_naming_no_one(deployment, tmp_path, case):
    """Flower's SuperLink takes a reply whose ``src_node_id`` is the message's receiver from
    any authenticated node. A reply in 'fou''s name that does not carry 'fou''s tag for that
    very message (another node's report tagged with its own key, no tag, an altered reply,
    'fou''s own earlier reply replayed), or a Flower error reply (no content to tag) while
    'fou''s node answers a ping, is refused naming no one: neither 'fou', whose name it
    bears, nor a culprit or an unavailable party in results.json; before tags, such a report
    was raised as 'fou''s, and such an error made 'fou' unavailable."""
    path, data = deployment
    kind, forge, why = FORGED[case]
    if forge is None:  # let the first reply through, replay it for the second
        first = {"seen": False}

        def forge(grid: ForgingGrid, reply: Message) -> Message:
            if not first["seen"]:
                first["seen"] = True
                grid.done = False
                return reply
            return _an_earlier_reply(grid, reply)

    rc = {"deploy-config": str(path)}
    grid = ForgingGrid(_node_configs(data, tmp_path), rc, kind=kind, forge=forge)
    caught = refused(grid, path, tmp_path / "c", ProtocolError)
    assert grid.done and type(caught.value) is ProtocolError
    assert caught.value.party is None
    assert str(caught.value).startswith(why + ": refused, naming no one (")
    assert str(caught.value).endswith("is not blamed)")
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert "culprit" not in res and "unavailable_party" not in res


class BrokenNodeGrid(LoopbackGrid):
    """Node 1001 ('fou') answers its first fedviews request with a Flower error; the ping
    that follows gets what ``ping`` makes of its echo (the SuperLink's error for a node that
    went away, or the node's Flower error again)."""

    def __init__(self, *args, ping, **kw):
        super().__init__(*args, **kw)
        self.ping, self.broken = ping, False

    def pull_messages(self, message_ids):
        got = super().pull_messages(message_ids)
        for k, r in enumerate(got):
            meta = r.metadata
            if meta.src_node_id == 1001 and not self.broken and meta.message_type == _ACTION:
                self.broken = True
                _a_flower_error(r)
            elif meta.src_node_id == 1001 and self.broken and meta.message_type == _PING:
                got[k] = self.ping(r, self.sent[meta.reply_to_message_id])
        return got


_PING = "query.fedviews_ping"


def test_a_node_whose_ping_the_superlink_answers_is_unavailable(deployment, tmp_path):
    """A Flower error reply in the name of a node that went away (the SuperLink answers its
    ping: the node is gone) makes its party unavailable, by its name."""
    path, data = deployment
    rc = {"deploy-config": str(path)}
    grid = BrokenNodeGrid(_node_configs(data, tmp_path), rc, ping=_superlink_error)
    caught = refused(grid, path, tmp_path / "c", PartyUnavailable)
    assert caught.value.party == "fou"
    assert str(caught.value) == (
        "party 'fou' is unavailable: Flower error 2 on 'deploy:setup': ClientApp failed"
    )
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert res["unavailable_party"] == "fou" and "culprit" not in res


def test_a_node_that_answers_only_flower_errors_is_not_named(deployment, tmp_path):
    """Flower error replies in a node's name to a request and to the ping after it carry no
    tag: another node may push them all, so the run stops naming no one (the text says that
    the node's ClientApp may fail to start)."""
    path, data = deployment
    rc = {"deploy-config": str(path)}
    grid = BrokenNodeGrid(
        _node_configs(data, tmp_path), rc, ping=lambda r, sent: _a_flower_error(r)
    )
    caught = refused(grid, path, tmp_path / "c", ProtocolError)
    assert type(caught.value) is ProtocolError and caught.value.party is None
    assert str(caught.value).startswith(
        "a Flower error reply (code 2: ClientApp failed) came to the 'query.fedviews' message "
        "sent to 'fou' (Flower node 1001), whose node answers a ping with a Flower error too "
        "(its ClientApp may fail to start): refused, naming no one ("
    )
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert "culprit" not in res and "unavailable_party" not in res


class HelloGrid(LoopbackGrid):
    """Node 1001's answer to the hello becomes what ``edit`` makes of its content."""

    def __init__(self, *args, edit, **kw):
        super().__init__(*args, **kw)
        self.edit = edit

    def pull_messages(self, message_ids):
        got = super().pull_messages(message_ids)
        for r in got:
            if r.metadata.src_node_id == 1001 and "hello" in r.content.config_records:
                self.edit(r.content)
                tagged_by_its_node(self, r)
        return got


def _hello_says(key: str, value: Any):
    def edit(content: RecordDict) -> None:
        content.config_records["hello"][key] = value

    return edit


def _another_seed(content: RecordDict) -> None:
    """The node's run identity with another seed (and the rest its own)."""
    hello = content.config_records["hello"]
    parts = dict(p.split("=") for p in str(hello["run"]).split(";"))
    parts["seed"] = "0" * 12
    hello["run"] = ";".join(f"{k}={v}" for k, v in parts.items())


def _no_party(content: RecordDict) -> None:
    del content.config_records["hello"]["party"]


def _a_report_without_its_text(content: RecordDict) -> None:
    from flwr.app import ConfigRecord

    content.config_records["fedviews-error"] = ConfigRecord({})


#: what node 1001 says in its hello instead; the error, its text
HELLO_LIES = {
    "no-party": (_no_party, ProtocolError, "the hello from 'Flower node 1001': no party name"),
    "a-party-that-is-no-string": (
        _hello_says("party", 7),
        ProtocolError,
        "the hello from 'Flower node 1001': a party name of type int, not str",
    ),
    "a-party-of-no-federation": (
        _hello_says("party", "bob"),
        ConfigError,
        "Flower node 1001 declares party 'bob', which is not one of this federation's parties "
        "['fou', 'pix', 'zer']",
    ),
    "another-config": (
        _hello_says("run", "0" * 16),
        ConfigError,
        "party 'fou' (Flower node 1001) runs another deployment config than the coordinator "
        "(different: its run identity; give every node the config the app runs, with its "
        "overrides (its deploy.toml))",
    ),
    "another-seed": (
        _another_seed,
        ConfigError,
        "party 'fou' (Flower node 1001) runs another deployment config than the coordinator "
        "(different: seed; give every node the config the app runs, with its overrides (its "
        "deploy.toml))",
    ),
    "an-error-report-without-payload": (
        _a_report_without_its_text,
        ProtocolError,
        "'Flower node 1001' answered 'hello' with a malformed error",
    ),
}


@pytest.mark.parametrize("lie", sorted(HELLO_LIES))
def test_a_bad_hello_names_its_node(deployment, tmp_path, lie):
    """A hello without a party name or with one that is no string, that declares a party of
    no federation or another deployment config, or an error report without its text is
    refused naming the node that sent it (``party``, ``culprit``: before its hello is taken
    it is no party), never the party it claims."""
    path, data = deployment
    edit, error, why = HELLO_LIES[lie]
    grid = HelloGrid(_node_configs(data, tmp_path), {"deploy-config": str(path)}, edit=edit)
    caught = refused(grid, path, tmp_path / "c", error)
    assert type(caught.value) is error and not isinstance(caught.value, RemoteError)
    assert caught.value.party == "Flower node 1001" and str(caught.value) == why
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert res["culprit"] == "Flower node 1001"


def _without_this_environment_on_path(monkeypatch) -> None:
    """PATH as in a shell where this environment is not activated (issue #34: the SuperLink
    died with ``FileNotFoundError: 'flower-superexec'``)."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


@pytest.mark.slow
def test_simulation_engine_equals_in_process(deployment, reference, tmp_path, monkeypatch):
    """flower-superlink --simulation (Ray) + flwr run on loopback == in-process; over TLS,
    without this environment on PATH, the config's max_iter overridden (to the reference's
    3) in the app's copy that the ServerApp and every node read."""
    pytest.importorskip("ray")
    path, data = deployment
    fewer = tmp_path / "fewer.toml"
    fewer.write_text(path.read_text().replace("max_iter = 3", "max_iter = 1"))
    _without_this_environment_on_path(monkeypatch)
    run = tmp_path / "run"
    lines: list[str] = []
    res = launch_flower(
        fewer,
        run,
        overrides=["params.max_iter=3", "federation.connect_timeout=240"],  # Ray: slow start
        engine="simulation",
        data_dir=data,
        timeout=300,
        echo=lines.append,
    )
    _check_against(reference, run, res)
    assert any(line.startswith("[coordinator] round 3/3: objective") for line in lines), lines
    assert any("(TLS)" in line for line in lines), lines
    assert "root-certificates" in (run / "flwr-home" / "config.toml").read_text()


def launch_deployment(path: Path, run: Path, data: Path, executor: str) -> dict[str, Any]:
    """:func:`launch_flower` on the deployment engine with ``executor``, patient with
    SuperNodes that join slowly on a busy machine."""
    return launch_flower(
        path,
        run,
        overrides=["federation.connect_timeout=240"],
        engine="deployment",
        data_dir=data,
        timeout=900,
        executor=executor,
    )


@pytest.mark.slow
@deployment_engine
@pytest.mark.parametrize("executor", ["fedviews", "flower"])
def test_deployment_engine_equals_in_process(
    deployment, reference, tmp_path, monkeypatch, executor
):
    """flower-superlink + one flower-supernode per party + flwr run == in-process, over TLS
    with every SuperNode's key registered under its party's name (the ServerApp checks
    each claim against it), without this environment on PATH; with fedviews' warm
    executor (--isolation process) and with Flower's own."""
    path, data = deployment
    _without_this_environment_on_path(monkeypatch)
    run = tmp_path / "run"
    res = launch_deployment(path, run, data, executor)
    _check_against(reference, run, res)
    assert res["executor"] == executor
    assert (run / "logs" / "executor-pix.log").is_file() == (executor == "fedviews")
    link = (run / "logs" / "superlink.log").read_text()
    assert "--insecure" not in link
    for p in PARTIES:
        assert (run / "node-keys" / f"{p}.pub").read_text().startswith("ecdsa-sha2-nistp384 ")
        assert "registered successfully" in (run / "logs" / f"register-{p}.log").read_text()


@pytest.mark.slow
@deployment_engine
def test_deployment_engine_refuses_a_supernode_claiming_another_party(deployment, tmp_path):
    """Real SuperLink (TLS, --enable-supernode-auth), the keys of pix, fou and zer registered
    under their names; pix and fou join honestly, and a SuperNode with zer's key presents
    party 'pix' in its node config. The ServerApp refuses it, naming that node (zer's
    registered node ID); neither honest party is blamed."""
    import subprocess

    from fedviews.deploy import _flower_launch as fl
    from fedviews.deploy._launch import free_port, make_certs

    path, data = deployment
    run = tmp_path / "run"
    logs, home = run / "logs", run / "flwr-home"
    for folder in (logs, home):
        folder.mkdir(parents=True)
    app = fl.write_flower_app(run / "flower-app", path, ["federation.connect_timeout=240"])
    certs = make_certs(run / "certs", load_deploy_config(path))
    ca, port = certs / "ca.crt", free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loop"\n[superlink.loop]\naddress = "127.0.0.1:{port}"\n'
        f'root-certificates = "{ca}"\n'
    )
    env = fl._flower_env(home, 0.05)
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], name: str) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=run, start_new_session=True
            )
        procs.append(proc)
        return proc

    node_ids = {}
    try:
        link = [fl._flwr_bin("flower-superlink"), "--ssl-ca-certfile", str(ca)]
        link += ["--ssl-certfile", str(certs / "coordinator.crt")]
        link += ["--ssl-keyfile", str(certs / "coordinator.key"), "--enable-supernode-auth"]
        link += ["--disable-runtime-dependency-installation", "--host", "127.0.0.1"]
        fl._wait_health(port, start([*link, "--port", str(port)], "superlink"), ca, 120.0)
        keys = {}
        for p in PARTIES:
            keys[p] = fl.write_supernode_key(run / "node-keys", p)
            register = [fl._flwr_bin("flwr"), "supernode", "register", f"{keys[p]}.pub", "loop"]
            assert start([*register, "--name", p], f"register-{p}").wait() == 0
            said = (logs / f"register-{p}.log").read_text()
            found = re.search(r"SuperNode (\d+) registered", said)
            assert found is not None, said
            node_ids[p] = found.group(1)
        for claim, key in (("pix", "pix"), ("fou", "fou"), ("pix", "zer")):
            nc = f"party='{claim}' data='{data / f'{claim}.npz'}' out='{run / key}' "
            nc += f"config='{app / fl.APP_CONFIG}'"
            node = [fl._flwr_bin("flower-supernode"), "--root-certificates", str(ca)]
            node += ["--superlink", f"127.0.0.1:{port}", "--port", str(free_port())]
            node += ["--auth-supernode-private-key", str(keys[key]), "--node-config", nc]
            start(node, f"supernode-{key}")
        submit = [fl._flwr_bin("flwr"), "run", str(app), "loop", "--stream"]
        start([*submit, "-c", f"out-dir='{run}'"], "flwr-run").wait(timeout=600)
    finally:
        fl._stop(procs)
    res = json.loads((run / "coordinator" / "results.json").read_text())
    impostor = f"Flower node {node_ids['zer']}"
    assert res["status"] == (
        f"ProtocolError: {impostor} declares party 'pix' but its SuperNode key is registered "
        "as 'zer': refused (a node cannot claim another party's name; 'pix' is not blamed)"
    )
    assert set(res["nodes"].items()) <= {("pix", node_ids["pix"]), ("fou", node_ids["fou"])}


@pytest.mark.slow
@deployment_engine
def test_deployment_engine_secure_aggregation_equals_the_plain_run(deployment, reference, tmp_path):
    """Secure aggregation on flower-superlink + one flower-supernode per party (a new
    ClientApp process per message, each party's keys kept in its node's Context.state) ==
    the plain run in one process."""
    path, data = deployment
    secure = _with_secagg(path, tmp_path)
    run = tmp_path / "run"
    res = launch_flower(secure, run, engine="deployment", data_dir=data, timeout=900)
    assert res["status"] == "ok", res["status"]
    np.testing.assert_allclose(res["objective"], reference[0]["objective"], rtol=1e-6)
    for p in PARTIES:
        with np.load(run / p / "result.npz") as z:
            np.testing.assert_allclose(z["W"], reference[1][p], rtol=1e-6, atol=1e-9)
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    for p in PARTIES:
        assert log["crossings"][f"{p} -> coordinator"] == ["masked_stats_Z_k", "masked_zeta_Z_k"]


@pytest.mark.slow
def test_simulation_engine_sfedmv_equals_in_process(sfedmv, tmp_path):
    """S-FedMV through flower-superlink --simulation (Ray) + flwr run == in-process."""
    pytest.importorskip("ray")
    path, data, *_ = sfedmv
    launch_flower(path, tmp_path / "run", engine="simulation", data_dir=data, timeout=300)
    _check_sfedmv(sfedmv, tmp_path / "run")


@pytest.mark.slow
@deployment_engine
def test_deployment_engine_sfedmv_equals_in_process(sfedmv, tmp_path):
    """S-FedMV through flower-superlink + one flower-supernode per client == in-process:
    every message a new ClientApp process, the party rebuilt from ``Context.state``."""
    path, data, *_ = sfedmv
    launch_flower(path, tmp_path / "run", engine="deployment", data_dir=data, timeout=900)
    _check_sfedmv(sfedmv, tmp_path / "run")


@pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")  # flwr's FAB builder
def test_flower_app_is_a_flower_app_with_the_config_and_overrides(tmp_path, monkeypatch):
    """``fedviews flower app DIR --config C key=value``: a Flower App that declares fedviews
    as its dependency, ships its module and a copy of the config with the overrides applied
    (found by a path relative to the app), and holds no absolute path; Flower builds it."""
    import importlib.util
    import zipfile

    from flwr.cli.build import build_fab_from_disk
    from typer.testing import CliRunner

    from fedviews import __version__
    from fedviews._tables import tomllib  # tomli before Python 3.11
    from fedviews.cli import app
    from fedviews.deploy._roles import run_identity

    config = Path(__file__).resolve().parents[2] / "configs" / "deploy_mmvfl_flower.toml"
    overrides = ["params.max_iter=2", "seed=11"]
    fa = tmp_path / "fa"
    res = CliRunner().invoke(app, ["flower", "app", str(fa), "--config", str(config), *overrides])
    assert res.exit_code == 0, res.output
    project = tomllib.loads((fa / "pyproject.toml").read_text())
    assert project["project"]["dependencies"] == [f"fedviews=={__version__}"]
    flwr_app = project["tool"]["flwr"]["app"]
    assert flwr_app["components"] == {
        "serverapp": "fedviews_flower_app:server_app",
        "clientapp": "fedviews_flower_app:client_app",
    }
    assert flwr_app["config"]["deploy-config"] == "deploy.toml"
    assert flwr_app["config"]["node-auth"] is True
    for f in fa.iterdir():  # nothing of this machine's layout
        assert str(tmp_path) not in f.read_text() and str(config.parent) not in f.read_text()
    copy = load_deploy_config(fa / "deploy.toml")
    assert run_identity(copy) == run_identity(load_deploy_config(config, overrides))
    assert (copy.params.max_iter, copy.seed) == (2, 11)
    with zipfile.ZipFile(io.BytesIO(build_fab_from_disk(fa))) as fab:
        assert {"deploy.toml", "fedviews_flower_app.py"} <= set(fab.namelist())
    # loaded as Flower loads it, the module's folder is where relative run config lives
    spec = importlib.util.spec_from_file_location(
        "fedviews_flower_app", fa / "fedviews_flower_app.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fedviews_flower_app", module)
    spec.loader.exec_module(module)
    assert module.server_app is _flower.server_app and module.client_app is _flower.client_app
    assert _flower_node.run_config_path({"deploy-config": "deploy.toml"}, "deploy-config") == (
        fa / "deploy.toml"
    )


def test_flower_launch_takes_overrides_and_refuses_bad_ones(tmp_path, monkeypatch):
    """``fedviews flower launch CONFIG key=value``: the overrides of ``fedviews launch``, a
    bad one refused in one line before anything starts; so is an unknown engine."""
    from typer.testing import CliRunner

    from fedviews.cli import app
    from fedviews.deploy import _flower_launch

    config = Path(__file__).resolve().parents[2] / "configs" / "deploy_mmvfl_flower.toml"
    runner = CliRunner()
    seen = {}

    def fake_launch(config, run_dir, **kwargs):
        seen.update(kwargs, config=config, run_dir=run_dir)
        return {"status": "ok", "seconds_per_round": 0.5}

    monkeypatch.setattr(_flower_launch, "launch_flower", fake_launch)
    out = tmp_path / "r"
    ok = runner.invoke(
        app, ["flower", "launch", str(config), "params.max_iter=2", "--out", str(out)]
    )
    assert ok.exit_code == 0, ok.output
    assert seen["overrides"] == ["params.max_iter=2"] and seen["run_dir"] == out
    assert seen["insecure"] is False and seen["engine"] == "deployment"
    for args, why in (
        (["params.max_iter=zero"], "params.max_iter"),
        (["params.nope=1"], "nope"),
        (["--engine", "ray"], "--engine must be"),
        (["--ping", "-1"], "--ping"),  # checked before anything starts
        (["--ping-bytes", "-5"], "--ping-bytes"),
    ):
        bad = runner.invoke(app, ["flower", "launch", str(config), *args, "--out", str(out)])
        assert bad.exit_code == 2 and why in bad.output, bad.output


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


def test_a_node_takes_no_path_from_the_run_config_unless_it_opts_in(deployment, tmp_path):
    """Whoever submits a run writes its run config: a node takes its config, data file, run
    folder, resume folder and certificates from its own node config, and one it leaves out
    from the run config only where it opts in (``run-config-paths``, which ``fedviews flower
    launch`` sets) or is a simulation node; otherwise a run config that names one is a clear
    error naming both keys."""
    path, data = deployment
    theirs = tmp_path / "theirs"
    rc = {
        "deploy-config": str(path),
        "data-dir": str(theirs / "data"),
        "out-dir": str(theirs / "run"),
        "resume": str(theirs / "run" / "coordinator"),
        "certs-dir": str(theirs / "certs"),
    }
    own = {
        "party": "pix",
        "config": str(path),
        "data": str(data / "pix.npz"),
        "out": str(tmp_path / "pix"),
        "certs": str(tmp_path / "certs"),
    }

    def settings(nc: dict, run_config: dict = rc) -> Any:
        return _flower_node.node_settings(Context(RUN_ID, 7, nc, RecordDict(), run_config))

    s = settings(own)
    assert (s.data, s.out_dir, s.resume, s.certs) == (
        data / "pix.npz",
        tmp_path / "pix",
        None,
        tmp_path / "certs",
    )
    keys = {"config": "deploy-config", "data": "data-dir", "out": "out-dir", "certs": "certs-dir"}
    for key, run_key in keys.items():
        nc = {k: v for k, v in own.items() if k != key}
        with pytest.raises(
            ConfigError,
            match=f"no {key}= and it takes no path from the run config \\(its {run_key}=.*"
            f"add {key}='PATH' to its --node-config, or run-config-paths=true",
        ):
            settings(nc)
        for opt_in in (True, "true"):  # a node config value, or its quoted text
            settings({**nc, _flower_node.RUN_CONFIG_PATHS: opt_in})
    with pytest.raises(ConfigError, match="no config= and it takes no path"):  # opted out
        settings({**own, "config": "", "run-config-paths": False})
    opted = settings({"party": "pix", "run-config-paths": True})
    assert (opted.data, opted.out_dir, opted.resume, opted.certs) == (
        theirs / "data" / "pix.npz",
        theirs / "run" / "pix",
        theirs / "run" / "pix",
        theirs / "certs",
    )
    assert settings({"partition-id": 0}) == opted  # a simulation node: the SuperLink host's
    with pytest.raises(ConfigError, match="run-config-paths='yes': give true or false"):
        settings({**own, "run-config-paths": "yes"})
    # a run config without paths: the node's own config's defaults, nothing refused
    bare = settings({k: v for k, v in own.items() if k != "out"}, {})
    assert bare.out_dir == Path(s.cfg.output_dir) / "flower_test-flower" / "pix"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_stopped_launch_leaves_no_process_its_processes_started_elsewhere():
    """The SuperLink starts flwr-serverapp in a session of its own: a `kill` of `fedviews
    flower launch` stopped the SuperLink's process group and the ServerApp ran on."""
    import subprocess

    from fedviews.deploy import _flower_launch

    child = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(120)'], start_new_session=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
    deadline = time.monotonic() + 30
    while not _flower_launch._descendants(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    (grandchild,) = _flower_launch._descendants(proc.pid)
    _flower_launch._stop([proc])
    assert proc.poll() is not None
    assert (
        not Path(f"/proc/{grandchild}").exists()
        or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]
    )
