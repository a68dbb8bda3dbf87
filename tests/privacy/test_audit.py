"""The leakage audit: recordings hold exactly what reached the attacker, observations map rows
right, attacks run on a recording alone, and bad requests are clear errors."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from fedviews.data import PartyData
from fedviews.errors import ConfigError, DataError
from fedviews.federation import Recording, Roster, RunSpec, build_in_process, get_algorithm_spec
from fedviews.linear import MMVFLParams
from fedviews.privacy.attacks import AuxKnowledge, Truth, audit, check_attacks


def _mmvfl_run(n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n // 3)
    names = ("a", "b", "c")
    datas = {}
    for k, p in enumerate(names):
        X = rng.normal(size=(n, 4 + k)) + y[:, None]  # every view is informative
        datas[p] = PartyData(np.arange(n), X, y if p == "a" else None)
    params = MMVFLParams(beta=1.0, zeta=10.0, eta=10.0, max_iter=5)
    run = RunSpec("mmvfl", params, Roster(names, label_owner="a"))
    return run, build_in_process(run, datas), y


def test_a_recording_holds_exactly_the_messages_addressed_to_its_party(tmp_path: Path) -> None:
    run, fed, _ = _mmvfl_run()
    recs = fed.record(["b", "coordinator"])
    fed()
    for name, rec in recs.items():
        logged = [
            (e.sender, e.kind, tuple(sorted(e.arrays)))
            for e in fed.transport.log.entries
            if e.receiver == name
        ]
        got = [(m.sender, m.kind, tuple(sorted(m.arrays))) for m in rec]
        assert got == logged and len(got) > 0
    # b received the consensus Z each round, never another party's view, labels or W
    names = {a for m in recs["b"] for a in m.arrays}
    assert names == {"Z"}
    # the coordinator received the Z_k (MMVFL: the label owner's is pulled towards its Y)
    assert {a for m in recs["coordinator"] for a in m.arrays} == {"Z_k"}
    # save / load round trip
    recs["b"].save(tmp_path / "b.npz")
    back = Recording.load(tmp_path / "b.npz")
    assert (back.party, back.role, back.algorithm) == ("b", "party", "mmvfl")
    assert len(back) == len(recs["b"])
    for m1, m2 in zip(back, recs["b"]):
        assert (m1.sender, m1.round, m1.kind, m1.meta) == (m2.sender, m2.round, m2.kind, m2.meta)
        np.testing.assert_array_equal(m1.arrays["Z"], m2.arrays["Z"])


def test_attacks_run_on_a_saved_recording_after_the_parties_are_gone(tmp_path: Path) -> None:
    run, fed, y = _mmvfl_run()
    recs = fed.record(["b", "coordinator"])
    fed()
    truth, setup = Truth.of_run(fed.locals), dict(fed.setup)
    live = audit(fed.algorithm, run, setup, recs, truth, AuxKnowledge())
    for name, rec in recs.items():
        rec.save(tmp_path / f"{name}.npz")
    truth.save(tmp_path / "truth.npz")
    del fed, recs
    gc.collect()
    loaded = {n: Recording.load(tmp_path / f"{n}.npz") for n in ("b", "coordinator")}
    again = audit(
        get_algorithm_spec("mmvfl"), run, setup, loaded, Truth.load(tmp_path / "truth.npz"),
        AuxKnowledge(),
    )  # fmt: skip
    assert again == live
    rows = {(r.attacker, r.observation): r for r in again if r.secret.startswith("labels")}
    assert set(rows) == {("b", "Z"), ("coordinator", "Z from the Z_k")}
    # the coordinator also holds each party's Z_k: a representation of that party's
    # features, scored beside what the consensus alone gives (tabular: MSE, no SSIM)
    feats = {(r.observation, r.metric) for r in again if r.secret.startswith("features")}
    assert feats == {(o, "mse") for p in "abc" for o in (f"Z_k of {p}", f"Z, for {p}'s features")}
    assert all(r.attacker == "coordinator" for r in again if r.secret.startswith("features"))
    # the label owner's labels, from what crossed: the consensus is pulled towards them
    for r in rows.values():
        assert r.value > 90 and r.chance == pytest.approx(100 / 3)
    assert all(r.secret == "labels of a" for r in rows.values())


@pytest.mark.slow
def test_multivfl_observations_are_the_activations_of_the_rows_they_name() -> None:
    """lr = 1e-30: nothing trains, so a label owner's observed activations of data owner d must
    equal d's bottom model on d's strips of exactly the rows the observation names."""
    torch = pytest.importorskip("torch")
    from fedviews.deep import MultiVFLParams

    rng = np.random.default_rng(0)
    n, D = 90, 2
    y = rng.integers(0, 3, size=n)
    y[:3] = [0, 1, 2]
    names = ("d0", "d1", "lo")
    datas = {
        d: PartyData(np.arange(n), rng.integers(0, 255, size=(n, 14, 28)).astype(np.uint8), None)
        for d in names[:D]
    }
    datas["lo"] = PartyData(np.arange(n), np.zeros((n, 0)), y)
    params = MultiVFLParams(rounds=2, batch_size=16, lr=1e-30, evaluate=False, device="cpu")
    run = RunSpec("multivfl", params, Roster(names, label_owners=("lo",), coordinator="server"))
    fed = build_in_process(run, datas)
    recs = fed.record(["lo", "d1"])
    fed()
    algo = fed.algorithm
    (grad_obs,) = algo.observations(run, fed.setup, recs["d1"])
    assert grad_obs.kind == "gradient" and grad_obs.labels_of == "lo"
    assert sorted(grad_obs.rows) == list(range(n))
    obs = algo.observations(run, fed.setup, recs["lo"])
    assert [o.features_of for o in obs] == ["d0", "d1"]
    for o in obs:
        party = fed.parties[o.features_of]
        with torch.no_grad():
            x = party.x["lo"][torch.as_tensor(o.rows)]
            expect = party.bottom(x).numpy()
        assert sorted(o.rows) == list(range(n))
        np.testing.assert_allclose(o.values, expect, rtol=1e-5, atol=1e-6)


def test_bad_requests_are_clear_errors() -> None:
    run, fed, _ = _mmvfl_run()
    with pytest.raises(ConfigError, match="'mallory' takes no part"):
        fed.record(["mallory"])
    with pytest.raises(ConfigError, match="unknown attack 'telepathy'"):
        check_attacks(["telepathy"], AuxKnowledge())
    with pytest.raises(ConfigError, match="needs auxiliary knowledge: set labelled > 0"):
        check_attacks(["direction"], AuxKnowledge(labelled=0))
    with pytest.raises(ConfigError, match=">= 0"):
        check_attacks([], AuxKnowledge(labelled=-1))
    recs = fed.record(["b"])
    fed()
    truth = Truth.of_run(fed.locals)
    with pytest.raises(ConfigError, match="'reconstruction' does not apply to mmvfl"):
        audit(
            fed.algorithm, run, fed.setup, recs, truth, AuxKnowledge(), attacks=["reconstruction"]
        )
    with pytest.raises(DataError, match="no true labels of 'x'"):
        truth.get("labels", "x", "train")


def test_a_recording_refuses_to_outgrow_its_memory_budget() -> None:
    run, fed, _ = _mmvfl_run()
    fed.parties["b"].record(Recording.of("b", "party", max_bytes=1000))
    with pytest.raises(ConfigError, match="record fewer message kinds or rounds"):
        fed()


def test_a_file_that_is_not_a_recording_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", a=np.zeros(3))
    with pytest.raises(DataError, match="is not a fedviews recording"):
        Recording.load(tmp_path / "x.npz")


@pytest.mark.parametrize("standardize", ["pooled", "none", "local"])
def test_hfedmv_models_label_the_samples_whose_features_an_attacker_knows(standardize) -> None:
    from fedviews.linear import HFedMVParams
    from fedviews.linear.hfedmv.spec import linear_predictor

    rng = np.random.default_rng(1)
    centres = rng.normal(scale=3.0, size=(3, 7))
    datas = {}
    for c in ("c0", "c1", "c2"):
        y = rng.integers(0, 3, size=60)
        y[:3] = [0, 1, 2]
        X = centres[y] + rng.normal(size=(60, 7))
        datas[c] = PartyData(np.arange(60), X, y, view_dims=(3, 4))
    params = HFedMVParams(n_rounds=3, standardize=standardize, evaluate=False)
    run = RunSpec("hfedmv", params, Roster(("c0", "c1", "c2"), label_owners=("c0", "c1", "c2")))
    fed = build_in_process(run, datas)
    recs = fed.record(["coordinator", "c0"])
    fed()
    truth = Truth.of_run(fed.locals)
    rows = audit(fed.algorithm, run, fed.setup, recs, truth, AuxKnowledge(known_features=30))
    seen = {(r.attacker, r.observation, r.secret) for r in rows}
    assert seen == {
        ("coordinator", "W_local from c0", "labels of c0"),
        ("coordinator", "W_local from c1", "labels of c1"),
        ("coordinator", "W_local from c2", "labels of c2"),
        ("c0", "global W", "labels of c1"),
        ("c0", "global W", "labels of c2"),
    }
    assert all(r.value > 90 and r.n_scored == 30 for r in rows)
    # the predictor itself, on a planted linear model: sum over views of X_k W_k
    W = [np.eye(3), np.zeros((4, 3))]
    X = np.hstack([np.eye(3)[[2, 0, 1]] * 5, rng.normal(size=(3, 4))])
    assert list(linear_predictor(W, (np.zeros(7), np.ones(7)))(X)) == [2, 0, 1]


@pytest.mark.slow
def test_sfedmv_server_averages_the_extractors_it_sent_and_labels_known_sequences() -> None:
    """Variable-length sequences: the server's view of the global GRUs (the average of the
    last replies it received) equals what every client received; both label a victim's
    sequences whose values they know, with the lengths honoured."""
    pytest.importorskip("torch")
    from fedviews.deep import SFedMVParams
    from fedviews.deep.sfedmv.spec import _averaged_extractors, _params_of

    rng = np.random.default_rng(2)
    datas = {}
    for c in ("c0", "c1", "c2"):
        y = np.arange(30) % 2
        views = [
            [rng.normal(loc=2.0 * y[i], size=(int(rng.integers(4, 9)), d)) for i in range(30)]
            for d in (2, 3)
        ]
        datas[c] = PartyData.from_sequences(np.arange(30), views, y)
    params = SFedMVParams(
        hidden_size=4, n_rounds=2, batch_size=8, fusion_rounds=2, evaluate=False, device="cpu"
    )
    run = RunSpec("sfedmv", params, Roster(("c0", "c1", "c2"), label_owners=("c0", "c1", "c2")))
    fed = build_in_process(run, datas)
    recs = fed.record(["coordinator", "c0"])
    fed()
    mine = _averaged_extractors(recs["coordinator"])
    for m in recs["c0"].select("final_view"):
        for name, a in _params_of(m).items():
            np.testing.assert_allclose(mine[int(m.number("view"))][name], a, rtol=1e-5, atol=1e-6)
    truth = Truth.of_run(fed.locals)
    assert truth.lengths[("c1", "c1")].shape == (30, 2)
    rows = audit(fed.algorithm, run, fed.setup, recs, truth, AuxKnowledge(known_features=20))
    assert {(r.attacker, r.secret) for r in rows} == {
        ("coordinator", "labels of c0"),
        ("coordinator", "labels of c1"),
        ("coordinator", "labels of c2"),
        ("c0", "labels of c1"),
        ("c0", "labels of c2"),
    }
    assert all(r.value >= 80 and r.n_scored == 20 for r in rows)  # the classes are far apart


def test_more_auxiliary_rows_than_observed_warn_and_say_how_many_are_used() -> None:
    """``params.labelled=5000`` (or ``known_features``) on fewer rows was cut without a
    word, and the attack then scored on one row (100 % against a chance of 100 %)."""
    from fedviews.errors import DataWarning

    run, fed, _ = _mmvfl_run()
    recs = fed.record(["coordinator"])
    fed()
    truth, setup = Truth.of_run(fed.locals), dict(fed.setup)
    with pytest.warns(DataWarning, match=r"params.known_features = 5000 is more than 'coordin"):
        rows = audit(fed.algorithm, run, setup, recs, truth, AuxKnowledge(known_features=5000))
    assert {r.aux for r in rows if r.secret.startswith("features")} == {"59 rows' raw features"}
