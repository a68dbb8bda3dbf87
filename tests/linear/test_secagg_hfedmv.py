"""H-FedMV with secure aggregation: the server learns sum_l N_l W^l_k (and, pooled, the sums
of the clients' features), never one client's model or moments; the run equals the plain one."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("cryptography")

from fedviews.federation import InProcessTransport  # noqa: E402
from fedviews.linear import HFedMV  # noqa: E402


def _clients(seed=0, sizes=(40, 55, 35), dims=(5, 8), c=3):
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = np.arange(n) % c
        Xs = [
            rng.normal(size=(n, d)) * 3 + 2 + np.eye(c)[y] @ rng.normal(size=(c, d)) for d in dims
        ]
        out.append((Xs, y))
    return out


def _spy():
    seen = []  # (kind, reply) of every reply the server got from a client

    class Spy(InProcessTransport):
        def request(self, msg):
            reply = super().request(msg)
            if msg.receiver.startswith("client"):
                seen.append((msg.kind, reply))
            return reply

    return seen, (lambda policy: Spy(policy))


@pytest.mark.parametrize("standardize", ["none", "pooled"])
def test_the_secure_run_equals_the_plain_run(standardize):
    clients = _clients()
    kw = {"n_rounds": 3, "local_iter": 1, "inner_max_iter": 3, "standardize": standardize}
    plain = HFedMV(**kw).fit(clients)
    seen, transport = _spy()
    secure = HFedMV(**kw, defense="secagg", transport=transport).fit(clients)
    for a, b in zip(secure.W_, plain.W_):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(secure.objective_, plain.objective_, rtol=1e-8)
    cross = secure.run_stats_["crossings"]
    want = {"masked_W_local_0", "masked_W_local_1", "masked_objective"}
    if standardize == "pooled":
        want |= {"masked_x_sum", "masked_x_sq"}
    for c in ("client0", "client1", "client2"):
        assert set(cross[f"{c} -> coordinator"]) == want
    # every array the server received from a client is a uint64 masked word, uniform
    words = np.concatenate(
        [a.reshape(-1) for kind, r in seen if kind != "secagg:keys" for a in r.arrays.values()]
    )
    assert words.dtype == np.uint64 and words.size > 300
    top = np.bincount((words >> np.uint64(62)).astype(np.int64), minlength=4) / words.size
    assert np.all(np.abs(top - 0.25) < 0.08), top
    # the one thing a client's reply still says in the clear: its sample count
    for kind, r in seen:
        if kind == "local_train":
            assert set(r.meta) == {"n_samples"}


def test_secure_pooled_statistics_equal_the_plain_pooled_statistics():
    from fedviews.linear.hfedmv.parties import pooled_moments

    clients = _clients(1)
    Xs = [np.hstack(v) for v, _ in clients]
    n = np.array([len(X) for X in Xs], dtype=float)
    mean, sd = pooled_moments(
        n,
        np.stack([X.sum(0) for X in Xs]),
        np.stack([((X - X.mean(0)) ** 2).sum(0) for X in Xs]),
    )
    allX = np.vstack(Xs)
    np.testing.assert_allclose(mean, allX.mean(0), rtol=1e-12)
    np.testing.assert_allclose(sd, allX.std(0), rtol=1e-12)
    seen, transport = _spy()
    HFedMV(n_rounds=1, local_iter=1, standardize="pooled", defense="secagg",
           transport=transport).fit(clients)  # fmt: skip
    client = [r for k, r in seen if k == "moments"]
    assert len(client) == 3 and all(r.arrays["masked_x_sum"].dtype == np.uint64 for r in client)


def test_the_servers_view_under_secagg_is_the_global_model_only():
    from fedviews.data import PartyData
    from fedviews.federation import Defense, Roster, RunSpec, build_in_process
    from fedviews.linear.hfedmv import HFedMVParams

    clients = _clients(2)
    names = tuple(f"c{i}" for i in range(3))
    datas = {
        n: PartyData(np.arange(len(y)), np.hstack(Xs), y.astype(np.int64), view_dims=(5, 8))
        for n, (Xs, y) in zip(names, clients)
    }
    params = HFedMVParams(n_rounds=2, local_iter=1, inner_max_iter=2, standardize="pooled")
    run = RunSpec("hfedmv", params, Roster(names, label_owners=names), 0, Defense.of("secagg"))
    fed = build_in_process(run, datas)
    rec = fed.record(["coordinator"])["coordinator"]
    fed()
    obs = fed.algorithm.observations(run, fed.setup, rec)
    assert [o.name for o in obs] == ["W from the masked sum"] * 3  # one per victim client
    # it predicts with the global model the server computed (and broadcast), on features
    # scaled with the pooled statistics it unmasked, which equal the pooled moments of all rows
    from fedviews.linear.hfedmv.spec import linear_predictor

    allX = np.vstack([np.hstack(Xs) for Xs, _ in clients])
    ref = linear_predictor(fed.coordinator.W, (allX.mean(0), allX.std(0)))
    np.testing.assert_array_equal(obs[0].predict(allX, None), ref(allX, None))


def test_secagg_with_one_client_is_a_config_error():
    """With one client the "secure sum" is its own N_l W^l, unmasked: refused before anything
    runs, instead of a run that calls itself secure and shows the server that client's model."""
    from fedviews.data import load
    from fedviews.errors import ConfigError

    ds = load("handwritten")
    idx = np.random.default_rng(0).permutation(len(ds.y))[:120]
    client = ([V[idx] for V in ds.views[:2]], ds.y[idx])
    with pytest.raises(ConfigError, match="at least two clients"):
        HFedMV(n_rounds=1, local_iter=1, defense="secagg").fit([client])
    HFedMV(n_rounds=1, local_iter=1).fit([client])  # without secagg: the plain protocol


@pytest.mark.parametrize("claimed", [0, -30, float("nan"), 2.5])
@pytest.mark.parametrize("standardize", ["none", "pooled"])
def test_the_server_refuses_a_sample_count_that_is_no_count(monkeypatch, claimed, standardize):
    """A client's n_samples is its FedAvg weight N_l (and its share of the pooled moments):
    a dishonest client claiming -30 or NaN would steer or poison the global model; the
    server refuses it, plainly and under secure aggregation, naming the client."""
    from fedviews.errors import ProtocolError
    from fedviews.linear.hfedmv import HFedMVClient

    honest = HFedMVClient.reply

    def reply(self, msg, **kw):
        meta = kw.get("meta")
        if self.name == "client1" and isinstance(meta, dict) and "n_samples" in meta:
            kw["meta"] = {**meta, "n_samples": claimed}
        return honest(self, msg, **kw)

    monkeypatch.setattr(HFedMVClient, "reply", reply)
    for defense in (None, "secagg"):
        est = HFedMV(n_rounds=1, local_iter=1, standardize=standardize, defense=defense)
        with pytest.raises(ProtocolError, match="'client1' sent n_samples"):
            est.fit(_clients())
