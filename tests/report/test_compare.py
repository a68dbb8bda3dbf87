"""``fedviews compare``: runs of one experiment side by side, and its bad input."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pytest
from _runs import ROOT, experiment_run, fedviews
from rich.console import Console
from typer.testing import Result

from fedviews.errors import ConfigError
from fedviews.experiments import load_config, run_experiment
from fedviews.report import compare_runs


@pytest.fixture(scope="module")
def other_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny MMVFL run again with another seed and zeta."""
    return experiment_run(tmp_path_factory.mktemp("exp") / "seed1", "seed=1", "params.zeta=100")


def _compare(*args: str | Path) -> Result:
    return fedviews("compare", *args)


def test_compare_two_runs_table_config_differences_and_curves(
    mmvfl_run, other_run, tmp_path, render
):
    cmp = compare_runs([mmvfl_run, other_run])
    assert dict(cmp.config) == {"seed": [0, 1], "params.zeta": [1000.0, 100.0]}
    metrics = dict(cmp.metrics)
    a, b = metrics["party0 (pix) · MMVFL"]  # the headline table's cells, one per run
    for run, cell in ((mmvfl_run, a), (other_run, b)):  # each run's own number, as it stored it
        stored = json.loads((run / "metrics.json").read_text())
        assert cell == stored["tables"][0]["rows"][0][1]
        assert cell == pytest.approx(np.mean(stored["accuracy"]["mmvfl"]["pix"]["mean"]))
    assert a != b  # another seed and zeta: another run, not the first one twice
    stored = json.loads((mmvfl_run / "metrics.json").read_text())
    assert cmp.measures == stored["tables"][0]["title"]  # what the numbers are: metric, unit
    assert metrics["messages"] == [300, 300]
    assert set(cmp.curves()["mmvfl_objective_first_fit"]) == {mmvfl_run.name, other_run.name}
    page = tmp_path / "cmp.html"
    r = _compare(mmvfl_run, other_run, "--out", page)
    assert r.exit_code == 0, r.stderr
    assert "headline metrics" in r.stdout and "params.zeta" in r.stdout
    assert "Accuracy (%)" in r.stdout  # the headline table's title names metric and unit
    assert "1000.0" in r.stdout and "1,000.00" not in r.stdout  # config values as in the TOML
    dom = render(page)
    assert "Traceback" not in dom and dom.count("<svg") == 1 and "party0 (pix) · MMVFL" in dom
    assert html.escape(cmp.measures) in dom
    assert (mmvfl_run / "report.html").resolve().as_uri() in dom or "report.html" in dom


def test_compare_refuses_a_folder_that_is_not_a_run(mmvfl_run, tmp_path):
    r = _compare(mmvfl_run, tmp_path)
    assert r.exit_code == 2 and "is not a finished run" in r.stderr and "Traceback" not in r.stderr
    r = _compare(mmvfl_run, tmp_path / "missing")
    assert r.exit_code == 2 and "is not a folder" in r.stderr
    with pytest.raises(ConfigError, match="at least two"):
        compare_runs([mmvfl_run])
    with pytest.raises(ConfigError, match="twice"):
        compare_runs([mmvfl_run, mmvfl_run])


def test_compare_refuses_runs_of_different_experiments(mmvfl_run, deployment_run):
    r = _compare(mmvfl_run, deployment_run)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "runs of different experiments" in r.stderr and "mmvfl_feature_selection" in r.stderr
    with pytest.raises(ConfigError, match="one party's folder"):
        compare_runs([deployment_run, deployment_run / "pix"])


def test_compare_keeps_every_row_of_a_leakage_table(tmp_path):
    """Several leakage rows of one attacker (V-FedMV: a party attacks Z and Z_test) are one
    headline number each, equal to metrics.json's: keyed by the attacker alone, the last
    row overwrote the others (compare showed 'fou · value' = the Z_test recovery only)."""
    small = ["params.split.n_per_class=20", "params.split.n_test=40", "params.attackers=['fou']"]
    outs = []
    for it in (2, 5):
        cfg = load_config(
            ROOT / "configs" / "audit_vfedmv_handwritten.toml",
            [*small, f"params.run.max_iter={it}"],
        )
        outs.append(tmp_path / f"it{it}")
        run_experiment(cfg, console=Console(quiet=True), quiet=True, out_dir=outs[-1])
    metrics = dict(compare_runs(outs).metrics)
    for i, out in enumerate(outs):
        rows = json.loads((out / "metrics.json").read_text())["leakage"]
        assert {r["observation"] for r in rows} == {"Z", "Z_test"}
        for r in rows:
            key = (
                f"fou · party · {r['observation']} · {r['attack']} · {r['secret']} · "
                f"{r['aux']} · {r['metric']} · value"
            )
            assert metrics[key][i] == round(r["value"], 2)


def test_compare_shows_results_that_a_table_holds_as_text(tmp_path):
    """V-FedMV's accuracy cells are text ("97.00 ± 0.50"; "97.00" for one repeat): compare
    showed only seconds, messages and bytes of two V-FedMV runs, none of their results."""
    outs = []
    for eta in (4, 16):
        cfg = load_config(
            ROOT / "configs" / "fedmv_vertical_handwritten.toml",
            ["params.n_repeats=1", "params.zetas=[8]", f"params.etas=[{eta}]",
             'params.methods=["vfedmv","single_view"]'],
        )  # fmt: skip
        outs.append(tmp_path / f"eta{eta}")
        run_experiment(cfg, console=Console(quiet=True), quiet=True, out_dir=outs[-1])
    metrics = dict(compare_runs(outs).metrics)
    for i, out in enumerate(outs):
        table = json.loads((out / "metrics.json").read_text())["tables"][0]
        texts = [(r[0], c, v) for r in table["rows"] for c, v in zip(table["columns"][1:], r[1:])
                 if isinstance(v, str) and v[:1].isdigit()]  # fmt: skip
        assert texts, table
        for name, col, v in texts:
            assert metrics[f"{name} · {col}"][i] == v


def test_an_experiment_that_lists_its_rounds_has_its_accuracy_curves(tmp_path):
    """Multi-VFL's metrics.json lists `rounds` and an `accuracy` per curve: compare (and the
    report) drew no curve, as only objective/loss/history keys counted."""
    from fedviews.report import load_run

    metrics = {
        "experiment": "multivfl_convergence",
        "rounds": [1, 2, 3],
        "accuracy": {"2niid/fedavg": [0.5, 0.6, 0.7], "4niid/fedavg": [0.4, 0.5, 0.55]},
        "folds": [0.9, 0.8, 0.7, 0.6],  # not a quality: no curve
        "tables": [],
    }
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    curves = load_run(tmp_path).curves()
    assert curves == {
        "accuracy": {
            "2niid/fedavg": ([1.0, 2.0, 3.0], [0.5, 0.6, 0.7]),
            "4niid/fedavg": ([1.0, 2.0, 3.0], [0.4, 0.5, 0.55]),
        }
    }
