"""FedMV deployed (V-FedMV, H-FedMV, S-FedMV): launched processes == the in-process estimators.

The three launches (coordinator + one process per party, gRPC with mutual TLS, PSI)
start together in one fixture, so that their start-up overlaps; each test then
checks one of them against its in-process estimator on the same data files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("rbcl")  # the PSI

from _protocol import assert_tight, footprint  # noqa: E402

from fedviews.data import align_views  # noqa: E402
from fedviews.deploy import PartyData, load_deploy_config, load_party_data, save_party_data  # noqa: E402
from fedviews.errors import DataError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    build_in_process,
    federate,  # noqa: E402
    get_algorithm_spec,
)
from fedviews.linear import HFedMV, VFedMV  # noqa: E402

V_PARTIES = ("pix", "fou")
H_CLIENTS = ("north", "south")
S_CLIENTS = ("left", "right")

CONFIGS = {
    "vfedmv": """
algorithm = "vfedmv"
name = "deploy_vfedmv_test"
seed = 3
[federation]
parties = ["pix", "fou"]
label_owner = "fou"
[data]
dataset = "handwritten"
n_per_class = 15
n_test = 30
overlap = 0.9
[params]
beta = 2.0
zeta = 4.0
eta = 8.0
max_iter = 5
inner_max_iter = 10
standardize = true
evaluate = true
""",
    "hfedmv": """
algorithm = "hfedmv"
name = "deploy_hfedmv_test"
seed = 4
[federation]
parties = ["north", "south"]
label_owners = ["north", "south"]
[data]
dataset = "handwritten"
views = ["pix", "fou", "zer"]
n_per_class = 12
n_test = 30
[params]
n_rounds = 4
local_iter = 2
standardize = "pooled"
evaluate = true
""",
    "sfedmv": """
algorithm = "sfedmv"
name = "deploy_sfedmv_test"
seed = 5
[federation]
parties = ["left", "right"]
label_owners = ["left", "right"]
[data]
dataset = "watch"
n_per_class = 4
n_test = 10
[params]
hidden_size = 8
n_rounds = 2
local_epochs = 1
batch_size = 16
fusion_rounds = 3
local_iter = 1
torch_threads = 1
evaluate = true
""",
}


# the H-FedMV run again, with secure aggregation
CONFIGS["hfedmv_secagg"] = (
    CONFIGS["hfedmv"].replace("deploy_hfedmv_test", "deploy_hfedmv_secagg_test")
    + '[defense]\nkind = "secagg"\n'
)
# the S-FedMV run again, with secure aggregation (both stages: the GRUs' FedAvg, H-FedMV)
CONFIGS["sfedmv_secagg"] = (
    CONFIGS["sfedmv"].replace("deploy_sfedmv_test", "deploy_sfedmv_secagg_test")
    + '[defense]\nkind = "secagg"\n'
)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``{algorithm: (config, run folder, process)}``, all three launched at once."""
    tmp = tmp_path_factory.mktemp("fedmv")
    runs = {}
    try:
        for algo, text in CONFIGS.items():
            config = tmp / f"{algo}.toml"
            config.write_text(text)
            run = tmp / f"run_{algo}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "fedviews", "launch", str(config), "--out", str(run)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            runs[algo] = (config, run, proc)
        yield runs
    finally:
        for _, _, proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _finished(launched, algo: str) -> tuple[object, Path, str, dict]:
    config, run, proc = launched[algo]
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok"
    return load_deploy_config(config), run, out, res


def _same_protocol(cfg, run: Path, fed) -> None:
    """The deployment's footprint, checked to equal the in-process run ``fed`` of the same
    config and to be exactly what the run's policy allows."""
    roles = {**cfg.roles(), "coordinator": "coordinator"}
    seen = footprint(
        json.loads((run / "coordinator" / "message_log.json").read_text())["exchanges"], roles
    )
    assert seen == footprint(fed.transport.log.exchanges(), roles)
    assert_tight(fed.transport.policy, seen)


def _crossings(run: Path) -> dict[str, set[str]]:
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    return {k: set(v) for k, v in log["crossings"].items()}


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _scale(X: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    mu, sd = X.mean(0), X.std(0)
    sd[sd < 1e-12] = 1.0
    return [(A - mu) / sd for A in (X, *others)]


def _sorted_client(d: PartyData) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A client's rows in ascending ID order (what its one-party alignment gives)."""
    o, ot = np.argsort(d.ids), np.argsort(d.ids_test)
    assert d.X_test is not None and d.y is not None and d.y_test is not None
    return d.features[o], d.y[o], d.X_test[ot], d.y_test[ot]


# --------------------------------------------------------------------------- V-FedMV


def test_vfedmv_launch_equals_in_process(launched):
    cfg, run, out, res = _finished(launched, "vfedmv")
    assert "[coordinator] round 5/5: objective" in out and "[fou] aligned" in out
    assert "accuracy" in out
    for party in V_PARTIES:  # numbered as the coordinator numbers them (not the testing phase)
        assert f"[{party}] round 5\n" in out and f"[{party}] round 6" not in out
    datas = [load_party_data(run / "data" / f"{p}.npz") for p in V_PARTIES]
    Xs, ids = align_views([d.X for d in datas], [d.ids for d in datas])
    Xts, ids_t = align_views([d.X_test for d in datas], [d.ids_test for d in datas])
    scaled = [_scale(X, Xt) for X, Xt in zip(Xs, Xts, strict=True)]
    owner = datas[1]
    y = owner.y[np.argsort(owner.ids)][np.searchsorted(np.sort(owner.ids), ids)]
    y_t = owner.y_test[np.argsort(owner.ids_test)][np.searchsorted(np.sort(owner.ids_test), ids_t)]
    p = cfg.params
    ref = VFedMV(
        beta=p.beta,
        zeta=p.zeta,
        eta=p.eta,
        max_iter=p.max_iter,
        tol=p.tol,
        inner_max_iter=p.inner_max_iter,
        inner_tol=p.inner_tol,
        random_state=cfg.seed,
    ).fit([s[0] for s in scaled], y)
    Z_test = ref.decision_function([s[1] for s in scaled])
    pred = ref.classes_[np.argmax(Z_test, axis=1)]
    np.testing.assert_allclose(res["objective"], ref.objective_, rtol=1e-10)
    assert res["test_accuracy"] == pytest.approx(np.mean(pred == y_t))
    coord = _npz(run / "coordinator" / "result.npz")
    np.testing.assert_allclose(coord["Z"], ref.Z_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(coord["Z_test"], Z_test, rtol=1e-9, atol=1e-12)
    for k, name in enumerate(V_PARTIES):
        mine = _npz(run / name / "result.npz")
        np.testing.assert_allclose(mine["W"], ref.W_[k], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(mine["Z_k"], ref.Z_k_[k], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(_npz(run / "fou" / "result.npz")["y_test_pred"], pred)
    # only Z_k / Z (+ test twins), the label owner's Y once, and the PSI arrays cross
    crossed = _crossings(run)
    assert crossed["fou -> coordinator"] == {"Y", "Z_k", "Z_k_test", "psi_sealed", "psi_set"}
    assert crossed["pix -> coordinator"] == {"Z_k", "Z_k_test", "psi_sealed", "psi_set"}
    for name in V_PARTIES:
        assert crossed[f"coordinator -> {name}"] == {"Z", "Z_test", "psi_positions", "psi_sealed"}
    assert len(crossed) == 2 * len(V_PARTIES)
    # the same config in one process runs exactly the deployed protocol, and the
    # policy of this run allows exactly what crossed
    fed = build_in_process(cfg, {p: load_party_data(run / "data" / f"{p}.npz") for p in V_PARTIES})
    fed()
    _same_protocol(cfg, run, fed)
    assert fed.transport.policy == get_algorithm_spec("vfedmv").policy(cfg, fed.setup)
    np.testing.assert_allclose(fed.coordinator.objective, res["objective"], rtol=1e-12)


# --------------------------------------------------------------------------- H-FedMV


def test_hfedmv_launch_equals_in_process(launched):
    cfg, run, out, res = _finished(launched, "hfedmv")
    assert "[coordinator] round 4/4: objective" in out and "[north] aligned" in out
    datas = [load_party_data(run / "data" / f"{c}.npz") for c in H_CLIENTS]
    assert all(d.view_dims == (240, 76, 47) for d in datas)
    parts = [_sorted_client(d) for d in datas]
    mu, sd = np.vstack([X for X, *_ in parts]).mean(0), np.vstack([X for X, *_ in parts]).std(0)
    sd[sd < 1e-12] = 1.0
    clients = [(datas[0].views((X - mu) / sd), y) for X, y, _, _ in parts]
    p = cfg.params
    ref = HFedMV(
        beta=p.beta,
        zeta=p.zeta,
        eta=p.eta,
        n_rounds=p.n_rounds,
        local_iter=p.local_iter,
        inner_max_iter=p.inner_max_iter,
        random_state=cfg.seed,
    ).fit(clients)
    np.testing.assert_allclose(res["objective"], ref.objective_, rtol=1e-9)
    coord = _npz(run / "coordinator" / "result.npz")
    correct = 0
    for c, name in enumerate(H_CLIENTS):
        mine = _npz(run / name / "result.npz")
        for k, W in enumerate(ref.W_):
            np.testing.assert_allclose(coord[f"W_{k}"], W, rtol=1e-8, atol=1e-11)
            np.testing.assert_array_equal(mine[f"W_{k}"], coord[f"W_{k}"])
        _, _, Xt, yt = parts[c]
        pred = ref.predict(datas[0].views((Xt - mu) / sd))
        np.testing.assert_array_equal(mine["y_test_pred"], pred)
        correct += int(np.sum(pred == yt))
        np.testing.assert_allclose(mine["x_scale"], sd, rtol=1e-10)
    assert res["test_accuracy"] == pytest.approx(correct / res["n_test"])
    # the same config in one process runs exactly the deployed protocol; the policy of
    # this run (3 views, pooled scaling) allows exactly what crossed: W_0..W_2, nothing more
    fed = build_in_process(cfg, {c: load_party_data(run / "data" / f"{c}.npz") for c in H_CLIENTS})
    fed()
    _same_protocol(cfg, run, fed)
    assert fed.transport.policy.allowed[("coordinator", "client")] == {
        "W_0", "W_1", "W_2", "x_mean", "x_scale"
    }  # fmt: skip
    np.testing.assert_allclose(fed.coordinator.objective, res["objective"], rtol=1e-12)
    # only W_k / W_local_k, the pooled-statistics aggregates and the PSI arrays cross
    crossed = _crossings(run)
    K = len(ref.W_)
    for name in H_CLIENTS:
        assert crossed[f"{name} -> coordinator"] == {
            *(f"W_local_{k}" for k in range(K)),
            "x_sum",
            "x_m2",
            "psi_set",
        }
        assert crossed[f"coordinator -> {name}"] == {
            *(f"W_{k}" for k in range(K)),
            "x_mean",
            "x_scale",
            "psi_positions",
        }
    assert len(crossed) == 2 * len(H_CLIENTS)


def test_hfedmv_secagg_launch_equals_in_process_and_the_plain_run(launched):
    """Secure aggregation deployed (mutual TLS: the clients sign their X25519 keys): the
    server receives only masked sums, and the run equals the plain deployment."""
    cfg, run, _, res = _finished(launched, "hfedmv_secagg")
    _, _, _, plain = _finished(launched, "hfedmv")
    np.testing.assert_allclose(res["objective"], plain["objective"], rtol=1e-8)
    assert res["test_accuracy"] == plain["test_accuracy"]
    fed = build_in_process(cfg, {c: load_party_data(run / "data" / f"{c}.npz") for c in H_CLIENTS})
    fed()
    _same_protocol(cfg, run, fed)
    crossed = _crossings(run)
    for name in H_CLIENTS:
        assert crossed[f"{name} -> coordinator"] == {
            "masked_W_local_0", "masked_W_local_1", "masked_W_local_2", "masked_objective",
            "masked_x_sum", "masked_x_sq", "psi_set",
        }  # fmt: skip


# --------------------------------------------------------------------------- S-FedMV


def test_sfedmv_launch_equals_in_process(launched):
    torch = pytest.importorskip("torch")
    from fedviews.deep import SFedMV
    from fedviews.deep.sfedmv.nets import get_params

    cfg, run, out, res = _finished(launched, "sfedmv")
    assert "[coordinator] round 4/4: view 1 round 2" in out and "fusion round 3/3:" in out
    datas = [load_party_data(run / "data" / f"{c}.npz") for c in S_CLIENTS]
    assert all(d.view_dims == (3, 3) and d.features.shape[1:] == (30, 6) for d in datas)
    parts = [_sorted_client(d) for d in datas]
    p = cfg.params
    threads = torch.get_num_threads()
    torch.set_num_threads(p.torch_threads)  # as in the deployed processes
    try:
        est = SFedMV(
            hidden_size=p.hidden_size,
            dropout=p.dropout,
            lr=p.lr,
            batch_size=p.batch_size,
            local_epochs=p.local_epochs,
            n_rounds=p.n_rounds,
            beta=p.beta,
            zeta=p.zeta,
            eta=p.eta,
            fusion_rounds=p.fusion_rounds,
            local_iter=p.local_iter,
            inner_max_iter=p.inner_max_iter,
            random_state=cfg.seed,
        ).fit([(datas[0].views(X), y) for X, y, _, _ in parts])
        preds = [est.predict(datas[0].views(Xt)) for _, _, Xt, _ in parts]
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(res["round_loss"], est.round_loss_, rtol=1e-5)
    np.testing.assert_allclose(res["fusion_objective"], est.fusion_.objective_, rtol=1e-5)
    coord = _npz(run / "coordinator" / "result.npz")
    for k, model in enumerate(est.extractors_):
        for n, a in get_params(model).items():
            np.testing.assert_allclose(coord[f"view{k}/{n}"], a, rtol=1e-5, atol=1e-6)
    for k, W in enumerate(est.fusion_.W_):
        np.testing.assert_allclose(coord[f"W_{k}"], W, rtol=1e-4, atol=1e-6)
    correct = 0
    for name, pred, (_, _, _, yt) in zip(S_CLIENTS, preds, parts, strict=True):
        np.testing.assert_array_equal(_npz(run / name / "result.npz")["y_test_pred"], pred)
        correct += int(np.sum(pred == yt))
    assert res["test_accuracy"] == pytest.approx(correct / res["n_test"])
    crossed = _crossings(run)
    for name in S_CLIENTS:
        up = crossed[f"{name} -> coordinator"]
        down = crossed[f"coordinator -> {name}"]
        assert {n for n in up if not n.startswith("view")} == {"W_local_0", "W_local_1", "psi_set"}
        assert {n for n in down if not n.startswith("view")} == {"W_0", "W_1", "psi_positions"}
        assert {n.split("/")[0] for n in up | down if n.startswith("view")} == {"view0", "view1"}
    # the same config in one process runs exactly the deployed protocol; the policy of
    # this run (2 views, this GRU's parameters) allows exactly what crossed
    threads = torch.get_num_threads()
    try:
        fed = build_in_process(cfg, dict(zip(S_CLIENTS, datas, strict=True)))
        fed()
    finally:
        torch.set_num_threads(threads)
    _same_protocol(cfg, run, fed)
    np.testing.assert_allclose(fed.coordinator.loss, res["round_loss"], rtol=1e-5)


def test_sfedmv_secagg_launch_equals_in_process_and_the_plain_run(launched):
    """S-FedMV's secure aggregation deployed (mutual TLS: the clients sign their X25519
    keys): the server receives only masked sums in both stages, and the run equals the same
    config in one process and, to the fixed point's rounding, the plain deployment."""
    torch = pytest.importorskip("torch")
    cfg, run, _, res = _finished(launched, "sfedmv_secagg")
    _, _, _, plain = _finished(launched, "sfedmv")
    np.testing.assert_allclose(res["round_loss"], plain["round_loss"], rtol=1e-4)
    datas = {c: load_party_data(run / "data" / f"{c}.npz") for c in S_CLIENTS}
    threads = torch.get_num_threads()
    try:
        fed = build_in_process(cfg, datas)
        fed()
    finally:
        torch.set_num_threads(threads)
    _same_protocol(cfg, run, fed)
    np.testing.assert_allclose(fed.coordinator.loss, res["round_loss"], rtol=1e-5)
    np.testing.assert_allclose(fed.coordinator.fusion.objective, res["fusion_objective"], rtol=1e-5)
    crossed = _crossings(run)
    for name in S_CLIENTS:
        up = {n for n in crossed[f"{name} -> coordinator"] if n != "psi_set"}
        assert up and all(n.startswith("masked_") for n in up), up
        assert {n.split("/")[0] for n in up if n.startswith("masked_view")} == {
            "masked_view0",
            "masked_view1",
        }


# --------------------------------------------------------------------------- resume, files


def _vfedmv_objects(Xs, Y, rounds):
    from fedviews.linear.vfedmv import VFEDMV_POLICY, VFedMVParty, VFedMVServer

    ss = np.random.SeedSequence(2).spawn(len(Xs) + 1)
    parties = [
        VFedMVParty(f"p{k}", X, beta=1.0, zeta=4.0, n_classes=Y.shape[1], seed=ss[1 + k])
        for k, X in enumerate(Xs)
    ]
    server = VFedMVServer([q.name for q in parties], Y, 8.0, ss[0], max_iter=rounds, tol=0.0)
    federate([server, *parties], VFEDMV_POLICY)
    return server, parties


def _hfedmv_objects(clients, rounds):
    from fedviews.linear import HFedMVClient, HFedMVServer, hfedmv_policy
    from fedviews.linear._consensus import IRLSOptions
    from fedviews.linear.hfedmv.protocol import LocalLearner, init_W

    ss = np.random.SeedSequence(2).spawn(len(clients) + 1)

    def learner(m, Y):
        return lambda Xs: LocalLearner(
            Xs, Y, betas=[1.0] * 2, zetas=[4.0] * 2, eta=8.0, seed=ss[1 + m], solver=IRLSOptions(5)
        )

    objs = [
        HFedMVClient(f"c{m}", Xs, Y, learner(m, Y), local_iter=2)
        for m, (Xs, Y) in enumerate(clients)
    ]
    dims = [X.shape[1] for X in clients[0][0]]
    server = HFedMVServer([c.name for c in objs], init_W(dims, 3, ss[0]), rounds)
    federate([server, *objs], hfedmv_policy(2))
    return server, objs


def test_fedmv_state_dicts_resume_bit_for_bit():
    rng = np.random.default_rng(0)
    Y = np.eye(3)[np.arange(30) % 3]
    Xs = [rng.normal(size=(30, d)) for d in (5, 7)]
    # V-FedMV: 3 rounds, "killed", new objects load the states, 3 more == 6 uninterrupted
    ref, ref_parties = _vfedmv_objects(Xs, Y, 6)
    ref.run()
    server, parties = _vfedmv_objects(Xs, Y, 3)
    saved = []
    server.run(on_round_end=saved.append)
    assert saved == [1, 2, 3]
    s_state, p_states = server.state_dict(), [q.state_dict() for q in parties]
    server, parties = _vfedmv_objects(Xs, Y, 6)
    server.load_state(s_state)
    for q, st in zip(parties, p_states, strict=True):
        q.load_state(st)
    server.run()
    np.testing.assert_array_equal(server.objective, ref.objective)
    for a, b in zip(parties, ref_parties, strict=True):
        np.testing.assert_array_equal(a.W, b.W)
    # H-FedMV, two clients
    clients = [([rng.normal(size=(20, d)) for d in (4, 6)], np.eye(3)[np.arange(20) % 3])] * 2
    ref_h, _ = _hfedmv_objects(clients, 5)
    ref_h.run()
    server_h, objs = _hfedmv_objects(clients, 2)
    server_h.run()
    s_state, c_states = server_h.state_dict(), [c.state_dict() for c in objs]
    server_h, objs = _hfedmv_objects(clients, 5)
    server_h.load_state(s_state)
    for c, st in zip(objs, c_states, strict=True):
        c.load_state(st)
    server_h.run()
    np.testing.assert_array_equal(server_h.objective, ref_h.objective)
    for a, b in zip(server_h.W, ref_h.W, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(DataError, match="does not fit"):
        objs[0].load_state({**c_states[0], "Z": np.zeros((3, 3))})


def test_sfedmv_state_dicts_resume_bit_for_bit():
    pytest.importorskip("torch")
    from fedviews.deep.sfedmv import SequenceClient, SequenceServer, sequence_policy, view_seeds
    from fedviews.deep.sfedmv.nets import get_params, make_extractor
    from fedviews.deep.sfedmv.protocol import GRUConfig

    rng = np.random.default_rng(1)
    views = [[rng.normal(size=(6, c)).astype(np.float32) for _ in range(12)] for c in (2, 3)]
    y = np.arange(12) % 3
    cfg = GRUConfig(hidden_size=4, batch_size=6, local_epochs=1, n_rounds=2)

    def objects():
        inits = [make_extractor(c, 3, cfg, view_seeds(0, k, 0)[0]) for k, c in enumerate((2, 3))]
        clients = [
            SequenceClient(
                f"c{m}", views, y, 3, cfg, [view_seeds(0, k, m)[1] for k in (0, 1)], "cpu"
            )
            for m in (0, 1)
        ]
        server = SequenceServer([c.name for c in clients], inits, 2)
        federate([server, *clients], sequence_policy([list(get_params(inits[0]))] * 2))
        return server, clients

    ref, ref_clients = objects()
    ref.run()
    server, clients = objects()
    rounds: list[int] = []

    def stop(r: int) -> None:
        rounds.append(r)
        if r == 2:  # the last round of view 0: its final parameters are not sent yet
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        server.run(on_round_end=stop)
    s_state, c_states = server.state_dict(), [c.state_dict() for c in clients]
    server, clients = objects()
    server.load_state(s_state)
    for c, st in zip(clients, c_states, strict=True):
        c.load_state(st)
    server.run(on_round_end=rounds.append)
    assert rounds == [1, 2, 3, 4]
    assert server.loss == ref.loss
    for a, b in zip(server.params, ref.params, strict=True):
        for n in a:
            np.testing.assert_array_equal(a[n], b[n])
    for c, r in zip(clients, ref_clients, strict=True):  # view 0's final_view was sent again
        for k in (0, 1):
            mine, theirs = get_params(c.models[k]), get_params(r.models[k])
            for n in mine:
                np.testing.assert_array_equal(mine[n], theirs[n])


def test_party_files_with_several_views(tmp_path):
    X = np.arange(24.0).reshape(4, 6)
    d = PartyData(np.arange(4), X, np.array([0, 1, 0, 1]), view_dims=(2, 4))
    back = load_party_data(save_party_data(tmp_path / "c.npz", d))
    assert back.view_dims == (2, 4)
    a, b = back.views(back.features)
    np.testing.assert_array_equal(a, X[:, :2])
    np.testing.assert_array_equal(b, X[:, 2:])
    assert back.take(np.array([1, 2])).view_dims == (2, 4)
    assert len(PartyData(np.arange(4), X).views(X)) == 1  # no view_dims: one view
    with pytest.raises(DataError, match="add up"):
        PartyData(np.arange(4), X, view_dims=(2, 3))
    with pytest.raises(DataError, match="use .npz"):
        save_party_data(tmp_path / "c.csv", d)
