"""H-FedMV with client-level DP of the model updates (``model_dp``, DP-FedAvg): the clipping
and noise of what a client sends, the ledger, what crosses and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("dp_accounting")

from fedviews.errors import ConfigError  # noqa: E402
from fedviews.federation import InProcessTransport, gaussian_epsilon  # noqa: E402
from fedviews.linear import HFedMV  # noqa: E402
from fedviews.linear.hfedmv.parties import private_update  # noqa: E402


def _clients(seed=0, sizes=(40, 55, 35), dims=(5, 8), c=3):
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = np.arange(n) % c
        Xs = [rng.normal(size=(n, d)) + np.eye(c)[y] @ rng.normal(size=(c, d)) for d in dims]
        out.append((Xs, y))
    return out


def test_the_update_is_clipped_jointly_over_the_views_and_noised():
    rng = np.random.default_rng(0)
    G = [rng.normal(size=(5, 3)), rng.normal(size=(8, 3))]
    L = [g + rng.normal(size=g.shape) for g in G]
    norm = math.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(L, G)))
    # no clipping, no noise: exactly the local model
    same = private_update(G, L, 2 * norm, 0.0, rng)
    for a, b in zip(same, L):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    # clipped to 1: the update keeps its direction and has norm 1
    out = private_update(G, L, 1.0, 0.0, rng)
    for a, b, g in zip(out, L, G):
        np.testing.assert_allclose(a - g, (b - g) / norm, atol=1e-12)
    # the noise: N(0, sigma^2) per coordinate around the clipped update
    draws = np.concatenate(
        [
            np.concatenate([(a - g - (b - g) / norm).ravel() for a, b, g in zip(o, L, G)])
            for o in (private_update(G, L, 1.0, 0.3, rng) for _ in range(200))
        ]
    )
    assert float(draws.std()) == pytest.approx(0.3, rel=0.03)
    assert abs(float(draws.mean())) < 4 * 0.3 / math.sqrt(draws.size)


def test_a_model_dp_run_sends_the_same_arrays_and_accounts_one_release_per_round():
    seen = []

    class Spy(InProcessTransport):
        def request(self, msg):
            reply = super().request(msg)
            if msg.kind == "local_train":
                seen.append(reply)
            return reply

    d = {"kind": "model_dp", "noise_multiplier": 1.0, "clip": 0.5}
    kw = {"n_rounds": 3, "local_iter": 1, "inner_max_iter": 2, "standardize": "local"}
    plain = HFedMV(**kw).fit(_clients())
    dp = HFedMV(**kw, defense=d, transport=lambda pol: Spy(pol)).fit(_clients())
    assert dp.run_stats_["crossings"] == plain.run_stats_["crossings"]
    assert all(set(r.meta) == {"n_samples"} for r in seen)  # no local objective
    assert all(np.isnan(dp.objective_))
    led = dp.privacy_["parties"]
    assert set(led) == {"client0", "client1", "client2"}
    assert led["client0"]["releases"] == 3
    assert led["client0"]["epsilon"] == pytest.approx(gaussian_epsilon(1.0, 3, 1e-5))
    # what a client sent differs from the global model it got by a clipped update plus noise
    again = HFedMV(**kw, defense=d).fit(_clients())  # reproducible per seed in one process
    for a, b in zip(dp.W_, again.W_):
        np.testing.assert_array_equal(a, b)
    assert any(not np.allclose(a, b) for a, b in zip(dp.W_, plain.W_))


def test_model_dp_refuses_pooled_scaling():
    with pytest.raises(ConfigError, match="model_dp does not noise the pooled feature moments"):
        HFedMV(n_rounds=1, standardize="pooled", defense={"kind": "model_dp", "epsilon": 1.0}).fit(
            _clients()
        )
