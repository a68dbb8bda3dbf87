"""One set-up path: a deployment's session sets a run up exactly as ``build_in_process``.

The deployment's two roles (:class:`DeployCoordinator`, :class:`DeployParty`) run here in
one process over an :class:`InProcessTransport`, with the PSI, from the files a launch
deals; the same files go to ``build_in_process``. Both take the steps of
:class:`fedviews.federation.MemberSetup` and :func:`fedviews.federation.agree_setup`:
the setup, the privacy policy and the privacy ledger (who counts as a label holder, in
which order) must be the same, and so must every party built from them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rbcl")  # the PSI
pytest.importorskip("dp_accounting")  # the ledgers

from fedviews._tables import tomllib  # noqa: E402
from fedviews.deploy import load_deploy_config, load_party_data, write_demo_data  # noqa: E402
from fedviews.deploy._roles import (  # noqa: E402
    DeployCoordinator,
    DeployParty,
    run_policy,
    session_policy,
)
from fedviews.federation import InProcessTransport, build_in_process  # noqa: E402

#: a linear and a deep algorithm, each with a defense that keeps a ledger (the configs of
#: the crossings tests, tests/deploy/test_deploy.py and test_deploy_multivfl.py, made small)
CONFIGS = {
    "mmvfl": """
algorithm = "mmvfl"
name = "setup_path_mmvfl"
seed = 3
[federation]
parties = ["pix", "fou", "zer"]
label_owner = "fou"
[data]
dataset = "handwritten"
n_per_class = 8
overlap = 0.9
[params]
standardize = true
beta = 0.5
max_iter = 2
inner_max_iter = 5
[defense]
kind = "label_rr"
epsilon = 2.0
seed = 11
""",
    # the label owners listed in another order than the parties: the first one holds the
    # test labels, and the ledger lists the holders as the roster does, parties first
    "multivfl": """
algorithm = "multivfl"
name = "setup_path_multivfl"
seed = 2
[federation]
parties = ["top", "middle", "bottom", "bank", "clinic"]
label_owners = ["clinic", "bank"]
[data]
dataset = "mnist"
n_per_class = 12
n_test = 20
scenario = "1niid"
samples_per_owner = 20
overlap = 0.95
[params]
rounds = 1
batch_size = 16
channels = 4
top_channels = 4
hidden = 8
device = "cpu"
[defense]
kind = "grad_dp"
clip = 1.0
noise_multiplier = 1.0
seed = 5
""",
}


def _deploy_in_one_process(cfg: object, files: dict[str, Path], out: Path) -> tuple:
    """The deployment's coordinator and parties, wired to one in-process transport, run."""
    transport = InProcessTransport(session_policy(cfg))  # type: ignore[arg-type]
    coord = DeployCoordinator(cfg, lambda line: None, out / "coordinator")  # type: ignore[arg-type]
    transport.register(coord)
    parties = {
        p: DeployParty(cfg, p, load_party_data(path), out / p, lambda line: None)  # type: ignore[arg-type]
        for p, path in files.items()
    }
    for party in parties.values():
        transport.register(party)
    return coord.run(), coord, parties, transport


@pytest.mark.parametrize("algorithm", sorted(CONFIGS))
def test_a_deployment_sets_up_as_in_process(algorithm: str, tmp_path: Path) -> None:
    cfg = load_deploy_config(tomllib.loads(CONFIGS[algorithm]))
    files = write_demo_data(cfg, tmp_path / "data")
    res, coord, parties, transport = _deploy_in_one_process(cfg, files, tmp_path / "run")
    fed = build_in_process(cfg, {p: load_party_data(path) for p, path in files.items()})

    assert coord.setup == fed.setup
    assert transport.policy == run_policy(cfg, fed.transport.policy)
    holders = [p for p in cfg.federation.parties if p in cfg.federation.owners()]
    assert list(fed.privacy["parties"]) == holders
    assert list(res["privacy"]["parties"]) == holders  # the same holders, in the same order
    assert res["privacy"] == fed.privacy
    for p, party in parties.items():  # what each party built its part from: the same rows
        mine = fed.locals[p]
        assert party.local is not None and party.local.rows.keys() == mine.rows.keys()
        for g, rows in mine.rows.items():
            np.testing.assert_array_equal(party.local.rows[g], rows)
    fed()  # and what it built: the same parts (randomized labels, noise draws), trained alike
    for p, party in parties.items():
        theirs, mine = party.algo.state_dict(), fed.parties[p].state_dict()
        assert theirs.keys() == mine.keys()
        for key, value in mine.items():
            np.testing.assert_allclose(theirs[key], value, rtol=1e-6, atol=1e-9, err_msg=key)
