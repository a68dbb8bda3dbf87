"""Your own networks (docs/your-own-model.md, docs/examples/my_models.py), run the three ways.

A table (the Handwritten views as data owners, a user MLP bottom and top) and images (MNIST
strips, a user CNN bottom) in Multi-VFL, APFed's strip CNN (encoder, head, decoder) and
S-FedMV's sequence extractor: as an estimator, as ``fedviews run`` of an experiment config
and deployed with ``fedviews launch``, which equals the same run in one process (models,
footprint, policy). The factories are found by import path with ``docs/examples`` on
``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _examples import EXAMPLES, example_env, example_module, fedviews  # noqa: E402
from fedviews.data import load, load_sequences  # noqa: E402
from fedviews.deep import APFed, SFedMV, SingleVL, SplitNN, load_active_model  # noqa: E402
from fedviews.deep.multivfl import MultiVFL  # noqa: E402
from fedviews.errors import ConfigError  # noqa: E402
from fedviews.experiments import load_config  # noqa: E402
from fedviews.federation import build_in_process, get_algorithm_spec  # noqa: E402


@pytest.fixture(scope="module")
def my_models() -> Any:
    """The example module, imported the way a user's module is: from a folder on the path."""
    with example_module("my_models") as module:
        yield module


def test_the_page_s_blocks_are_the_example_module() -> None:
    """The definitions and imports that docs/your-own-model.md shows, copied into one file in
    the order of the page, run and are those of docs/examples/my_models.py, to the character
    (a page without `import math` read well and failed in a user's copy)."""
    import ast
    import re

    page = (EXAMPLES.parent / "your-own-model.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    defining = [b for b in blocks if re.search(r"^(def|class) ", b, re.M)]
    copied = "\n\n".join(defining)
    namespace: dict[str, Any] = {}
    # a user's copy of the page (not under this file's `from __future__ import annotations`)
    exec(compile(copied, "my_models.py", "exec", dont_inherit=True), namespace)

    def definitions(source: str) -> dict[str, str]:
        tree = ast.parse(source)
        kinds = (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
        return {
            getattr(n, "name", ast.unparse(n)): ast.get_source_segment(source, n) or ""
            for n in tree.body
            if isinstance(n, kinds)
        }

    shipped = (EXAMPLES / "my_models.py").read_text()
    assert definitions(copied) == definitions(shipped)
    assert all(callable(namespace[n]) for n in definitions(shipped) if " " not in n)


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
    # its layers (checked when it loads), beside its weights
    assert bottom.pop("bottom#structure") == (len(repr(est.data_owners_[1].bottom).encode()),)
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


def _normed_bottom(shape: tuple[int, ...], index: int) -> Any:
    """A bottom with batch norm (an integer buffer, running statistics) and dropout."""
    nn = torch.nn
    return nn.Sequential(
        nn.BatchNorm1d(shape[0]), nn.Linear(shape[0], 16), nn.ReLU(), nn.Dropout(0.3)
    )


def test_a_multivfl_bottom_with_batch_norm_and_dropout_trains_and_predicts_the_same_twice():
    """Averaging the bottoms averaged batch norm's int64 ``num_batches_tracked`` ("mean():
    could not infer output dtype", as the party being "unavailable"), and the data owners
    predicted with their bottoms in training mode: dropout on, two predictions agreed on 62 %
    of the rows, and a saved and loaded model "changed"."""
    Xs, y, Xt, yt = _handwritten(256)  # (no batch of one row: batch norm cannot train on it)
    kw: dict[str, Any] = {"n_data_owners": 3, "n_label_owners": 2, "rounds": 2, "batch_size": 32}
    est = MultiVFL(bottom=_normed_bottom, device="cpu", verbose=False, **kw).fit(Xs, y)
    first = est.predict(Xt)
    np.testing.assert_array_equal(est.predict(Xt), first)  # eval mode: no dropout
    assert est.score(Xt, yt) > 0.3  # chance: 0.1
    for owner in est.data_owners_:
        assert owner.bottom.training  # (its mode restored after predicting)
        assert int(owner.bottom[0].num_batches_tracked) > 0


def test_a_network_that_cannot_be_trained_is_a_config_error_naming_its_factory():
    """A parameter-free bottom (torch's "optimizer got an empty parameter list"), float64
    layers ("mixed dtype (CPU)"), integer activations (a failed backward pass, staged) and a
    batch norm without running statistics, which a probe of one sample refused though it
    trains."""
    Xs, y, _, _ = _handwritten(60)
    kw: dict[str, Any] = {"n_data_owners": 3, "n_label_owners": 1, "rounds": 1, "device": "cpu"}
    kw["verbose"] = False
    nn = torch.nn
    with pytest.raises(ConfigError, match="bottom factory .* without trainable parameters"):
        MultiVFL(bottom=lambda shape, d: nn.Flatten(), **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match="of torch.float64 parameters: .* must be float32"):
        MultiVFL(bottom=lambda shape, d: nn.Linear(shape[0], 8).double(), **kw).fit(Xs, y)

    class Rounded(nn.Module):
        def __init__(self, k: int) -> None:
            super().__init__()
            self.lin = nn.Linear(k, 8)

        def forward(self, x: Any) -> Any:
            return self.lin(x).long()

    with pytest.raises(ConfigError, match="returns torch.int64 values, not floating point"):
        MultiVFL(bottom=lambda shape, d: Rounded(shape[0]), **kw).fit(Xs, y)
    no_stats = lambda shape, d: nn.Sequential(  # noqa: E731
        nn.BatchNorm1d(shape[0], track_running_stats=False), nn.Linear(shape[0], 8)
    )
    MultiVFL(bottom=no_stats, **kw).fit(Xs, y)


def test_split_nn_with_a_user_mlp_on_a_table_and_how_to_save_it(tmp_path, my_models):
    """The split NN on Handwritten's views, the user's bottom (16 features per party) and top:
    it learns. ``save`` refuses the callables and says how to save (their import paths, or
    pickle); done so, the saved model loads and predicts as the fitted one."""
    Xs, y, Xt, yt = _handwritten()
    kw: dict[str, Any] = {"n_parties": 3, "epochs": 5, "batch_size": 32, "device": "cpu"}
    est = SplitNN(bottom=my_models.table_bottom, top=my_models.table_top, **kw).fit(Xs, y)
    assert est.score(Xt, yt) > 0.5  # ten classes: chance is 0.1
    assert est.models_["party_0"]["top/1.weight"].shape == (10, 48)  # 3 parties x 16
    assert est.models_["party_2"]["net/1.weight"].shape == (32, 240)  # pix: 240 columns
    hint = (
        r"cannot save parameter bottom, the callable my_models\.table_bottom: save writes no "
        r"code\. To save, give it by its import path: set_params\(bottom='my_models:table_bottom'"
        r"\) .* or pickle the estimator"
    )
    with pytest.raises(ConfigError, match=hint):
        est.save(tmp_path / "m")
    assert not (tmp_path / "m").exists()
    expected = est.predict_proba(Xt)
    est.set_params(bottom="my_models:table_bottom", top="my_models:table_top")
    loaded = SplitNN.load(est.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.predict_proba(Xt), expected)
    with pytest.raises(
        ConfigError, match=r"the callable .*<lambda>: .* define it at the top level.*cannot keep"
    ):
        est.set_params(top=lambda shape, n: torch.nn.Linear(shape[0], n)).save(tmp_path / "x")
    # (save said "or pickle the estimator", and pickle then failed deep inside with
    # "AttributeError: Can't pickle local object")
    with pytest.raises(ConfigError, match=r"cannot pickle this SplitNN: its top=.*<lambda>"):
        pickle.dumps(est)


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

    def broken(shape: tuple[int, ...], index: int) -> Any:
        raise RuntimeError("a bug of the user's")

    # the call that failed, as the factory got it: per-sample shape and data-owner index
    with pytest.raises(
        ConfigError, match=r"broken failed when called as .*broken\(\(\d+,\), 0\): a bug"
    ):
        MultiVFL(bottom=broken, **kw).fit(Xs, y)
    # a top of the wrong number of classes; a CNN bottom on table columns
    with pytest.raises(ConfigError, match=r"top factory .* output is \(7,\), not \(10,\)"):
        MultiVFL(top=lambda shape, n: torch.nn.Linear(shape[0], 7), **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match=r"fails on a batch of float32 samples of shape \(76,\)"):
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


def _launch_equals_in_process(tmp_path, config: str, overrides: list[str]) -> tuple[Any, Any, Any]:
    """``fedviews launch`` of ``config`` (every process imports the user's factories), then the
    same run in one process on the files the launch wrote: every party's results (its models)
    are equal, and so are the exchanges (sender, receiver, kind, array names: the footprint)
    and the policy. Returns the run folder, the config and the in-process run."""
    pytest.importorskip("grpc")
    pytest.importorskip("rbcl")  # the PSI
    from fedviews.deploy import load_deploy_config, load_party_data

    run = tmp_path / "run"
    r = _fedviews("launch", str(EXAMPLES / config), *overrides, "--out", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((run / "coordinator" / "results.json").read_text())["status"] == "ok"
    cfg = load_deploy_config(EXAMPLES / config, overrides)
    files = {p: load_party_data(run / "data" / f"{p}.npz") for p in cfg.federation.parties}
    fed = build_in_process(cfg, files)
    fed()
    for p, party in fed.parties.items():
        with np.load(run / p / "result.npz") as z:
            mine = fed.algorithm.party_results(party)
            assert set(z.files) == set(mine)
            for k, v in mine.items():
                if np.asarray(v).dtype.kind in "USO":
                    assert str(z[k]) == str(v)
                else:
                    np.testing.assert_allclose(z[k], v, rtol=1e-4, atol=1e-6)
    deployed = set()
    for p in ("coordinator", *cfg.federation.parties):
        log = json.loads((run / p / "message_log.json").read_text())
        deployed |= {tuple(e[:3]) + (tuple(e[3]),) for e in log["exchanges"]}
    deployed = {e for e in deployed if not e[2].startswith(("deploy:", "psi:"))}
    assert deployed == set(fed.transport.log.exchanges())
    assert get_algorithm_spec(cfg.algorithm).policy(cfg, fed.setup) == fed.transport.policy
    return run, cfg, fed


def _crossed(run: Any, parties: Any) -> set[str]:
    """Every array name that crossed in a deployment, by its message logs."""
    crossed: set[str] = set()
    for p in ("coordinator", *parties):
        log = json.loads((run / p / "message_log.json").read_text())
        crossed |= set().union(*log["crossings"].values())
    return crossed


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
    overrides = [*overrides, "params.rounds=1", "data.samples_per_owner=0"]
    run, cfg, fed = _launch_equals_in_process(tmp_path, config, overrides)
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["rounds_done"] == 1
    assert res["history"]["accuracy"] == [r["accuracy"] for r in fed.coordinator.history]
    with np.load(run / "coordinator" / "result.npz") as z:
        assert set(z.files) == {f"top/{k}" for k in fed.coordinator.params}
        for k, v in fed.coordinator.params.items():
            np.testing.assert_allclose(z[f"top/{k}"], v, rtol=1e-4, atol=1e-6)
    names = {f"top/{k}" for k in fed.coordinator.params}
    assert fed.transport.policy.allowed[("coordinator", "label_owner")] == names
    assert names <= _crossed(run, cfg.federation.parties)


# --------------------------------------------------------------------------- APFed


def _mnist(n: int) -> tuple[np.ndarray, np.ndarray]:
    ds = load("mnist")
    rows = np.random.default_rng(0).permutation(len(ds.y))[:n]
    return ds.images[rows], ds.y[rows]


APFED = {"m": 2, "i": 1, "epochs": 2, "batch_size": 32, "lam": 0.1, "device": "cpu"}


def test_apfed_with_user_networks_as_an_estimator(tmp_path, my_models):
    """The active party trains the user's encoder and head, the passive party the user's
    decoder; by import path the very same run; the export rebuilds the user's networks."""
    X, y = _mnist(800)
    nets = {"encoder": my_models.strip_encoder, "head": my_models.strip_head}
    est = APFed(decoder=my_models.strip_decoder, **nets, **APFED).fit(X[:600], y[:600])
    assert est.score(X[600:], y[600:]) > 0.3  # ten classes: chance is 0.1
    active = {k: tuple(v.shape) for k, v in est.active_.net.state_dict().items()}
    assert active == {  # a 14 x 28 strip: 16 maps of 7 x 14 after the pooling
        "encoder.0.weight": (16, 1, 3, 3),
        "encoder.0.bias": (16,),
        "head.1.weight": (10, 16 * 7 * 14),
        "head.1.bias": (10,),
    }
    passive = {k: tuple(v.shape) for k, v in est.passives_[0].net.state_dict().items()}
    assert passive == {"weight": (16, 1, 2, 2), "bias": (1,)}
    assert est.run_stats_["crossings"] == {
        "active -> passive2": ["h_A"],
        "passive2 -> active": ["grad_h_A"],
    }
    paths = {"encoder": "my_models:strip_encoder", "head": "my_models:strip_head"}
    by_path = APFed(decoder="my_models:strip_decoder", **paths, **APFED).fit(X[:600], y[:600])
    assert by_path.history_ == est.history_
    np.testing.assert_array_equal(by_path.predict(X[600:]), est.predict(X[600:]))
    by_path.save(tmp_path / "saved")  # an import path is a plain value: save rebuilds it
    np.testing.assert_array_equal(
        APFed.load(tmp_path / "saved").predict(X[600:]), est.predict(X[600:])
    )
    # the export names the factories and rebuilds them (the module on the path)
    model = load_active_model(est.export(tmp_path / "model"))
    assert model.meta["networks"] == paths and model.meta["arch"] is None
    np.testing.assert_array_equal(model.predict(X[600:]), est.predict(X[600:]))
    # APFed-C: the passive party encodes its strip with the encoder's factory; SingleVL
    contrastive = APFed(variant="C", **nets, **APFED).fit(X[:600], y[:600])
    assert contrastive.passives_[0].net.state_dict()["0.weight"].shape == (16, 1, 3, 3)
    single = SingleVL(m=2, i=1, epochs=2, batch_size=32, device="cpu", **nets).fit(X[:600], y[:600])
    assert single.active_.net.state_dict()["head.1.weight"].shape == (10, 16 * 7 * 14)


def test_apfed_networks_that_do_not_fit_are_config_errors(my_models):
    """A decoder must give back exactly the passive strip (Eq. 12), a passive encoder as many
    features as h_A (Eq. 15), a head the class logits: each error names the factory."""
    X, y = _mnist(120)
    nets = {"encoder": my_models.strip_encoder, "head": my_models.strip_head}
    nn = torch.nn
    with pytest.raises(ConfigError, match=r"paper_decoder: its module fails on .* \(16, 7, 14\)"):
        APFed(**nets, **APFED).fit(X, y)  # the paper's decoder inverts the paper's encoder
    crop = lambda rep, strip: nn.ConvTranspose2d(16, 1, 2)  # noqa: E731
    with pytest.raises(ConfigError, match=r"<lambda> .* output is \(1, 8, 15\), not the passive "):
        APFed(decoder=crop, **nets, **APFED).fit(X, y)
    with pytest.raises(ConfigError, match=r"passive_encoder .* 392 features, not the 1568 of h_A"):
        APFed(variant="C", passive_encoder=lambda s: nn.Flatten(), **nets, **APFED).fit(X, y)
    with pytest.raises(ConfigError, match=r"head factory .* output is \(1568,\), not \(10,\)"):
        APFed(encoder=my_models.strip_encoder, head=lambda s, n: nn.Flatten(), **APFED).fit(X, y)
    with pytest.raises(ConfigError, match="decoder = 'my_models:nope'"):
        APFed(decoder="my_models:nope", **APFED).fit(X, y)
    with pytest.raises(ConfigError, match="the TVFL baselines build the paper's networks"):
        load_config(EXAMPLES / "apfed_mnist_cnn.toml", ['params.methods=["TVFL-0"]'])


def _run_example(tmp_path: Any, config: str, *args: str) -> Any:
    """``fedviews run docs/examples/CONFIG ARGS``, successful; its output folder."""
    out = tmp_path / "run"
    r = _fedviews("run", str(EXAMPLES / config), *args, "--out", str(out), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.mark.parametrize(
    ("config", "args", "setting", "above"),
    [  # percent: ten classes, chance is 10
        ("apfed_mnist_cnn.toml", ["params.n_train=300", "params.epochs=1"], "2-1", 20),
        ("apfed_handwritten.toml", ["params.n_train=600", "params.epochs=3"], "3-1", 30),
    ],
)
def test_fedviews_run_of_the_apfed_examples(tmp_path, config, args, setting, above):
    out = _run_example(tmp_path, config, "params.n_test=200", *args)
    metrics = json.loads((out / "metrics.json").read_text())
    acc = metrics["accuracy"][setting]
    assert set(acc) == {"SingleVL", "APFed-R", "APFed-C"}
    assert all(a[0] >= above for a in acc.values())
    assert metrics["paper"] is None  # the paper's numbers are those of its networks
    log = json.loads((out / "message_log.json").read_text())["APFed-R"]
    assert set().union(*log["crossings"].values()) == {"h_A", "grad_h_A"}


def test_apfed_launch_equals_in_process(tmp_path, my_models):
    """The active party's model is the user's encoder and head, the passive party's the user's
    decoder, equal to the same run in one process; only h_A and its gradient crossed."""
    overrides = ["data.n_per_class=20", "data.n_test=100", "params.epochs=2"]
    run, cfg, fed = _launch_equals_in_process(tmp_path, "deploy_apfed_mnist_cnn.toml", overrides)
    assert "head.1.weight" in {k.removeprefix("net/") for k in fed.parties["bank"].results()}
    assert set(fed.parties["shop"].results()) == {"net/weight", "net/bias", "net#structure"}
    assert _crossed(run, cfg.federation.parties) >= {"h_A", "grad_h_A"}
    meta = json.loads((run / "bank" / "model" / "model.json").read_text())
    assert meta["networks"] == {
        "encoder": "my_models:strip_encoder",
        "head": "my_models:strip_head",
    }


TABLE_NETS = {"encoder": "table_encoder", "head": "table_top", "decoder": "table_decoder"}


def test_apfed_on_a_table_with_user_networks_as_an_estimator(tmp_path, my_models):
    """Handwritten's views as APFed parties (fou active, kar and pix passive): the user's
    encoder and head at the active party, the user's decoder onto each passive party's own
    width; by import path the very same run; SingleVL trains the same active networks."""
    Xs, y, Xt, yt = _handwritten(800)
    kw: dict[str, Any] = {"m": 3, "i": 1, "epochs": 5, "batch_size": 32, "device": "cpu"}
    nets = {k: getattr(my_models, f) for k, f in TABLE_NETS.items()}
    est = APFed(**nets, **kw).fit(Xs, y)
    assert est.score(Xt, yt) >= 0.3  # three times chance on ten classes
    assert est.active_.net.state_dict()["head.1.weight"].shape == (10, 16)
    decoders = [p.net.state_dict()["2.weight"].shape for p in est.passives_]
    assert decoders == [(64, 32), (240, 32)]  # kar: 64 columns, pix: 240
    assert set().union(*est.run_stats_["crossings"].values()) == {"h_A", "grad_h_A"}
    paths = {k: f"my_models:{f}" for k, f in TABLE_NETS.items()}
    by_path = APFed(**paths, **kw).fit(Xs, y)
    assert by_path.history_ == est.history_
    np.testing.assert_array_equal(by_path.predict(Xt), est.predict(Xt))
    model = load_active_model(by_path.export(tmp_path / "model"))
    np.testing.assert_array_equal(model.predict(Xt[0]), est.predict(Xt))
    # APFed-C: each passive party encodes its own columns with the encoder's factory
    contrastive = APFed(variant="C", encoder=nets["encoder"], head=nets["head"], **kw)
    widths = [p.net.state_dict()["1.weight"].shape for p in contrastive.fit(Xs, y).passives_]
    assert widths == [(32, 64), (32, 240)]
    assert contrastive.score(Xt, yt) >= 0.3
    single = SingleVL(encoder=nets["encoder"], head=nets["head"], **kw).fit(Xs, y)
    assert single.active_.net.state_dict()["encoder.1.weight"].shape == (32, 76)


def test_apfed_on_a_table_launch_equals_in_process(tmp_path, my_models):
    """Each party holds its view's columns; the deployed models (the user's encoder and head,
    a decoder per passive width), footprint and policy equal the run in one process."""
    overrides = ["data.n_per_class=30", "data.n_test=100", "params.epochs=2"]
    run, cfg, fed = _launch_equals_in_process(tmp_path, "deploy_apfed_handwritten.toml", overrides)
    assert fed.setup["input/kar"] == "64" and fed.setup["h_A"] == "16"
    assert fed.parties["pix"].results()["net/2.weight"].shape == (240, 32)
    assert _crossed(run, cfg.federation.parties) >= {"h_A", "grad_h_A"}
    meta = json.loads((run / "fou" / "model" / "model.json").read_text())
    assert meta["input_shape"] == [76] and meta["networks"] == {
        "encoder": "my_models:table_encoder",
        "head": "my_models:table_top",
    }


# --------------------------------------------------------------------------- S-FedMV

SFEDMV = {"n_rounds": 2, "local_epochs": 1, "batch_size": 16, "fusion_rounds": 3}


def _watch_clients(n_clients: int = 3, per_client: int = 60) -> list[Any]:
    ds = load_sequences("watch")
    subjects = ds.clients()[:n_clients]
    idx = np.concatenate([np.flatnonzero(ds.client_ids == s)[::2][:per_client] for s in subjects])
    return list(ds.subset(idx).by_client())


def test_sfedmv_with_a_user_extractor_as_an_estimator(tmp_path, my_models):
    """The clients federate the user's extractor and its head (the policy names exactly their
    parameters), H-FedMV fuses its 16-feature embeddings, and the run learns."""
    clients = _watch_clients()
    est = SFedMV(extractor=my_models.sequence_extractor, **SFEDMV).fit(clients)
    assert np.mean([est.score(v, y) for v, y in clients]) > 0.3  # seven classes: 0.14
    params = ["extractor.conv.weight", "extractor.conv.bias", "head.weight", "head.bias"]
    up = est.transport_.policy.allowed[("client", "coordinator")]
    assert up == {f"view{k}/{p}" for k in range(2) for p in params} | {"W_local_0", "W_local_1"}
    assert [X.shape[1] for X in est.transform(clients[0][0])] == [16, 16]
    assert [W.shape[0] for W in est.fusion_.W_] == [16, 16]
    by_path = SFedMV(extractor="my_models:sequence_extractor", **SFEDMV).fit(clients)
    assert by_path.round_loss_ == est.round_loss_
    np.testing.assert_array_equal(by_path.predict(clients[0][0]), est.predict(clients[0][0]))
    by_path.save(tmp_path / "saved")
    loaded = SFedMV.load(tmp_path / "saved")
    np.testing.assert_array_equal(loaded.predict(clients[0][0]), est.predict(clients[0][0]))
    # the baselines train the same extractor alone
    local = SFedMV(extractors="local", extractor=my_models.sequence_extractor, **SFEDMV)
    local.fit(clients)
    assert local.extractors_[0][1].extractor.conv.weight.shape == (16, 3, 5)


def test_a_bad_extractor_is_a_config_error(my_models):
    clients = _watch_clients(2, 20)
    nn = torch.nn
    with pytest.raises(ConfigError, match=r"<lambda>: its module fails on a batch"):
        SFedMV(extractor=lambda c, k: nn.Linear(c, 4), **SFEDMV).fit(clients)  # no lengths

    class Steps(nn.Module):  # one vector per step, not per sequence
        def __init__(self, c: int) -> None:
            super().__init__()
            self.lin = nn.Linear(c, 3)

        def forward(self, x: Any, lengths: Any) -> Any:
            return self.lin(x)

    with pytest.raises(ConfigError, match=r"output is \(2, 3\), not an embedding \(E,\)"):
        SFedMV(extractor=lambda c, k: Steps(c), **SFEDMV).fit(clients)
    with pytest.raises(ConfigError, match="extractor = 'my_models:nope'"):
        SFedMV(extractor="my_models:nope", **SFEDMV).fit(clients)


def test_fedviews_run_of_the_sfedmv_example(tmp_path):
    args = ["params.n_rounds=2", "params.fusion_rounds=3", "params.max_per_client=60"]
    out = _run_example(tmp_path, "sfedmv_watch_cnn.toml", *args)
    log = json.loads((out / "message_log.json").read_text())
    crossed = set().union(*log["crossings"].values())
    assert "view0/extractor.conv.weight" in crossed and "view0/gru.weight_ih_l0" not in crossed


def test_sfedmv_launch_equals_in_process(tmp_path, my_models):
    overrides = [
        "data.n_per_class=6",
        "data.n_test=10",
        "params.n_rounds=2",
        "params.fusion_rounds=3",
    ]
    run, cfg, fed = _launch_equals_in_process(tmp_path, "deploy_sfedmv_watch_cnn.toml", overrides)
    with np.load(run / "coordinator" / "result.npz") as z:
        for k, model in enumerate(fed.coordinator.models):
            assert model.width == 16
            for n, a in model.state_dict().items():
                np.testing.assert_allclose(z[f"view{k}/{n}"], a.numpy(), rtol=1e-5, atol=1e-6)
    assert "view1/extractor.conv.bias" in _crossed(run, cfg.federation.parties)
