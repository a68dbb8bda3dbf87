"""Multi-VFL deployed: data owners and label owners as real processes == in-process MultiVFL.

The estimator and the deployment run the one definition of the algorithm
(:class:`fedviews.deep.multivfl.MultiVFLAlgorithm`): same numbers, same protocol
footprint, same privacy policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grpc")
pytest.importorskip("rbcl")  # the PSI

from _protocol import footprint, launch_config  # noqa: E402

from fedviews.deep.multivfl import MultiVFL  # noqa: E402
from fedviews.deploy import (  # noqa: E402
    free_port,
    load_deploy_config,
    load_party_data,
    write_demo_data,  # noqa: E402
)
from fedviews.errors import ConfigError, DataError  # noqa: E402
from fedviews.federation import build_in_process, get_algorithm_spec  # noqa: E402

DOS = ("top", "middle", "bottom")
LOS = ("bank", "clinic")
CONFIG = """
algorithm = "multivfl"
name = "deploy_multivfl_test"
seed = 2
[federation]
parties = ["top", "middle", "bottom", "bank", "clinic"]
label_owners = ["bank", "clinic"]
timeout = 30.0
[data]
dataset = "mnist"
n_per_class = 12
n_test = 60
scenario = "1niid"
samples_per_owner = 20
overlap = 0.95
[params]
optimizer = "fedadam"
server_lr = 0.01
rounds = 2
batch_size = 32
channels = 8
top_channels = 8
hidden = 16
device = "cpu"
"""


def _in_process(run: Path, cfg) -> MultiVFL:
    """The same federation in one process, from the same files (aligned as the PSI does)."""
    D = [load_party_data(run / "data" / f"{d}.npz") for d in DOS]
    L = [load_party_data(run / "data" / f"{lo}.npz") for lo in LOS]
    ids = np.sort(D[0].ids)
    for d in D[1:]:
        ids = np.intersect1d(ids, d.ids)
    strips = [d.X[np.argsort(d.ids)][np.searchsorted(np.sort(d.ids), ids)] for d in D]
    y = np.zeros(len(ids), dtype=np.int64)
    owner_ids = []
    for lo in L:
        keep = np.isin(lo.ids, ids)
        y[np.searchsorted(ids, lo.ids[keep])] = lo.y[keep]
        owner_ids.append(np.sort(lo.ids[keep]))
    test_ids = np.sort(D[0].ids_test)
    t_strips = [d.X_test[np.argsort(d.ids_test)] for d in D]
    y_test = L[0].y_test[np.argsort(L[0].ids_test)]
    assert np.array_equal(np.sort(L[0].ids_test), test_ids)
    p = cfg.params
    return MultiVFL(
        n_data_owners=len(DOS),
        n_label_owners=len(LOS),
        optimizer=p.optimizer,
        rounds=p.rounds,
        batch_size=p.batch_size,
        lr=p.lr,
        server_lr=p.server_lr,
        channels=p.channels,
        top_channels=p.top_channels,
        hidden=p.hidden,
        device="cpu",
        defense=cfg.defense,
        random_state=cfg.seed,
    ).fit(strips, y, ids=ids, label_owner_ids=owner_ids, eval_set=(t_strips, y_test))


@dataclass(frozen=True)
class Launched:
    """One launched deployment of ``CONFIG`` and the same federation run in one process."""

    run: Path  # the run folder of ``fedviews launch``
    out: str  # what it printed
    cfg: Any
    ref: MultiVFL  # the estimator on the same files


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """``fedviews launch`` as a user runs it (once for the tests below), and the estimator.

    ``top`` declares an endpoint (``[federation.listen]``): both label owners dial it and
    exchange its activations and gradients directly; ``middle`` and ``bottom`` declare
    none and stay behind the hub's relay.
    """
    direct = f'[federation.listen]\ntop = "127.0.0.1:{free_port()}"\n'
    return Launched(*_launch_with(tmp_path_factory.mktemp("multivfl"), "", direct))


def _logs(run: Path, cfg: Any) -> dict[str, dict[str, Any]]:
    """Every process's ``message_log.json``, by name (the coordinator's: what its hub saw)."""
    names = (cfg.federation.coordinator, *cfg.federation.parties)
    return {p: json.loads((run / p / "message_log.json").read_text()) for p in names}


def _crossings(logs: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """What crossed, as all processes logged it together (a direct link is logged by its
    two parties only)."""
    out: dict[str, set[str]] = {}
    for log in logs.values():
        for pair, names in log["crossings"].items():
            out.setdefault(pair, set()).update(names)
    return {pair: sorted(names) for pair, names in out.items()}


def test_launch_equals_in_process_and_only_activations_cross(launched):
    run, out, ref = launched.run, launched.out, launched.ref
    assert "[coordinator] round 2/2: train loss" in out and "PSI bank" in out
    res = _assert_same_models(run, ref)
    assert res["rounds_done"] == 2
    np.testing.assert_allclose(res["history"]["train_loss"], ref.history_["train_loss"], rtol=1e-5)
    cross = _crossings(_logs(run, launched.cfg))
    top_names = {f"top/{k}" for k in ref.server_.params}
    update_names = {f"update/{k}" for k in ref.server_.params}
    for d in DOS:
        assert set(cross[f"{d} -> coordinator"]) == {"psi_sealed", "psi_set"}
        for lo in LOS:  # only activations and their gradients between owners
            assert cross[f"{d} -> {lo}"] == ["activations"]
            assert cross[f"{lo} -> {d}"] == ["activation_grad"]
    for lo in LOS:
        assert set(cross[f"{lo} -> coordinator"]) == update_names | {"psi_sealed", "psi_set"}
        assert set(cross[f"coordinator -> {lo}"]) == top_names | {"psi_sealed", "psi_positions"}
    # raw strips, labels and bottom models stay home: no other array name ever crossed
    crossed = {n for names in cross.values() for n in names}
    assert crossed == {
        "activations",
        "activation_grad",
        "psi_set",
        "psi_sealed",
        "psi_positions",
    } | (top_names | update_names)


def _roles(cfg) -> dict[str, str]:
    return {**cfg.roles(), cfg.federation.coordinator: "coordinator"}


def test_in_process_and_deployed_runs_have_one_footprint(launched):
    """Every (sender role, receiver role, kind, array names) of the estimator's run, and
    nothing else, crossed in the deployment."""
    ref = launched.ref
    deployed = set()
    for log in _logs(launched.run, launched.cfg).values():
        deployed |= footprint(log["exchanges"], _roles(launched.cfg))
    parties = [ref.server_, *ref.data_owners_, *ref.label_owners_]
    in_process = footprint(ref.transport_.log.exchanges(), {p.name: p.role for p in parties})
    assert deployed == in_process
    kinds = {k for _, _, k, _ in deployed}
    assert kinds == {
        k + r
        for k in ("train_round", "set_top", "average_bottoms", "evaluate")
        + ("begin_epoch", "forward", "backward", "infer")
        for r in ("", ":reply")
    }
    # a data owner only ever answers, and only with activations
    assert {(k, n) for s, _, k, n in deployed if s == "data_owner"} == {
        (f"{k}:reply", n)
        for k, n in (
            ("forward", ("activations",)),
            ("infer", ("activations",)),
            ("begin_epoch", ()),
            ("backward", ()),
            ("average_bottoms", ()),
        )
    }


def test_deployed_policy_is_the_in_process_policy(launched):
    """The policy every deployed process computes from this run's setup is exactly the one
    the estimator's transport enforced: this run's top-model layers, nothing wider."""
    run, cfg, ref = launched.run, launched.cfg, launched.ref
    spec = get_algorithm_spec("multivfl")
    files = {p: load_party_data(run / "data" / f"{p}.npz") for p in cfg.federation.parties}
    setup = build_in_process(cfg, files).setup  # what the deployed coordinator broadcast
    # this run's image: 28 rows cut into 10 + 9 + 9, 28 wide, 10 classes
    assert setup == {
        "n_classes": 10,
        "top_input": "8x28x28",
        **{f"input/{d}": f"1x{h}x28" for d, h in zip(DOS, (10, 9, 9), strict=True)},
        **{f"output/{d}": f"8x{h}x28" for d, h in zip(DOS, (10, 9, 9), strict=True)},
    }
    policy = spec.policy(cfg, setup)
    assert policy == ref.transport_.policy
    layers = list(ref.server_.params)
    assert layers == spec.top_names(cfg, setup)
    assert policy.strict_kinds
    assert policy.allowed == {
        ("data_owner", "label_owner"): {"activations"},
        ("label_owner", "data_owner"): {"activation_grad"},
        ("label_owner", "coordinator"): {f"update/{k}" for k in layers},
        ("coordinator", "label_owner"): {f"top/{k}" for k in layers},
    }
    assert policy.kinds == {
        ("coordinator", "label_owner"): {"train_round", "set_top", "evaluate"},
        ("coordinator", "data_owner"): {"average_bottoms"},
        ("label_owner", "data_owner"): {"begin_epoch", "forward", "backward", "infer"},
    }
    # the layers are those of this run's top model: its shapes follow the setup and params
    p = cfg.params
    shapes = {k: v.shape for k, v in ref.server_.params.items()}
    assert shapes == {
        "0.weight": (p.top_channels, p.channels, 3, 3),
        "0.bias": (p.top_channels,),
        "4.weight": (p.hidden, p.top_channels * 7 * 7),
        "4.bias": (p.hidden,),
        "6.weight": (setup["n_classes"], p.hidden),
        "6.bias": (setup["n_classes"],),
    }
    with np.load(run / "coordinator" / "result.npz") as z:
        assert {k: z[k].shape for k in z.files} == {f"top/{k}": s for k, s in shapes.items()}
    # without evaluation the coordinator may not ask for it
    quiet = replace(cfg, params=replace(cfg.params, evaluate=False))
    assert spec.policy(quiet, setup).kinds[("coordinator", "label_owner")] == {
        "train_round",
        "set_top",
    }


class _Stop(Exception):
    pass


def _federation(cfg, files):
    run = build_in_process(cfg, files)
    return run.algorithm, run.coordinator, run.parties


def test_deploy_app_state_resumes_bit_for_bit(tmp_path):
    """Kill after round 2 (states saved as the processes do), resume in fresh objects."""
    (tmp_path / "c.toml").write_text(CONFIG)
    cfg = load_deploy_config(tmp_path / "c.toml", ["params.rounds=4", "params.optimizer=fedyogi"])
    files_dir = tmp_path / "data"
    write_demo_data(cfg, files_dir)
    files = {p: load_party_data(files_dir / f"{p}.npz") for p in cfg.federation.parties}

    app, server, _ = _federation(cfg, files)
    app.run_coordinator(server, lambda r: None)
    uninterrupted = app.coordinator_results(server)

    app, server, parties = _federation(cfg, files)
    saved = {}

    def kill_after_2(r: int) -> None:
        if r == 2:
            saved["server"] = server.state_dict()
            saved.update({p: obj.state_dict() for p, obj in parties.items()})
            raise _Stop

    with pytest.raises(_Stop):
        app.run_coordinator(server, kill_after_2)
    app, server, parties = _federation(cfg, files)  # fresh "processes"
    server.load_state(saved["server"])
    for p, obj in parties.items():
        obj.load_state(saved[p])
    app.run_coordinator(server, lambda r: None)
    resumed = app.coordinator_results(server)
    assert resumed[0]["rounds_done"] == 4
    for key in ("train_loss", "accuracy"):
        assert resumed[0]["history"][key] == uninterrupted[0]["history"][key]
    for k, v in uninterrupted[1].items():
        np.testing.assert_array_equal(resumed[1][k], v)
    with pytest.raises(DataError, match="lacks the top-model arrays"):
        server.load_state({})


def test_multivfl_deploy_config_errors(tmp_path):
    base = {
        "algorithm": "multivfl",
        "federation": {"parties": ["a", "b", "lo"], "label_owners": ["lo"]},
    }
    cfg = load_deploy_config(base)
    assert cfg.roles() == {"a": "data_owner", "b": "data_owner", "lo": "label_owner"}
    with pytest.raises(ConfigError, match="label_owners"):
        load_deploy_config({**base, "federation": {"parties": ["a", "lo"], "label_owner": "lo"}})
    with pytest.raises(ConfigError, match="at least one data owner"):
        load_deploy_config({**base, "federation": {"parties": ["lo"], "label_owners": ["lo"]}})


def _launch_with(tmp_path: Path, defense: str, extra: str = "") -> tuple[Path, str, Any, MultiVFL]:
    """``CONFIG`` launched (with ``defense``, the body of a ``[defense]`` table, if given, and
    the tables of ``extra``), and the estimator on the same files."""
    config = tmp_path / "deploy.toml"
    config.write_text(CONFIG + extra + (f"[defense]\n{defense}" if defense else ""))
    run = tmp_path / "run"
    out = launch_config(config, run)
    cfg = load_deploy_config(config)
    return run, out, cfg, _in_process(run, cfg)


def _assert_same_models(run: Path, ref: MultiVFL) -> dict[str, Any]:
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok"
    np.testing.assert_allclose(res["history"]["accuracy"], ref.history_["accuracy"], atol=1e-12)
    with np.load(run / "coordinator" / "result.npz") as z:
        for k, v in ref.server_.params.items():
            np.testing.assert_allclose(z[f"top/{k}"], v, rtol=1e-4, atol=1e-6)
    for d, owner in zip(DOS, ref.data_owners_, strict=True):
        with np.load(run / d / "result.npz") as z:
            for k, v in owner.state_dict().items():
                np.testing.assert_allclose(z[k], v, rtol=1e-4, atol=1e-6)
    return res


def _footprints(run: Path, cfg: Any, ref: MultiVFL) -> tuple[set, set, dict[str, Any]]:
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    parties = [ref.server_, *ref.data_owners_, *ref.label_owners_]
    in_process = footprint(ref.transport_.log.exchanges(), {p.name: p.role for p in parties})
    return footprint(log["exchanges"], _roles(cfg)), in_process, log


def test_launch_with_gradient_dp_equals_in_process(tmp_path):
    """``[defense] kind = "grad_dp"`` deployed: the label owners clip and noise what they
    release exactly as in one process (the noise from ``defense.seed``, for the test), the
    same arrays cross, no training loss leaves a label owner, and the coordinator reports
    the budget of the run's ``rounds x local_epochs`` releases."""
    pytest.importorskip("dp_accounting")
    defense = 'kind = "grad_dp"\nepsilon = 8.0\nclip = 1.0\nseed = 5\n'
    run, out, cfg, ref = _launch_with(tmp_path, defense)
    assert "defense.seed is set" in out  # a seeded draw is for tests only, and says so
    res = _assert_same_models(run, ref)
    assert all(v is None or np.isnan(v) for v in res["history"]["train_loss"])
    for k, lo in enumerate(LOS):
        got = res["privacy"]["parties"][lo]
        assert got == ref.privacy_["parties"][f"label_owner_{k}"]
        assert got["epsilon"] == pytest.approx(8.0) and got["releases"] == 2
    deployed, in_process, log = _footprints(run, cfg, ref)
    assert deployed == in_process
    for lo in LOS:
        assert "train_loss" not in log["meta_keys"].get(f"{lo} -> coordinator", [])


def test_launch_with_secure_aggregation_equals_in_process(tmp_path):
    """``[defense] kind = "secagg"`` deployed (mutual TLS: the label owners sign their
    X25519 keys): the server receives only masked updates, and the run equals the
    in-process secure run and, within fixed point, the plain one."""
    run, _, cfg, ref = _launch_with(tmp_path, 'kind = "secagg"\n')
    res = _assert_same_models(run, ref)
    np.testing.assert_allclose(res["history"]["train_loss"], ref.history_["train_loss"], rtol=1e-5)
    deployed, in_process, log = _footprints(run, cfg, ref)
    assert deployed == in_process
    assert ("label_owner", "coordinator", "secagg:keys:reply", ()) in deployed
    names = {f"masked_update/{k}" for k in ref.server_.params}
    for lo in LOS:
        assert set(log["crossings"][f"{lo} -> coordinator"]) == names | {"psi_sealed", "psi_set"}


def test_direct_links_skip_the_hub_and_both_ends_log_them(launched):
    """The label owners' messages with ``top`` went over direct links and never reached
    the hub; those with ``middle`` and ``bottom`` were relayed. Both ends of every link
    logged the same crossings, however they went."""
    assert "[top] listening for direct links" in launched.out
    logs = _logs(launched.run, launched.cfg)
    relayed = logs["coordinator"]["crossings"]
    for lo in LOS:
        for d in DOS:
            direct = d == "top"
            assert (f"{d} -> {lo}" in relayed) is not direct
            assert (f"{lo} -> {d}" in relayed) is not direct
            for side in (d, lo):
                assert logs[side]["crossings"][f"{d} -> {lo}"] == ["activations"]
                assert logs[side]["crossings"][f"{lo} -> {d}"] == ["activation_grad"]
        links = logs[lo]["links"]
        assert [(x["peer"], x["dialed"]) for x in links["direct"]] == [("top", True)]
        assert links["relayed"] == {} and links["direct"][0]["bytes_in"] > 0
    top = logs["top"]["links"]["direct"]
    assert sorted((x["peer"], x["dialed"]) for x in top) == [(lo, False) for lo in sorted(LOS)]
