"""The APFed claim tables (issue #30): APFed − SingleVL and λ > 0 − λ = 0, paired by seed.

Their numbers are the per-seed accuracies' differences, with the Student-t interval of a
paired t-test; one seed prints the difference alone (no std, no interval).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from scipy import stats  # noqa: E402

from fedviews.errors import DataError  # noqa: E402
from fedviews.experiments import load_config, run_experiment  # noqa: E402
from fedviews.experiments._runner import ExperimentResult  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = ["params.epochs=1", "params.n_train=160", "params.n_test=80"]


@pytest.fixture(scope="module", autouse=True)
def _mnist() -> None:
    from fedviews.data import load

    try:
        load("mnist")
    except DataError as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"MNIST not available: {exc}")


def _run(tmp: Path, config: str, overrides: list[str]) -> tuple[Any, ExperimentResult]:
    cfg = load_config(CONFIGS / config, [*overrides, *TINY])
    _, res = run_experiment(cfg, out_dir=tmp / "run", quiet=True)
    return cfg, res


def _check_paired(row_cells: list[Any], a: list[float], b: list[float]) -> None:
    """``row_cells`` (per seed, mean ± std, interval, verdict) are those of ``a − b``."""
    d = np.subtract(a, b)
    assert row_cells[0] == ", ".join(f"{x:+.2f}" for x in d)
    assert row_cells[1] == f"{d.mean():+.2f} ± {d.std(ddof=1):.2f}"
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert row_cells[2] == f"[{ci.low:+.2f}, {ci.high:+.2f}]"
    word = "higher" if ci.low > 0 else "lower" if ci.high < 0 else "not distinguishable"
    assert row_cells[3] == word


def test_table2_claim_paired_numbers_are_the_per_seed_differences(tmp_path: Path) -> None:
    from fedviews.deep import APFed
    from fedviews.experiments import apfed as apfed_exp

    cfg, res = _run(tmp_path, "apfed_table2_claim_mnist.toml", ["params.n_seeds=2"])
    acc = res.metrics["accuracy"]
    assert set(acc) == {"3-1", "3-3"} and set(acc["3-1"]) == {"SingleVL", "APFed-R", "APFed-C"}
    table = res.tables[1]
    assert table.columns[2:6] == ["per seed", "mean ± std", "95% interval", "verdict"]
    assert [r[:2] for r in table.rows] == [
        [s, m] for s in ("3-1", "3-3") for m in ("APFed-R", "APFed-C")
    ]
    for row in table.rows:
        setting, meth = row[:2]
        assert len(acc[setting][meth]) == 2
        _check_paired(row[2:6], acc[setting][meth], acc[setting]["SingleVL"])
        for r in res.metrics["paired_vs_singlevl"]:  # the numbers behind the row, unrounded
            if (r["setting"], r["method"]) == (setting, meth):
                diffs = np.subtract(acc[setting][meth], acc[setting]["SingleVL"])
                assert r["per_seed"] == diffs.tolist() and r["mean"] == diffs.mean()
    assert table.rows[0][6] == 0.97  # the paper's APFed-R − SingleVL at 3-1: 79.77 − 78.80
    assert "APFed-R − SingleVL 3-1: " in table.note and "over 2 seeds" in res.summary
    # seed s trains on the one split drawn with the config's seed, with random_state seed + s
    Xtr, ytr, Xte, yte, _ = apfed_exp._load(cfg, cfg.params)
    kw = cfg.params.train_kwargs("cpu", cfg.seed + 1)
    est = APFed(variant="R", m=3, i=3, lam=1.0, tau=0.5, recon_loss="l2", **kw).fit(Xtr, ytr)
    assert acc["3-3"]["APFed-R"][1] == 100 * est.score(Xte, yte)


def test_one_seed_prints_the_difference_alone(tmp_path: Path) -> None:
    """A std and an interval of one difference do not exist: no '± nan', no '[nan, nan]'."""
    _, res = _run(
        tmp_path,
        "apfed_table2_claim_mnist.toml",
        ["params.n_seeds=1", "params.settings=['3-1']", "params.methods=['SingleVL','APFed-R']"],
    )
    acc = res.metrics["accuracy"]["3-1"]
    (row,) = res.tables[1].rows
    diff = acc["APFed-R"][0] - acc["SingleVL"][0]
    assert row[2:6] == [f"{diff:+.2f}", f"{diff:+.2f}", "n/a", "not distinguishable"]
    assert "nan" not in f"{res.tables[1].rows} {res.tables[1].note} {res.summary}"
    assert f"APFed-R − SingleVL 3-1: {diff:+.2f} over 1 seed, no interval" in res.summary


def test_lambda_claim_paired_numbers_are_the_per_seed_differences(tmp_path: Path) -> None:
    _, res = _run(tmp_path, "apfed_lambda10_lr1e-3_mnist.toml", ["params.n_seeds=2"])
    acc = res.metrics["accuracy"]["R"]
    assert set(acc) == {"0.0", "10.0"} and len(acc["10.0"]) == 2
    (row,) = res.tables[1].rows
    assert row[:2] == ["APFed-R", 10.0]
    _check_paired(row[2:], acc["10.0"], acc["0.0"])
    assert "APFed-R λ=10 − λ=0: " in res.tables[1].note


def test_lambda_sweep_without_lambda_0_has_no_paired_table(tmp_path: Path) -> None:
    _, res = _run(
        tmp_path,
        "apfed_lambda10_lr1e-3_mnist.toml",
        ["params.n_seeds=1", "params.lams=[10.0]"],
    )
    assert len(res.tables) == 1 and res.metrics["paired_vs_lambda0"] == []
