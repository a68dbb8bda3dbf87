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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _netns import hosts
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


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FEDVIEWS_TEST_FLOWER_DEPLOYMENT") != "1",
    reason="minutes: set FEDVIEWS_TEST_FLOWER_DEPLOYMENT=1 to run the deployment engine",
)
@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="the recipe's ssh-keygen")
def test_the_flower_recipe_per_organisation_runs_on_separate_hosts(tmp_path):
    [link_steps], link_text = doc_section(PAGE, "### The SuperLink host", "\n### ")
    [node_steps, *_], _ = doc_section(
        PAGE, "### Each SuperNode host (one per party; here `pix`)", "\n## "
    )
    srv = tmp_path / "srv"  # the page's /srv of every host

    def local(arg: str) -> str:
        return arg.replace("/srv/", f"{srv}/")

    # the connection of step 3 (a file the page shows in comments)
    toml = "\n".join(re.findall(r"(?m)^#\s{6}(\S.*)$", link_text))
    address = re.search(r'address = "(.+)"', toml)
    assert address is not None and address.group(1).startswith(f"{LINK_HOST}:")
    config = re.search(r"--config (configs/\S+\.toml)", link_text)
    assert config is not None
    config_file = config.group(1)
    shipped = (Path(__file__).resolve().parents[2] / config_file).read_text()

    names = ["flower", *PARTIES]  # the SuperLink host (/srv/flower), one host per party
    folders = {h: srv / h for h in names}
    for folder in folders.values():
        (folder / "configs").mkdir(parents=True)
        (folder / config_file).write_text(agreed_config(shipped))
        (folder / ".flwr").mkdir()
    envs = {h: _flower_launch._flower_env(folders[h] / ".flwr", 1.0) for h in names}

    with hosts(len(names), {LINK_HOST: 0}) as net:

        def argv(command: list[str]) -> list[str]:
            args = [local(a) for a in command]
            if args[0] == "fedviews":
                return [sys.executable, "-m", "fedviews", *args[1:]]
            return args  # Flower's commands, from the environment's bin first on PATH

        def run(host: str, command: list[str]) -> str:
            i = names.index(host)
            done = net.run(i, argv(command), cwd=folders[host], env=envs[host], timeout=300)
            assert done.returncode == 0, (host, command, done.stdout)
            return done.stdout

        def start(host: str, command: list[str], log: str) -> subprocess.Popen[str]:
            i, out = names.index(host), (tmp_path / f"{log}.log").open("w")
            with out:
                return net.start(
                    i, argv(command), cwd=folders[host], env=envs[host], stdout=out, stderr=out
                )

        link = {c[0] if c[0] != "fedviews" else " ".join(c[:3]): c for c in link_steps}
        # the SuperLink host, steps 1-2: the CA, the SuperLink's certificate, the SuperLink
        run("flower", link["fedviews certs init"])
        run("flower", link["fedviews certs issue"])
        superlink = start("flower", link["flower-superlink"], "superlink")
        port = link["flower-superlink"][link["flower-superlink"].index("--port") + 1]
        deadline = time.monotonic() + 120
        while not net.connects(1, f"{LINK_HOST}:{port}"):
            if superlink.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no SuperLink at {LINK_HOST}:{port}: see superlink.log")
            time.sleep(0.5)
        assert not net.connects(1, f"127.0.0.1:{port}")  # a SuperNode host's own loopback
        (folders["flower"] / ".flwr" / "config.toml").write_text(local(toml) + "\n")
        # each SuperNode host, steps 1-2: its key pair and its data file; ca.crt and
        # <party>.pub travel
        for party in PARTIES:
            for command in node_steps[:-1]:
                run(party, [a.replace("pix", party) for a in command])
            shutil.copy(folders["flower"] / "ca" / "ca.crt", folders[party])
            shutil.copy(folders[party] / f"{party}.pub", folders["flower"])
        # the SuperLink host, steps 4-5: every party's key registered under its name, the app
        registers = [c for c in link_steps if c[:3] == ["flwr", "supernode", "register"]]
        assert registers[0][3:] == ["pix.pub", "fedviews", "--name", "pix"]
        for party in PARTIES:
            said = run("flower", [a.replace("pix", party) for a in registers[0]])
            assert "registered successfully" in said, said
        run("flower", link["fedviews flower app"])
        # each SuperNode host, step 3
        for party in PARTIES:
            start(party, [a.replace("pix", party) for a in node_steps[-1]], f"supernode-{party}")
        # the SuperLink's own SuperExec (it starts the ServerApp) is still up
        assert any("flower-superexec" in c for c in net.commands(0)), (
            "the SuperLink's SuperExec died: see superlink.log"
        )
        # the SuperLink host, step 6: submit the run
        assert link["flwr"][:2] == ["flwr", "run"]
        submit = net.run(
            0,
            argv(link["flwr"]),
            cwd=folders["flower"],
            env=envs["flower"],
            timeout=900,
        )
        (tmp_path / "flwr-run.log").write_text(submit.stdout)

    # every SuperNode reached the SuperLink from its own host's address
    said = (tmp_path / "superlink.log").read_text()
    for i in range(1, len(names)):
        activated = rf'{re.escape(net.address(i))}:\d+ - "POST /v1/fleet/activate-node'
        assert re.search(activated, said), said[-3000:]
    out = Path(local(re.findall(r"out-dir='([^']+)'", " ".join(link["flwr"]))[0]))
    res = json.loads((out / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok", (res["status"], submit.stdout[-3000:])
    assert res["transport"] == "flower" and sorted(res["nodes"]) == sorted(PARTIES)
    # the same deployment in one process, on the same files (those of pix's host)
    ref_out = tmp_path / "in-process"
    agreed = folders["pix"] / config_file
    _, ref, _ = in_process_session(agreed, folders["pix"] / "data", ref_out)
    assert len(res["objective"]) == ROUNDS
    np.testing.assert_allclose(res["objective"], ref["objective"], rtol=1e-10)
    for party in PARTIES:
        run_folder = folders[party] / "run"
        with np.load(run_folder / "result.npz") as z, np.load(ref_out / party / "result.npz") as r:
            np.testing.assert_allclose(z["W"], r["W"], rtol=1e-10, atol=1e-12)
