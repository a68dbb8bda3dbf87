"""APFed on table columns: every party holds its own columns ``(n, k_p)``, of different widths
(the Handwritten views), with fedviews' default MLPs or a user's networks."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedviews.data import load  # noqa: E402
from fedviews.deep import TVFL, APFed, SingleVL, load_active_model  # noqa: E402
from fedviews.errors import ConfigError, DataError  # noqa: E402

nn = torch.nn
KW: dict[str, Any] = {"m": 3, "i": 1, "epochs": 5, "batch_size": 32, "device": "cpu"}


@pytest.fixture(scope="module")
def views() -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray]:
    """fou (76 columns), kar (64), pix (240): 1,600 training and 400 test digits."""
    ds = load("handwritten", views=["fou", "kar", "pix"])
    rows = np.random.default_rng(0).permutation(len(ds.y))  # the digits are sorted by class
    tr, te = rows[:1600], rows[1600:]
    return [X[tr] for X in ds.views], ds.y[tr], [X[te] for X in ds.views], ds.y[te]


@pytest.mark.parametrize("variant", ["R", "C"])
def test_apfed_on_three_handwritten_views_learns(views, variant: str):
    """fou active, kar and pix passive, the default MLPs: the active party predicting alone is
    well above chance (0.1), each passive network is built for its own width, and only h_A
    and its gradient cross (no column, no label)."""
    Xs, y, Xt, yt = views
    est = APFed(variant=variant, **KW).fit(Xs, y)
    assert est.score(Xt, yt) >= 0.3  # three times chance on ten classes
    active = {k: tuple(v.shape) for k, v in est.active_.net.state_dict().items()}
    assert active["encoder.1.weight"] == (64, 76)  # after the layer norm of fou's 76 columns
    assert active["head.fc2.weight"] == (10, 64)
    last = "3.weight" if variant == "R" else "1.weight"
    widths = [p.net.state_dict()[last].shape for p in est.passives_]
    assert widths == ([(64, 64), (240, 64)] if variant == "R" else [(64, 64), (64, 240)])
    assert est.run_stats_["crossings"] == {
        "active -> passive2": ["h_A"],
        "active -> passive3": ["h_A"],
        "passive2 -> active": ["grad_h_A"],
        "passive3 -> active": ["grad_h_A"],
    }
    shapes = {s[1:] for e in est.transport_.log.entries for s in e.shapes}
    assert shapes == {(32,)}  # h_A and its gradient, 32 features per sample: no columns
    assert est.predict(Xt).shape == (len(yt),)


def test_singlevl_on_a_table_is_apfed_with_lambda_zero(views):
    Xs, y, Xt, _ = views
    kw = {**KW, "epochs": 2}
    single = SingleVL(**kw).fit(Xs, y)
    zero = APFed(lam=0.0, **kw).fit(Xs, y)
    assert single.history_ == zero.history_
    np.testing.assert_array_equal(single.predict_proba(Xt), zero.predict_proba(Xt))


def test_a_table_model_saves_pickles_and_exports(tmp_path, views):
    Xs, y, Xt, _ = views
    est = APFed(**{**KW, "epochs": 1}).fit(Xs, y)
    expected = est.predict_proba(Xt)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict_proba(Xt), expected)
    loaded = APFed.load(est.save(tmp_path / "saved"))
    np.testing.assert_array_equal(loaded.predict_proba(Xt), expected)
    model = load_active_model(est.export(tmp_path / "model", torchscript=True))
    assert model.meta["input_shape"] == [76] and model.meta["image_shape"] is None
    np.testing.assert_allclose(model.predict_proba(Xt[0]), expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(DataError, match=r"not the active party's table columns.*\(n, 76\)"):
        model.predict(Xt[1])
    # the estimator's input (every party's features) too: it raised numpy's "inhomogeneous"
    np.testing.assert_array_equal(model.predict(list(Xt)), est.predict(Xt))
    with pytest.raises(DataError, match=r"a list of 2 arrays: this model's setting has 3"):
        model.predict(list(Xt[:2]))
    with pytest.raises(DataError, match=r"per-sample shapes \[\(64,\), \(76,\), \(240,\)\]"):
        est.predict([Xt[1], Xt[0], Xt[2]])


def test_table_networks_that_do_not_fit_are_config_errors(views):
    """A decoder must give back exactly the passive party's columns (Eq. 12), a passive
    encoder as many features as h_A (Eq. 15); the errors name the factory."""
    Xs, y, _, _ = views
    Xs, y = [X[:100] for X in Xs], y[:100]
    kw = {**KW, "epochs": 1}
    fixed = lambda rep, cols: nn.Linear(rep[0], 64)  # noqa: E731 - kar's width, not pix's
    with pytest.raises(
        ConfigError, match=r"<lambda> .* output is \(64,\), not the passive .*\(240,\)"
    ):
        APFed(decoder=fixed, **kw).fit(Xs, y)
    narrow = lambda cols: nn.Linear(cols[0], 8)  # noqa: E731
    with pytest.raises(ConfigError, match=r"passive_encoder .* 8 features, not the 32 of h_A"):
        APFed(variant="C", passive_encoder=narrow, **kw).fit(Xs, y)
    with pytest.raises(ConfigError, match=r"fails on a batch of float32 samples of shape \(76,\)"):
        APFed(encoder=lambda s: nn.Conv2d(1, 4, 3), **kw).fit(Xs, y)
    with pytest.raises(DataError, match="X has 2 arrays but m=3"):
        APFed(**kw).fit(Xs[:2], y)
    with pytest.raises(DataError, match="TVFL takes images"):
        TVFL(m=3, epochs=1).fit(Xs, y)
    strip = np.random.default_rng(0).random((len(y), 4, 6))  # an image strip beside columns
    with pytest.raises(DataError, match=r"all image strips or all table columns: \['active'\]"):
        APFed(**{**kw, "m": 2}).fit([Xs[0], strip], y)
    bad = [Xs[0], Xs[1].copy(), Xs[2]]
    bad[1][0, 0] = np.nan
    with pytest.raises(DataError, match=r"X\[1\] \(party 1's features\) contains NaN"):
        APFed(**kw).fit(bad, y)


def test_a_user_network_on_a_table():
    """User factories on vectors: h_A of 16 features, the passive decoders onto 64 and 240
    columns (the example's by import path: tests/test_your_own_model.py)."""
    ds = load("handwritten", views=["fou", "kar", "pix"])
    rows = np.random.default_rng(1).permutation(len(ds.y))[:300]
    Xs, y = [X[rows] for X in ds.views], ds.y[rows]

    est = APFed(encoder=_encoder, head=_head, decoder=_decoder, **{**KW, "epochs": 1}).fit(Xs, y)
    assert [p.net.weight.shape for p in est.passives_] == [(64, 16), (240, 16)]
    assert est.active_.net.head.weight.shape == (10, 16)


def _encoder(shape: tuple[int, ...]) -> Any:
    return nn.Sequential(nn.LayerNorm(shape[0]), nn.Linear(shape[0], 16))


def _head(shape: tuple[int, ...], n_classes: int) -> Any:
    return nn.Linear(shape[0], n_classes)


def _decoder(shape: tuple[int, ...], out: tuple[int, ...]) -> Any:
    return nn.Linear(shape[0], out[0])


def test_demo_data_with_a_view_per_party_missing_names_the_apfed_parties(tmp_path):
    from fedviews.deploy import write_demo_data
    from fedviews.deploy._config import load_deploy_config

    cfg = load_deploy_config(
        {
            "algorithm": "apfed",
            "federation": {"parties": ["fou", "kar", "pix"], "label_owner": "fou"},
            "data": {"dataset": "handwritten", "views": ["fou", "kar"]},
        }
    )
    with pytest.raises(ConfigError, match="2 views for 3 APFed parties"):
        write_demo_data(cfg, tmp_path)
