"""`fedviews predict`: a deployed model's parts predict new rows together, as the estimator does.

A deployment is trained once per algorithm (its coordinator and parties wired to one
in-process transport, as in test_setup_path.py: the same session objects a launched
process runs, in seconds), leaving every member's model part in its folder. The
prediction sessions then run in one process too, and once as `fedviews launch` +
`fedviews predict` over gRPC, as a user runs them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomllib

pytest.importorskip("rbcl")  # the PSI

from _protocol import assert_tight, footprint  # noqa: E402

from fedviews.data import align_views  # noqa: E402
from fedviews.deploy import (  # noqa: E402
    PartyData,
    load_deploy_config,
    load_party_data,
    save_party_data,
    write_demo_data,
)
from fedviews.deploy._launch import check_model_parts  # noqa: E402
from fedviews.deploy._model import load_model_part  # noqa: E402
from fedviews.deploy._predict import PredictCoordinator, PredictParty  # noqa: E402
from fedviews.deploy._roles import (  # noqa: E402
    DeployCoordinator,
    DeployParty,
    run_policy,
    session_policy,
)
from fedviews.errors import ConfigError, DataError, ProtocolError  # noqa: E402
from fedviews.federation import InProcessTransport, Message, get_algorithm_spec  # noqa: E402
from fedviews.linear import VFedMV  # noqa: E402

VFEDMV = """
algorithm = "vfedmv"
name = "predict_vfedmv_test"
seed = 3
[federation]
parties = ["pix", "fou"]
label_owner = "fou"
[data]
dataset = "handwritten"
n_per_class = 10
n_test = 30
overlap = 0.9
[params]
beta = 2.0
zeta = [4.0, 2.0]
eta = 8.0
max_iter = 4
inner_max_iter = 10
standardize = true
"""

MULTIVFL = """
algorithm = "multivfl"
name = "predict_multivfl_test"
seed = 2
[federation]
parties = ["top", "bottom", "bank", "clinic"]
label_owners = ["bank", "clinic"]
[data]
dataset = "mnist"
n_per_class = 6
n_test = 20
samples_per_owner = 20
[params]
rounds = 2
batch_size = 16
channels = 4
top_channels = 4
hidden = 8
device = "cpu"
evaluate = false
"""


def _cfg(text: str, *overrides: str) -> Any:
    return load_deploy_config(tomllib.loads(text), list(overrides))


def _train(cfg: Any, files: dict[str, Path], run: Path) -> None:
    """The deployment's training session in one process: every member's folder in ``run``."""
    transport = InProcessTransport(session_policy(cfg))
    coord = DeployCoordinator(cfg, lambda line: None, run / cfg.federation.coordinator)
    transport.register(coord)
    for p, path in files.items():
        transport.register(DeployParty(cfg, p, load_party_data(path), run / p, lambda _: None))
    coord.run()


def _predict(
    cfg: Any, new: dict[str, PartyData], run: Path, out: Path
) -> tuple[dict[str, Any], InProcessTransport]:
    """The prediction session in one process, every member with its part from ``run``."""
    transport = InProcessTransport(session_policy(cfg))
    name = cfg.federation.coordinator
    coord = PredictCoordinator(cfg, lambda line: None, load_model_part(run / name, cfg, name))
    transport.register(coord)
    for p, data in new.items():
        part = load_model_part(run / p, cfg, p)
        transport.register(PredictParty(cfg, p, data, part, out / p, lambda _: None))
    return coord.run(), transport


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def vfedmv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Path], Path]:
    """``(config, training data files, run folder)`` of a trained V-FedMV deployment."""
    tmp = tmp_path_factory.mktemp("predict_vfedmv")
    cfg = _cfg(VFEDMV)
    files = write_demo_data(cfg, tmp / "data")
    _train(cfg, files, tmp / "run")
    return cfg, files, tmp / "run"


def _vfedmv_new_rows(files: dict[str, Path], drop: int) -> dict[str, PartyData]:
    """Each party's held-out rows as its new rows, without labels; ``pix`` lacks the first
    ``drop`` of them (the PSI leaves them out)."""
    new = {}
    for p, path in files.items():
        d = load_party_data(path)
        assert d.ids_test is not None and d.X_test is not None
        keep = slice(drop, None) if p == "pix" else slice(None)
        new[p] = PartyData(d.ids_test[keep], d.X_test[keep])
    return new


def _vfedmv_reference(
    cfg: Any, files: dict[str, Path], new: dict[str, PartyData], defense: str | None = None
) -> Any:
    """The estimator's ``(ids, predict, decision_function)`` of the common new rows, fitted on
    the training rows that the PSI aligns (ascending ID)."""
    datas = [load_party_data(files[p]) for p in ("pix", "fou")]
    Xs, ids = align_views([d.X for d in datas], [d.ids for d in datas])
    owner = datas[1]
    assert owner.y is not None
    y = owner.y[np.argsort(owner.ids)][np.searchsorted(np.sort(owner.ids), ids)]
    p = cfg.params
    ref = VFedMV(
        beta=p.beta,
        zeta=list(p.zeta),
        eta=p.eta,
        max_iter=p.max_iter,
        inner_max_iter=p.inner_max_iter,
        standardize=True,
        random_state=cfg.seed,
        defense=defense,
    ).fit(Xs, y)
    Xts, ids_t = align_views(
        [new[q].X for q in ("pix", "fou")], [new[q].ids for q in ("pix", "fou")]
    )
    return ids_t, ref.predict(Xts), ref.decision_function(Xts)


@pytest.mark.parametrize("alignment", ["psi", "none"])
def test_vfedmv_predict_equals_the_estimator(vfedmv, tmp_path: Path, alignment: str) -> None:
    """The testing phase (Eqs. 12-13) of the deployed parts, on new rows aligned by PSI (or,
    with alignment = "none", the same IDs at every party): the estimator's labels and
    consensus; only ``Z_k_test`` / ``Z_test`` (and the PSI arrays) cross."""
    cfg, files, run = vfedmv
    cfg = _cfg(VFEDMV, f'federation.alignment="{alignment}"')
    new = _vfedmv_new_rows(files, drop=4 if alignment == "psi" else 0)
    res, transport = _predict(cfg, new, run, tmp_path)
    ids, labels, scores = _vfedmv_reference(cfg, files, new)
    assert res["predicted_rows"] == {"predict": len(ids)} and len(ids) == 26 + 4 * (
        alignment == "none"
    )
    got = _npz(tmp_path / "fou" / "predictions.npz")
    np.testing.assert_array_equal(got["ids"], ids)
    np.testing.assert_array_equal(got["labels"], labels)
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-9, atol=1e-12)
    lines = (tmp_path / "fou" / "predictions.csv").read_text().splitlines()
    assert lines[0] == "id,label" and lines[1] == f"{ids[0]},{labels[0]}"
    assert not (tmp_path / "pix" / "predictions.csv").exists()  # predictions land with the owner
    crossed = transport.log.summary()["crossings"]
    psi = {"psi_set", "psi_positions"}
    for p in ("pix", "fou"):  # no raw view, no W_k: only the test phase's consensus arrays
        assert set(crossed[f"{p} -> coordinator"]) - psi == {"Z_k_test"}
        assert set(crossed[f"coordinator -> {p}"]) - psi == {"Z_test"}
    spec = get_algorithm_spec("vfedmv")
    setup = load_model_part(run / "fou", cfg, "fou").setup
    assert transport.policy == run_policy(cfg, spec.predict_policy(cfg, setup))
    roles = {**cfg.roles(), "coordinator": "coordinator"}
    assert_tight(spec.predict_policy(cfg, setup), footprint(transport.log.exchanges(), roles))


def test_vfedmv_predict_takes_new_rows_of_any_number_after_an_evaluated_training(
    tmp_path: Path,
) -> None:
    """A training run that scored its test rows (``params.evaluate``, as the shipped config)
    kept their count in its setup, and the prediction session's server expected it: 26 new
    rows of 30 test rows named the honest label owner (``'pix' sent 'Z_k_test' of shape
    (26, 10) ..., expected (30, 10)``). The server expects the rows the session aligned."""
    cfg = _cfg(VFEDMV, "params.evaluate=true")
    files = write_demo_data(cfg, tmp_path / "data")
    _train(cfg, files, tmp_path / "run")
    assert load_model_part(tmp_path / "run" / "fou", cfg, "fou").setup["n_test"] == 30
    new = _vfedmv_new_rows(files, drop=4)
    res, _ = _predict(cfg, new, tmp_path / "run", tmp_path / "out")
    ids, labels, scores = _vfedmv_reference(cfg, files, new)
    assert res["predicted_rows"] == {"predict": 26} and len(ids) == 26
    got = _npz(tmp_path / "out" / "fou" / "predictions.npz")
    np.testing.assert_array_equal(got["labels"], labels)
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-9, atol=1e-12)


def test_a_party_s_own_error_is_said_on_its_own_console(vfedmv, tmp_path: Path) -> None:
    """A party whose new rows have other columns reported its DataError to the coordinator
    only (another organisation's host); its own console said just that the coordinator
    stopped the run. It now says its error where its operator reads."""
    cfg, files, run = vfedmv
    new = _vfedmv_new_rows(files, drop=0)
    new["pix"] = PartyData(new["pix"].ids, new["pix"].X[:, :10])
    said: dict[str, list[str]] = {"pix": [], "fou": []}
    transport = InProcessTransport(session_policy(cfg))
    name = cfg.federation.coordinator
    transport.register(
        PredictCoordinator(cfg, lambda line: None, load_model_part(run / name, cfg, name))
    )
    for p, data in new.items():
        part = load_model_part(run / p, cfg, p)
        transport.register(PredictParty(cfg, p, data, part, tmp_path / p, said[p].append))
    with pytest.raises(DataError, match="'pix': its new rows have 10 features"):
        transport.local[name].run()
    assert [line for line in said["pix"] if line.startswith("error")] == [
        "error answering 'deploy:build' from 'coordinator': DataError: 'pix': its new rows "
        "have 10 features, but its model part holds W of shape (240, 10) (features x the 10 "
        "trained classes): give it rows of the columns it trained on"
    ]
    assert not [line for line in said["fou"] if line.startswith("error")]


def test_vfedmv_predict_with_secure_aggregation(tmp_path: Path) -> None:
    """Under ``defense.kind = "secagg"`` the parties' ``Z_k_test`` leave only masked, as in
    the estimator's federated testing phase, which predicts the same."""
    cfg = _cfg(VFEDMV + '[defense]\nkind = "secagg"\n')
    files = write_demo_data(cfg, tmp_path / "data")
    _train(cfg, files, tmp_path / "run")
    new = _vfedmv_new_rows(files, drop=2)
    _, transport = _predict(cfg, new, tmp_path / "run", tmp_path / "out")
    ids, labels, scores = _vfedmv_reference(cfg, files, new, defense="secagg")
    got = _npz(tmp_path / "out" / "fou" / "predictions.npz")
    np.testing.assert_array_equal(got["ids"], ids)
    np.testing.assert_array_equal(got["labels"], labels)
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-9, atol=1e-12)
    crossed = transport.log.summary()["crossings"]
    masked = {"masked_zeta_Z_k_test", "masked_stats_Z_k_test"}
    for p in ("pix", "fou"):
        assert set(crossed[f"{p} -> coordinator"]) - {"psi_set"} == masked
        # a coordinator that left members out of the sums would be refused
        assert transport.local[p].algo.secure_members == {"pix", "fou"}


def test_model_parts_missing_changed_or_of_another_config_are_named(vfedmv, tmp_path: Path):
    cfg, files, run = vfedmv
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    check_model_parts(copy, cfg, tmp_path, None)  # all there
    # the key that differs is named (it said "algorithm, seed, parties, params or defense")
    with pytest.raises(
        ConfigError, match=r"another config \(vfedmv; different: params\.max_iter\)"
    ):
        load_model_part(copy / "pix", _cfg(VFEDMV, "params.max_iter=5"), "pix")
    (copy / "fou" / "model.json").unlink()
    with pytest.raises(DataError, match="'fou' has no model part"):
        check_model_parts(copy, cfg, tmp_path, None)
    with pytest.raises(DataError, match="'pix'.*not the one its training run wrote"):
        np.savez(copy / "pix" / "result.npz", W=np.zeros((2, 2)))
        load_model_part(copy / "pix", cfg, "pix")
    with pytest.raises(ConfigError, match="--data-dir"):
        check_model_parts(run, cfg, None, None)


def test_a_part_of_another_training_run_is_refused_naming_its_party(vfedmv, tmp_path: Path):
    cfg, files, run = vfedmv
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    meta = json.loads((copy / "pix" / "model.json").read_text())
    meta["run_id"] = "0123456789abcdef"  # what a second training run of this config draws
    (copy / "pix" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ProtocolError, match="another training run") as err:
        _predict(cfg, _vfedmv_new_rows(files, 0), copy, tmp_path / "out")
    assert err.value.party == "pix"


def test_new_rows_with_labels_are_refused(vfedmv, tmp_path: Path):
    cfg, files, run = vfedmv
    d = load_party_data(files["fou"])
    part = load_model_part(run / "fou", cfg, "fou")
    with pytest.raises(DataError, match="'fou'.*holds labels"):
        PredictParty(cfg, "fou", PartyData(d.ids, d.X, d.y), part, tmp_path, print)


def test_an_algorithm_whose_parties_predict_alone_says_how(tmp_path: Path):
    cfg = _cfg(VFEDMV.replace('"vfedmv"', '"mmvfl"').replace("zeta = [4.0, 2.0]", ""))
    with pytest.raises(ConfigError, match="MMVFL party predicts alone with its own W_k"):
        check_model_parts(tmp_path, cfg, tmp_path, None)


def test_a_coordinator_holding_the_labels_is_refused_naming_the_fix(tmp_path: Path) -> None:
    """The estimator's server may hold V-FedMV's labels; a deployment's coordinator holds no
    data, so its label owner is a party (which sends the server its one-hot labels once and
    gets the predictions of `fedviews predict`). A config naming the coordinator was refused
    as "not one of federation.parties"; now it says why and what to name, and `fedviews
    predict` exits with it before any process starts."""
    text = VFEDMV.replace('label_owner = "fou"', 'label_owner = "coordinator"')
    match = "the coordinator 'coordinator' holds no data in a deployment; name the party"
    with pytest.raises(ConfigError, match=match):
        _cfg(text)
    config = tmp_path / "vfedmv.toml"
    config.write_text(text)
    args = ["predict", str(config), "--model", str(tmp_path), "--data-dir", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "fedviews", *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0 and match in " ".join((proc.stdout + proc.stderr).split())


def test_multivfl_predict_equals_the_estimator(tmp_path: Path) -> None:
    """Every label owner asks for its own new IDs; the data owners' bottoms and the global
    top: the estimator's ``predict``. Only activations cross, and only to the label owner
    whose rows they are."""
    pytest.importorskip("torch")
    from fedviews.deep.multivfl import MultiVFL

    cfg = _cfg(MULTIVFL)
    files = write_demo_data(cfg, tmp_path / "data")
    _train(cfg, files, tmp_path / "run")
    D = [load_party_data(files[d]) for d in ("top", "bottom")]
    L = [load_party_data(files[lo]) for lo in ("bank", "clinic")]
    ids = np.intersect1d(D[0].ids, D[1].ids)
    strips = [d.X[np.argsort(d.ids)][np.searchsorted(np.sort(d.ids), ids)] for d in D]
    y = np.zeros(len(ids), dtype=np.int64)
    for lo in L:
        assert lo.y is not None
        keep = np.isin(lo.ids, ids)
        y[np.searchsorted(ids, lo.ids[keep])] = lo.y[keep]
    p = cfg.params
    ref = MultiVFL(
        n_data_owners=2,
        n_label_owners=2,
        rounds=p.rounds,
        batch_size=p.batch_size,
        channels=p.channels,
        top_channels=p.top_channels,
        hidden=p.hidden,
        device="cpu",
        random_state=cfg.seed,
    ).fit(strips, y, ids=ids, label_owner_ids=[np.sort(lo.ids[np.isin(lo.ids, ids)]) for lo in L])
    test_ids = D[0].ids_test
    assert test_ids is not None
    asked = {"bank": test_ids[:12], "clinic": np.concatenate([test_ids[5:], ["nobody"]])}
    new = {d: PartyData(data.ids_test, data.X_test) for d, data in zip(("top", "bottom"), D)}
    new |= {lo: PartyData(asked[lo]) for lo in ("bank", "clinic")}
    res, transport = _predict(cfg, new, tmp_path / "run", tmp_path / "out")
    assert res["predicted_rows"] == {"bank": 12, "clinic": 15}
    for lo in ("bank", "clinic"):
        got = _npz(tmp_path / "out" / lo / "predictions.npz")
        rows = np.searchsorted(np.sort(D[0].ids_test), got["ids"])
        assert np.array_equal(np.sort(D[0].ids_test)[rows], got["ids"])
        order = [np.argsort(d.ids_test) for d in D]
        X = [d.X_test[o][rows] for d, o in zip(D, order)]
        np.testing.assert_array_equal(got["labels"], ref.predict(X))
    crossed = transport.log.summary()["crossings"]
    psi = {"psi_set", "psi_positions"}
    assert {k: set(v) - psi for k, v in crossed.items() if set(v) - psi} == {
        f"{d} -> {lo}": {"activations"} for d in ("top", "bottom") for lo in ("bank", "clinic")
    }
    # a label owner asking for the activations of another label owner's rows is refused
    ask = {"split": "clinic", "start": 0, "stop": 1}
    forged = Message("infer", sender="bank", receiver="top", meta=ask)
    with pytest.raises(ProtocolError, match="'bank' asked for the activations of 'clinic'"):
        transport.local["top"].algo.handle(forged)


def test_fedviews_predict_over_grpc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fedviews launch` trains, `fedviews predict` predicts: processes over gRPC with mutual
    TLS and PSI, each with its own model part and file of new rows; the estimator's labels.
    The launch's overrides are the prediction's too, unsaid (predict refused the training
    config without them: "trained with another config")."""
    pytest.importorskip("grpc")
    config = tmp_path / "vfedmv.toml"
    config.write_text(VFEDMV)
    run, pred = tmp_path / "run", tmp_path / "pred"

    def fedviews(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "fedviews", *args], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    fedviews("launch", str(config), "params.max_iter=3", "--out", str(run))
    trained = _cfg(VFEDMV, "params.max_iter=3")
    files = {p: run / "data" / f"{p}.npz" for p in ("pix", "fou")}
    new = _vfedmv_new_rows(files, drop=3)
    for p, data in new.items():
        save_party_data(tmp_path / "new" / f"{p}.npz", data)

    def predict(new: dict[str, PartyData], pred: Path) -> str:
        """`fedviews predict` of the files in ``tmp_path/new``: the estimator's labels of
        ``new`` (the training overrides not repeated)."""
        args = ["--model", str(run), "--data-dir", str(tmp_path / "new"), "--out", str(pred)]
        out = fedviews("predict", str(config), *args)
        assert "the training run's overrides: params.max_iter=3" in out
        ids, labels, _ = _vfedmv_reference(trained, files, new)
        got = _npz(pred / "fou" / "predictions.npz")
        np.testing.assert_array_equal(got["ids"], ids)
        np.testing.assert_array_equal(got["labels"], labels)
        return out

    out = predict(new, pred)
    assert "[fou] predicted 27 rows" in out and "PSI predict" in out
    log = json.loads((pred / "coordinator" / "message_log.json").read_text())
    for p in ("pix", "fou"):
        assert set(log["crossings"][f"{p} -> coordinator"]) == {"Z_k_test", "psi_set", "psi_sealed"}

    # the docs' recipe for new rows (docs/deployment.md: the training files' held-out rows)
    page = (Path(__file__).parents[2] / "docs" / "deployment.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", page, re.S)
    monkeypatch.chdir(tmp_path)
    exec(block, {})  # the page's own code
    predict(_vfedmv_new_rows(files, drop=0), tmp_path / "pred_docs")


SPLITNN = """
algorithm = "splitnn"
name = "predict_splitnn_test"
seed = 2
[federation]
parties = ["top", "bottom"]
label_owner = "bottom"
[data]
dataset = "mnist"
n_per_class = 6
n_test = 20
[params]
epochs = 2
batch_size = 16
hidden = 8
device = "cpu"
evaluate = true
"""


def test_splitnn_predict_equals_the_in_process_run_and_the_estimator(tmp_path: Path) -> None:
    """The label owner predicts the common new rows with every party's bottom (only their
    ``logits`` cross): what the in-process run of the same config predicts for them, and
    what :class:`SplitNN` fitted on the same aligned rows predicts."""
    pytest.importorskip("torch")
    from fedviews.deep import SplitNN
    from fedviews.federation import build_in_process

    cfg = _cfg(SPLITNN)
    files = write_demo_data(cfg, tmp_path / "data")
    _train(cfg, files, tmp_path / "run")
    datas = {p: load_party_data(path) for p, path in files.items()}
    fed = build_in_process(cfg, datas)
    fed()
    expected = fed.parties["bottom"].predict_test()  # the test rows in ascending ID order
    new = {
        p: PartyData(d.ids_test[3 if p == "top" else 0 :], d.X_test[3 if p == "top" else 0 :])
        for p, d in datas.items()
    }
    res, transport = _predict(cfg, new, tmp_path / "run", tmp_path / "out")
    got = _npz(tmp_path / "out" / "bottom" / "predictions.npz")
    all_ids = np.sort(datas["bottom"].ids_test)
    np.testing.assert_array_equal(got["ids"], np.sort(new["top"].ids))
    np.testing.assert_array_equal(got["labels"], expected[np.searchsorted(all_ids, got["ids"])])
    assert res["predicted_rows"] == {"predict": len(all_ids) - 3}
    crossed = transport.log.summary()["crossings"]
    assert set(crossed["top -> bottom"]) == {"logits"}
    # the estimator, fitted on the rows both parties hold (in ID order, as aligned)
    ids = np.intersect1d(datas["top"].ids, datas["bottom"].ids)

    def rows(d: PartyData, want: np.ndarray, test: bool = False) -> np.ndarray:
        have = d.ids_test if test else d.ids
        X = d.X_test if test else d.X
        assert have is not None and X is not None
        return X[np.argsort(have)][np.searchsorted(np.sort(have), want)]

    y = datas["bottom"].y
    assert y is not None
    y = y[np.argsort(datas["bottom"].ids)][np.searchsorted(np.sort(datas["bottom"].ids), ids)]
    p = cfg.params
    est = SplitNN(
        label_owner=1, epochs=p.epochs, batch_size=p.batch_size, hidden=p.hidden,
        device="cpu", random_state=cfg.seed,
    ).fit([rows(datas[q], ids) for q in ("top", "bottom")], y)  # fmt: skip
    assert est.history_["loss"] == [r["loss"] for r in fed.coordinator.history]
    new_rows = [rows(datas[q], got["ids"], test=True) for q in ("top", "bottom")]
    np.testing.assert_array_equal(est.predict(new_rows), got["labels"])


def test_multivfl_predict_without_the_psi_from_tagged_rows(tmp_path: Path) -> None:
    """``fedviews predict`` without the PSI (as on Flower): each data owner's new rows are
    tagged with the label owner that asks for them (``group``) and every member of a group
    holds its IDs; the predictions equal those of the same rows aligned by the PSI, and a
    data owner holding other IDs than a label owner asks for is refused by the coordinator."""
    pytest.importorskip("torch")
    cfg = _cfg(MULTIVFL)
    files = write_demo_data(cfg, tmp_path / "data")
    _train(cfg, files, tmp_path / "run")
    D = {d: load_party_data(files[d]) for d in ("top", "bottom")}
    test_ids = D["top"].ids_test
    assert test_ids is not None
    asked = {"bank": np.sort(test_ids[:12]), "clinic": np.sort(test_ids[12:])}

    def new_rows(tagged: bool, bottom_ids: np.ndarray | None = None) -> dict[str, PartyData]:
        out: dict[str, PartyData] = {lo: PartyData(ids) for lo, ids in asked.items()}
        for d, data in D.items():
            assert data.ids_test is not None and data.X_test is not None
            ids = data.ids_test if bottom_ids is None or d == "top" else bottom_ids
            group = np.where(np.isin(ids, asked["bank"]), "bank", "clinic")
            out[d] = PartyData(ids, data.X_test, group=group if tagged else None)
        return out

    _predict(cfg, new_rows(tagged=False), tmp_path / "run", tmp_path / "psi")
    none = _cfg(MULTIVFL, 'federation.alignment="none"')
    res, transport = _predict(none, new_rows(tagged=True), tmp_path / "run", tmp_path / "none")
    assert res["predicted_rows"] == {"bank": 12, "clinic": 8}
    for lo in ("bank", "clinic"):
        want, got = (_npz(tmp_path / o / lo / "predictions.npz") for o in ("psi", "none"))
        np.testing.assert_array_equal(got["ids"], asked[lo])
        np.testing.assert_array_equal(got["ids"], want["ids"])
        np.testing.assert_array_equal(got["labels"], want["labels"])
    assert not any(kind.startswith("psi:") for _, _, kind, _ in transport.log.exchanges())
    other = test_ids.copy()
    other[np.flatnonzero(np.isin(other, asked["clinic"]))[0]] = "nobody"
    with pytest.raises(DataError, match="group 'clinic' hold as many samples but not the same"):
        _predict(none, new_rows(True, other), tmp_path / "run", tmp_path / "bad")
