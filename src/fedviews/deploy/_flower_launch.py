"""The Flower app project that ``flwr run`` submits, and a whole Flower run on this machine.

The app (:func:`write_flower_app`) ships no code: its components are
``fedviews.deploy._flower:server_app`` and ``client_app``, its run config is described
in :mod:`fedviews.deploy._flower`. :func:`launch_flower` runs it over loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from fedviews.deploy._config import load_deploy_config
from fedviews.deploy._data import party_files, write_demo_data
from fedviews.deploy._flower import check_flower_config
from fedviews.deploy._flower_node import SECAGG_NEEDS_A_LIVE_PARTY
from fedviews.deploy._flower_transport import PEERS_NEED_A_LIVE_PARTY
from fedviews.deploy._launch import free_port, make_certs
from fedviews.deploy._roles import Printer
from fedviews.errors import ConfigError, MissingDependency, ProtocolError, require
from fedviews.federation import get_algorithm_spec

require("flwr", "flower")

_PYPROJECT = """\
# A Flower app whose ServerApp and ClientApp are fedviews' deployed session.
# fedviews (with the flower extra) must be installed where the SuperLink and the
# SuperNodes run: this app ships no code of its own.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedviews-flower"
version = "1.0.0"
description = "fedviews deployed session (MMVFL, ...) as a Flower ServerApp and ClientApp"
license = "MIT"
dependencies = []

[tool.flwr.app]
publisher = "fedviews"

[tool.flwr.app.components]
serverapp = "fedviews.deploy._flower:server_app"
clientapp = "fedviews.deploy._flower:client_app"

[tool.flwr.app.config]
deploy-config = {deploy_config}
out-dir = {out_dir}
data-dir = {data_dir}
resume = ""
certs-dir = ""  # per-batch algorithms: the nodes' fedviews certificates (end-to-end keys)
ping = 0        # > 0: only time this many echo round trips (no session)
ping-bytes = 0  # payload of each ping, each way
"""


def write_flower_app(
    directory: str | Path,
    *,
    deploy_config: str | Path = "",
    out_dir: str | Path = "",
    data_dir: str | Path = "",
) -> Path:
    """Write the Flower app project (a ``pyproject.toml``) that ``flwr run`` submits.

    The paths become the run config defaults (make them absolute: the ServerApp and
    ClientApps do not run in this folder); ``flwr run -c`` overrides them.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def toml_str(v: str | Path) -> str:
        return json.dumps(str(Path(v).absolute()) if str(v) else "")

    (d / "pyproject.toml").write_text(
        _PYPROJECT.format(
            deploy_config=toml_str(deploy_config),
            out_dir=toml_str(out_dir),
            data_dir=toml_str(data_dir),
        )
    )
    return d


def _flwr_bin(name: str) -> str:
    """A Flower command of this environment (next to this Python), else from PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        raise MissingDependency(name, "flower")
    return found


def _wait_http(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1.0):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ProtocolError(
                    f"the Flower SuperLink did not start on port {port} (see its log)"
                ) from None
            time.sleep(0.2)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the process groups that :func:`launch_flower` started (SIGTERM, then SIGKILL)."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def launch_flower(
    config: str | Path,
    run_dir: str | Path,
    *,
    engine: str = "deployment",
    data_dir: str | Path | None = None,
    timeout: float = 900.0,
    echo: Printer | None = None,
    superexec_poll: float = 0.05,
    ping: int = 0,
    ping_bytes: int = 0,
) -> dict[str, Any]:
    """Run a deployment config through Flower on this machine and return ``results.json``.

    ``engine="deployment"``: a ``flower-superlink --insecure`` and one
    ``flower-supernode --insecure --node-config "party=... data=... out=..."`` per
    party; ``engine="simulation"``: a ``flower-superlink --simulation`` whose
    simulation engine (Ray, ``flwr[simulation]``) runs one virtual node per party
    (node ``k`` is party ``k``, data from ``data_dir``). Then ``flwr run`` submits the
    app (:func:`write_flower_app`) and streams its log. Everything lives in
    ``run_dir`` (``coordinator/``, one folder per party, ``logs/``, ``flwr-home/``);
    data files come from ``data_dir`` (``<party>.npz``/``.csv``) or are written from
    the config's ``[data]``. The processes are stopped at the end. ``ping``,
    ``ping_bytes``: time echo round trips instead of running the session (run config
    ``ping``, ``ping-bytes``).
    """
    if engine not in ("deployment", "simulation"):
        raise ConfigError(f"engine must be 'deployment' or 'simulation', not {engine!r}")
    config = Path(config).absolute()
    run_dir = Path(run_dir).absolute()
    cfg = load_deploy_config(config)
    check_flower_config(cfg)
    if engine == "deployment" and cfg.defense.kind == "secagg":
        raise ConfigError(SECAGG_NEEDS_A_LIVE_PARTY)
    peers = get_algorithm_spec(cfg.algorithm).peer_to_peer
    if engine == "deployment" and peers:
        raise ConfigError(PEERS_NEED_A_LIVE_PARTY)
    say = echo or print
    run_dir.mkdir(parents=True, exist_ok=True)
    if data_dir is None:
        data_dir = run_dir / "data"
        write_demo_data(cfg, data_dir)
    data_dir = Path(data_dir).absolute()
    files = party_files(cfg.federation.parties, data_dir, ConfigError)
    app_dir = write_flower_app(
        run_dir / "flower-app", deploy_config=config, out_dir=run_dir, data_dir=data_dir
    )
    home, logs = run_dir / "flwr-home", run_dir / "logs"
    for folder in (home, logs):
        folder.mkdir(exist_ok=True)
    port = free_port()
    address = f"127.0.0.1:{port}"
    connection = [
        "[superlink]",
        'default = "fedviews-loopback"',
        "[superlink.fedviews-loopback]",
        f'address = "{address}"',
        "insecure = true",
    ]
    if engine == "simulation":
        n = len(cfg.federation.parties)
        cpus = max(1, min(n, os.cpu_count() or 1))
        connection += [
            f"options.num-supernodes = {n}",
            # per-batch: one Ray actor, whose process keeps every party's waiting handler
            f"options.backend.client-resources.num-cpus = {cpus if peers else 1}",
            f"options.backend.init-args.num-cpus = {cpus}",
        ]
    (home / "config.toml").write_text("\n".join(connection) + "\n")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(superexec_poll),
        "RAY_DISABLE_USAGE_STATS": "1",
        "RAY_DEDUP_LOGS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], name: str = "") -> subprocess.Popen[bytes]:
        """Start ``args``, its output into ``logs/NAME.log`` (no name: a pipe)."""
        with contextlib.ExitStack() as stack:
            out = stack.enter_context((logs / f"{name}.log").open("wb")) if name else None
            proc = subprocess.Popen(
                args,
                stdout=out or subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=run_dir,
                start_new_session=True,  # its own process group: stopped with its children
            )
        procs.append(proc)
        return proc

    link = ["--insecure", "--disable-runtime-dependency-installation", "--host", "127.0.0.1"]
    link += ["--port", str(port)] + (["--simulation"] if engine == "simulation" else [])
    names = "|".join(map(re.escape, [cfg.federation.coordinator, *files]))
    mine = re.compile(rf"\[({names})\] ")
    try:
        superlink = start([_flwr_bin("flower-superlink"), *link], "superlink")
        _wait_http(port, superlink, 60.0)
        if engine == "deployment":
            for p, f in files.items():
                node = {"party": p, "data": str(f), "out": str(run_dir / p)}
                if any("'" in v for v in node.values()):
                    raise ConfigError(f"paths with a quote cannot go into a node config: {node}")
                args = ["--insecure", "--superlink", address, "--port", str(free_port())]
                args += ["--node-config", " ".join(f"{k}='{v}'" for k, v in node.items())]
                start([_flwr_bin("flower-supernode"), *args], f"supernode-{p}")
        say(f"[flower] {engine} engine on {address}; logs in {logs}")
        overrides = [f"ping={int(ping)} ping-bytes={int(ping_bytes)}"] if ping else []
        if peers:  # the nodes' certificates sign their end-to-end keys
            overrides.append(f"certs-dir='{make_certs(run_dir / 'certs', cfg)}'")
        run = start(
            [_flwr_bin("flwr"), "run", str(app_dir), "fedviews-loopback", "--stream"]
            + (["-c", " ".join(overrides)] if overrides else [])
        )
        timer = threading.Timer(timeout, lambda: _stop([run]))
        timer.start()
        try:
            assert run.stdout is not None
            with (logs / "flwr-run.log").open("wb") as out:
                for raw in run.stdout:
                    out.write(raw)
                    line = raw.decode(errors="replace").rstrip()
                    hit = mine.search(line)
                    if hit is not None:
                        say(line[hit.start() :])
            run.wait()
        finally:
            timer.cancel()
    finally:
        _stop(procs)
    results = run_dir / cfg.federation.coordinator / "results.json"
    if not results.is_file():
        tail = (logs / "flwr-run.log").read_text(errors="replace")[-3000:]
        raise ProtocolError(f"the Flower run wrote no {results}; end of its log:\n{tail}")
    result: dict[str, Any] = json.loads(results.read_text())
    return result
