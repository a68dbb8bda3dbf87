"""docs/flower.md's recipe per organisation, run as the page writes it on separate hosts
(network namespaces of this machine, ``_netns``): the SuperLink host ``link.example.org``
and one host per party's SuperNode, each SuperNode reaching the SuperLink only through
that name's address, over TLS (the federation CA's certificate of the SuperLink, issued
for that name), with SuperNode authentication (each party's key made on its own host,
registered on the SuperLink host under its name). The files travel as the page says
(``ca.crt`` to every SuperNode host, each ``<party>.pub`` to the SuperLink's operator).
The run equals the same deployment in one process.

The deployment engine takes minutes on a small machine: only with
``FEDVIEWS_TEST_FLOWER_DEPLOYMENT=1``, as the loopback ones of ``test_flower.py``.

The page's "Simulation on a multi-node Ray cluster", run as written on two hosts (a Ray
head with the SuperLink, a second Ray node where every ClientApp actor runs): only with
``FEDVIEWS_TEST_RAY_CLUSTER=1``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
from _netns import Hosts, hosts
from _protocol import doc_section

pytest.importorskip("flwr")

from test_flower import in_process_session  # noqa: E402

from fedviews.deploy import _flower_launch  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "flower.md"
LINK_HOST = "link.example.org"
#: the agreed deployment config: the shipped one with three of its parties, two rounds
PARTIES = ("pix", "fou", "zer")
ROUNDS = 2


def agreed_config(shipped: str) -> str:
    """The shipped MMVFL-on-Flower config as the organisations agreed it here: fewer
    parties and rounds (minutes on a 2-core machine), nodes given time to join."""
    agreed = re.sub(r"(?m)^parties = .*$", f"parties = {json.dumps(list(PARTIES))}", shipped)
    agreed = re.sub(r"(?m)^max_iter = \d+$", f"max_iter = {ROUNDS}", agreed)
    agreed = agreed.replace("[federation]\n", "[federation]\nconnect_timeout = 240.0\n", 1)
    assert agreed.count(json.dumps(list(PARTIES))) == 1 and f"max_iter = {ROUNDS}" in agreed
    return agreed


class Site:
    """Hosts of ``net`` by name, each with its folder (its working directory) and the
    environment of an operator who activated fedviews' environment; the page's paths
    (``/srv/``, ``/shared/``) and addresses mapped by ``local``."""

    def __init__(
        self,
        net: Hosts,
        folders: Mapping[str, Path],
        local: Callable[[str], str],
        logs: Path,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.net, self.folders, self.local, self.logs = net, folders, local, logs
        self.names = list(folders)
        self.envs = {
            h: {**_flower_launch._flower_env(f / ".flwr", 1.0), **(extra_env or {})}
            for h, f in folders.items()
        }

    def argv(self, command: list[str]) -> tuple[list[str], dict[str, str]]:
        """The process of a page's command and the variables it sets (``A=b cmd``)."""
        args = [self.local(a) for a in command]
        env: dict[str, str] = {}
        while args and re.match(r"^[A-Z_]+=", args[0]):
            key, value = args.pop(0).split("=", 1)
            env[key] = value
        if args[0] == "fedviews":
            args = [sys.executable, "-m", "fedviews", *args[1:]]
        return args, env  # Flower's and Ray's commands: from the environment's bin on PATH

    def run(self, host: str, command: list[str], timeout: float = 300) -> str:
        """A page's command on ``host``, to its end (exit status 0); its output."""
        args, env = self.argv(command)
        i, folder = self.names.index(host), self.folders[host]
        done = self.net.run(i, args, cwd=folder, env={**self.envs[host], **env}, timeout=timeout)
        assert done.returncode == 0, (host, command, done.stdout)
        return done.stdout

    def start(self, host: str, command: list[str], log: str) -> subprocess.Popen[str]:
        """A page's command started on ``host``, its output in ``LOGS/LOG.log``."""
        args, env = self.argv(command)
        i, folder = self.names.index(host), self.folders[host]
        with (self.logs / f"{log}.log").open("w") as out:
            return self.net.start(
                i, args, cwd=folder, env={**self.envs[host], **env}, stdout=out, stderr=out
            )


def superlink_steps() -> tuple[dict[str, list[str]], list[list[str]], str]:
    """The SuperLink host's commands of the recipe, by their first words (``flwr``: the
    run), all of them, and the block's text."""
    [steps], text = doc_section(PAGE, "### The SuperLink host", "\n### ")
    by_name = {c[0] if c[0] != "fedviews" else " ".join(c[:3]): c for c in steps}
    return by_name, steps, text


def config_of(text: str) -> tuple[str, str]:
    """The config path the recipe names (``configs/...``) and its agreed text."""
    config = re.search(r"--config (configs/\S+\.toml)", text)
    assert config is not None
    shipped = (Path(__file__).resolve().parents[2] / config.group(1)).read_text()
    return config.group(1), agreed_config(shipped)


def wait_for_port(net: Hosts, i: int, address: str, proc: subprocess.Popen[str]) -> None:
    """Until host ``i`` connects to ``address`` (``proc`` serves it and must not die)."""
    deadline = time.monotonic() + 120
    while not net.connects(i, address):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"nothing answers at {address}: see the logs")
        time.sleep(0.5)


def check_equal_in_process(
    res: dict, party_folders: Mapping[str, Path], config: Path, data: Path, out: Path
) -> None:
    """``res`` (the coordinator's results) and every party's ``W`` equal the same
    deployment of ``config`` run in one process on ``data``."""
    assert res["status"] == "ok", res["status"]
    assert res["transport"] == "flower" and sorted(res["nodes"]) == sorted(PARTIES)
    _, ref, _ = in_process_session(config, data, out)
    assert len(res["objective"]) == ROUNDS
    np.testing.assert_allclose(res["objective"], ref["objective"], rtol=1e-10)
    for party, folder in party_folders.items():
        with np.load(folder / "result.npz") as z, np.load(out / party / "result.npz") as r:
            np.testing.assert_allclose(z["W"], r["W"], rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FEDVIEWS_TEST_FLOWER_DEPLOYMENT") != "1",
    reason="minutes: set FEDVIEWS_TEST_FLOWER_DEPLOYMENT=1 to run the deployment engine",
)
@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="the recipe's ssh-keygen")
@pytest.mark.parametrize("executor", ["flower", "fedviews"])
def test_the_flower_recipe_per_organisation_runs_on_separate_hosts(tmp_path, executor):
    """Step 3 of each SuperNode host as the recipe writes it (Flower's executor), or as the
    executor's section writes it instead (``--isolation process`` and ``fedviews flower
    executor``)."""
    link, link_steps, link_text = superlink_steps()
    [node_steps, *_], _ = doc_section(
        PAGE, "### Each SuperNode host (one per party; here `pix`)", "\n## "
    )
    node_steps, step3 = node_steps[:-1], node_steps[-1:]
    if executor == "fedviews":
        [step3, *_], _ = doc_section(
            PAGE, "## One ClientApp process per party (`fedviews flower executor`)", "\n## "
        )
        assert [c[:3] for c in step3] == [
            ["flower-supernode", "--root-certificates", "ca.crt"],
            ["fedviews", "flower", "executor"],
        ]
    srv = tmp_path / "srv"  # the page's /srv of every host
    # the connection of step 3 (a file the page shows in comments)
    toml = "\n".join(re.findall(r"(?m)^#\s{6}(\S.*)$", link_text))
    address = re.search(r'address = "(.+)"', toml)
    assert address is not None and address.group(1).startswith(f"{LINK_HOST}:")
    config_file, agreed = config_of(link_text)
    names = ["flower", *PARTIES]  # the SuperLink host (/srv/flower), one host per party
    folders = {h: srv / h for h in names}
    for folder in folders.values():
        (folder / "configs").mkdir(parents=True)
        (folder / config_file).write_text(agreed)
        (folder / ".flwr").mkdir()

    with hosts(len(names), {LINK_HOST: 0}) as net:
        site = Site(net, folders, lambda a: a.replace("/srv/", f"{srv}/"), tmp_path)
        # the SuperLink host, steps 1-2: the CA, the SuperLink's certificate, the SuperLink
        site.run("flower", link["fedviews certs init"])
        site.run("flower", link["fedviews certs issue"])
        superlink = site.start("flower", link["flower-superlink"], "superlink")
        port = link["flower-superlink"][link["flower-superlink"].index("--port") + 1]
        wait_for_port(net, 1, f"{LINK_HOST}:{port}", superlink)
        assert not net.connects(1, f"127.0.0.1:{port}")  # a SuperNode host's own loopback
        (folders["flower"] / ".flwr" / "config.toml").write_text(site.local(toml) + "\n")
        # each SuperNode host, steps 1-2: its key pair and its data file; ca.crt and
        # <party>.pub travel
        for party in PARTIES:
            for command in node_steps:
                site.run(party, [a.replace("pix", party) for a in command])
            shutil.copy(folders["flower"] / "ca" / "ca.crt", folders[party])
            shutil.copy(folders[party] / f"{party}.pub", folders["flower"])
        # the SuperLink host, steps 4-5: every party's key registered under its name, the app
        registers = [c for c in link_steps if c[:3] == ["flwr", "supernode", "register"]]
        assert registers[0][3:] == ["pix.pub", "fedviews", "--name", "pix"]
        for party in PARTIES:
            said = site.run("flower", [a.replace("pix", party) for a in registers[0]])
            assert "registered successfully" in said, said
        site.run("flower", link["fedviews flower app"])
        # each SuperNode host, step 3
        for party in PARTIES:
            for command in step3:
                command = [a.replace("pix", party) for a in command]
                site.start(party, command, f"{command[0]}-{party}")
        # the SuperLink's own SuperExec (it starts the ServerApp) is still up
        assert any("flower-superexec" in c for c in net.commands(0)), (
            "the SuperLink's SuperExec died: see superlink.log"
        )
        # the SuperLink host, step 6: submit the run
        assert link["flwr"][:2] == ["flwr", "run"]
        (tmp_path / "flwr-run.log").write_text(site.run("flower", link["flwr"], timeout=900))

    # every SuperNode reached the SuperLink from its own host's address
    said = (tmp_path / "superlink.log").read_text()
    for i in range(1, len(names)):
        activated = rf'{re.escape(Hosts.address(i))}:\d+ - "POST /v1/fleet/activate-node'
        assert re.search(activated, said), said[-3000:]
    out = Path(site.local(re.findall(r"out-dir='([^']+)'", " ".join(link["flwr"]))[0]))
    res = json.loads((out / "coordinator" / "results.json").read_text())
    for party in PARTIES:  # the party lived in fedviews' executor, where one was started
        log = tmp_path / f"fedviews-{party}.log"
        assert log.is_file() == (executor == "fedviews")
        assert executor == "flower" or f"[{party}] round {ROUNDS}" in log.read_text()
    parties = {p: folders[p] / "run" for p in PARTIES}
    # the same deployment in one process, on the same files (those of pix's host)
    pix = folders["pix"]
    check_equal_in_process(res, parties, pix / config_file, pix / "data", tmp_path / "ref")


CLUSTER_NODES = """import json, ray
ray.init()
print(json.dumps(sorted(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"])))"""


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FEDVIEWS_TEST_RAY_CLUSTER") != "1",
    reason="a Ray cluster of two nodes: set FEDVIEWS_TEST_RAY_CLUSTER=1",
)
def test_the_simulation_engine_on_a_two_node_ray_cluster(tmp_path):
    pytest.importorskip("ray")
    [steps, *_], _ = doc_section(PAGE, "## Simulation on a multi-node Ray cluster", "\n## ")
    head, joins, superlink_command, submit = steps
    link, _, link_text = superlink_steps()
    config_file, agreed = config_of(link_text)
    shared = tmp_path / "shared"  # one folder that both hosts see: the page's /shared
    ray_tmp = Path(tempfile.mkdtemp(prefix="fvray", dir="/tmp"))  # Ray's sockets: short paths
    folders = {"flower": tmp_path / "flower", "ray2": tmp_path / "ray2"}
    for folder in folders.values():
        (folder / "configs").mkdir(parents=True)
        (folder / ".flwr").mkdir()
    (folders["flower"] / config_file).write_text(agreed)

    def local(arg: str) -> str:
        arg = arg.replace("/shared/", f"{shared}/")
        return arg.replace("10.0.0.1", Hosts.address(0)).replace("10.0.0.2", Hosts.address(1))

    try:
        with hosts(2) as net:
            site = Site(net, folders, local, tmp_path, {"RAY_TMPDIR": str(ray_tmp)})
            # steps 1-2, the head declaring no CPU: every actor has to run on the second node
            site.start("flower", [*head, "--num-cpus", "0", "--block"], "ray-head")
            site.start("ray2", [*joins, "--num-cpus", "1", "--block"], "ray-node")
            check = [sys.executable, "-c", CLUSTER_NODES]
            env = {**site.envs["flower"], "RAY_ADDRESS": f"{Hosts.address(0)}:6379"}
            deadline = time.monotonic() + 180
            while net.run(0, check, env=env).stdout.strip().endswith("[0, 1.0]") is False:
                assert time.monotonic() < deadline, "the second Ray node did not join"
                time.sleep(2)
            # the SuperLink's certificate, the app and the data, as in the recipe
            site.run("flower", link["fedviews certs init"])
            site.run("flower", link["fedviews certs issue"])
            site.run("flower", link["fedviews flower app"])
            split = ["fedviews", "split-data", "handwritten", "/shared/data/"]
            site.run("flower", [*split, "--config", config_file])
            # step 3, and the connection of the one-machine simulation engine above
            superlink = site.start("flower", superlink_command, "superlink")
            port = superlink_command[superlink_command.index("--port") + 1]
            wait_for_port(net, 0, f"127.0.0.1:{port}", superlink)
            (folders["flower"] / ".flwr" / "config.toml").write_text(
                '[superlink]\ndefault = "fedviews-sim"\n[superlink.fedviews-sim]\n'
                f'address = "127.0.0.1:{port}"\n'
                f'root-certificates = "{folders["flower"] / "ca" / "ca.crt"}"\n'
            )
            # step 4, every virtual node a party of the agreed config
            n = f"num-supernodes={len(PARTIES)}"
            command = [re.sub(r"num-supernodes=\d+", n, a) for a in submit]
            args, _ = site.argv(command)
            run = net.start(
                0, args, cwd=folders["flower"], env=site.envs["flower"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            actors: set[int] = set()
            deadline = time.monotonic() + 600
            while run.poll() is None and time.monotonic() < deadline:
                for i in (0, 1):
                    if any("ClientAppActor" in c for c in net.commands(i)):
                        actors.add(i)
                time.sleep(1)
            said = run.communicate(timeout=60)[0]
            (tmp_path / "flwr-run.log").write_text(said)
            # fedviews flower launch on the head's host starts a Ray of its own instead
            # of joining the cluster (whose head it would find), which refuses its num_cpus
            config = folders["flower"] / config_file
            launch = ["fedviews", "flower", "launch", str(config), "--out", str(tmp_path / "l")]
            site.run("flower", [*launch, "--engine", "simulation"], timeout=600)
            launched = json.loads((tmp_path / "l" / "coordinator" / "results.json").read_text())
            assert launched["status"] == "ok", launched["status"]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert actors == {1}, said[-3000:]  # the ClientApps ran on the second host only
    assert "(ClientAppActor pid=" in said and f", ip={Hosts.address(1)})" in said  # Ray's view
    out = Path(local(re.findall(r"out-dir='([^']+)'", " ".join(submit))[0]))
    res = json.loads((out / "coordinator" / "results.json").read_text())
    parties = {p: out / p for p in PARTIES}
    cfg = folders["flower"] / config_file
    check_equal_in_process(res, parties, cfg, shared / "data", tmp_path / "ref")
