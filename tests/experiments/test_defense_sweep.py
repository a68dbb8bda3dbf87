"""``defense_sweep`` through the CLI: one audit per defense setting, side by side, resumable."""

import json
from pathlib import Path

import numpy as np
import pytest
from _cli import fedviews

pytest.importorskip("torch")
pytest.importorskip("dp_accounting")

TINY = (
    "params.split.n_per_class=8", "params.split.n_test=40", "params.run.rounds=1",
    "params.run.channels=4", "params.run.top_channels=4", "params.run.hidden=8",
    "params.labelled=10",
)  # fmt: skip


def test_a_sweep_puts_each_defense_beside_the_undefended_run(tmp_path):
    out = tmp_path / "run"
    settings = (
        "params.settings=[{label='none'}, "
        "{label='RR', defense={kind='label_rr', epsilon=0.5}}, "
        "{label='DP', defense={kind='grad_dp', noise_multiplier=2.0, clip=0.5}}, "
        "{label='top1', run={wire_gradients='topk', topk_ratio=0.01}}]"
    )
    r = fedviews(
        "run", "configs/defenses_multivfl_mnist.toml", *TINY, settings, "params.seeds=[0, 1]",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    cells = metrics["settings"]
    assert list(cells) == ["none", "RR", "DP", "top1"] and metrics["seeds"] == [0, 1]
    assert cells["none"]["epsilon"] is None and cells["top1"]["epsilon"] is None
    assert cells["RR"]["epsilon"] == pytest.approx(0.5, rel=1e-3)
    assert cells["RR"]["delta"] == 0.0
    dp = cells["DP"]["privacy"]["parties"]
    assert set(dp) == {"bank", "clinic"} and dp["bank"]["noise_multiplier"] == 2.0
    assert dp["bank"]["releases"] == 1 and cells["DP"]["epsilon"] == dp["bank"]["epsilon"]
    for label, c in cells.items():  # the same attack on every setting, for both seeds
        assert [run["seed"] for run in c["runs"]] == [0, 1]
        for run in c["runs"]:
            assert [row["observation"] for row in run["rows"]] == [
                "activation_grad from bank", "activation_grad from clinic",
            ]  # fmt: skip
        # the summary is the mean over the seeds of the strongest attack, and of the accuracy
        best = [max(row["value"] for row in run["rows"]) for run in c["runs"]]
        assert c["summary"]["label_attack"] == pytest.approx(sum(best) / 2)
        assert c["summary"]["n_seeds"] == 2
        accuracy = [100 * run["accuracy"] for run in c["runs"]]
        row = next(r for r in metrics["tables"][0]["rows"] if r[0] == label)
        assert row[4] == f"{np.mean(accuracy):.2f} ± {np.std(accuracy, ddof=1):.2f}"
    # the seeds are different runs (data, models and noise follow the seed)
    runs = cells["none"]["runs"]
    assert runs[0]["rows"] != runs[1]["rows"] or runs[0]["accuracy"] != runs[1]["accuracy"]
    summary = metrics["tables"][0]
    assert [row[0] for row in summary["rows"]] == ["none", "RR", "DP", "top1"]
    assert all(" ± " in row[4] for row in summary["rows"])  # accuracy: mean ± std
    assert (out / "tradeoff.png").stat().st_size > 10_000
    report = (out / "report.html").read_text()
    assert "tradeoff.png" in report
    assert "Privacy ledger" in report and "dp-accounting analytic Gaussian" in report  # DP's
    # a finished run is not resumed (one without cells was computed again, overwritten)
    r = fedviews("run", "--resume", str(out), "--quiet")
    assert r.returncode == 2 and "finished (its metrics.json is written)" in r.stderr, r.stderr
    # one killed after its last cell: resumed from its cells, nothing is trained again and
    # the tables are the same
    cells_before = (out / "cells.json").read_text()
    assert len(json.loads(cells_before)) == 8  # settings x seeds
    (out / "metrics.json").unlink()
    r = fedviews("run", "--resume", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    assert (out / "cells.json").read_text() == cells_before
    assert json.loads((out / "metrics.json").read_text())["tables"] == metrics["tables"]


@pytest.mark.parametrize(
    "override, msg",
    [
        ("params.settings=[{label='a', defence={kind='secagg'}}]", "unknown keys ['defence']"),
        ("params.settings=[{label='a'}, {label='a'}]", "labels must differ"),
        ("params.settings=[{defense={kind='label_rr', epsilon=1}}]", "needs a label"),
        (
            "params.settings=[{label='a', defense={kind='grad_dp'}}]",
            "grad_dp takes either defense.noise_multiplier",
        ),
        ("params.settings=[{label='a', run={rounds=0}}]", "rounds"),
        ("params.seeds=[1, 1]", "params.seeds must differ"),
        ("params.seeds=[-1]", "params.seeds must lie in [0, 2**31)"),  # was an sklearn traceback
    ],
)
def test_bad_settings_are_one_line_errors(tmp_path, override, msg):
    r = fedviews(
        "run", "configs/defenses_multivfl_mnist.toml", *TINY, override,
        "--out", str(tmp_path / "run"), "--quiet",
    )  # fmt: skip
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_every_attack_line_is_one_victim(tmp_path):
    """A client of H-FedMV attacks every other client's labels with the one global W it
    received: the detail table has a line per victim, equal to its leakage row (they were
    one line, the mean of the three victims, under a title saying 'mean over the seeds')."""
    out = tmp_path / "run"
    r = fedviews(
        "run", "configs/defenses_hfedmv_handwritten.toml", "params.run.n_rounds=2",
        "params.seeds=[0]", "params.settings=[{label='none'}]", "params.attackers=['clinic_b']",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    rows = metrics["settings"]["none"]["runs"][0]["rows"]
    assert sorted(row["secret"] for row in rows) == [
        "labels of clinic_a", "labels of clinic_c", "labels of clinic_d",
    ]  # fmt: skip
    detail = metrics["tables"][1]["rows"]
    assert len(detail) == 3
    for row in rows:
        (line,) = [d for d in detail if row["secret"] in d[0]]
        assert line[1] == round(row["value"], 3)


def _mmvfl_reconstruction_sweep(out: Path) -> dict:
    """A tiny sweep of MMVFL's feature reconstructions only (1-D features: MSE, no SSIM)."""
    r = fedviews(
        "run", "configs/audit_mmvfl_handwritten.toml", "experiment=defense_sweep",
        "params.run.max_iter=3", "params.split.n_per_class=30", "params.seeds=[0, 1]",
        "params.settings=[{label='none'}]", "params.attacks=['reconstruction']",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads((out / "metrics.json").read_text())


def test_a_sweep_without_a_label_or_ssim_attack_still_plots(tmp_path):
    """MMVFL's only reconstruction is of 1-D features (MSE, no SSIM): no accuracy-vs-attack
    panel, only the epsilon one. plt.subplots(1, 1) gave one Axes and the sweep failed with
    "TypeError: 'Axes' object is not subscriptable" after every cell had trained."""
    metrics = _mmvfl_reconstruction_sweep(tmp_path / "run")
    assert (tmp_path / "run" / "tradeoff.png").stat().st_size > 5_000
    summary = metrics["tables"][0]
    assert summary["columns"] == ["setting", "defense", "epsilon", "delta", "accuracy %"]
    assert summary["rows"] == [["none", "none", "∞", "0", "—"]]  # MMVFL reports no accuracy


def test_the_detail_table_keeps_a_small_mse_readable(tmp_path):
    """The coordinator of MMVFL reconstructs fou's Fourier features at an MSE near 0.004: the
    detail table rounded it to 3 decimals and the pages showed 0.00 (as if exact). An MSE is
    written to 4 significant digits, as the leakage table writes it."""
    metrics = _mmvfl_reconstruction_sweep(tmp_path / "run")
    runs = metrics["settings"]["none"]["runs"]
    detail = {row[0]: row[1] for row in metrics["tables"][1]["rows"]}
    assert len(detail) == len(runs[0]["rows"]) == 10  # Z_k and Z, for each party
    means = []
    for row in runs[0]["rows"]:
        (key,) = [k for k in detail if f"← {row['observation']}:" in k]
        obs = [x for run in runs for x in run["rows"] if x["observation"] == row["observation"]]
        means.append(sum(x["value"] for x in obs) / 2)
        assert row["metric"] == "mse" and detail[key] == f"{means[-1]:.4g}"
    assert min(means) < 0.005  # fou's features
