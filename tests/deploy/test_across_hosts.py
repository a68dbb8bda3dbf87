"""docs/deployment.md's "Across organisations, step by step", run as the page writes it on
three hosts (network namespaces of this machine, ``_netns``): the coordinator's organisation
on ``coord.example.org`` (its own address, resolved by every host), organisations A and B
each in a host of its own, reaching the coordinator only through that address. The files
travel as the page says (the CA's certificate and each party's own pair, each party's
data file); the run equals the in-process MMVFL on the same files."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _netns import hosts
from _protocol import doc_section, mmvfl_inputs, mmvfl_reference

from fedviews.deploy import load_deploy_config

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("rbcl")  # the PSI

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deployment.md"
COORDINATOR_HOST = "coord.example.org"


def fedviews(command: list[str]) -> list[str]:
    assert command[0] == "fedviews", command
    return [sys.executable, "-m", "fedviews", *command[1:]]


@pytest.mark.slow
def test_the_across_organisations_recipe_runs_on_three_hosts(tmp_path):
    blocks, prose = doc_section(
        PAGE, "## Across organisations, step by step", "**When a party does not connect.**"
    )
    files, coordinator, *parties = blocks
    orgs = dict(re.findall(r"organisation (\w) \(party `(\w+)`", prose))  # letter -> party
    assert [c[c.index("--party") + 1] for (c,) in parties] == list(orgs.values())
    sent = dict(re.findall(r"# to organisation (\w): (.+)", prose))
    assert set(sent) == set(orgs)
    data_sent = {org: path for path, org in re.findall(r"`(\S+\.npz)` to (\w)\b", prose)}
    [copy_config] = re.findall(r"`(fedviews configs copy \S+)`", prose)
    [split] = re.findall(r"`(fedviews split-data [^`]+)`", prose)

    names = ["coordinator", *orgs]
    folders = {h: tmp_path / h for h in names}
    with hosts(len(names), {COORDINATOR_HOST: 0}) as net:

        def run(host: str, command: list[str]) -> None:
            i = names.index(host)
            folders[host].mkdir(exist_ok=True)
            done = net.run(i, fedviews(command), cwd=folders[host], timeout=300)
            assert done.returncode == 0, (host, command, done.stdout)

        for host in names:  # "every host has fedviews installed and the same config"
            run(host, shlex.split(copy_config))
        for command in files:  # 1. the CA and the certificates, at the coordinator's
            run("coordinator", command)
        run("coordinator", shlex.split(split))  # 2. demo data, written there
        for org in orgs:  # ... and sent: each organisation's three files in certs/
            (folders[org] / "certs").mkdir()
            for f in sent[org].split():
                shutil.copy(folders["coordinator"] / f, folders[org] / "certs")
            shutil.copy(folders["coordinator"] / data_sent[org], folders[org])

        # 3. the coordinator listens on every interface of its host
        [[command]] = [coordinator]
        listen = command[command.index("--listen") + 1]
        address = f"{COORDINATOR_HOST}:{listen.rsplit(':', 1)[1]}"
        out = subprocess.PIPE
        started = [
            net.start(0, fedviews(command), cwd=folders["coordinator"], stdout=out, stderr=out)
        ]
        deadline = time.monotonic() + 60
        while not net.connects(1, address):
            if started[0].poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"host A cannot reach the coordinator at {address}")
            time.sleep(0.2)
        # a party's host reaches it by its address only: nothing listens on its own loopback
        assert not net.connects(1, address.replace(COORDINATOR_HOST, "127.0.0.1"))
        for i, ([command], org) in enumerate(zip(parties, orgs, strict=True), start=1):
            assert command[command.index("--coordinator") + 1] == address
            started.append(
                net.start(i, fedviews(command), cwd=folders[org], stdout=out, stderr=out)
            )
        outs = [p.communicate(timeout=300)[0] for p in started]
        for p, said in zip(started, outs, strict=True):
            assert p.returncode == 0, said

    assert "[coordinator] ok; results in run/coordinator" in outs[0]
    for party, said in zip(orgs.values(), outs[1:], strict=True):
        assert f"[{party}] finished; results in run/{party}" in said
    res = json.loads((folders["coordinator"] / "run" / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok"
    config = folders["coordinator"] / f"{copy_config.split()[-1]}.toml"
    cfg = load_deploy_config(config)
    party_names = list(cfg.federation.parties)
    assert party_names == list(orgs.values())
    owner = party_names.index(cfg.federation.label_owner)
    Xs, y = mmvfl_inputs(folders["coordinator"] / Path(data_sent["A"]).parent, party_names, owner)
    ref = mmvfl_reference(cfg, Xs, y, owner=owner)
    np.testing.assert_allclose(res["objective"], ref.objective_, rtol=1e-12)
    for k, (org, party) in enumerate(orgs.items()):
        with np.load(folders[org] / "run" / party / "result.npz") as z:
            np.testing.assert_allclose(z["W"], ref.W_[k], rtol=1e-10, atol=1e-12)
