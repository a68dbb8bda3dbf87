"""The Multi-VFL Fig. 3 claim: seeds, server lrs, and the claim tables computed from the curves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _cli import ROOT
from scipy import stats

from fedviews.errors import ConfigError, DataError
from fedviews.experiments import load_config, run_experiment
from fedviews.experiments.multivfl import optimizer_claim

CONFIG = ROOT / "configs" / "multivfl_fig3_claim_mnist.toml"
TINY = [
    "params.rounds=2",
    "params.n_seeds=2",
    "params.samples_per_owner=40",
    "params.eval_samples=100",
    "params.batch_size=20",
    "params.optimizers=['fedavg', 'fedadam']",
    "device='cpu'",
]


def _paired(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean and Student-t 95 % interval of ``a - b``, seed by seed."""
    d = np.subtract(a, b)
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def test_claim_tables_equal_what_the_curves_give(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from fedviews.data import image_split
    from fedviews.deep import partition_label_owners
    from fedviews.deep.multivfl import MultiVFL

    cfg = load_config(CONFIG, TINY)
    out, result = run_experiment(cfg, quiet=True, out_dir=tmp_path)
    acc = json.loads((out / "metrics.json").read_text())["accuracy"]
    assert sorted(acc) == sorted(
        f"4niid/{o}/seed={s}"
        for o in ("fedavg", "fedadam/lr=0.001", "fedadam/lr=0.01")
        for s in (0, 1)
    )
    # seed 1 is MultiVFL with random_state 1 on the label owners' samples of seed 0
    p = cfg.params
    Xtr, ytr, ids, Xte, yte, _ = image_split("mnist", {}, 0, p.test_fraction)
    keep = np.random.default_rng(0).permutation(len(yte))[: p.eval_samples]
    rows = partition_label_owners(
        np.unique(ytr, return_inverse=True)[1], "4niid", 5, 40, np.random.default_rng(0)
    )
    kw = {k: getattr(p, k) for k in MultiVFL().get_params() if hasattr(p, k)}
    kw |= {"scenario": "4niid", "optimizer": "fedadam", "server_lr": 0.01, "device": "cpu"}
    est = MultiVFL(**{**kw, "random_state": 1}).fit(
        Xtr, ytr, ids=ids, label_owner_ids=[ids[r] for r in rows], eval_set=(Xte[keep], yte[keep])
    )
    assert acc["4niid/fedadam/lr=0.01/seed=1"] == [float(a) for a in est.history_["accuracy"]]
    assert acc["4niid/fedadam/lr=0.01/seed=1"] != acc["4niid/fedadam/lr=0.01/seed=0"]

    higher, faster = result.tables[1:]
    curves = {k: [100 * a for a in v] for k, v in acc.items()}
    final = {k: float(np.mean(v)) for k, v in curves.items()}  # the last 10 = both rounds
    base = [final[f"4niid/fedavg/seed={s}"] for s in (0, 1)]
    assert higher.rows[0][:3] == [
        "4niid, adam",
        "fedavg",
        f"{np.mean(base):.2f} ± {np.std(base):.2f}",
    ]
    assert faster.rows[0][1] == "fedavg"
    for i, lr in enumerate(("0.001", "0.01"), 1):
        mine = [final[f"4niid/fedadam/lr={lr}/seed={s}"] for s in (0, 1)]
        assert higher.rows[i][1] == f"fedadam (server lr {lr})"
        assert higher.rows[i][3:6] == pytest.approx(_paired(mine, base), rel=1e-9)
        # rounds to 90 % of FedAvg's final accuracy of the same seed; never: 3 rounds
        reach = []
        for s in (0, 1):
            target = 0.9 * final[f"4niid/fedavg/seed={s}"]
            pair = (f"4niid/fedadam/lr={lr}/seed={s}", f"4niid/fedavg/seed={s}")
            reach.append(
                [next((r for r, a in enumerate(curves[k], 1) if a >= target), 3) for k in pair]
            )
        got = [r[0] for r in reach]
        assert faster.rows[i][3] == f"{sum(r < 3 for r in got)} of 2"
        assert faster.rows[i][4:7] == pytest.approx(_paired(*zip(*reach, strict=True)), rel=1e-9)
    assert len(result.summary.split("; ")) == 4  # higher and faster, for each server lr


def test_optimizer_claim_counts_a_target_never_reached_as_one_more_round() -> None:
    fedavg = [[10.0, 50.0, 60.0, 60.0], [10.0, 30.0, 60.0, 60.0], [20.0, 60.0, 60.0, 60.0]]
    others = {
        "late": [[10.0, 10.0, 50.0, 70.0], [10.0, 20.0, 20.0, 30.0], [10.0, 60.0, 60.0, 80.0]],
    }
    claim = optimizer_claim(fedavg, others, target_fraction=0.8, last=2)
    assert claim["fedavg"]["targets"] == [48.0, 48.0, 48.0]
    assert claim["fedavg"]["rounds_to_target"] == [2, 3, 2]
    late = claim["late"]
    assert late["final"] == [60.0, 25.0, 70.0]
    assert late["rounds_to_target"] == [3, None, 2]
    assert late["censored"] == [3, 5, 2]
    assert late["rounds_diff"]["mean"] == pytest.approx(1.0)  # (1 + 2 + 0) / 3
    assert late["final_diff"]["mean"] == pytest.approx((0 - 35 + 10) / 3)


def test_optimizer_claim_refuses_curves_that_do_not_pair() -> None:
    with pytest.raises(DataError, match="2 curves against FedAvg's 3 seeds"):
        optimizer_claim([[1.0]] * 3, {"x": [[1.0]] * 2})
    with pytest.raises(DataError, match="one length"):
        optimizer_claim([[1.0, 2.0]] * 2, {"x": [[1.0]] * 2})
    with pytest.raises(DataError, match="one length"):
        optimizer_claim([], {})


@pytest.mark.parametrize(
    "override,match",
    [
        ("params.server_lrs=[0.001, 0.001]", "repeats"),
        ("params.server_lrs=[0]", "server lr"),
        ("params.target_fraction=0", "target_fraction"),
        ("params.target_fraction=1.5", "target_fraction"),
        ("params.n_seeds=0", "n_seeds"),
    ],
)
def test_bad_claim_params(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(CONFIG, [override])
