"""The plain split NN (the audit's reference point): federated equals centralized, only logits and
their gradients cross, and a passive party's observations name the right rows."""

from __future__ import annotations

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


def test_passive_backward_passes_run_as_one_and_equal_one_each(monkeypatch):
    """In one process the gradients of the label owner's scatter go back through the passive
    parties' bottoms in one autograd call; every model and message is bit for bit that of
    one backward pass per party."""
    datas, _, Xa, y = _data()
    datas["q"] = PartyData(np.arange(len(y)), Xa[:, ::-1].copy())
    run = RunSpec("splitnn", PARAMS, Roster(("p", "q", "a"), label_owner="a"), seed=3)
    calls = batched_equals_one_each(run, datas, monkeypatch)
    assert calls == [2] * (PARAMS.epochs * 3)  # both passives, every batch (40 rows by 16)


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
    with pytest.raises(ConfigError, match="one of them federation.label_owner"):
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
