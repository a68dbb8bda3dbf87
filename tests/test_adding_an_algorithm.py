"""The toy of docs/adding-an-algorithm.md (docs/examples/fedridge.py), run the three ways.

Nothing in fedviews knows the toy: the estimator imports it from docs/examples, and
``fedviews run`` / ``fedviews launch`` find it through the configs' ``modules`` key
with ``docs/examples`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from _examples import EXAMPLES, example_env, example_module, fedviews
from fedviews.errors import ConfigError, PrivacyError
from fedviews.experiments import load_config
from fedviews.federation import Roster, RunSpec, build_in_process

#: every array name the toy's policy declares
DECLARED = {"Xw", "residual", "prediction"}
#: the deployment's own session arrays (PSI), next to the algorithm's
SESSION = {"psi_set", "psi_sealed", "psi_positions"}


@pytest.fixture(scope="module")
def fedridge():
    """The toy module, imported the way a user's module is: from a folder on the path."""
    with example_module("fedridge") as module:
        yield module


def _allowing(policy, pair, name):
    """``policy`` allowing ``name`` from role to role too."""
    from fedviews.federation import PrivacyPolicy

    return policy.merged(PrivacyPolicy.of("more", {pair: [name]}))


def _views(seed: int = 0, n: int = 80, dims: tuple[int, ...] = (5, 3, 4)):
    rng = np.random.default_rng(seed)
    Xs = [rng.normal(size=(n, d)) for d in dims]
    X = np.hstack(Xs)
    y = X @ rng.normal(size=X.shape[1]) + 0.3 * rng.normal(size=n)
    return Xs, X, y


def test_estimator_equals_closed_form_ridge(fedridge):
    Xs, X, y = _views()
    alpha = 0.7
    model = fedridge.FedRidge(alpha=alpha, max_iter=500).fit(Xs, y)
    w_star = np.linalg.solve(X.T @ X + alpha * np.eye(X.shape[1]), X.T @ y)
    np.testing.assert_allclose(np.concatenate(model.coef_), w_star, rtol=0, atol=1e-8)
    np.testing.assert_allclose(model.predict(Xs), X @ w_star, rtol=0, atol=1e-8)
    assert len(model.objective_) < 500  # stopped by tol, not by max_iter
    assert np.all(np.diff(model.objective_) <= 1e-9 * model.objective_[0])  # non-increasing
    # only the declared arrays crossed, each only where the policy lets it
    log = model.transport_.log
    assert log.crossings() == {
        "coordinator -> party0": ["prediction", "residual"],
        "coordinator -> party1": ["residual"],
        "coordinator -> party2": ["residual"],
        "party0 -> coordinator": ["Xw", "residual"],
        "party1 -> coordinator": ["Xw"],
        "party2 -> coordinator": ["Xw"],
    }
    assert log.arrays_sent() == DECLARED
    # and the policy declares nothing the protocol never sends
    roles = model.transport_.roles
    assert fedridge.POLICY.unused(log.crossings(), roles) == {}
    wider = _allowing(fedridge.POLICY, ("party", "coordinator"), "w")
    assert wider.unused(log.crossings(), roles) == {("party", "coordinator"): ["w"]}


def test_a_forbidden_array_is_stopped_before_it_leaves(fedridge):
    Xs, _, y = _views(n=20)
    names = ("a", "b", "c")
    datas = {
        p: fedridge.PartyData(np.arange(20), X, y if p == "a" else None) for p, X in zip(names, Xs)
    }
    run = RunSpec("fedridge", fedridge.FedRidgeParams(max_iter=3), Roster(names, label_owner="a"))
    fed = build_in_process(run, datas)
    leaky = fed.parties["b"]

    def leak(msg):  # a party that also tries to send its weights
        return leaky.reply(msg, arrays={"Xw": leaky.X @ leaky.w, "w": leaky.w}, meta={"w2": 0.0})

    leaky.on_update = leak
    with pytest.raises(PrivacyError, match=r"forbids 'b' \(party\) from sending \['w'\]"):
        fed()
    assert "w" not in fed.transport.log.arrays_sent()


def test_checkpoint_resume_equals_uninterrupted_run(fedridge):
    Xs, _, y = _views(seed=1, n=40)
    names = ("a", "b", "c")
    datas = {
        p: fedridge.PartyData(np.arange(40), X, y if p == "a" else None) for p, X in zip(names, Xs)
    }

    def run(max_iter: int):
        params = fedridge.FedRidgeParams(alpha=0.5, max_iter=max_iter, tol=0.0)
        return build_in_process(RunSpec("fedridge", params, Roster(names, label_owner="a")), datas)

    full = run(6)
    full()
    first = run(6)
    states: dict[str, dict[str, np.ndarray]] = {}

    def stop_after_3(r: int) -> None:  # what a deployed process writes at a round boundary
        if r == 3:
            states.update({p: dict(first.parties[p].state_dict()) for p in names})
            states["coordinator"] = dict(first.coordinator.state_dict())
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        first(stop_after_3)
    resumed = run(6)
    for p in names:
        resumed.parties[p].load_state(states[p])
    resumed.coordinator.load_state(states["coordinator"])
    resumed()
    assert resumed.coordinator.objective == full.coordinator.objective
    for p in names:
        np.testing.assert_array_equal(resumed.parties[p].w, full.parties[p].w)
    assert resumed.transport.log.rounds == 6 and resumed.transport.log.n_messages == 3 * 4 * 2


def test_modules_key_is_validated():
    base = {"experiment": "fedridge_views"}
    with pytest.raises(ConfigError, match=r"modules must be a list of module names"):
        load_config({**base, "modules": "fedridge_experiment"})
    with pytest.raises(ConfigError, match=r"not an importable module name"):
        load_config({**base, "modules": ["docs/examples/fedridge.py"]})
    with pytest.raises(ConfigError, match=r"no module named 'no_such_fedviews_plugin'.*PYTHONPATH"):
        load_config({**base, "modules": ["no_such_fedviews_plugin"]})
    with pytest.raises(ConfigError, match=r"unknown key 'modulez'; did you mean 'modules'"):
        load_config({**base, "modulez": []})


def test_modules_key_of_deploy_config_is_validated():
    pytest.importorskip("grpc")
    from fedviews.deploy import load_deploy_config

    base = {"algorithm": "mmvfl", "federation": {"parties": ["a", "b"], "label_owner": "a"}}
    assert load_deploy_config({**base, "modules": []}).modules == ()
    with pytest.raises(ConfigError, match=r"modules must be a list"):
        load_deploy_config({**base, "modules": {"x": 1}})
    with pytest.raises(ConfigError, match=r"no module named 'no_such_fedviews_plugin'.*PYTHONPATH"):
        load_deploy_config({**base, "modules": ["no_such_fedviews_plugin"]})
    with pytest.raises(ConfigError, match=r"unknown top-level keys \['module'\]"):
        load_deploy_config({**base, "module": ["fedridge"]})
    with pytest.raises(ConfigError, match=r"cannot be deployed.*modules = \[\.\.\.\]"):
        load_deploy_config({**base, "algorithm": "fedridge_nope"})


def test_fedviews_experiments_lists_what_a_module_registers():
    """`fedviews experiments` read no config and so never listed a user's registrations."""
    r = fedviews("experiments", "--module", "fedridge", "-m", "fedridge_experiment")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fedridge_views" in r.stdout
    specs = next(line for line in r.stdout.splitlines() if line.startswith("algorithms"))
    assert "fedridge" in specs.split(": ")[1].split(", ") and "mmvfl" in specs
    assert "fedridge" not in fedviews("experiments").stdout  # (not imported: not listed)
    bad = fedviews("experiments", "--module", "no_such_fedviews_plugin")
    assert bad.returncode == 2 and "--module: no module named" in bad.stderr


def test_the_estimator_block_of_the_page_runs_as_printed():
    """Its block used X_a, X_b, X_c and y without saying where they came from."""
    page = (EXAMPLES.parent / "adding-an-algorithm.md").read_text(encoding="utf-8")
    block = next(b for b in page.split("```python\n")[1:] if "FedRidge(alpha" in b)
    namespace: dict = {}
    with example_module("fedridge"):  # (the block's own sys.path line is relative)
        exec(block.split("```")[0], namespace)
    assert [w.shape for w in namespace["model"].coef_] == [(76,), (47,), (64,)]
    assert set().union(*namespace["model"].transport_.log.crossings().values()) == DECLARED


def test_fedviews_run_of_the_example_config(tmp_path):
    out = tmp_path / "run"
    config = "docs/examples/fedridge_handwritten.toml"
    r = fedviews("run", config, "params.alphas=[100.0]", "--out", str(out), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FedRidge on handwritten" in r.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    (run,) = metrics["runs"]
    assert run["max_abs_w_gap"] < 1e-6 and run["rounds"] < 2000
    fed_r2, central_r2, _ = (float(v) for v in run["test_r2"])
    assert fed_r2 == pytest.approx(central_r2, abs=1e-4) and fed_r2 > 0.5
    assert json.loads((out / "config.json").read_text())["modules"] == ["fedridge_experiment"]
    crossed = set().union(*json.loads((out / "message_log.json").read_text())["crossings"].values())
    assert crossed == DECLARED
    # without the folder on PYTHONPATH: one clear line, no traceback
    env = {k: v for k, v in example_env().items() if k != "PYTHONPATH"}
    bad = fedviews("run", config, "--out", str(tmp_path / "bad"), env=env)
    assert bad.returncode == 2
    assert "no module named 'fedridge_experiment'" in bad.stderr and "PYTHONPATH" in bad.stderr
    assert "Traceback" not in bad.stderr + bad.stdout


def test_fedviews_launch_equals_in_process(tmp_path, fedridge):
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    pytest.importorskip("rbcl")  # the PSI
    from fedviews.deploy import load_deploy_config, load_party_data

    config = EXAMPLES / "deploy_fedridge.toml"
    overrides = ["data.n_per_class=8", "params.max_iter=6"]
    run = tmp_path / "run"
    r = fedviews("launch", str(config), *overrides, "--out", str(run))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "[coordinator] round 6: objective" in out and "[fou] aligned samples" in out
    assert "wrote no checkpoint" not in out
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok" and len(res["objective"]) == 6
    # the same config in one process, on the same data files (aligned in the clear)
    cfg = load_deploy_config(config, overrides)
    parties = cfg.federation.parties
    fed = build_in_process(cfg, {p: load_party_data(run / "data" / f"{p}.npz") for p in parties})
    fed()
    np.testing.assert_allclose(res["objective"], fed.coordinator.objective, rtol=1e-12)
    for p in parties:
        with np.load(run / p / "result.npz") as z:
            np.testing.assert_allclose(z["w"], fed.parties[p].w, rtol=1e-10, atol=1e-12)
    with np.load(run / "coordinator" / "result.npz") as z:
        np.testing.assert_allclose(z["prediction"], fed.coordinator.Xw.sum(0), atol=1e-10)
    # only the declared arrays (and the PSI's) crossed, and the same exchanges as in-process
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    assert log["crossings"]["fou -> coordinator"] == ["Xw", "psi_sealed", "psi_set", "residual"]
    assert log["crossings"]["zer -> coordinator"] == ["Xw", "psi_sealed", "psi_set"]
    assert log["crossings"]["coordinator -> kar"] == ["psi_positions", "psi_sealed", "residual"]
    assert set().union(*log["crossings"].values()) == DECLARED | SESSION
    deployed = {tuple(e[:3]) + (tuple(e[3]),) for e in log["exchanges"]}
    deployed = {e for e in deployed if not e[2].startswith(("deploy:", "psi:"))}
    assert deployed == set(fed.transport.log.exchanges())


def test_a_round_message_that_never_comes_is_said_at_the_end(tmp_path, fedridge):
    """An algorithm whose parties never answer its ``round_message`` (another kind, or sent
    with no round number) wrote no party checkpoint without a word: a killed run could not
    resume. Each party says so when the run finishes."""
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    pytest.importorskip("rbcl")
    (tmp_path / "fedridge_noround.py").write_text(
        "import fedridge\nfrom fedviews import federation as fv\n\n\n"
        "class NoRound(fedridge.FedRidgeAlgorithm):\n    name = 'fedridge_noround'\n\n"
        "    def round_message(self, role):\n        return 'never_sent'\n\n\n"
        "fv.register_algorithm_spec(NoRound())\n"
    )
    config = (EXAMPLES / "deploy_fedridge.toml").read_text()
    config = config.replace('algorithm = "fedridge"', 'algorithm = "fedridge_noround"')
    config = config.replace('modules = ["fedridge"]', 'modules = ["fedridge_noround"]')
    (tmp_path / "deploy.toml").write_text(config)
    env = example_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    overrides = ["data.n_per_class=8", "params.max_iter=3"]
    r = fedviews(
        "launch", str(tmp_path / "deploy.toml"), *overrides, "--out", str(tmp_path / "r"), env=env
    )
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0, out
    for p in ("fou", "zer", "kar"):
        assert (
            f"[{p}] warning: 3 rounds ran but this party wrote no checkpoint: it answered no "
            "'never_sent' message numbered 1 or more" in out
        ), out
