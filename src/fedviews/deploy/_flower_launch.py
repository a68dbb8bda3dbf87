"""The Flower App that ``flwr run`` submits, and a whole Flower run on this machine.

The app (:func:`write_flower_app`) is a project folder: ``pyproject.toml`` (fedviews as
its dependency, the components in the app's own module), that module
(:data:`~fedviews.deploy._flower_node.APP_MODULE`: fedviews' ServerApp and ClientApp)
and ``deploy.toml``, a copy of the deployment config with the overrides applied, which
the run config names by a path relative to the app. Its run config is described in
:mod:`fedviews.deploy._flower`. :func:`launch_flower` runs it over loopback: TLS
between the SuperLink and the SuperNodes (certificates of :func:`make_certs`), every
SuperNode's authentication key registered under its party's name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedviews import __version__
from fedviews._tables import dump_toml, merge_tables, parse_overrides, read_toml
from fedviews.deploy._config import load_deploy_config
from fedviews.deploy._data import party_files, write_demo_data
from fedviews.deploy._flower import check_flower_config
from fedviews.deploy._flower_exec import AVAILABLE as WARM_EXECUTOR
from fedviews.deploy._flower_node import APP_MODULE, RUN_CONFIG_PATHS
from fedviews.deploy._flower_transport import PEERS_NEED_A_LIVE_PARTY
from fedviews.deploy._launch import (
    free_port,
    make_certs,
    stop_signals_held,
    terminate_as_interrupt,
)
from fedviews.deploy._roles import Printer
from fedviews.errors import ConfigError, MissingDependency, ProtocolError, require
from fedviews.federation import crypto, get_algorithm_spec

require("flwr", "flower")

#: the app's copy of the deployment config (run config ``deploy-config``)
APP_CONFIG = "deploy.toml"

_PYPROJECT = """\
# A Flower App: fedviews' deployed session as a ServerApp and a ClientApp
# ({module}.py), running the deployment config {config}.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedviews-flower"
version = "1.0.0"
description = "fedviews deployed session ({algorithm}) as a Flower ServerApp and ClientApp"
license = "MIT"
requires-python = ">=3.10"
dependencies = ["fedviews=={version}"]  # flwr: the SuperLink's and SuperNodes' own

[tool.flwr.app]
publisher = "fedviews"

[tool.flwr.app.components]
serverapp = "{module}:server_app"
clientapp = "{module}:client_app"

[tool.flwr.app.config]
deploy-config = "{config}"  # relative: a file of this app
out-dir = ""      # run folder on the SuperLink host (default <output_dir>/<name>-flower)
data-dir = ""     # simulation engine: folder of <party>.npz on that host
node-auth = true  # every SuperNode registered under its party's name
resume = ""
certs-dir = ""    # the nodes' fedviews certificates: sign end-to-end and secagg keys
ping = 0          # > 0: only time this many echo round trips (no session)
ping-bytes = 0    # payload of each ping, each way
"""

_MODULE = '''"""fedviews' deployed session as a Flower ServerApp and ClientApp.

Written by ``fedviews flower app``; ``{config}`` next to this file is the deployment
config they run (run config ``deploy-config``).
"""

from fedviews.deploy._flower import client_app, server_app

__all__ = ["client_app", "server_app"]
'''


def write_flower_app(
    directory: str | Path, config: str | Path, overrides: Sequence[str] = ()
) -> Path:
    """Write the Flower App that ``flwr run DIRECTORY`` submits; return ``DIRECTORY``.

    ``config`` with ``overrides`` (``key=value``, as for ``fedviews launch``) applied is
    checked and copied into the app as :data:`APP_CONFIG`. The app holds no absolute
    path: the run folder (``out-dir``) and, for the simulation engine, the data folder
    (``data-dir``) are run config that ``flwr run -c`` sets.
    """
    config = Path(config)
    check_flower_config(load_deploy_config(config, overrides))
    raw = merge_tables(read_toml(config), parse_overrides(overrides))
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    source = config.name + (f" with {' '.join(overrides)}" if overrides else "")
    (d / APP_CONFIG).write_text(f"# {source} (fedviews flower app)\n{dump_toml(raw)}")
    (d / f"{APP_MODULE}.py").write_text(_MODULE.format(config=APP_CONFIG))
    (d / "pyproject.toml").write_text(
        _PYPROJECT.format(
            algorithm=raw["algorithm"], version=__version__, module=APP_MODULE, config=APP_CONFIG
        )
    )
    return d


def write_supernode_key(directory: str | Path, party: str) -> Path:
    """Write ``DIR/PARTY`` (a SuperNode's P-384 private key, OpenSSH format, owner-only)
    and ``DIR/PARTY.pub`` (its public key, to register); return the private key's path."""
    c = crypto()
    fmt = c.serialization
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    key = c.ec.generate_private_key(c.ec.SECP384R1())
    path = d / party
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(fmt.Encoding.PEM, fmt.PrivateFormat.OpenSSH, fmt.NoEncryption()))
    public = key.public_key().public_bytes(fmt.Encoding.OpenSSH, fmt.PublicFormat.OpenSSH)
    (d / f"{party}.pub").write_bytes(public + b"\n")
    return path


def _flwr_bin(name: str) -> str:
    """A Flower command of this environment (next to this Python), else from PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        raise MissingDependency(name, "flower")
    return found


def _wait_health(port: int, proc: subprocess.Popen[bytes], ca: Path | None, timeout: float) -> None:
    """Wait until the SuperLink answers ``/health`` (over TLS, trusting ``ca``, if given)."""
    url = f"{'https' if ca else 'http'}://127.0.0.1:{port}/health"
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1.0, context=context):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ProtocolError(
                    f"the Flower SuperLink did not start on port {port} (see its log)"
                ) from None
            time.sleep(0.2)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the process groups that :func:`launch_flower` started (SIGTERM, then SIGKILL),
    and every process they started in a group of its own (the SuperLink's ``flwr-serverapp``
    outlived a stopped launch by up to a minute)."""
    spawned = [d for proc in procs for d in _descendants(proc.pid)]
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
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [d for d in spawned if Path(f"/proc/{d}").exists()]
        for d in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(d, sig)
        deadline = time.monotonic() + 5
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [d for d in alive if Path(f"/proc/{d}").exists()]


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux's ``/proc``; none where there is no ``/proc``)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            with contextlib.suppress(OSError):
                kids = [int(c) for c in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found


def _flower_env(home: Path, superexec_poll: float) -> dict[str, str]:
    """The environment of the Flower processes: this environment's commands first on PATH.

    The SuperLink and the SuperNodes start ``flower-superexec`` (and it ``flwr-serverapp``
    / ``flwr-clientapp``) by name, from PATH: without this, a launch from an environment
    that is not on PATH fails (``FileNotFoundError: 'flower-superexec'``).

    ``RAY_ADDRESS=local``: the simulation engine starts a Ray of its own, sized by the run's
    ``init-args-num-cpus``. Without it, ``ray.init()`` joins a Ray cluster that ``ray start``
    started on this machine (or that the user's ``RAY_ADDRESS`` names), and Ray refuses
    ``num_cpus`` when it joins one: the run crashed.
    """
    bins = dict.fromkeys(
        str(Path(_flwr_bin(n)).parent) for n in ("flower-superexec", "flower-superlink")
    )
    path = os.pathsep.join([*bins, os.environ.get("PATH", "")])
    return {
        **os.environ,
        "PATH": path,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(superexec_poll),
        "RAY_ADDRESS": "local",
        "RAY_DISABLE_USAGE_STATS": "1",
        "RAY_DEDUP_LOGS": "0",
        "PYTHONUNBUFFERED": "1",
    }


def launch_flower(
    config: str | Path,
    run_dir: str | Path,
    *,
    overrides: Sequence[str] = (),
    engine: str = "deployment",
    data_dir: str | Path | None = None,
    insecure: bool = False,
    timeout: float = 900.0,
    echo: Printer | None = None,
    superexec_poll: float = 0.05,
    ping: int = 0,
    ping_bytes: int = 0,
    executor: str | None = None,
) -> dict[str, Any]:
    """Run a deployment config through Flower on this machine and return ``results.json``.

    ``engine="deployment"``: a ``flower-superlink`` and one ``flower-supernode
    --node-config "party=... data=... out=... config=..."`` per party;
    ``engine="simulation"``: a ``flower-superlink --simulation`` whose simulation
    engine (Ray, ``flwr[simulation]``) runs one virtual node per party (node ``k`` is
    party ``k``, data from ``data_dir``). Then ``flwr run`` submits the app
    (:func:`write_flower_app`, ``config`` with ``overrides``) and streams its log.

    Unless ``insecure``: the SuperLink serves TLS with a certificate of a fresh
    federation CA (``RUN_DIR/certs``, :func:`make_certs`) that ``flwr`` and the
    SuperNodes verify, and (deployment engine) runs with ``--enable-supernode-auth``:
    each party's SuperNode key (``RUN_DIR/node-keys``) is registered under the party's
    name, so the ServerApp refuses a node that claims another party. ``insecure``:
    plain text, and the node configs say who is who.

    Everything lives in ``run_dir`` (``flower-app/``, ``coordinator/``, one folder per
    party, ``logs/``, ``flwr-home/``); data files come from ``data_dir``
    (``<party>.npz``/``.csv``) or are written from the config's ``[data]``. The
    processes are stopped at the end. ``ping``, ``ping_bytes``: time echo round trips
    instead of running the session (run config ``ping``, ``ping-bytes``).

    ``executor`` (deployment engine): ``"fedviews"`` starts every SuperNode with
    ``--isolation process`` next to a ``fedviews flower executor`` (one long-lived
    ClientApp process per party, :mod:`._flower_exec`), ``"flower"`` leaves the SuperNode
    its own (a new ClientApp process per message); None: fedviews' where this flwr has the
    Runtime API it needs. The result says which (``executor``). Per-batch algorithms
    (split NN, Multi-VFL, APFed) need fedviews' executor on the deployment engine: with
    Flower's they are refused before anything starts.
    """
    if engine not in ("deployment", "simulation"):
        raise ConfigError(f"engine must be 'deployment' or 'simulation', not {engine!r}")
    for option, n in (("ping", ping), ("ping_bytes", ping_bytes)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"{option} must be a whole number >= 0, not {n!r}")
    config = Path(config).absolute()
    run_dir = Path(run_dir).absolute()
    cfg = load_deploy_config(config, overrides)
    check_flower_config(cfg)
    if executor is None:
        executor = "fedviews" if WARM_EXECUTOR else "flower"
    if executor not in ("fedviews", "flower"):
        raise ConfigError(f"executor must be 'fedviews' or 'flower', not {executor!r}")
    warm = engine == "deployment" and executor == "fedviews"
    peers = get_algorithm_spec(cfg.algorithm).peer_to_peer
    if engine == "deployment" and peers and not warm:  # a new ClientApp process per message
        raise ConfigError(PEERS_NEED_A_LIVE_PARTY)
    say = echo or print
    run_dir.mkdir(parents=True, exist_ok=True)
    if data_dir is None:
        data_dir = run_dir / "data"
        write_demo_data(cfg, data_dir, aligned=True)  # no PSI on Flower
    data_dir = Path(data_dir).absolute()
    files = party_files(cfg.federation.parties, data_dir, ConfigError)
    app_dir = write_flower_app(run_dir / "flower-app", config, overrides)
    home, logs = run_dir / "flwr-home", run_dir / "logs"
    for folder in (home, logs):
        folder.mkdir(exist_ok=True)
    port = free_port()
    address = f"127.0.0.1:{port}"
    connection = "fedviews-loopback"
    link = ["--disable-runtime-dependency-installation", "--host", "127.0.0.1"]
    link += ["--port", str(port)] + (["--simulation"] if engine == "simulation" else [])
    ca: Path | None = None
    if insecure:
        link.insert(0, "--insecure")
        security = ["--insecure"]
        trust = "insecure = true"
    else:
        certs = make_certs(run_dir / "certs", cfg)
        ca, me = certs / "ca.crt", certs / cfg.federation.coordinator
        link += ["--ssl-ca-certfile", str(ca), "--ssl-certfile", f"{me}.crt"]
        link += ["--ssl-keyfile", f"{me}.key"]
        security = ["--root-certificates", str(ca)]
        trust = f"root-certificates = {json.dumps(str(ca))}"
    node_auth = engine == "deployment" and not insecure
    if node_auth:
        link.append("--enable-supernode-auth")
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{connection}"\n[superlink.{connection}]\n'
        f'address = "{address}"\n{trust}\n'
    )
    env = _flower_env(home, superexec_poll)
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

    def register(party: str) -> Path:
        """A key for ``party``'s SuperNode, registered with the SuperLink under its name."""
        key = write_supernode_key(run_dir / "node-keys", party)
        done = start(
            [_flwr_bin("flwr"), "supernode", "register", f"{key}.pub", connection]
            + ["--name", party],
            f"register-{party}",
        )
        if done.wait() != 0:
            log = (logs / f"register-{party}.log").read_text(errors="replace")[-2000:]
            raise ProtocolError(f"flwr supernode register failed for {party!r}:\n{log}")
        return key

    run_config = {"out-dir": str(run_dir), "data-dir": str(data_dir)}
    run_config.update({"ping": str(int(ping)), "ping-bytes": str(int(ping_bytes))})
    if not node_auth:
        run_config["node-auth"] = "false"
    if peers or cfg.defense.kind == "secagg":  # the nodes' certificates sign their keys
        certs_dir = run_dir / "certs"
        if not (certs_dir / "ca.crt").is_file():
            make_certs(certs_dir, cfg)
        run_config["certs-dir"] = str(certs_dir)
    names = "|".join(map(re.escape, [cfg.federation.coordinator, *files]))
    mine = re.compile(rf"\[({names})\] ")
    restore = terminate_as_interrupt()  # `kill` stops the Flower processes too, as Ctrl-C does
    try:
        superlink = start([_flwr_bin("flower-superlink"), *link], "superlink")
        _wait_health(port, superlink, ca, 60.0)
        if engine == "deployment":
            for p, f in files.items():
                node = {"party": p, "data": str(f), "out": str(run_dir / p)}
                node["config"] = str(app_dir / APP_CONFIG)
                node[RUN_CONFIG_PATHS] = "true"  # its certs-dir: this launcher submits the run
                if any("'" in v for v in node.values()):
                    raise ConfigError(f"paths with a quote cannot go into a node config: {node}")
                runtime = f"127.0.0.1:{free_port()}"  # its Runtime API (local)
                args = [*security, "--superlink", address, "--port", runtime.split(":")[1]]
                if node_auth:
                    args += ["--auth-supernode-private-key", str(register(p))]
                args += ["--node-config", " ".join(f"{k}='{v}'" for k, v in node.items())]
                args += ["--isolation", "process"] if warm else []
                start([_flwr_bin("flower-supernode"), *args], f"supernode-{p}")
                if warm:
                    executor_args = ["flower", "executor", "--runtime-api", runtime]
                    start([sys.executable, "-m", "fedviews", *executor_args], f"executor-{p}")
        tls = "plain text: --insecure" if insecure else "TLS"
        say(f"[flower] {engine} engine on {address} ({tls}); logs in {logs}")
        submit = [_flwr_bin("flwr"), "run", str(app_dir), connection, "--stream"]
        if any("'" in v for v in run_config.values()):
            raise ConfigError(f"paths with a quote cannot go into a run config: {run_config}")
        submit += [
            "-c",
            " ".join(
                f"{k}='{v}'" if k.endswith("dir") else f"{k}={v}" for k, v in run_config.items()
            ),
        ]
        if engine == "simulation":
            n = len(cfg.federation.parties)
            cpus = max(1, min(n, os.cpu_count() or 1))
            submit += [
                "--federation-config",
                # per-batch: one Ray actor, whose process keeps every party's waiting handler
                f"num-supernodes={n} client-resources-num-cpus={cpus if peers else 1} "
                f"init-args-num-cpus={cpus}",
            ]
        run = start(submit)
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
        restore()
        with stop_signals_held():  # a second `kill` does not leave them running
            _stop(procs)
    results = run_dir / cfg.federation.coordinator / "results.json"
    if not results.is_file():
        tail = (logs / "flwr-run.log").read_text(errors="replace")[-3000:]
        raise ProtocolError(f"the Flower run wrote no {results}; end of its log:\n{tail}")
    result: dict[str, Any] = json.loads(results.read_text())
    result["executor"] = executor if engine == "deployment" else "simulation"
    return result
