"""Secure aggregation of the Multi-VFL label owners' top-model updates: the server learns
their mean only, and the secure run equals the plain one."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cryptography")

from fedviews.deep.multivfl import MultiVFL  # noqa: E402
from fedviews.errors import ConfigError  # noqa: E402


@pytest.fixture(scope="module")
def images():
    from fedviews import data

    ds = data.load("fashion_mnist", subset="test")
    idx = np.random.default_rng(1).permutation(len(ds.y))[:700]
    return ds.images[idx], ds.y[idx]


def _fit(images, defense, K=3):
    X, y = images
    return MultiVFL(
        n_data_owners=2, n_label_owners=K, rounds=2, lr=0.05, optimizer="fedadam",
        server_lr=0.01, samples_per_owner=180, channels=4, top_channels=4, hidden=8,
        device="cpu", defense=defense,
    ).fit(X[:600], y[:600], eval_set=(X[600:], y[600:]))  # fmt: skip


def test_the_secure_run_equals_the_plain_run_and_sends_only_masked_updates(images):
    plain = _fit(images, None)
    secure = _fit(images, "secagg")
    for k, v in plain.server_.params.items():
        np.testing.assert_allclose(secure.server_.params[k], v, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(secure.history_["accuracy"], plain.history_["accuracy"])
    names = set(plain.server_.params)
    cross = secure.run_stats_["crossings"]
    for k in range(3):
        assert set(cross[f"label_owner_{k} -> server"]) == {f"masked_update/{n}" for n in names}
    # nothing else changed: data owners and label owners exchange what they did before
    same = {p: n for p, n in plain.run_stats_["crossings"].items() if "server" not in p}
    assert {p: n for p, n in cross.items() if "server" not in p} == same
    pol = secure.transport_.policy
    assert pol.allowed[("label_owner", "coordinator")] == {f"masked_update/{n}" for n in names}


def test_the_server_receives_uniform_words_and_only_their_sum_means_anything(images):
    from fedviews.federation import InProcessTransport

    est = MultiVFL(
        n_data_owners=2, n_label_owners=3, rounds=1, lr=0.05, samples_per_owner=180,
        channels=4, top_channels=4, hidden=8, device="cpu", defense="secagg",
    )  # fmt: skip
    seen = []  # the replies to train_round, as the server receives them

    class Spy(InProcessTransport):
        def request(self, msg):
            reply = super().request(msg)
            if msg.kind == "train_round":
                seen.append(reply)
            return reply

    est.set_params(transport=lambda policy: Spy(policy))
    X, y = images
    est.fit(X[:600], y[:600])
    assert len(seen) == 3
    words = np.concatenate([a.reshape(-1) for m in seen for a in m.arrays.values()])
    assert words.dtype == np.uint64
    top = np.bincount((words >> np.uint64(62)).astype(np.int64), minlength=4) / words.size
    assert np.all(np.abs(top - 0.25) < 0.02), top  # uniform over the ring
    # one owner's masked update read as fixed point is nowhere near its real update
    g = est.server_.params  # after one round of FedAvg: the mean of the updates
    for name, masked in seen[0].arrays.items():
        real = g[name.removeprefix("masked_update/")]
        approx = masked.view(np.int64).astype(float) / 2.0**32
        assert np.abs(approx - real).mean() > 1e3


def test_secagg_needs_two_label_owners(images):
    with pytest.raises(ConfigError, match="at least two label owners"):
        _fit(images, "secagg", K=1)
