"""Gaussian defenses of Multi-VFL: ``grad_dp`` (DP-SGD at the label owners, label DP) and
``act_dp`` (noised activations and DP-SGD bottoms at the data owners, feature DP). The
per-sample clipping against slow loops, the noise scale against the accountant, the
ledger against the closed form, and what crosses."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("dp_accounting")

from scipy.stats import norm  # noqa: E402

from fedviews.deep.multivfl import MultiVFL, build_bottom, build_models  # noqa: E402
from fedviews.deep.multivfl.dp import (  # noqa: E402
    GradDP,
    clip_rows,
    private_bottom_gradients,
    private_gradients,
)
from fedviews.deep.multivfl.nets import combine_activations  # noqa: E402
from fedviews.errors import ConfigError, DataError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    Defense,
    RunSpec,
    gaussian_epsilon,
    noise_multiplier,
    privacy_ledger,
)
from fedviews.linear import MMVFL  # noqa: E402


def _batch(B=12, heights=(3, 4), C=4, W=5, n_classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    _, top = build_models(heights, W, n_classes, channels=C, top_channels=6, hidden=8)
    acts = [torch.randn(B, C, h, W, generator=g) for h in heights]
    y = torch.randint(0, n_classes, (B,), generator=g)
    return top, acts, y


def _dp(clip, sigma, grad_clip=1.0):
    return GradDP(clip, sigma, np.random.SeedSequence(0), grad_clip, 0.0)


def test_without_clipping_or_noise_it_is_the_plain_gradient_of_the_mean_loss():
    top, acts, y = _batch()
    leaves = [a.clone().requires_grad_(True) for a in acts]
    loss = torch.nn.functional.cross_entropy(top(combine_activations(leaves)), y)
    top.zero_grad()
    loss.backward()
    par, act = private_gradients(top, acts, y, _dp(1e9, 0.0), torch.Generator())
    for k, p in top.named_parameters():
        torch.testing.assert_close(par[k], p.grad, rtol=1e-5, atol=1e-7)
    for a, leaf in zip(act, leaves):
        torch.testing.assert_close(a, leaf.grad, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("clip", [0.05, 0.5])
def test_per_sample_clipping_equals_a_slow_loop(clip):
    """One sample at a time with autograd: its joint (parameters, activation rows) gradient,
    clipped to ``clip``, summed over the batch for the parameters, divided by B."""
    top, acts, y = _batch(seed=1)
    B = len(y)
    want_par = {k: torch.zeros_like(p) for k, p in top.named_parameters()}
    want_act = [torch.zeros_like(a) for a in acts]
    clipped_any = False
    for i in range(B):
        leaves = [a[i : i + 1].clone().requires_grad_(True) for a in acts]
        loss = torch.nn.functional.cross_entropy(top(combine_activations(leaves)), y[i : i + 1])
        top.zero_grad()
        loss.backward()
        grads = [p.grad.clone() for _, p in top.named_parameters()] + [x.grad for x in leaves]
        norm_i = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        f = min(1.0, clip / norm_i)
        clipped_any |= f < 1.0
        for (k, _), g in zip(top.named_parameters(), grads):
            want_par[k] += f * g / B
        for d, leaf in enumerate(leaves):
            want_act[d][i] = f * leaf.grad[0] / B
    assert clipped_any  # the test clips something
    par, act = private_gradients(top, acts, y, _dp(clip, 0.0), torch.Generator())
    for k in want_par:
        torch.testing.assert_close(par[k], want_par[k], rtol=1e-4, atol=1e-7)
    for a, w in zip(act, want_act):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-8)
    # every sample's released joint vector (times B) has norm <= clip
    joint = torch.cat([a.flatten(1) for a in act], 1) * B
    assert float(joint.norm(dim=1).max()) <= clip * (1 + 1e-5)


def test_the_noise_has_the_calibrated_standard_deviation():
    """With the signal clipped away, B * (released) is the noise: N(0, sigma^2) per coordinate,
    sigma = noise_multiplier * 2 * clip as the defense computes it."""
    d = Defense.of({"kind": "grad_dp", "epsilon": 3.0, "delta": 1e-5, "clip": 1e-9})
    z = noise_multiplier(d, releases=20)
    sigma = 2 * z * d.clip * 1e9  # rescale: look at it with clip = 1
    top, acts, y = _batch(B=64)
    _, act = private_gradients(top, acts, y, _dp(1e-9, sigma), torch.Generator().manual_seed(3))
    noise = torch.cat([a.flatten() for a in act]).double() * len(y)
    assert abs(float(noise.mean())) < 4 * sigma / math.sqrt(noise.numel())
    assert float(noise.std()) == pytest.approx(sigma, rel=0.03)  # ~2,300 draws


def test_the_calibrated_noise_meets_the_budget_in_closed_form():
    """T Gaussian mechanisms of multiplier z are one of multiplier z/sqrt(T); its exact delta at
    epsilon (Balle & Wang 2018) equals the target delta, and PLD composition agrees."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant as pld

    for eps, delta, T in ((1.0, 1e-5, 10), (4.0, 1e-6, 150), (0.5, 1e-5, 1)):
        d = Defense.of({"kind": "grad_dp", "epsilon": eps, "delta": delta})
        z = noise_multiplier(d, T)
        s = z / math.sqrt(T)
        exact = norm.cdf(1 / (2 * s) - eps * s) - math.exp(eps) * norm.cdf(-1 / (2 * s) - eps * s)
        assert exact == pytest.approx(delta, rel=1e-3)
        acc = pld.PLDAccountant()
        acc.compose(dp_accounting.GaussianDpEvent(z), T)
        assert acc.get_epsilon(delta) == pytest.approx(eps, rel=2e-3)
        assert gaussian_epsilon(z, T, delta) == pytest.approx(eps, rel=1e-6)


def test_the_ledger_grows_with_rounds_as_the_accountant_says():
    d = Defense.of({"kind": "grad_dp", "noise_multiplier": 2.0, "clip": 1.0})
    run = RunSpec("multivfl", defense=d)
    eps = [privacy_ledger(run, ["bank"], 10, T)["parties"]["bank"]["epsilon"] for T in (1, 4, 16)]
    assert eps[0] < eps[1] < eps[2]
    # the composition of T is one Gaussian of multiplier z / sqrt(T)
    for T, e in zip((1, 4, 16), eps):
        assert e == pytest.approx(gaussian_epsilon(2.0 / math.sqrt(T), 1, 1e-5), rel=1e-9)


@pytest.mark.parametrize(
    "table, msg",
    [
        ({"kind": "grad_dp"}, "not neither"),
        ({"kind": "grad_dp", "epsilon": 1.0, "noise_multiplier": 1.0}, "not both"),
        ({"kind": "grad_dp", "epsilon": 1.0, "clip": 0}, "defense.clip"),
        ({"kind": "grad_dp", "epsilon": 1.0, "delta": 1.5}, "defense.delta"),
        ({"kind": "grad_dp", "epsilon": 1.0, "clipp": 1}, "did you mean 'clip'"),
    ],
)
def test_bad_grad_dp_tables_are_config_errors(table, msg):
    with pytest.raises(ConfigError, match=msg):
        Defense.of(table)


def test_grad_dp_does_not_apply_to_mmvfl():
    rng = np.random.default_rng(0)
    Xs, y = [rng.normal(size=(30, 4)), rng.normal(size=(30, 3))], np.arange(30) % 2
    with pytest.raises(ConfigError, match="does not apply to mmvfl"):
        MMVFL(defense={"kind": "grad_dp", "epsilon": 1.0}).fit(Xs, y)


@pytest.fixture(scope="module")
def images():
    from fedviews import data

    ds = data.load("fashion_mnist", subset="test")
    idx = np.random.default_rng(0).permutation(len(ds.y))[:360]
    return ds.images[idx], ds.y[idx]


def _fit(images, defense, **kw):
    X, y = images
    return MultiVFL(
        n_data_owners=2, n_label_owners=2, rounds=2, batch_size=32, lr=0.05, channels=4,
        top_channels=4, hidden=8, device="cpu", defense=defense, log_entries=True,
        samples_per_owner=120, **kw,
    ).fit(X[:300], y[:300], eval_set=(X[300:], y[300:]))  # fmt: skip


def test_a_grad_dp_run_sends_what_the_plain_run_sends_but_not_the_loss(images):
    plain = _fit(images, None)
    dp = _fit(images, {"kind": "grad_dp", "noise_multiplier": 1.0, "clip": 1.0})
    assert dp.run_stats_["crossings"] == plain.run_stats_["crossings"]
    sent = dp.transport_.log.entries
    replies = [e for e in sent if e.kind == "train_round:reply"]
    assert replies and all("train_loss" not in e.meta for e in replies)
    assert any("train_loss" in e.meta for e in plain.transport_.log.entries)
    assert all(np.isnan(dp.history_["train_loss"]))
    led = dp.privacy_["parties"]
    assert set(led) == {"label_owner_0", "label_owner_1"}
    assert led["label_owner_0"]["releases"] == 2  # rounds x local epochs
    assert led["label_owner_0"]["epsilon"] == pytest.approx(gaussian_epsilon(1.0, 2, 1e-5))
    # the released gradients differ from the plain ones (noise), reproducibly per seed
    again = _fit(images, {"kind": "grad_dp", "noise_multiplier": 1.0, "clip": 1.0})
    for a, b in zip(dp.label_owners_, again.label_owners_):
        for k, v in a.top.state_dict().items():
            torch.testing.assert_close(v, b.top.state_dict()[k])
    p0 = plain.label_owners_[0].top.state_dict()
    assert any(
        not torch.allclose(v, p0[k]) for k, v in dp.label_owners_[0].top.state_dict().items()
    )


# ----------------------------------------------------------------------------- act_dp


def _bottom_batch(B=10, seed=2):
    g = torch.Generator().manual_seed(seed)
    bottom = build_bottom(0, channels=3)
    x = torch.rand(B, 1, 4, 6, generator=g)
    grad_out = torch.randn(B, 3, 4, 6, generator=g) / B
    return bottom, x, grad_out


def test_act_dp_without_clipping_or_noise_is_the_plain_bottom_step():
    bottom, x, grad_out = _bottom_batch()
    bottom.zero_grad()
    bottom(x).backward(grad_out)
    got = private_bottom_gradients(bottom, x, grad_out, _dp(1e9, 0.0, 1e9), torch.Generator())
    for k, p in bottom.named_parameters():
        torch.testing.assert_close(got[k], p.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("clip, grad_clip", [(0.5, 1e9), (1e9, 0.05), (0.8, 0.05)])
def test_act_dp_clipping_equals_a_slow_loop(clip, grad_clip):
    """Per sample: the activation row clipped to ``clip`` (as released), the bottom's
    gradient of <that row, B * received gradient row> (through the clipping: it is part
    of the function whose output was released) clipped to ``grad_clip``."""
    bottom, x, grad_out = _bottom_batch()
    B = len(x)
    want = {k: torch.zeros_like(p) for k, p in bottom.named_parameters()}
    for i in range(B):
        bottom.zero_grad()
        a = bottom(x[i : i + 1])
        f = torch.clamp(clip / a.norm(), max=1.0)
        ((a * f) * (B * grad_out[i : i + 1])).sum().backward()
        grads = {k: p.grad.clone() for k, p in bottom.named_parameters()}
        n = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
        for k, g in grads.items():
            want[k] += min(1.0, grad_clip / n) * g / B
    got = private_bottom_gradients(
        bottom, x, grad_out, _dp(clip, 0.0, grad_clip), torch.Generator()
    )
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-8)
    rows = clip_rows(bottom(x).detach(), clip)
    assert float(rows.flatten(1).norm(dim=1).max()) <= clip * (1 + 1e-6)


def test_an_act_dp_run_accounts_two_releases_per_epoch_for_the_data_owners(images):
    plain = _fit(images, None)
    d = {"kind": "act_dp", "noise_multiplier": 1.5, "clip": 5.0, "grad_clip": 0.5}
    dp = _fit(images, d, local_epochs=2)
    assert dp.run_stats_["crossings"] == plain.run_stats_["crossings"]
    led = dp.privacy_["parties"]
    assert set(led) == {"data_owner_0", "data_owner_1"}  # whose features are protected
    assert led["data_owner_0"]["releases"] == 2 * 2 * 2  # (forward + backward) x R x E
    assert led["data_owner_0"]["epsilon"] == pytest.approx(gaussian_epsilon(1.5, 8, 1e-5))
    assert led["data_owner_0"]["grad_clip"] == 0.5
    again = _fit(images, d, local_epochs=2)  # the noise is reproducible per seed
    for a, b in zip(dp.data_owners_, again.data_owners_):
        for k, v in a.state_dict().items():
            np.testing.assert_array_equal(v, b.state_dict()[k])


def test_act_dp_refuses_label_owners_that_share_samples(images):
    X, y = images
    ids = np.arange(300)
    with pytest.raises(DataError, match="act_dp needs the label owners' samples to be disjoint"):
        MultiVFL(
            n_data_owners=2, n_label_owners=2, rounds=1, channels=4, top_channels=4, hidden=8,
            device="cpu", defense={"kind": "act_dp", "epsilon": 2.0},
        ).fit(X[:300], y[:300], label_owner_ids=[ids[:200], ids[100:]])  # fmt: skip


def test_the_noise_on_released_activations_has_the_calibrated_scale(images):
    """What a label owner receives under act_dp, read from its recording: rows of norm
    about sigma * sqrt(dims) around clipped rows of norm <= C."""
    from fedviews.data import PartyData
    from fedviews.deep.multivfl.spec import MultiVFLParams
    from fedviews.federation import Roster, build_in_process

    X, y = images
    strips = [X[:200, :14].astype(np.float32) / 255, X[:200, 14:].astype(np.float32) / 255]
    ids = np.arange(200)
    datas = {
        "a": PartyData(ids, strips[0]),
        "b": PartyData(ids, strips[1]),
        "bank": PartyData(ids, None, y[:200].astype(np.int64)),
    }
    d = Defense.of({"kind": "act_dp", "noise_multiplier": 0.01, "clip": 1.0})
    params = MultiVFLParams(rounds=1, channels=2, top_channels=4, hidden=8, evaluate=False)
    run = RunSpec("multivfl", params, Roster(("a", "b", "bank"), label_owners=("bank",)), 0, d)
    fed = build_in_process(run, datas)
    rec = fed.record(["bank"])["bank"]
    fed()
    sigma = 2 * 0.01 * 1.0
    rows = np.concatenate(
        [m.arrays["activations"].reshape(len(m.arrays["activations"]), -1)
         for m in rec if m.kind == "forward:reply" and m.sender == "a"]
    )  # fmt: skip
    dims = rows.shape[1]
    # each row: a clipped row (norm <= 1) plus noise of norm ~ sigma * sqrt(dims)
    assert np.all(np.linalg.norm(rows, axis=1) <= 1.0 + sigma * math.sqrt(dims) * 1.5)
    assert np.median(np.linalg.norm(rows, axis=1)) > 0.5 * sigma * math.sqrt(dims)


def test_gaussian_defenses_need_the_privacy_extra_before_anything_runs(monkeypatch):
    import sys

    from fedviews.errors import MissingDependency
    from fedviews.federation import get_algorithm_spec

    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # as if not installed
    with pytest.raises(MissingDependency, match=r"fedviews\[privacy\]"):
        get_algorithm_spec("multivfl").check_defense(Defense.of({"kind": "grad_dp", "epsilon": 1}))
    get_algorithm_spec("multivfl").check_defense(Defense.of("secagg"))  # needs no accountant
