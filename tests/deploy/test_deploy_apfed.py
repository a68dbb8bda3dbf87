"""APFed deployed: the spec in-process (== APFed.fit, resume) and a real launch over gRPC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("grpc")
pytest.importorskip("rbcl")  # the PSI

from _protocol import assert_tight, footprint  # noqa: E402

from fedviews.deep import export_apfed_model, load_active_model  # noqa: E402
from fedviews.deep.apfed import APFed  # noqa: E402
from fedviews.deploy import (  # noqa: E402
    PartyData,
    free_port,
    load_deploy_config,
    load_party_data,
    write_demo_data,
)
from fedviews.errors import ConfigError, DataError  # noqa: E402
from fedviews.federation import build_in_process, get_algorithm_spec  # noqa: E402

PARTIES = ("top", "mid", "bot")  # strips top to bottom; "mid" is active: setting 3-2
CONFIG = """
algorithm = "apfed"
name = "deploy_apfed_test"
seed = 4
[federation]
parties = ["top", "mid", "bot"]
label_owner = "mid"
timeout = 30.0
[data]
dataset = "mnist"
n_per_class = {n_per_class}
n_test = 60
overlap = 0.9
[params]
variant = "{variant}"
lam = [1.0, 0.5]
epochs = 2
batch_size = 64
lr = 0.03
device = "cpu"
pad = true
torch_threads = 1
"""


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # as the party processes (torch_threads = 1): tiny networks
    yield
    torch.set_num_threads(n)


def _config(variant: str = "C", n_per_class: int = 16) -> dict:
    from fedviews._tables import tomllib  # tomli before Python 3.11

    return tomllib.loads(CONFIG.format(variant=variant, n_per_class=n_per_class))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    cfg = load_deploy_config(_config())
    return write_demo_data(cfg, tmp_path_factory.mktemp("apfed_data"))


def _aligned(datas: dict[str, PartyData]) -> np.ndarray:
    common = np.sort(list(set.intersection(*(set(d.ids.tolist()) for d in datas.values()))))
    return common


def _rows(data: PartyData, common: np.ndarray) -> np.ndarray:
    order = np.argsort(data.ids)
    return order[np.searchsorted(data.ids[order], common)]


def _reference(cfg, datas: dict[str, PartyData]) -> tuple[APFed, np.ndarray]:
    """APFed.fit on the aligned images (rows by ascending ID, strips stacked top to bottom)."""
    common = _aligned(datas)
    strips = [datas[p].features[_rows(datas[p], common)] for p in PARTIES]
    images = np.concatenate(strips, axis=1) / 255.0
    active = datas["mid"]
    y = np.asarray(active.y)[_rows(active, common)]
    p = cfg.params
    est = APFed(
        variant=p.variant,
        m=3,
        i=2,
        lam=list(p.lam),
        tau=p.tau,
        epochs=p.epochs,
        batch_size=p.batch_size,
        lr=p.lr,
        momentum=p.momentum,
        weight_decay=p.weight_decay,
        pad=False,
        device="cpu",
        random_state=cfg.seed,
    ).fit(images, y)
    X_test = np.asarray(active.X_test / 255.0, dtype=np.float32)[:, None]
    pred = est.classes_[np.argmax(est._logits(X_test), axis=1)]
    return est, pred


def _objects(cfg, datas: dict[str, PartyData]):
    """The driver and every party built by the app as in their processes, one transport."""
    run = build_in_process(cfg, datas)
    return run.algorithm, run.coordinator, run.parties


class _Killed(Exception):
    pass


@pytest.mark.parametrize("variant", ["R", "C"])
def test_app_equals_apfed_fit_and_resumes(files, variant):
    """The app's objects == APFed.fit bit for bit; a run killed after epoch 1 resumes to the same."""
    cfg = load_deploy_config(_config(variant))
    datas = {p: load_party_data(f) for p, f in files.items()}
    est, pred = _reference(cfg, datas)

    app, driver, parties = _objects(cfg, datas)
    app.run_coordinator(driver, lambda r: None)
    metrics, _ = app.coordinator_results(driver)
    assert metrics["history"]["loss"] == est.history_
    assert metrics["final_accuracy"] == np.mean(pred == datas["mid"].y_test)
    full = app.party_results(parties["mid"])
    for k, v in est.active_.net.state_dict().items():
        np.testing.assert_array_equal(full[f"net/{k}"], v.numpy(), err_msg=k)
    for k, v in est.passives_[1].net.state_dict().items():  # "bot" is the second passive
        np.testing.assert_array_equal(app.party_results(parties["bot"])[f"net/{k}"], v.numpy())

    # killed after epoch 1: every process had checkpointed; fresh processes load them
    app, driver, parties = _objects(cfg, datas)
    saved: dict[str, dict[str, np.ndarray]] = {}

    def kill_after_epoch_1(r: int) -> None:
        saved.update({p: obj.state_dict() for p, obj in parties.items()})
        saved["coordinator"] = driver.state_dict()
        raise _Killed

    with pytest.raises(_Killed):
        app.run_coordinator(driver, kill_after_epoch_1)
    app, driver, parties = _objects(cfg, datas)
    driver.load_state(saved["coordinator"])
    for p, obj in parties.items():
        obj.load_state(saved[p])
    app.run_coordinator(driver, lambda r: None)
    resumed, _ = app.coordinator_results(driver)
    assert resumed["history"]["loss"] == est.history_
    assert resumed["history"]["accuracy"] == metrics["history"]["accuracy"]
    after = app.party_results(parties["mid"])
    for k, v in full.items():
        np.testing.assert_array_equal(after[k], v, err_msg=k)
    first = next(k for k in saved["top"] if k.startswith("net/"))
    with pytest.raises(DataError, match="does not fit"):
        parties["top"].load_state({**saved["top"], first: np.zeros(3)})


def test_config_and_data_errors(files):
    with pytest.raises(ConfigError, match="one active party"):
        load_deploy_config(
            {"algorithm": "apfed", "federation": {"parties": ["a", "b"], "label_owners": ["a"]}}
        )
    with pytest.raises(ConfigError, match="variant"):
        load_deploy_config({**_config(), "params": {"variant": "X"}})
    cfg = load_deploy_config(_config())
    app = get_algorithm_spec("apfed")
    with pytest.raises(ConfigError, match="2 passive"):
        one_lam = load_deploy_config({**_config(), "params": {"lam": [1.0]}})
        app.check_data(one_lam, "mid", load_party_data(files["mid"]))
    passive = load_party_data(files["top"])
    five = passive.features.reshape(len(passive.ids), -1, 1, 1, 1)  # table columns (n, k) are fine
    with pytest.raises(DataError, match=r"image strips .* or table columns \(n, k\)"):
        app.check_data(cfg, "top", PartyData(passive.ids, five))
    infos = {p: {"channels": 1, "height": 10, "width": 28, "n/train": 5} for p in PARTIES}
    infos["mid"]["n_classes"] = 10
    infos["bot"] = {**infos["bot"], "height": 8}
    with pytest.raises(DataError, match="equal size"):
        app.make_setup(cfg, infos)


def _launch_and_compare(tmp_path: Path, launch, extra: str = "") -> tuple:
    """``CONFIG`` (variant C, and the tables of ``extra``) launched as a user does; its
    results and models checked against APFed.fit on the same files. Returns ``(run, out,
    cfg, datas, est)``."""
    config = tmp_path / "deploy.toml"
    config.write_text(CONFIG.format(variant="C", n_per_class=16) + extra)
    run = tmp_path / "run"
    out = launch(config, run)
    assert "[coordinator] epoch 2/2: loss" in out and "test accuracy" in out
    cfg = load_deploy_config(config)
    datas = {p: load_party_data(run / "data" / f"{p}.npz") for p in PARTIES}
    assert datas["top"].y is None and datas["top"].ids_test is None  # passives: strips only
    est, pred = _reference(cfg, datas)

    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok" and res["epochs_done"] == 2 and res["last_checkpoint_round"] == 2
    np.testing.assert_allclose(res["history"]["loss"], est.history_, rtol=1e-4)
    acc = float(np.mean(pred == datas["mid"].y_test))
    assert abs(res["final_accuracy"] - acc) <= 1.5 / len(pred)
    with np.load(run / "mid" / "result.npz") as z:
        for k, v in est.active_.net.state_dict().items():
            np.testing.assert_allclose(z[f"net/{k}"], v.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)
    # the active party predicts alone from its own result
    model = load_active_model(run / "mid" / "model")  # written by the active party itself
    assert export_apfed_model(run / "mid" / "result.npz", tmp_path / "again").is_dir()
    strips = datas["mid"].X_test[:, None] / 255.0
    assert np.mean(model.predict(strips) == pred) >= 1 - 1.5 / len(pred)
    return run, out, cfg, datas, est


def test_launch_equals_in_process(tmp_path, launch):
    """Coordinator (driver) + 3 party processes over gRPC with mutual TLS and PSI == APFed.fit."""
    run, _, cfg, datas, est = _launch_and_compare(tmp_path, launch)
    res = json.loads((run / "coordinator" / "results.json").read_text())

    # only h_A and grad_h_A crossed between parties, only the PSI arrays with the coordinator
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    crossed = log["crossings"]
    for p in ("top", "bot"):
        assert crossed[f"mid -> {p}"] == ["h_A"]
        assert crossed[f"{p} -> mid"] == ["grad_h_A"]
    for p in PARTIES:
        assert crossed[f"{p} -> coordinator"] == ["psi_sealed", "psi_set"]
        assert crossed[f"coordinator -> {p}"] == ["psi_positions", "psi_sealed"]
    assert len(crossed) == 4 + 2 * len(PARTIES)

    # the same config in one process runs exactly the deployed protocol, and the policy
    # of this run allows exactly what crossed
    fed = build_in_process(cfg, datas)
    fed()
    roles = {**cfg.roles(), "coordinator": "coordinator"}
    seen = footprint(log["exchanges"], roles)
    assert seen == footprint(fed.transport.log.exchanges(), roles)
    assert_tight(fed.transport.policy, seen)
    assert fed.transport.policy == get_algorithm_spec("apfed").policy(cfg, fed.setup)
    assert fed.coordinator.history[-1]["loss"] == pytest.approx(res["history"]["loss"][-1])
    # and so does the estimator on the same data and params (its clients named by strip)
    assert seen == footprint(est.transport_.log.exchanges(), est.transport_.roles)
    assert_tight(est.transport_.policy, seen)


def test_launch_with_one_direct_and_one_relayed_link_equals_in_process(tmp_path, launch):
    """``top`` declares an endpoint (``[federation.listen]``): the active party dials it and
    they exchange ``h_A`` and ``grad_h_A`` directly; ``bot`` declares none and stays behind
    the hub's relay. Same losses, models and accuracy as APFed.fit, and, over all
    processes' logs, the same footprint as the in-process run of the config."""
    extra = f'[federation.listen]\ntop = "127.0.0.1:{free_port()}"\n'
    run, out, cfg, datas, est = _launch_and_compare(tmp_path, launch, extra)
    assert cfg.federation.listen == {"top": extra.split('"')[1]}
    assert "[top] listening for direct links" in out
    names = (cfg.federation.coordinator, *PARTIES)
    logs = {p: json.loads((run / p / "message_log.json").read_text()) for p in names}
    relayed = logs["coordinator"]["crossings"]  # what the hub saw
    assert "mid -> top" not in relayed and "top -> mid" not in relayed
    assert relayed["mid -> bot"] == ["h_A"] and relayed["bot -> mid"] == ["grad_h_A"]
    for p in PARTIES:  # the PSI still goes through the hub
        assert relayed[f"{p} -> coordinator"] == ["psi_sealed", "psi_set"]
    for side in ("mid", "top"):  # both ends of the direct link logged it alike
        assert logs[side]["crossings"]["mid -> top"] == ["h_A"]
        assert logs[side]["crossings"]["top -> mid"] == ["grad_h_A"]
    direct = logs["mid"]["links"]
    assert [(x["peer"], x["dialed"]) for x in direct["direct"]] == [("top", True)]
    assert direct["relayed"] == {} and direct["direct"][0]["bytes_in"] > 0
    assert [(x["peer"], x["dialed"]) for x in logs["top"]["links"]["direct"]] == [("mid", False)]
    assert logs["bot"]["links"]["direct"] == []

    # one footprint: all processes' logs together == the in-process run == the estimator
    roles = {**cfg.roles(), "coordinator": "coordinator"}
    seen = set()
    for log in logs.values():
        seen |= footprint(log["exchanges"], roles)
    fed = build_in_process(cfg, datas)
    fed()
    assert seen == footprint(fed.transport.log.exchanges(), roles)
    assert_tight(fed.transport.policy, seen)
    assert seen == footprint(est.transport_.log.exchanges(), est.transport_.roles)
