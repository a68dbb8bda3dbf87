"""Server optimizers: every step against a hand-computed one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedviews.deep._serveropt import (
    FedAdam,
    FedAvg,
    FedDemonAdam,
    FedYogi,
    demon_beta,
    make_server_optimizer,
    mean_update,
)
from fedviews.errors import ConfigError, DataError

X0 = {"w": np.array([1.0, -2.0, 0.5]), "b": np.array([0.1])}
U1 = [
    {"w": np.array([0.2, 0.0, -0.4]), "b": np.array([0.3])},
    {"w": np.array([0.0, 0.2, -0.2]), "b": np.array([-0.1])},
]
U2 = [
    {"w": np.array([-0.1, 0.1, 0.1]), "b": np.array([0.2])},
    {"w": np.array([-0.3, 0.1, 0.3]), "b": np.array([0.0])},
]
# mean updates: round 1 d1 = w [0.1, 0.1, -0.3], b [0.1]; round 2 d2 = w [-0.2, 0.1, 0.2], b [0.1]
D1 = {"w": np.array([0.1, 0.1, -0.3]), "b": np.array([0.1])}
D2 = {"w": np.array([-0.2, 0.1, 0.2]), "b": np.array([0.1])}
LR, B1, B2, TAU = 0.01, 0.9, 0.99, 1e-3


def test_mean_update() -> None:
    got = mean_update(U1)
    for k in D1:
        np.testing.assert_allclose(got[k], D1[k])


def test_fedavg_is_mean_of_local_models() -> None:
    opt = FedAvg()
    x1 = opt.step(X0, U1)
    locals_ = [{k: X0[k] + u[k] for k in X0} for u in U1]
    for k in X0:
        np.testing.assert_allclose(x1[k], (locals_[0][k] + locals_[1][k]) / 2)


def test_fedadam_two_steps() -> None:
    opt = FedAdam(lr=LR, beta1=B1, beta2=B2, tau=TAU)
    x1 = opt.step(X0, U1)
    x2 = opt.step(x1, U2)
    for k in X0:
        m1 = (1 - B1) * D1[k]
        v1 = (1 - B2) * D1[k] ** 2
        e1 = X0[k] + LR * math.sqrt(1 - B2) / (1 - B1) * m1 / (np.sqrt(v1) + TAU)
        m2 = B1 * m1 + (1 - B1) * D2[k]
        v2 = B2 * v1 + (1 - B2) * D2[k] ** 2
        e2 = e1 + LR * math.sqrt(1 - B2**2) / (1 - B1**2) * m2 / (np.sqrt(v2) + TAU)
        np.testing.assert_allclose(x1[k], e1, rtol=1e-12)
        np.testing.assert_allclose(x2[k], e2, rtol=1e-12)
    # first bias-corrected step is ~ lr * sign(delta)
    np.testing.assert_allclose(
        x1["w"] - X0["w"], LR * np.sign(D1["w"]), rtol=0.15
    )  # tau shrinks it slightly


def test_fedyogi_two_steps() -> None:
    opt = FedYogi(lr=LR, beta1=B1, beta2=B2, tau=TAU)
    x1 = opt.step(X0, U1)
    x2 = opt.step(x1, U2)
    for k in X0:
        m1 = (1 - B1) * D1[k]
        v0 = TAU**2  # Reddi et al. 2021, Algorithm 2
        v1 = v0 - (1 - B2) * D1[k] ** 2 * np.sign(v0 - D1[k] ** 2)
        e1 = X0[k] + LR * math.sqrt(1 - B2) / (1 - B1) * m1 / (np.sqrt(v1) + TAU)
        m2 = B1 * m1 + (1 - B1) * D2[k]
        v2 = v1 - (1 - B2) * D2[k] ** 2 * np.sign(v1 - D2[k] ** 2)
        e2 = e1 + LR * math.sqrt(1 - B2**2) / (1 - B1**2) * m2 / (np.sqrt(v2) + TAU)
        np.testing.assert_allclose(x1[k], e1, rtol=1e-12)
        np.testing.assert_allclose(x2[k], e2, rtol=1e-12)
    # Yogi and Adam differ (from the first step, since v starts at tau^2)
    adam = FedAdam(lr=LR, beta1=B1, beta2=B2, tau=TAU)
    assert not np.allclose(adam.step(adam.step(X0, U1), U2)["w"], x2["w"])


def test_feddemonadam_two_steps() -> None:
    R = 4
    opt = FedDemonAdam(total_rounds=R, lr=LR, beta1=B1, beta2=B2, tau=TAU)
    x1 = opt.step(X0, U1)
    x2 = opt.step(x1, U2)
    b2_round = B1 * (1 - 2 / R) / ((1 - B1) + B1 * (1 - 2 / R))  # = 0.45 / 0.55
    assert demon_beta(B1, 2, R) == pytest.approx(b2_round)
    assert demon_beta(B1, 0, R) == pytest.approx(B1) and demon_beta(B1, R, R) == 0.0
    for k in X0:
        m1 = D1[k]
        v1 = (1 - B2) * D1[k] ** 2
        e1 = X0[k] + LR * math.sqrt(1 - B2) * m1 / (np.sqrt(v1) + TAU)
        m2 = b2_round * m1 + D2[k]
        v2 = B2 * v1 + (1 - B2) * D2[k] ** 2
        e2 = e1 + LR * math.sqrt(1 - B2**2) * m2 / (np.sqrt(v2) + TAU)
        np.testing.assert_allclose(x1[k], e1, rtol=1e-12)
        np.testing.assert_allclose(x2[k], e2, rtol=1e-12)


def test_works_on_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    x0 = {k: torch.as_tensor(v) for k, v in X0.items()}
    ups = [{k: torch.as_tensor(v) for k, v in u.items()} for u in U1]
    for name in ("fedavg", "fedadam", "fedyogi", "feddemonadam"):
        ref = make_server_optimizer(name, lr=LR, total_rounds=3).step(X0, U1)
        got = make_server_optimizer(name, lr=LR, total_rounds=3).step(x0, ups)
        for k in X0:
            np.testing.assert_allclose(got[k].numpy(), ref[k], rtol=1e-12)


def test_errors() -> None:
    with pytest.raises(ConfigError, match="did you mean 'fedadam'"):
        make_server_optimizer("fedadm")
    with pytest.raises(ConfigError, match="beta1"):
        FedAdam(beta1=1.0)
    with pytest.raises(DataError, match="no model updates"):
        FedAvg().step(X0, [])
    with pytest.raises(DataError, match="same model"):
        FedAvg().step(X0, [U1[0], {"w": U1[1]["w"]}])
    assert make_server_optimizer("FedDemon-Adam", total_rounds=2).name == "feddemonadam"
    # NaN passed `lr <= 0`: a multivfl_optimizers run with params.server_lr=nan (or tau=nan)
    # trained FedAdam to NaN weights and reported 6% test accuracy on MNIST, no error
    for kw in ({"lr": float("nan")}, {"tau": float("nan")}, {"lr": float("inf")}):
        with pytest.raises(ConfigError, match="server lr and tau must be positive"):
            make_server_optimizer("fedadam", **kw)
