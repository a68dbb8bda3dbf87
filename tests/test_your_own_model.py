"""Your own networks (docs/your-own-model.md, docs/examples/my_models.py), run the three ways.

A table (the Handwritten views as data owners, a user MLP bottom and top) and images (MNIST
strips, a user CNN bottom): as the :class:`~fedviews.deep.multivfl.MultiVFL` estimator, as
``fedviews run`` of an experiment config and deployed with ``fedviews launch``, which equals
the same run in one process (models, footprint, policy). The factories are found by import
path with ``docs/examples`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _examples import EXAMPLES, example_env, example_module, fedviews  # noqa: E402
from fedviews.data import load  # noqa: E402
from fedviews.deep.multivfl import MultiVFL  # noqa: E402
from fedviews.errors import ConfigError  # noqa: E402
from fedviews.federation import build_in_process, get_algorithm_spec  # noqa: E402


@pytest.fixture(scope="module")
def my_models() -> Any:
    """The example module, imported the way a user's module is: from a folder on the path."""
    with example_module("my_models") as module:
        yield module


def _fedviews(*args: str, env: dict[str, str] | None = None) -> Any:
    return fedviews(*args, env=env or {**example_env(), "OMP_NUM_THREADS": "1"}, timeout=400)


def _handwritten(n: int = 400) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray]:
    ds = load("handwritten", views=["fou", "kar", "pix"])
    rows = np.random.default_rng(0).permutation(len(ds.y))
    tr, te = rows[:n], rows[n : n + 200]
    return [X[tr] for X in ds.views], ds.y[tr], [X[te] for X in ds.views], ds.y[te]


def test_a_table_with_a_user_mlp_as_an_estimator(my_models):
    """Handwritten's views as data owners, the user's bottom and top: the policy carries the
    user top's layers, the data owners keep the user bottom, and the run learns."""
    Xs, y, Xt, yt = _handwritten()
    kw: dict[str, Any] = {"n_data_owners": 3, "n_label_owners": 2, "rounds": 2, "batch_size": 32}
    kw |= {"device": "cpu", "verbose": False}
    est = MultiVFL(bottom=my_models.table_bottom, top=my_models.table_top, **kw)
    est.fit(Xs, y, eval_set=(Xt, yt))
    assert est.score(Xt, yt) > 0.5  # ten classes: chance is 0.1
    top = {k: v.shape for k, v in est.server_.params.items()}
    assert top == {"1.weight": (10, 48), "1.bias": (10,)}  # 3 owners x 16 features
    allowed = est.transport_.policy.allowed[("label_owner", "coordinator")]
    assert allowed == {f"update/{k}" for k in top}
    bottom = {k: v.shape for k, v in est.data_owners_[1].state_dict().items()}
    assert bottom == {  # kar: 64 columns
        "bottom/0.weight": (64,),
        "bottom/0.bias": (64,),
        "bottom/1.weight": (32, 64),
        "bottom/1.bias": (32,),
        "bottom/3.weight": (16, 32),
        "bottom/3.bias": (16,),
    }
    assert est.run_stats_["raw_activation_bytes_per_sample"] == 4 * 48
    # named by import path (as a config names them): the very same model
    by_path = MultiVFL(bottom="my_models:table_bottom", top="my_models:table_top", **kw)
    by_path.fit(Xs, y, eval_set=(Xt, yt))
    assert by_path.history_["accuracy"] == est.history_["accuracy"]
    for k, v in est.server_.params.items():
        np.testing.assert_array_equal(by_path.server_.params[k], v)
    # the default networks on the same table: an MLP bottom of `channels` units
    default = MultiVFL(channels=8, hidden=16, **kw).fit(Xs, y, eval_set=(Xt, yt))
    assert default.server_.params["1.weight"].shape == (16, 24)
    assert default.score(Xt, yt) > 0.3  # chance: 0.1


def test_image_strips_with_a_user_cnn_as_an_estimator(my_models):
    ds = load("mnist")
    rows = np.random.default_rng(0).permutation(len(ds.y))[:800]
    X, y = ds.images[rows], ds.y[rows]
    est = MultiVFL(
        n_data_owners=4,
        n_label_owners=2,
        rounds=2,
        batch_size=32,
        top_channels=8,
        hidden=16,
        bottom=my_models.image_bottom,
        local_optimizer="adam",
        lr=3e-3,
        device="cpu",
        verbose=False,
    ).fit(X[:600], y[:600], eval_set=(X[600:], y[600:]))
    # the default top on the user's 8 maps of 28 x 28 (four 7-row strips stacked)
    assert est.server_.params["0.weight"].shape == (8, 8, 3, 3)
    assert est.data_owners_[0].state_dict()["bottom/0.weight"].shape == (8, 1, 5, 5)
    assert est.history_["accuracy"][-1] > 0.2  # ten classes: chance is 0.1


def test_a_bad_factory_is_a_config_error(my_models):
    Xs, y, _, _ = _handwritten(60)
    kw: dict[str, Any] = {"n_data_owners": 3, "n_label_owners": 1, "rounds": 1, "device": "cpu"}
    kw["verbose"] = False
    with pytest.raises(ConfigError, match="bottom = 'no_such_module:f': cannot import"):
        MultiVFL(bottom="no_such_module:f", **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match="'my_models' has no attribute 'nope'"):
        MultiVFL(top="my_models:nope", **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match="my_models:__name__' is a str, not a callable"):
        MultiVFL(top="my_models:__name__", **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match="^bottom must be '' .*, got 3$"):
        MultiVFL(bottom=3, **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match="returned an object of type int, not a torch.nn"):
        MultiVFL(bottom=lambda shape, d: 3, **kw).fit(Xs, y)
    # a top of the wrong number of classes; a CNN bottom on table columns
    with pytest.raises(ConfigError, match=r"top factory .* output is \(7,\), not \(10,\)"):
        MultiVFL(top=lambda shape, n: torch.nn.Linear(shape[0], 7), **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match=r"fails on an input of per-sample shape \(76,\)"):
        MultiVFL(bottom=my_models.image_bottom, **kw).fit(Xs, y)


@pytest.mark.parametrize(
    ("config", "args", "layers"),
    [  # the user's top (a linear layer after a ReLU); the default one (conv, two linear)
        ("multivfl_handwritten.toml", ["params.rounds=1", "params.samples_per_owner=150"], "1"),
        ("multivfl_mnist_cnn.toml", ["params.rounds=2", "params.eval_samples=200"], "046"),
    ],
)
def test_fedviews_run_of_the_example_configs(tmp_path, config: str, args: list[str], layers: str):
    out = tmp_path / "run"
    args = [*args, 'params.optimizers=["fedavg"]']
    r = _fedviews("run", str(EXAMPLES / config), *args, "--out", str(out), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final_accuracy"]["iid/fedavg"] > 0.2  # ten classes: chance is 0.1
    log = json.loads((out / "message_log.json").read_text())["iid/fedavg"]
    crossed = set().union(*log["crossings"].values())
    assert crossed == {"activations", "activation_grad"} | {
        f"{way}/{k}.{p}" for way in ("top", "update") for k in layers for p in ("weight", "bias")
    }
    # the factory's module not on PYTHONPATH: one clear line, no traceback
    env = {k: v for k, v in example_env().items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    bad = _fedviews("run", str(EXAMPLES / config), "--out", str(tmp_path / "bad"), env=env)
    assert bad.returncode != 0
    assert "cannot import 'my_models'" in bad.stderr and "PYTHONPATH" in bad.stderr
    assert "Traceback" not in bad.stderr + bad.stdout


@pytest.mark.parametrize(
    ("config", "overrides"),
    [
        ("deploy_multivfl_handwritten.toml", ["data.n_per_class=30", "data.n_test=60"]),
        ("deploy_multivfl_mnist_cnn.toml", ["data.n_per_class=12", "data.n_test=60"]),
    ],
)
def test_fedviews_launch_equals_in_process(tmp_path, my_models, config: str, overrides: list):
    """Every process imports the user's factories: the deployed models, the footprint and
    the policy (the user top's layers) are those of the same run in one process."""
    pytest.importorskip("grpc")
    pytest.importorskip("rbcl")  # the PSI
    from fedviews.deploy import load_deploy_config, load_party_data

    overrides = [*overrides, "params.rounds=1", "data.samples_per_owner=0"]
    run = tmp_path / "run"
    r = _fedviews("launch", str(EXAMPLES / config), *overrides, "--out", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok" and res["rounds_done"] == 1
    cfg = load_deploy_config(EXAMPLES / config, overrides)
    files = {p: load_party_data(run / "data" / f"{p}.npz") for p in cfg.federation.parties}
    fed = build_in_process(cfg, files)
    fed()
    assert res["history"]["accuracy"] == [r["accuracy"] for r in fed.coordinator.history]
    with np.load(run / "coordinator" / "result.npz") as z:
        assert set(z.files) == {f"top/{k}" for k in fed.coordinator.params}
        for k, v in fed.coordinator.params.items():
            np.testing.assert_allclose(z[f"top/{k}"], v, rtol=1e-4, atol=1e-6)
    for p, party in fed.parties.items():
        with np.load(run / p / "result.npz") as z:
            for k, v in fed.algorithm.party_results(party).items():
                np.testing.assert_allclose(z[k], v, rtol=1e-4, atol=1e-6)
    # the same exchanges (sender, receiver, kind, array names) as in one process
    deployed, crossed = set(), set()
    for p in ("coordinator", *cfg.federation.parties):
        log = json.loads((run / p / "message_log.json").read_text())
        deployed |= {tuple(e[:3]) + (tuple(e[3]),) for e in log["exchanges"]}
        crossed |= set().union(*log["crossings"].values())
    deployed = {e for e in deployed if not e[2].startswith(("deploy:", "psi:"))}
    assert deployed == set(fed.transport.log.exchanges())
    spec = get_algorithm_spec("multivfl")
    policy = spec.policy(cfg, fed.setup)
    assert policy == fed.transport.policy
    names = {f"top/{k}" for k in fed.coordinator.params}
    assert policy.allowed[("coordinator", "label_owner")] == names
    assert names <= crossed
