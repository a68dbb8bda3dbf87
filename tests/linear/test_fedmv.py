"""FedMV (V-FedMV, H-FedMV and baselines) on small slices of the real Handwritten data."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews import data
from fedviews.data import one_hot, partition_clients
from fedviews.errors import DataError, PrivacyError, ProtocolError
from fedviews.linear import (
    MMVFL,
    VFEDMV_POLICY,
    HFedMV,
    LocalMVL,
    SingleViewFL,
    VFedMV,
    fedmv_consensus,
    hfedmv_centralized,
    hfedmv_policy,
    mvl_local,
    vfedmv_centralized,
)
from fedviews.linear._consensus import ConsensusParty


def _std(X: np.ndarray) -> np.ndarray:
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return (X - X.mean(axis=0)) / sd


@pytest.fixture(scope="module")
def hw() -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray]:
    data.fetch("handwritten")
    ds = data.load("handwritten", views=["fou", "zer", "kar"])
    idx = data.balanced_subsample(ds.y, 16, random_state=0)  # 160 samples
    rng = np.random.default_rng(0)
    idx = rng.permutation(idx)
    Xs = [_std(v[idx]) for v in ds.views]
    y = ds.y[idx]
    return [X[:120] for X in Xs], y[:120], [X[120:] for X in Xs], y[120:]


def test_vfedmv_federated_equals_centralized(hw) -> None:
    Xs, y, _, _ = hw
    kw = {
        "beta": 4.0,
        "zeta": [2.0, 8.0, 4.0],
        "eta": 16.0,
        "max_iter": 8,
        "inner_max_iter": 5,
        "random_state": 3,
    }
    fed = VFedMV(**kw).fit(Xs, y)
    cen = vfedmv_centralized(Xs, one_hot(y)[0], **kw)
    np.testing.assert_allclose(fed.objective_, cen["objective"], rtol=1e-10)
    for Wf, Wc in zip(fed.W_, cen["W"], strict=True):
        np.testing.assert_allclose(Wf, Wc, atol=1e-8)
    np.testing.assert_allclose(fed.Z_, cen["Z"], atol=1e-8)


def test_vfedmv_equal_per_view_zetas_reduce_to_one_zeta(hw) -> None:
    """zeta_k = zeta for every view is the single-zeta model (same W, Z, objective, test
    predictions); an unequal zeta_k changes the fit, so the per-view values are used."""
    Xs, y, Xte, _ = hw
    kw = {"beta": 4.0, "eta": 8.0, "max_iter": 6, "inner_max_iter": 3, "random_state": 1}
    one = VFedMV(zeta=8.0, **kw).fit(Xs, y)
    per_view = VFedMV(zeta=[8.0, 8.0, 8.0], **kw).fit(Xs, y)
    np.testing.assert_array_equal(per_view.objective_, one.objective_)
    for Wp, Wo in zip(per_view.W_, one.W_, strict=True):
        np.testing.assert_array_equal(Wp, Wo)
    np.testing.assert_array_equal(per_view.Z_, one.Z_)
    np.testing.assert_array_equal(per_view.decision_function(Xte), one.decision_function(Xte))
    other = VFedMV(zeta=[8.0, 8.0, 1.0], **kw).fit(Xs, y)
    assert not np.allclose(other.W_[2], one.W_[2])


def test_vfedmv_objective_non_increasing_and_accurate(hw) -> None:
    Xs, y, Xte, yte = hw
    m = VFedMV(max_iter=25, inner_max_iter=5).fit(Xs, y)
    obj = np.array(m.objective_)
    assert np.all(np.diff(obj) <= 1e-9 * obj[:-1])
    assert obj[-1] < 0.5 * obj[0]
    assert np.mean(m.predict(Xte) == yte) > 0.7  # 10 classes, 120 training samples


def test_testing_phase_equals_closed_form_minimiser(hw) -> None:
    Xs, y, Xte, _ = hw
    zeta = [1.0, 8.0, 32.0]  # unequal: the consensus needs many iterations
    m = VFedMV(zeta=zeta, max_iter=5, inner_max_iter=3, test_max_iter=5000, test_tol=1e-13).fit(
        Xs, y
    )
    Z = m.decision_function(Xte)
    P = [X @ W for X, W in zip(Xte, m.W_, strict=True)]
    w = np.array(zeta) / (1 + np.array(zeta))
    closed = sum(wk * Pk for wk, Pk in zip(w, P, strict=True)) / w.sum()
    np.testing.assert_allclose(Z, closed, atol=1e-9)
    assert m.test_iterations_ > 10
    # the local (centralized) twin of the testing phase agrees
    Zl, _ = fedmv_consensus(P, zeta, max_iter=5000, tol=1e-13)
    np.testing.assert_allclose(Zl, Z, atol=1e-10)
    # Z^test minimises Eq. (2) over Z (with Z_k eliminated): gradient is zero
    grad = sum(wk * (Z - Pk) for wk, Pk in zip(w, P, strict=True))
    assert np.abs(grad).max() < 1e-8
    np.testing.assert_array_equal(m.predict(Xte), m.classes_[np.argmax(closed, axis=1)])


def test_vfedmv_testing_phase_goes_through_the_runner(hw, monkeypatch) -> None:
    """predict runs the deployed testing phase: the spec's runner drives the server, which
    sends test_init / test_update to the parties' handlers; no training round is rerun."""
    from fedviews.linear.vfedmv import VFEDMV_SPEC

    Xs, y, Xte, _ = hw
    calls = []
    runner = type(VFEDMV_SPEC).run_coordinator

    def counted(self, coord, on_round_end=None):
        calls.append(coord)
        return runner(self, coord, on_round_end)

    monkeypatch.setattr(type(VFEDMV_SPEC), "run_coordinator", counted)
    m = VFedMV(max_iter=3, inner_max_iter=2).fit(Xs, y)
    n_fit = len(m.transport_.log.entries)
    Z, objective = m.Z_.copy(), list(m.objective_)
    first = m.decision_function(Xte)
    assert calls == [m.server_, m.server_]
    kinds = {e.kind for e in m.transport_.log.entries[n_fit:]}
    assert kinds == {"test_init", "test_update", "test_init:reply", "test_update:reply"}
    assert m.objective_ == objective and np.array_equal(m.server_.Z, Z)
    np.testing.assert_array_equal(m.decision_function(Xte), first)  # again, the same rows
    P = [X @ W for X, W in zip(Xte, m.W_, strict=True)]
    local, _ = fedmv_consensus(P, m.zeta, max_iter=m.test_max_iter, tol=m.test_tol)
    np.testing.assert_allclose(first, local, atol=1e-12)


def test_vfedmv_message_log_only_allowed_arrays(hw) -> None:
    Xs, y, Xte, _ = hw
    m = VFedMV(max_iter=3, inner_max_iter=2).fit(Xs, y)
    m.predict(Xte)
    log = m.transport_.log
    assert log.arrays_sent(receiver="coordinator") == {"Z_k", "Z_k_test"}
    assert log.arrays_sent(sender="coordinator") == {"Z", "Z_test"}
    for k in range(3):  # parties never talk to each other, and never send W_k or X_k^test
        assert log.arrays_sent(sender=f"party{k}") == {"Z_k", "Z_k_test"}
    with pytest.raises(PrivacyError):
        VFEDMV_POLICY.check("party0", "party", "coordinator", "coordinator", ["W_k"])


def test_vfedmv_errors(hw) -> None:
    Xs, y, Xte, _ = hw
    with pytest.raises(DataError, match="labels are missing"):
        VFedMV().fit(Xs, None)
    m = VFedMV(max_iter=2, inner_max_iter=2).fit(Xs, y)
    with pytest.raises(DataError):
        m.predict(Xte[:2])


def _clients(Xs: list[np.ndarray], y: np.ndarray, n: int, scheme: str = "iid") -> list:
    parts = partition_clients(y, n, scheme, classes_per_client=4, random_state=0)
    return [([X[p] for X in Xs], y[p]) for p in parts]


def test_hfedmv_single_client_equals_local_mvl(hw) -> None:
    Xs, y, _, _ = hw
    kw = {"beta": 4.0, "zeta": [2.0, 4.0, 8.0], "eta": 8.0, "inner_max_iter": 4, "random_state": 7}
    h = HFedMV(n_rounds=3, local_iter=2, **kw).fit([(Xs, y)])
    ref = mvl_local(Xs, one_hot(y)[0], n_iter=6, **kw)
    for Wh, Wr in zip(h.W_, ref["W"], strict=True):
        np.testing.assert_allclose(Wh, Wr, atol=1e-10)
    np.testing.assert_allclose(h.objective_, ref["objective"][1::2], rtol=1e-10)
    local = LocalMVL(n_iter=6, **kw).fit(Xs, y)
    for Wh, Wl in zip(h.W_, local.W_, strict=True):
        np.testing.assert_allclose(Wh, Wl, atol=1e-10)
    cen = hfedmv_centralized([(Xs, one_hot(y)[0])], n_rounds=3, local_iter=2, **kw)
    for Wh, Wc in zip(h.W_, cen["W"], strict=True):
        np.testing.assert_allclose(Wh, Wc, atol=1e-10)
    np.testing.assert_allclose(h.objective_, cen["objective"], rtol=1e-10)


def test_hfedmv_federated_equals_centralized(hw) -> None:
    """Three unequal clients (60, 40, 20 samples: the smaller two solve their W steps in
    the Woodbury form, the reference in the plain one) against the reference written from
    Eqs. (14)-(17) and the weighted average of Algorithm 3."""
    Xs, y, _, _ = hw
    cuts = [slice(0, 60), slice(60, 100), slice(100, 120)]
    clients = [([X[c] for X in Xs], y[c]) for c in cuts]
    kw = {"beta": 4.0, "zeta": [2.0, 4.0, 8.0], "eta": 8.0, "inner_max_iter": 4, "random_state": 5}
    h = HFedMV(n_rounds=3, local_iter=2, **kw).fit(clients)
    Y = [one_hot(yl, h.classes_)[0] for _, yl in clients]
    cen = hfedmv_centralized(
        [(Xl, Yl) for (Xl, _), Yl in zip(clients, Y, strict=True)], n_rounds=3, local_iter=2, **kw
    )
    for Wh, Wc in zip(h.W_, cen["W"], strict=True):
        np.testing.assert_allclose(Wh, Wc, atol=1e-8)
    for local, ref in zip(h.local_W_, cen["W_local"], strict=True):
        for Wh, Wc in zip(local, ref, strict=True):
            np.testing.assert_allclose(Wh, Wc, atol=1e-8)
    np.testing.assert_allclose(h.objective_, cen["objective"], rtol=1e-10)


@pytest.mark.parametrize(
    "module",
    [
        "fedviews.linear._reference",
        "fedviews.linear.vfedmv.reference",
        "fedviews.linear.hfedmv.reference",
    ],
)
def test_the_references_share_no_update_step_with_the_parties(module: str) -> None:
    """The centralized references are written from the equations: they import no party,
    no protocol step (z_k_step, z_step, the local learner) and not the fast ℓ2,1 solver."""
    import ast
    import importlib
    import inspect

    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    shared = {
        "fedviews.linear._consensus",
        "fedviews.linear._l21",
        "fedviews.linear._consensus_fit",
    }
    assert not {m for m in imported if m and (m in shared or m.endswith((".parties", ".protocol")))}


def test_hfedmv_aggregation_is_sample_weighted_mean(hw) -> None:
    Xs, y, Xte, yte = hw
    # three unequal clients: 60, 40, 20 samples
    cuts = [slice(0, 60), slice(60, 100), slice(100, 120)]
    clients = [([X[c] for X in Xs], y[c]) for c in cuts]
    h = HFedMV(n_rounds=4, local_iter=1, inner_max_iter=3).fit(clients)
    assert h.client_sizes_ == [60, 40, 20]
    for k in range(3):
        expected = (60 * h.local_W_[0][k] + 40 * h.local_W_[1][k] + 20 * h.local_W_[2][k]) / 120
        np.testing.assert_allclose(h.W_[k], expected, atol=1e-12)
    assert np.mean(h.predict(Xte) == yte) > 0.6


def test_hfedmv_message_log_only_w(hw) -> None:
    Xs, y, _, _ = hw
    h = HFedMV(n_rounds=2, local_iter=1, inner_max_iter=2).fit(_clients(Xs, y, 4))
    log = h.transport_.log
    assert log.arrays_sent(receiver="coordinator") == {"W_local_0", "W_local_1", "W_local_2"}
    assert log.arrays_sent(sender="coordinator") == {"W_0", "W_1", "W_2"}
    assert log.rounds == 2
    with pytest.raises(PrivacyError):
        hfedmv_policy(3).check("client0", "client", "coordinator", "coordinator", ["Z"])


def test_hfedmv_errors(hw) -> None:
    Xs, y, _, _ = hw
    clients = _clients(Xs, y, 2)
    missing = [clients[0], (clients[1][0][:2], clients[1][1])]
    with pytest.raises(DataError, match="holds 2 views but client 0 holds 3"):
        HFedMV(n_rounds=1).fit(missing)
    wrong = [
        clients[0],
        ([clients[1][0][0], clients[1][0][1][:, :5], clients[1][0][2]], clients[1][1]),
    ]
    with pytest.raises(DataError, match="view dimensions differ"):
        HFedMV(n_rounds=1).fit(wrong)
    with pytest.raises(DataError, match="labels are missing"):
        HFedMV(n_rounds=1).fit([clients[0], (clients[1][0], None)])
    with pytest.raises(DataError):
        HFedMV(n_rounds=1).fit([])


def test_hfedmv_label_skew_and_single_view_fl(hw) -> None:
    Xs, y, Xte, yte = hw
    clients = _clients(Xs, y, 4, "label_skew")
    assert all(len(np.unique(c[1])) <= 4 for c in clients)
    h = HFedMV(n_rounds=5, local_iter=1, inner_max_iter=3).fit(clients)
    assert len(h.classes_) == 10
    assert np.mean(h.predict(Xte) == yte) > 0.5
    sv = SingleViewFL(n_rounds=3, local_iter=3).fit([(c[0][0], c[1]) for c in clients])
    assert sv.predict(Xte[0]).shape == yte.shape
    assert sv.transport_.log.arrays_sent(receiver="coordinator") == {"W_local_0"}


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("Z_k", np.nan, "'party2' sent 'Z_k' with NaN"),
        ("Z_k", np.inf, "'party2' sent 'Z_k' with NaN"),
        ("zeta", np.nan, "'party2' sent meta\\['zeta'\\] = nan"),
        ("zeta", -1.0, "'party2' sent zeta = -1.0; each zeta_k must be > 0"),
        ("zeta", 0.0, "'party2' sent zeta = 0.0"),
        ("local_objective", np.nan, "'party2' sent meta\\['local_objective'\\]"),
        # finite, but the consensus overflows: the sender is named, not the parties that
        # would have received an infinite Z (a security review found them blamed)
        ("Z_k", 1e300, "'party2' sent values so large .* the consensus overflows"),
    ],
)
def test_the_server_refuses_a_poisoned_z_k_or_zeta(hw, monkeypatch, name, value, match) -> None:
    """V-FedMV's server took a party's Z_k, zeta_k and local objective as sent: a NaN or
    infinite Z_k or zeta made Z (and every party's next W) NaN and the objective nan without
    an error, a negative or zero zeta_k weighted the consensus against that party (zeta -1 of
    party2: objective 193 instead of 288 after 3 rounds, no error), a NaN local objective made
    the reported objective nan."""
    Xs, y, _, _ = hw
    honest = ConsensusParty.reply

    def reply(self, msg, arrays=None, meta=None):
        arrays, meta = dict(arrays or {}), dict(meta or {})
        if self.name == "party2" and name in arrays:
            arrays[name] = arrays[name] * value
        if self.name == "party2" and name in meta:
            meta[name] = value
        return honest(self, msg, arrays, meta)

    monkeypatch.setattr(ConsensusParty, "reply", reply)
    with pytest.raises(ProtocolError, match=match) as err:
        VFedMV(max_iter=3, inner_max_iter=3).fit(Xs, y)
    assert err.value.party == "party2"


@pytest.mark.parametrize(
    ("who", "match"),
    [
        # client0 replies first: its own reply is refused for its NaN
        ("client0", "'client0' sent 'W_local_0' with NaN"),
        # client0, honest, overflowed first: client1 is named, not client0
        ("client1", "'client1' sent 'W_local_0' with values so large .* what 'client0' comput"),
    ],
    ids=["culprit-first", "victim-first"],
)
@pytest.mark.parametrize("wire", [False, True], ids=["handed-over", "encoded"])
def test_hfedmv_names_the_client_whose_huge_w_local_overflowed_another(
    hw, monkeypatch, who, match, wire
):
    """A client's finite but huge ``W_local`` (1e300) averages into a finite, poisoned global
    ``W``; the next round's local steps overflow on it and the first client to reply with
    NaN was named, an honest one unless the culprit replied first. The server names the
    client whose ``W_local`` of the round before was the largest (and huge), in one process
    and where every message is encoded and decoded (a gRPC hub's path)."""
    from fedviews.federation import InProcessTransport
    from fedviews.linear.hfedmv.parties import HFedMVClient

    class Wire(InProcessTransport):
        def request(self, msg):
            return self._loopback(self.local[msg.receiver], msg)

    Xs, y, _, _ = hw
    honest = HFedMVClient.reply

    def reply(self, msg, arrays=None, meta=None):
        arrays = dict(arrays or {})
        if self.name == who and msg.round == 1 and "W_local_0" in arrays:
            arrays["W_local_0"] = arrays["W_local_0"] * 1e300
        return honest(self, msg, arrays, meta)

    monkeypatch.setattr(HFedMVClient, "reply", reply)
    with pytest.raises(ProtocolError, match=match) as err:
        kw = {"transport": Wire} if wire else {}
        HFedMV(n_rounds=3, local_iter=1, inner_max_iter=2, **kw).fit(_clients(Xs, y, 3))
    assert err.value.party == who


def test_a_test_view_of_another_row_count_names_its_sender(hw, monkeypatch) -> None:
    """The server took the first party's Z_k_test row count as the one every party must send:
    a first party with one row too many got the honest second named. The count most parties
    send (in a deployment: the test rows the setup agreed) is the one expected."""
    Xs, y, Xte, _ = hw
    model = VFedMV(max_iter=3, inner_max_iter=3).fit(Xs, y)
    honest = ConsensusParty.reply

    def reply(self, msg, arrays=None, meta=None):
        arrays = dict(arrays or {})
        if self.name == "party0" and "Z_k_test" in arrays:
            arrays["Z_k_test"] = np.vstack([arrays["Z_k_test"], arrays["Z_k_test"][:1]])
        return honest(self, msg, arrays, meta)

    monkeypatch.setattr(ConsensusParty, "reply", reply)
    with pytest.raises(ProtocolError, match="'party0' sent 'Z_k_test' of shape") as err:
        model.predict(Xte)
    assert err.value.party == "party0"


def test_an_overflow_is_pinned_on_the_largest_input() -> None:
    """A deployed party's zeta of 1.7e308 with Z_k of 10 made the consensus NaN, and the
    parties that received it were named: the refusal names the largest zeta_k * max |Z_k|."""
    from fedviews.linear._consensus import overflowed

    err = overflowed(
        ["a", "b", "c"],
        [8.0, 1.7e308, 8.0],
        [np.ones((2, 3)), np.full((2, 3), 10.0), -np.ones((2, 3))],
        [1.0, 2.0, 3.0],
    )
    assert err.party == "b" and "the consensus overflows" in str(err)
    err = overflowed(["a", "b"], [1.0, 1.0], [np.ones((2, 3)), np.ones((2, 3))], [1.0, np.inf])
    assert err.party == "b"  # (its local objective)


def test_a_huge_z_k_that_makes_another_party_s_solver_fail_names_its_sender(monkeypatch):
    """A Z_k of 1e20 x (finite, nothing overflows) made round 3's IRLS of an honest party
    numerically singular, rounds later, when every party's Z_k had grown towards the
    poisoned Z: the honest party was the one named (its report told it to raise beta). The
    server names the party that sent the largest Z_k so far, where it is huge."""
    import fedviews.linear._testing_phase as tp

    ds = data.load("handwritten", views=["pix", "fou", "zer"])
    rows = np.random.default_rng(0).permutation(len(ds.y))[:100]
    honest = tp.ConsensusTester._send_Z

    def send(self, msg, name, Z_k, local):
        if self.name == "party2" and msg.round == 1 and name == "Z_k":
            Z_k = Z_k * 1e20
        return honest(self, msg, name, Z_k, local)

    monkeypatch.setattr(tp.ConsensusTester, "_send_Z", send)
    est = MMVFL(beta=0.5, max_iter=3, tol=0.0, inner_max_iter=10, standardize=True)
    with pytest.raises(ProtocolError, match=r"^'party2' sent 'Z_k' with values so large") as err:
        est.fit([X[rows] for X in ds.views], ds.y[rows])
    assert err.value.party == "party2" and "failed on what was computed from them (Data" in str(
        err.value
    )
