"""The plain split NN (the audit's reference point): federated equals centralized, only logits and
their gradients cross, and a passive party's observations name the right rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _wire import WireTransport, assert_same_run, batched_equals_one_each  # noqa: E402

from fedviews.data import PartyData  # noqa: E402
from fedviews.deep._common import batches  # noqa: E402
from fedviews.deep._split import build_module  # noqa: E402
from fedviews.deep.splitnn.parties import bottom_mlp, strips  # noqa: E402
from fedviews.deep.splitnn.spec import SplitNNParams, epoch_seed  # noqa: E402
from fedviews.errors import ConfigError, DataError  # noqa: E402
from fedviews.federation import Roster, RunSpec, build_in_process, spawn_streams  # noqa: E402
from fedviews.privacy.attacks import labels_from_softmax_gradient  # noqa: E402


def _data(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    y[:3] = [0, 1, 2]
    Xp = rng.integers(0, 255, size=(n, 4, 6)).astype(np.uint8)
    Xa = rng.integers(0, 255, size=(n, 4, 6)).astype(np.uint8)
    ids = np.arange(n)
    return {"p": PartyData(ids, Xp), "a": PartyData(ids[::-1], Xa[::-1], y[::-1])}, Xp, Xa, y


PARAMS = SplitNNParams(epochs=2, batch_size=16, lr=0.1, hidden=8, evaluate=False, device="cpu")


def _run(params=PARAMS, seed=3):
    datas, Xp, Xa, y = _data()
    run = RunSpec("splitnn", params, Roster(("p", "a"), label_owner="a"), seed=seed)
    return run, build_in_process(run, datas), Xp, Xa, y


def test_federated_equals_one_model_on_both_strips():
    run, fed, Xp, Xa, y = _run()
    fed()
    # centralized: the same two bottoms (same seeds), one SGD over all of them, the same batches
    seeds = [int(s.generate_state(1)[0]) for s in spawn_streams(run.seed, 2)]
    nets = [build_module(s, lambda: bottom_mlp(24, 8, 3), "cpu") for s in seeds]
    params = [q for net in nets for q in net.parameters()]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.0)
    X = [torch.as_tensor(strips(Xp)), torch.as_tensor(strips(Xa))]
    Y = torch.as_tensor(y)
    for e in range(1, PARAMS.epochs + 1):
        rng = np.random.default_rng(epoch_seed(run.seed, e))
        for idx in batches(len(y), PARAMS.batch_size, rng):
            loss = torch.nn.functional.cross_entropy(
                nets[1](X[1][idx]) + nets[0](X[0][idx]), Y[idx]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    for name, net in zip(("p", "a"), nets):
        got = fed.parties[name].net.state_dict()
        for k, v in net.state_dict().items():
            np.testing.assert_allclose(got[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6)
    assert len(fed.coordinator.history) == PARAMS.epochs


def test_tensors_handed_over_equal_the_wire_run():
    """In one process logits and their gradients are handed over as tensors; through their
    encoding (as gRPC carries them) the run is the same: equal models, messages and bytes."""
    run, fast, *_ = _run()
    datas = _data()[0]
    wire = build_in_process(run, datas, transport=WireTransport)
    fast(), wire()
    assert_same_run(fast, wire)


def test_the_lean_path_equals_every_message_checked_in_full(monkeypatch):
    """A message of a signature met before is handed over without its checks (``_lean``):
    the run (models, messages, bytes, the log in order) is bit for bit that of a transport
    that checks every message in full."""
    import fedviews.federation._transport as transport

    run, lean, *_ = _run()
    lean()
    assert lean.transport._lanes  # (the lanes were taken)
    monkeypatch.setattr(transport, "signature", lambda msg: None)
    full = build_in_process(run, _data()[0])
    full()
    assert not full.transport._lanes
    assert_same_run(lean, full)
    assert lean.transport.log.summary()["exchanges"] == full.transport.log.summary()["exchanges"]


def test_passive_backward_passes_run_as_one_and_equal_one_each(monkeypatch):
    """In one process the gradients of the label owner's scatter go back through the passive
    parties' bottoms in one autograd call; every model and message is bit for bit that of
    one backward pass per party."""
    datas, _, Xa, y = _data()
    datas["q"] = PartyData(np.arange(len(y)), Xa[:, ::-1].copy())
    run = RunSpec("splitnn", PARAMS, Roster(("p", "q", "a"), label_owner="a"), seed=3)
    calls = batched_equals_one_each(run, datas, monkeypatch)
    assert calls == [2] * (PARAMS.epochs * 3)  # both passives, every batch (40 rows by 16)


def _trained_pair(batch_backward: bool) -> tuple[Any, Any]:
    """The passive party ``p`` and label owner ``a`` of a run trained two epochs (the
    optimiser has momentum), a new epoch of batches of 16 begun (``batch_backward``: the
    transport stages the backward passes)."""
    from fedviews.federation import InProcessTransport

    run, _, *_ = _run()
    fed = build_in_process(
        run, _data()[0], transport=lambda p: InProcessTransport(p, batch_backward=batch_backward)
    )
    fed()
    p, a = fed.parties["p"], fed.parties["a"]
    a.send("p", "splitnn.epoch", meta={"shuffle_seed": 1, "batch_size": 16})
    return p, a


@pytest.mark.parametrize("batch_backward", [True, False])
def test_a_refused_gradient_leaves_the_passive_party_as_it_was(batch_backward):
    """A label owner's malformed ``splitnn.backward`` (a gradient of the wrong shape or dtype,
    or one with no output pending) is refused naming it, and the passive party's network and
    optimiser state (momentum) stay bit for bit as they were, whether the transport stages the
    backward pass or the handler runs it; a ``splitnn.forward`` of a batch that is no index of
    the epoch's batches is refused. A NaN gradient is refused naming it too; in one process its
    finiteness is settled when the request returns (docs/runtime.md), so the receiver may have
    stepped with it by then, and the run fails."""
    from _tamper import tampered

    from fedviews.errors import ProtocolError

    p, a = _trained_pair(batch_backward)
    for b in (0.5, 3, -1):  # 40 rows: batches 0, 1, 2 (0.5 was taken as batch 0)
        with pytest.raises(ProtocolError, match=f"'a' asked for batch {float(b)!r}, not in"):
            a.send("p", "splitnn.forward", meta={"batch": b})
    out = a.send("p", "splitnn.forward", meta={"batch": 0}).arrays["logits"]
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    before = {k: v.copy() for k, v in p.state_dict().items()}
    for bad, match in [
        (grad[1:], "'a' sent 'grad_logits' of shape \\(15, 3\\)"),
        (tampered(grad, "int64"), "'a' sent 'grad_logits' as int64"),
    ]:
        with pytest.raises(ProtocolError, match=match) as err:
            a.scatter("splitnn.backward", {"p": {"grad_logits": bad}})
        assert err.value.party == "a"
        after = p.state_dict()
        for k, v in before.items():
            np.testing.assert_array_equal(after[k], v, err_msg=k)
    a.scatter("splitnn.backward", {"p": {"grad_logits": grad}})  # valid: the model moves
    assert any(not np.array_equal(v, before[k]) for k, v in p.state_dict().items())
    moved = {k: v.copy() for k, v in p.state_dict().items()}
    with pytest.raises(ProtocolError, match="'a' sent a gradient before a forward") as err:
        a.scatter("splitnn.backward", {"p": {"grad_logits": grad}})
    assert err.value.party == "a"
    for k, v in moved.items():
        np.testing.assert_array_equal(p.state_dict()[k], v, err_msg=k)
    a.send("p", "splitnn.forward", meta={"batch": 1})
    with pytest.raises(ProtocolError, match="'a' sent 'grad_logits' with NaN") as err:
        a.scatter("splitnn.backward", {"p": {"grad_logits": tampered(grad, np.nan)}})
    assert err.value.party == "a"


def test_one_round_trip_per_batch_the_gradient_rides_on_the_next_request():
    """An epoch of B batches is B ``splitnn.forward`` requests and their replies per passive
    party and one ``splitnn.backward``: the first request without a gradient, every later one
    with the gradient of the batch before (``grad_logits`` of its rows), the last gradient
    alone; the label owner's gradients per batch are those the passive party applied."""
    run, fed, *_ = _run()
    fed()
    log = fed.transport.log
    to_p = [(e.kind, e.arrays, e.shapes) for e in log.entries if e.receiver == "p"]
    batch_rows = [16, 16, 8]  # 40 rows by 16
    epoch = [("splitnn.epoch", (), ())]
    epoch += [("splitnn.forward", (), ())]
    epoch += [("splitnn.forward", ("grad_logits",), ((r, 3),)) for r in batch_rows[:-1]]
    epoch += [("splitnn.backward", ("grad_logits",), ((batch_rows[-1], 3),))]
    assert to_p == epoch * PARAMS.epochs
    kinds = [e.kind for e in log.entries if "p" in (e.sender, e.receiver)]
    assert kinds.count("splitnn.forward:reply") == len(batch_rows) * PARAMS.epochs
    assert kinds.count("splitnn.backward:reply") == PARAMS.epochs


@pytest.mark.parametrize("batch_backward", [True, False])
def test_a_forward_request_is_checked_whole_before_its_gradient_changes_anything(
    batch_backward,
):
    """A ``splitnn.forward`` without the gradient of the output still pending, one with a
    gradient for no pending output, one whose gradient has the wrong shape or dtype, or one of
    a batch the epoch does not have (with a valid gradient) is refused naming the label owner,
    and the passive party stays bit for bit as it was (network, momentum, the pending output:
    the right request then goes through), whether the transport stages the backward pass or
    the handler runs it."""
    from _tamper import tampered

    from fedviews.errors import ProtocolError

    p, a = _trained_pair(batch_backward)
    grad = torch.randn((16, 3), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ProtocolError, match="'a' sent a gradient before a forward") as err:
        a.scatter("splitnn.forward", {"p": {"grad_logits": grad}}, meta={"batch": 0})
    assert err.value.party == "a"
    out = a.send("p", "splitnn.forward", meta={"batch": 0}).arrays["logits"]
    before = {k: v.copy() for k, v in p.state_dict().items()}
    for arrays, batch, match in [
        ({}, 1, "'a' asked for batch 1 without returning the gradient 'grad_logits'"),
        ({"grad_logits": grad[1:]}, 1, "'a' sent 'grad_logits' of shape \\(15, 3\\)"),
        ({"grad_logits": tampered(grad, "int64")}, 1, "'a' sent 'grad_logits' as int64"),
        ({"grad_logits": grad}, 3, "'a' asked for batch 3.0, not in the current epoch"),
    ]:
        with pytest.raises(ProtocolError, match=match) as err:
            a.scatter("splitnn.forward", {"p": arrays}, meta={"batch": batch})
        assert err.value.party == "a"
        after = p.state_dict()
        for k, v in before.items():
            np.testing.assert_array_equal(after[k], v, err_msg=k)
        assert p._pending is not None and p._pending.shape == out.shape
    a.scatter("splitnn.forward", {"p": {"grad_logits": grad}}, meta={"batch": 1})  # valid
    assert any(not np.array_equal(v, before[k]) for k, v in p.state_dict().items())
    assert p._pending is not None and p._pending.shape == (16, 3)


def test_only_logits_and_their_gradients_cross_and_the_passive_sees_the_labels():
    run, fed, _, _, y = _run()
    rec = fed.record(["p"])["p"]
    fed()
    log = fed.transport.log
    assert log.arrays_sent("p", "a") == {"logits"}
    assert log.arrays_sent("a", "p") == {"grad_logits"}
    assert log.arrays_sent("coordinator") == set() and log.arrays_sent(None, "coordinator") == set()
    (obs,) = fed.algorithm.observations(run, fed.setup, rec)
    assert obs.kind == "softmax_gradient" and obs.labels_of == "a"
    assert sorted(obs.rows) == list(range(len(y)))
    # the rows are the passive party's own rows: their labels are y in its (ID) order
    assert (labels_from_softmax_gradient(obs.values) == y[obs.rows]).all()


def test_bad_configs_are_clear_errors():
    datas, *_ = _data()
    with pytest.raises(ConfigError, match=r"^lr must be a finite number > 0, got 0"):
        build_in_process(
            RunSpec("splitnn", SplitNNParams(lr=0), Roster(("p", "a"), label_owner="a")), datas
        )
    with pytest.raises(ConfigError, match="label owner .x. is not one of the parties"):
        build_in_process(RunSpec("splitnn", PARAMS, Roster(("p", "a"), label_owner="x")), datas)
    with pytest.raises(DataError, match="no test split"):
        build_in_process(
            RunSpec("splitnn", SplitNNParams(device="cpu"), Roster(("p", "a"), label_owner="a")),
            datas,
        )


def test_it_learns_real_digits_and_reports_the_joint_models_accuracy():
    """Its defaults (5 epochs, lr 0.01) on 500 MNIST digits cut into two strips: the reported
    test accuracy is that of the two trained bottoms' summed logits, and far above chance."""
    from fedviews.deep.splitnn.spec import SPLITNN_SPEC
    from fedviews.deploy import load_deploy_config
    from fedviews.errors import DataError as Missing

    cfg = load_deploy_config(
        {
            "algorithm": "splitnn",
            "federation": {"parties": ["top", "bottom"], "label_owner": "bottom"},
            "data": {"dataset": "mnist", "n_per_class": 50, "n_test": 300},
            "params": {"device": "cpu"},
        }
    )
    try:
        datas = SPLITNN_SPEC.demo_data(cfg)
    except Missing as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"MNIST not available: {exc}")
    fed = build_in_process(cfg, datas)
    fed()
    metrics, _ = SPLITNN_SPEC.coordinator_results(fed.coordinator)
    with torch.no_grad():
        logits = sum(
            fed.parties[p].net.eval()(torch.as_tensor(strips(datas[p].X_test)))
            for p in ("top", "bottom")
        )
    y_test = datas["bottom"].y_test
    assert metrics["final_accuracy"] == float(np.mean(logits.argmax(1).numpy() == y_test))
    assert metrics["final_accuracy"] > 0.6  # chance: 0.1


def _user_bottom(shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(shape[0], 5), torch.nn.Tanh())


def _user_top(shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
    return torch.nn.Linear(shape[0], n_classes)


def test_user_networks_on_table_columns_equal_one_model():
    """Table columns (4 and 7 of them), the user's bottoms and top: the federation trains the
    one model of the two bottoms and the top on their outputs side by side, the label
    owner's first; the top stays with the label owner."""
    rng = np.random.default_rng(1)
    n, ids = 40, np.arange(40)
    y = rng.integers(0, 3, size=n)
    Xp, Xa = rng.normal(size=(n, 4)), rng.normal(size=(n, 7))
    datas = {"p": PartyData(ids, Xp), "a": PartyData(ids, Xa, y)}
    params = SplitNNParams(
        epochs=2, batch_size=16, lr=0.1, evaluate=False, device="cpu",
        bottom=_user_bottom, top=_user_top,
    )  # fmt: skip
    run = RunSpec("splitnn", params, Roster(("p", "a"), label_owner="a"), seed=3)
    fed = build_in_process(run, datas)
    fed()
    seeds = [int(s.generate_state(1)[0]) for s in spawn_streams(run.seed, 3)]
    nets = [
        build_module(s, lambda k=k: _user_bottom((k,), 3), "cpu")  # type: ignore[misc]
        for s, k in zip(seeds[:2], (4, 7), strict=True)
    ]
    top = build_module(seeds[2], lambda: _user_top((10,), 3), "cpu")
    opt = torch.optim.SGD([q for m in (*nets, top) for q in m.parameters()], lr=0.1, momentum=0.9)
    X = [torch.as_tensor(v, dtype=torch.float32) for v in (Xp, Xa)]
    for e in range(1, params.epochs + 1):
        for idx in batches(n, params.batch_size, np.random.default_rng(epoch_seed(run.seed, e))):
            z = top(torch.cat([nets[1](X[1][idx]), nets[0](X[0][idx])], dim=1))
            loss = torch.nn.functional.cross_entropy(z, torch.as_tensor(y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    for name, module, prefix in (
        ("p", nets[0], "net/"),
        ("a", nets[1], "net/"),
        ("a", top, "top/"),
    ):
        mine = fed.algorithm.party_results(fed.parties[name])
        for k, v in module.state_dict().items():
            np.testing.assert_allclose(mine[prefix + k], v.numpy(), rtol=1e-5, atol=1e-6)
    assert fed.transport.log.arrays_sent("a", "p") == {"grad_logits"}  # the top stays home


def test_a_bottom_that_does_not_fit_the_sum_is_a_config_error():
    ids, y = np.arange(12), np.arange(12) % 3
    datas = {"p": PartyData(ids, np.ones((12, 4))), "a": PartyData(ids, np.ones((12, 2)), y)}
    params = SplitNNParams(epochs=1, evaluate=False, device="cpu", bottom=_user_bottom)
    # 5 features from each party, without a top to read them
    with pytest.raises(ConfigError, match=r"output is \(5,\), not the \(3,\) logits"):
        build_in_process(RunSpec("splitnn", params, Roster(("p", "a"), label_owner="a")), datas)
    with pytest.raises(ConfigError, match="bottom = 'no_such_module:f': cannot import"):
        params = SplitNNParams(bottom="no_such_module:f")
        build_in_process(RunSpec("splitnn", params, Roster(("p", "a"), label_owner="a")), datas)


# --------------------------------------------------------------------------- the estimator


def test_the_estimator_equals_the_in_process_run_of_a_deployment_config():
    """``SplitNN.fit`` of the images the demo data deals is the run of the deployment config
    (same seed, parties, label owner): the same loss every epoch, the same model parts, and
    ``predict`` the label owner's own prediction of the test rows (its reported accuracy)."""
    from fedviews.deep import SplitNN
    from fedviews.deep.splitnn.spec import SPLITNN_SPEC
    from fedviews.deploy import load_deploy_config

    cfg = load_deploy_config(
        {
            "algorithm": "splitnn",
            "seed": 5,
            "federation": {"parties": ["party_0", "party_1"], "label_owner": "party_1"},
            "data": {"dataset": "mnist", "n_per_class": 20, "n_test": 100},
            "params": {"device": "cpu", "epochs": 2, "batch_size": 32, "hidden": 32},
        }
    )
    fed = build_in_process(cfg, SPLITNN_SPEC.demo_data(cfg))
    fed()
    parties = ("party_0", "party_1")
    train = [fed.locals[p].take("train") for p in parties]
    test = [fed.locals[p].take("test") for p in parties]
    images = np.concatenate([X for _, X, _ in train], axis=1)  # the two strips, top to bottom
    y = train[1][2]
    est = SplitNN(label_owner=1, epochs=2, batch_size=32, hidden=32, device="cpu", random_state=5)
    est.fit(images, y)
    assert est.history_["loss"] == [r["loss"] for r in fed.coordinator.history]
    assert est.history_["epoch"] == [1, 2]
    for p in parties:
        got, expected = est.models_[p], fed.algorithm.party_results(fed.parties[p])
        assert got.keys() == expected.keys()
        for k, v in expected.items():
            np.testing.assert_array_equal(got[k], v)
    y_test = test[1][2]
    predicted = est.predict(np.concatenate([X for _, X, _ in test], axis=1))
    np.testing.assert_array_equal(predicted, fed.parties["party_1"].predict_test())
    assert (
        est.score(np.concatenate([X for _, X, _ in test], axis=1), y_test)
        == (fed.coordinator.history[-1]["accuracy"])
    )
    assert fed.coordinator.history[-1]["accuracy"] > 0.3  # ten classes: chance is 0.1


def test_only_logits_and_their_gradients_cross_in_the_estimators_run():
    from fedviews.deep import SplitNN

    _, Xp, Xa, y = _data()
    est = SplitNN(n_parties=3, label_owner=2, epochs=1, batch_size=16, hidden=8, device="cpu")
    est.fit([Xp, Xa, Xa[:, ::-1]], y)
    log = est.transport_.log
    assert log.crossings() == {
        **{f"party_{k} -> party_2": ["logits"] for k in (0, 1)},
        **{f"party_2 -> party_{k}": ["grad_logits"] for k in (0, 1)},
    }
    assert log.arrays_sent("coordinator") == set() and log.arrays_sent(None, "coordinator") == set()
    assert est.run_stats_ == log.summary()
    # no top: logits summed (its net's weights, and its structure, checked when they load)
    assert {k.split("/")[0] for k in est.models_["party_2"]} == {"net", "net#structure"}
    fitted = len(log.entries)
    est.predict([Xp[:5], Xa[:5], Xa[:5, ::-1]])  # the prediction session's messages follow
    crossed = {(e.sender, e.receiver, e.kind, e.arrays, e.shapes) for e in log.entries[fitted:]}
    assert crossed == {
        *{("party_2", f"party_{k}", "splitnn.infer", (), ()) for k in (0, 1)},
        *{(f"party_{k}", "party_2", "splitnn.infer:reply", ("logits",), ((5, 3),)) for k in (0, 1)},
    }
    assert est.run_stats_ != log.summary()  # run_stats_ stays the fit's


def test_the_estimator_with_user_networks_on_table_columns_equals_the_spec_run():
    """Table columns, the user's bottoms and top, as a list of the parties' arrays: the
    spec's run of the same data and seed (the model of the one-model test above)."""
    from fedviews.deep import SplitNN

    rng = np.random.default_rng(1)
    n, ids = 40, np.arange(40)
    y = rng.integers(0, 3, size=n)
    Xp, Xa = rng.normal(size=(n, 4)), rng.normal(size=(n, 7))
    kw = {"epochs": 2, "batch_size": 16, "lr": 0.1, "device": "cpu"}
    est = SplitNN(label_owner=1, bottom=_user_bottom, top=_user_top, random_state=3, **kw)
    est.fit([Xp, Xa], y)
    params = SplitNNParams(evaluate=False, bottom=_user_bottom, top=_user_top, **kw)
    run = RunSpec("splitnn", params, Roster(("party_0", "party_1"), label_owner="party_1"), seed=3)
    datas = {"party_0": PartyData(ids, Xp), "party_1": PartyData(ids, Xa, y)}
    fed = build_in_process(run, datas)
    fed()
    for p in ("party_0", "party_1"):
        for k, v in fed.algorithm.party_results(fed.parties[p]).items():
            np.testing.assert_array_equal(est.models_[p][k], v)
    assert est.input_shapes_ == [(4,), (7,)] and "top/weight" in est.models_["party_1"]
    proba = est.predict_proba([Xp, Xa])
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(est.classes_[proba.argmax(1)], est.predict([Xp, Xa]))


def test_the_estimator_refuses_bad_input_with_clear_errors():
    from fedviews.deep import SplitNN
    from fedviews.errors import NotFittedError

    _, Xp, Xa, y = _data()
    est = SplitNN(epochs=1, batch_size=16, hidden=8, device="cpu")
    with pytest.raises(NotFittedError, match="SplitNN is not fitted yet"):
        est.predict([Xp, Xa])
    nan = Xa.astype(np.float32)
    nan[3, 1, 2] = np.nan
    with pytest.raises(DataError, match=r"X\[1\] \(party 1's features\) contains NaN"):
        est.fit([Xp, nan], y)
    with pytest.raises(DataError, match=r"mismatched shapes \[\(40, 4, 6\), \(39, 4, 6\)\]"):
        est.fit([Xp, Xa[:-1]], y)
    with pytest.raises(DataError, match="y has 39 labels but the views have 40 samples"):
        est.fit([Xp, Xa], y[:-1])
    with pytest.raises(DataError, match="X has 3 arrays but n_parties=2"):
        est.fit([Xp, Xa, Xa], y)
    with pytest.raises(DataError, match=r"X must be images \(n, H, W\) or \(n, C, H, W\)"):
        est.fit(Xp.reshape(40, -1), y)
    with pytest.raises(DataError, match="height 5 cannot be cut into 2 equal strips; pass pad"):
        est.fit(np.ones((40, 5, 6)), y)
    with pytest.raises(ConfigError, match="label_owner=2 is not a party"):
        SplitNN(label_owner=2).fit([Xp, Xa], y)
    with pytest.raises(ConfigError, match="n_parties must be at least 2"):
        SplitNN(n_parties=1).fit(Xp, y)
    est.fit([Xp, Xa], y)
    with pytest.raises(DataError, match=r"features of shapes \[\(4, 6\), \(4, 5\)\], the model "):
        est.predict([Xp, Xa[:, :, :5]])
    with pytest.raises(DataError, match=r"X\[0\] \(party 0's features\) contains NaN"):
        est.predict([nan, Xa])
    with pytest.raises(DataError, match=r"^X contains NaN or infinite values"):
        est.predict(np.full((2, 8, 6), np.nan))
    with pytest.raises(DataError, match="one label per sample"):
        est.score([Xp, Xa], y[:-1])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_training_and_a_cpu_load(tmp_path):
    """Fitted on the GPU (every party's bottom there), the model parts are host arrays: a copy
    loaded with ``device="cpu"`` predicts the same classes (the logits up to float rounding),
    and the pickled estimator predicts exactly as the fitted one."""
    import pickle

    from fedviews.deep import SplitNN

    _, Xp, Xa, y = _data()
    est = SplitNN(epochs=2, batch_size=16, hidden=8, device="cuda").fit([Xp, Xa], y)
    assert est.setup_["n_classes"] == 3 and est.history_["epoch"] == [1, 2]
    expected = est.decision_function([Xp, Xa])
    folder = est.save(tmp_path / "m")
    on_cpu = SplitNN.load(folder).set_params(device="cpu")
    np.testing.assert_allclose(on_cpu.decision_function([Xp, Xa]), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(on_cpu.predict([Xp, Xa]), est.predict([Xp, Xa]))
    twin = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(twin.decision_function([Xp, Xa]), expected)


def test_set_params_after_fit_waits_for_the_next_fit():
    """``n_parties``, ``label_owner`` and ``pad`` set after ``fit``: ``predict`` keeps the
    fitted parties and label owner (their model parts) until the next fit."""
    from fedviews.deep import SplitNN

    _, Xp, Xa, y = _data()
    est = SplitNN(label_owner=1, epochs=1, batch_size=16, hidden=8, device="cpu")
    expected = est.fit([Xp, Xa], y).decision_function([Xp, Xa])
    est.set_params(n_parties=3, label_owner=2, pad=True)
    np.testing.assert_array_equal(est.decision_function([Xp, Xa]), expected)
    assert est.label_owner_ == "party_1" and est.parties_ == ("party_0", "party_1")


def test_parties_that_share_no_id_are_refused_with_the_alignment_error():
    """The label owner's setup report took ``max`` of its labels of no aligned row: numpy's
    "zero-size array to reduction operation" in a deployment, not the alignment's error."""
    datas, *_ = _data()
    datas["p"] = PartyData(np.arange(100, 140), datas["p"].X)
    run = RunSpec("splitnn", PARAMS, Roster(("p", "a"), label_owner="a"), seed=3)
    with pytest.raises(DataError, match="share no sample ID"):
        build_in_process(run, datas)()


def test_the_demo_data_of_a_table_gives_each_party_one_view():
    """``data.views`` gave each party one view's columns for Multi-VFL and APFed, but the
    split NN cut images only ("dataset 'handwritten' has no images; Multi-VFL needs ...")."""
    from fedviews.deep.splitnn.spec import SPLITNN_SPEC
    from fedviews.deploy import load_deploy_config

    cfg = load_deploy_config(
        {
            "algorithm": "splitnn",
            "federation": {"parties": ["a", "b"], "label_owner": "a"},
            "data": {"dataset": "handwritten", "views": ["fou", "kar"], "n_test": 100},
        }
    )
    out = SPLITNN_SPEC.demo_data(cfg)
    assert [out[p].X.shape for p in ("a", "b")] == [(1900, 76), (1900, 64)]
    assert out["a"].y is not None and out["b"].y is None
    assert out["a"].X_test is not None and len(out["a"].X_test) == 100


def test_the_estimator_takes_a_defense_and_reports_its_ledger():
    """The defenses page offered ``label_rr`` for the split NN, but its estimator had no
    ``defense=`` (Python's TypeError): it takes one, as a config does."""
    from fedviews.deep import SplitNN
    from fedviews.errors import ConfigError

    _, Xp, Xa, y = _data()
    kw = {"epochs": 1, "batch_size": 16, "hidden": 8, "device": "cpu"}
    est = SplitNN(defense={"kind": "label_rr", "epsilon": 2.0}, **kw).fit([Xp, Xa], y)
    assert est.privacy_["parties"]["party_0"]["epsilon"] == pytest.approx(2.0, abs=1e-3)
    assert SplitNN(**kw).fit([Xp, Xa], y).privacy_ == {}
    with pytest.raises(ConfigError, match="defense 'grad_dp' does not apply to splitnn"):
        SplitNN(defense="grad_dp", **kw).fit([Xp, Xa], y)
