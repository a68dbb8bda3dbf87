"""fedviews' warm executor for a SuperNode in ``--isolation process`` (``_flower_exec``).

The SuperNode's Runtime API is played here: every message of the ServerApp becomes one
task of its node, run by that node's :class:`WarmExecutor` (``run_task``); the task's
``Context`` arrives, as from a real SuperNode, deserialised from its protobuf, and the
context the executor pushes back is the node's next one. The deployment engine with
real processes is ``test_flower.py::test_deployment_engine_equals_in_process``.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Message  # noqa: E402
from flwr.common.constant import ErrorCode, SubStatus  # noqa: E402
from flwr.common.serde import context_from_proto, context_to_proto  # noqa: E402
from flwr.supercore.fab import Fab  # noqa: E402
from test_flower import (  # noqa: E402
    RUN_ID,
    LoopbackGrid,
    _check_against,
    _node_configs,
    _task_identity,  # noqa: F401 - an autouse fixture
    deployment,  # noqa: F401 - a fixture
    reference,  # noqa: F401 - a fixture
)

from fedviews.deploy import _flower, _flower_exec, _flower_node, load_deploy_config  # noqa: E402
from fedviews.deploy._flower_launch import write_flower_app  # noqa: E402
from fedviews.deploy._flower_wire import pack  # noqa: E402

pytestmark = pytest.mark.skipif(not _flower_exec.AVAILABLE, reason="needs flwr>=1.42")


def _fab(tmp_path: Path, clientapp: str = _flower_exec.CLIENT_APP) -> Fab:
    """The app that ``flwr run`` would submit (``fedviews flower app``'s files), as a FAB."""
    config = Path(__file__).resolve().parents[2] / "configs" / "deploy_mmvfl_flower.toml"
    app = write_flower_app(tmp_path / "app", config)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in app.iterdir():
            text = f.read_text()
            z.writestr(f.name, text.replace(_flower_exec.CLIENT_APP, clientapp))
    return Fab(clientapp, buf.getvalue(), {})


class RuntimeAPI:
    """One SuperNode's Runtime API, for :meth:`WarmExecutor.run_task`: its pending tasks
    (token -> message), its stored context, and what the executor pushed back."""

    def __init__(self, context, fab: Fab) -> None:
        self.context, self.fab = context, fab
        self.tasks: dict[str, Message] = {}
        self.replies: dict[str, Message] = {}
        self.outputs: list[str] = []

    def client(self, token: str = "") -> RuntimeAPI.Client:
        return RuntimeAPI.Client(self, token)

    class Client:
        def __init__(self, api: RuntimeAPI, token: str) -> None:
            self.api, self.token = api, token

        def SendTaskHeartbeat(self, request):  # noqa: N802 - Flower's RPC name
            return type("Res", (), {"success": True})()

        def close(self) -> None:
            pass


def _pull(client):
    api = client.api
    message = api.tasks.pop(client.token)
    context = context_from_proto(context_to_proto(api.context))  # as the SuperNode sends it
    return message, context, None, api.fab


def _push_message(client, reply, context):
    client.api.replies[client.token] = reply


def _push_task_output(client, context, status, details):
    if context is not None:
        client.api.context = context_from_proto(context_to_proto(context))
    client.api.outputs.append(status)


@pytest.fixture
def runtime_api(monkeypatch):
    """The Runtime API calls of ``_flower_exec`` played by :class:`RuntimeAPI`."""
    monkeypatch.setattr(_flower_exec, "pull_task_input", _pull)
    monkeypatch.setattr(_flower_exec, "push_message", _push_message)
    monkeypatch.setattr(_flower_exec, "push_task_output", _push_task_output)


class ExecutorGrid(LoopbackGrid):
    """Every node a SuperNode in ``--isolation process`` with a :class:`WarmExecutor`."""

    def __init__(self, node_configs, run_config, fab: Fab) -> None:
        super().__init__(node_configs, run_config, fresh=False)
        self.apis = {n: RuntimeAPI(c, fab) for n, c in self.contexts.items()}
        self.executors = {n: _flower_exec.WarmExecutor("runtime:0") for n in self.contexts}
        for n, ex in self.executors.items():
            ex._client = self.apis[n].client  # type: ignore[method-assign]
        self.kinds: list[str] = []  # the Flower message type of every task, in order

    def _deliver(self, m: Message) -> None:
        node = m.metadata.dst_node_id
        api = self.apis[node]
        token = m.metadata.message_id
        api.tasks[token] = m
        with self.lock:
            self.kinds.append(m.metadata.message_type)
        self.executors[node].run_task(token)
        reply = api.replies.pop(token)
        reply.metadata.__dict__["_message_id"] = f"reply-{token}"
        with self.lock:
            self.replies[m.metadata.message_id] = reply
            self.delivered += 1


def test_warm_executor_keeps_the_party_live(
    deployment,  # noqa: F811
    reference,  # noqa: F811
    tmp_path,
    runtime_api,
    monkeypatch,
):
    """Every task through one executor per node == in-process, and no party is ever
    rebuilt from Context.state although every task gets its context afresh."""
    path, data = deployment
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run)}
    for key in list(_flower_node._LIVE):
        _flower_node._LIVE.pop(key)
    built, restored = [], []
    init, restore = _flower_node._Node.__init__, _flower_node._Node.restore
    monkeypatch.setattr(
        _flower_node._Node, "__init__", lambda self, s: (built.append(s.party), init(self, s))[1]
    )
    monkeypatch.setattr(
        _flower_node._Node, "restore", lambda self, st: (restored.append(1), restore(self, st))[1]
    )
    grid = ExecutorGrid(_node_configs(data, run), rc, _fab(tmp_path))
    try:
        res = _flower.run_flower_coordinator(load_deploy_config(path), grid, run / "coordinator")
    finally:
        grid.close()
    _check_against(reference, run, res)
    assert sorted(built) == sorted(_node_configs(data, run)[k]["party"] for k in range(3))
    assert restored == []
    for api in grid.apis.values():  # hello, setup, build, 3 rounds, finish: all completed
        assert api.outputs == [SubStatus.COMPLETED] * 7
        assert json.loads(str(api.context.state.config_records["fedviews"]["generation"])) == 6
    assert sum(ex.tasks for ex in grid.executors.values()) == 3 * 7


def test_warm_executor_runs_split_learning(tmp_path, runtime_api, monkeypatch):
    """Split NN with every node a SuperNode in ``--isolation process`` and its executor:
    the label owner's handler waits in its executor's process across the tasks that
    relay its messages (``query.fedviews`` answered "send these", then
    ``query.fedviews_resume``), as on the simulation engine's one actor: == in-process."""
    pytest.importorskip("torch")
    pytest.importorskip("cryptography")
    from test_flower_peers import _federation, _in_process, _results, _same_results

    monkeypatch.setattr(sys, "path", list(sys.path))  # the executor adds the app's folder
    path, data, certs = _federation(tmp_path / "fed", "splitnn")
    ref = _in_process(path, data, tmp_path / "ref")[0]
    run = tmp_path / "run"
    rc = {"deploy-config": str(path), "out-dir": str(run), "certs-dir": str(certs)}
    cfg = load_deploy_config(path)
    nodes = _node_configs(data, run, cfg.federation.parties)
    grid = ExecutorGrid(nodes, rc, _fab(tmp_path))
    try:
        res = _flower.run_flower_coordinator(cfg, grid, run / "coordinator")
    finally:
        grid.close()
    assert res["status"] == "ok", res["status"]
    _same_results(res, ref)
    got, want = (
        _results(run, cfg.federation.parties),
        _results(tmp_path / "ref", cfg.federation.parties),
    )
    for p, arrays in want.items():
        for k, v in arrays.items():
            np.testing.assert_array_equal(got[p][k], v, err_msg=f"{p}: {k}")
    assert "query.fedviews_resume" in grid.kinds  # a handler waited in its executor's process
    for api in grid.apis.values():
        assert set(api.outputs) == {SubStatus.COMPLETED}


def test_warm_executor_serves_only_fedviews(tmp_path, runtime_api, monkeypatch):
    """A run of another Flower app gets an error reply naming the executor; its ClientApp
    never runs here."""
    from flwr.app import Context, RecordDict

    called = []
    monkeypatch.setattr(_flower_exec, "client_app", lambda **kw: called.append(kw))
    api = RuntimeAPI(Context(RUN_ID, 7, {}, RecordDict(), {}), _fab(tmp_path, "other.app:client"))
    ex = _flower_exec.WarmExecutor("runtime:0")
    ex._client = api.client  # type: ignore[method-assign]
    msg = Message(pack(b"x"), dst_node_id=7, message_type="query.fedviews")
    msg.metadata.__dict__["_message_id"] = "m1"
    api.tasks["t"] = msg
    ex.run_task("t")
    reply = api.replies["t"]
    assert reply.has_error() and reply.error.code == ErrorCode.LOAD_CLIENT_APP_EXCEPTION
    assert "other.app:client" in reply.error.reason and "--isolation process" in reply.error.reason
    assert api.outputs == [SubStatus.FAILED] and called == []


def test_executor_command_serves_the_given_runtime_api(tmp_path, monkeypatch):
    """fedviews flower executor --runtime-api ADDR [--root-certificates PEM] serves ADDR."""
    from typer.testing import CliRunner

    from fedviews.cli import app

    served = []
    monkeypatch.setattr(
        _flower_exec.WarmExecutor,
        "serve",
        lambda self: served.append((self.runtime_api, self.certificates)),
    )
    pem = tmp_path / "ca.pem"
    pem.write_bytes(b"CA")
    runner = CliRunner()
    res = runner.invoke(app, ["flower", "executor", "--runtime-api", "127.0.0.1:9094"])
    assert res.exit_code == 0, res.output
    args = ["flower", "executor", "--runtime-api", "h:1", "--root-certificates", str(pem)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert served == [("127.0.0.1:9094", None), ("h:1", b"CA")]
    for args, why in (  # refused in one line, before serving (it retried forever)
        (["--runtime-api", "nonsense"], "expected HOST:PORT"),
        (["--runtime-api", "127.0.0.1:0"], "expected HOST:PORT"),
        (["--runtime-api", "h:1", "--root-certificates", str(tmp_path / "no")], "no such file"),
    ):
        res = runner.invoke(app, ["flower", "executor", *args])
        assert res.exit_code == 2 and why in res.output and "Traceback" not in res.output, (
            res.output
        )
    assert len(served) == 2


def test_a_failed_task_does_not_stop_the_executor(monkeypatch):
    """A task whose Runtime API calls fail is logged; the executor asks for the next one."""
    import threading

    stop = threading.Event()
    tokens = iter(["t1", "t2"])

    class Task:
        def __init__(self) -> None:
            self.token = next(tokens, "")
            if not self.token:
                stop.set()

        def HasField(self, name):  # noqa: N802 - protobuf's name
            return bool(self.token)

    class Client:
        def AcquireTask(self, request):  # noqa: N802 - Flower's RPC name
            return Task()

        def close(self) -> None:
            pass

    ran = []

    def run_task(token):
        ran.append(token)
        raise RuntimeError("the SuperNode went away")

    ex = _flower_exec.WarmExecutor("runtime:0")
    ex._client = lambda token="": Client()  # type: ignore[method-assign]
    ex.run_task = run_task  # type: ignore[method-assign]
    ex.serve(stop)
    assert ran == ["t1", "t2"]


def test_the_executor_finds_the_config_copy_of_the_app_it_serves(tmp_path, monkeypatch):
    """A run config ``deploy-config = "deploy.toml"`` (relative: the app's own copy, as
    ``fedviews flower app`` writes it) resolves in the executor's process as in
    ``flwr-clientapp``'s: the app's files are unpacked where the process imports from."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    fab = _fab(tmp_path / "a")
    _flower_exec._install(fab.content)
    found = _flower_node.run_config_path({"deploy-config": "deploy.toml"}, "deploy-config")
    assert found is not None and found.read_text().startswith("# deploy_mmvfl_flower.toml")
    assert not found.is_relative_to(tmp_path)  # the unpacked copy, not the written app
    evil = io.BytesIO()  # a FAB that ships a module of the name of one this process imports
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("json.py", "raise SystemExit('imported from the FAB')")
        z.writestr("fedviews_flower_app.py", "")
    _flower_exec._install(evil.getvalue())
    assert not any((Path(p) / "json.py").exists() for p in sys.path)
