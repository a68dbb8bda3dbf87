"""MMVFL and V-FedMV with secure aggregation: the plain run's iterates, and no Z_k crosses."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("cryptography")

from fedviews.data import PartyData  # noqa: E402
from fedviews.errors import ConfigError, PrivacyError, ProtocolError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    Defense,
    Message,
    Roster,
    RunSpec,
    build_in_process,
    secure_sum_setup,
)
from fedviews.linear import MMVFL, VFedMV  # noqa: E402
from fedviews.linear.mmvfl import MMVFLParams  # noqa: E402


def _data(seed=0, n=90, dims=(6, 9, 14), c=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    Xs = []
    for d in dims:
        X = rng.normal(size=(n, d))
        X[:, :2] += 1.5 * np.eye(c)[y][:, :2]
        Xs.append(X)
    return Xs, y


@pytest.mark.parametrize("Est", [MMVFL, VFedMV])
def test_secure_aggregation_equals_the_plain_run(Est):
    Xs, y = _data()
    plain = Est(max_iter=6, tol=0).fit(Xs, y)
    secure = Est(max_iter=6, tol=0, defense="secagg").fit(Xs, y)
    # iterates equal to the fixed-point resolution (2^-32 per value, carried over 6 rounds)
    np.testing.assert_allclose(secure.Z_, plain.Z_, atol=1e-8)
    np.testing.assert_allclose(secure.objective_, plain.objective_, rtol=1e-9)
    for Ws, Wp in zip(secure.W_, plain.W_, strict=True):
        np.testing.assert_allclose(Ws, Wp, atol=1e-7)
    if Est is VFedMV:  # the testing phase is securely summed too (fresh keys per phase)
        np.testing.assert_allclose(
            secure.decision_function(Xs), plain.decision_function(Xs), atol=1e-8
        )
        np.testing.assert_array_equal(secure.predict(Xs), plain.predict(Xs))
    # what crossed: masked sums up, the consensus down; never a Z_k, zeta_k or local term
    crossings = secure.run_stats_["crossings"]
    for k in range(3):
        up = set(crossings[f"party{k} -> coordinator"])
        assert up <= {
            "masked_zeta_Z_k", "masked_stats_Z_k", "masked_zeta_Z_k_test", "masked_stats_Z_k_test",
        }  # fmt: skip
        assert {"masked_zeta_Z_k", "masked_stats_Z_k"} <= up
        assert secure.run_stats_["meta_keys"][f"party{k} -> coordinator"] == ["bundle"]
    assert set(plain.run_stats_["crossings"]["party0 -> coordinator"]) >= {"Z_k"}


def _secure_run(max_iter=3):
    Xs, y = _data()
    names = ("party0", "party1", "party2")
    datas = {
        p: PartyData(np.arange(len(y)), X, y if p == "party0" else None)
        for p, X in zip(names, Xs, strict=True)
    }
    run = RunSpec(
        "mmvfl",
        MMVFLParams(max_iter=max_iter, tol=0),
        Roster(names, label_owner="party0"),
        0,
        Defense.of("secagg"),
    )
    return run, datas


def test_the_coordinator_receives_only_uniform_masked_values():
    run, datas = _secure_run()
    fed = build_in_process(run, datas)
    rec = fed.record(["coordinator"])["coordinator"]
    fed()
    masked = [m for m in rec.messages if m.kind == "update:reply"]
    assert len(masked) == 9
    assert all(set(m.arrays) == {"masked_zeta_Z_k", "masked_stats_Z_k"} for m in masked)
    words = np.concatenate([m.arrays["masked_zeta_Z_k"].reshape(-1) for m in masked])
    assert words.dtype == np.uint64
    # uniform over the ring whatever Z_k they hide: the top 2 bits of 2,430 words fall in
    # each quarter with frequency 1/4 (0.05 is over 5 standard deviations)
    top = np.bincount((words >> np.uint64(62)).astype(np.int64), minlength=4) / words.size
    assert np.all(np.abs(top - 0.25) < 0.05), top
    for m in masked[-3:]:  # read as fixed point, nowhere near the party's zeta_k Z_k
        approx = m.arrays["masked_zeta_Z_k"].view(np.int64).astype(float) / 2.0**32
        assert np.abs(approx - 1000.0 * fed.parties[m.sender].Z_k).min() > 1.0
    # the audit's view of the coordinator: the sum (hence the consensus), nothing per party
    obs = fed.algorithm.observations(fed.run, fed.setup, rec)
    assert [o.name for o in obs] == ["Z from the masked sum"] + [
        f"Z, for party{k}'s features" for k in range(3)
    ]  # the sum, read as a representation of each party's features: no Z_k of anyone
    np.testing.assert_allclose(obs[0].values, fed.coordinator.Z, atol=1e-8)


def test_a_party_never_sends_Zk_in_the_clear_under_secagg():
    run, datas = _secure_run()
    fed = build_in_process(run, datas)
    party = fed.parties["party1"]
    update = Message("update", "coordinator", "party1", 1, {"Z": fed.coordinator.Z})
    # a coordinator that skips the key exchange gets a refusal, not Z_k
    with pytest.raises(ProtocolError, match="before the secure-aggregation key exchange"):
        party.handle(update)
    # and the run's policy refuses Z_k from a party (at the sender, hub and receiver)
    with pytest.raises(PrivacyError, match="forbids 'party1'"):
        fed.transport.policy.check("party1", "party", "coordinator", "coordinator", ["Z_k"])


def test_defense_that_does_not_apply_is_a_config_error():
    from fedviews.federation import get_algorithm_spec

    with pytest.raises(ConfigError, match="defense 'secagg' does not apply to apfed"):
        get_algorithm_spec("apfed").check_defense(Defense.of("secagg"))
    with pytest.raises(ConfigError, match="defense 'grad_dp' does not apply to mmvfl"):
        get_algorithm_spec("mmvfl").check_defense(Defense.of({"kind": "grad_dp", "epsilon": 1}))
    Xs, y = _data()
    with pytest.raises(ConfigError, match="unknown defense.kind"):
        MMVFL(defense="laplace").fit(Xs, y)


@pytest.mark.parametrize("Est", [MMVFL, VFedMV])
def test_secagg_with_one_party_is_a_config_error(Est):
    """With one party the "secure sum" is its own zeta Z_k, unmasked: refused up front."""
    from fedviews.data import load

    ds = load("handwritten")
    idx = np.random.default_rng(0).permutation(len(ds.y))[:120]
    with pytest.raises(ConfigError, match="at least two parties"):
        Est(max_iter=2, defense="secagg").fit([ds.views[0][idx]], ds.y[idx])


def test_a_party_refuses_a_key_exchange_that_leaves_members_out():
    """A coordinator that lists only the victim and one colluder: their two masks cancel in
    the sum of two, and the colluder's own value gives the victim's away. Every party of
    the run knows the run's members and refuses (in process as deployed: make_party)."""
    run, datas = _secure_run()
    fed = build_in_process(run, datas)
    coord = fed.coordinator
    few = ["party0", "party1"]
    with pytest.raises(PrivacyError, match="with members left out"):
        secure_sum_setup(coord, few, 32)
    assert all(fed.parties[p].secure_members == frozenset(fed.parties) for p in fed.parties)
    fed()  # the honest exchange of all three goes through
    assert len(fed.coordinator.objective) == 3
