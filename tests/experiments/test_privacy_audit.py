"""``privacy_audit`` through the CLI: a small real run, its leakage table, and ``fedviews audit``
re-running the attacks on the saved recordings alone."""

import json
import shutil

import pytest
from _cli import fedviews


def test_mmvfl_audit_and_reaudit(tmp_path):
    out = tmp_path / "run"
    r = fedviews(
        "run", "configs/audit_mmvfl_handwritten.toml", "params.split.n_per_class=20",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    rows = metrics["leakage"]
    # every non-owner party and the coordinator, each with the consensus it received
    assert {row["attacker"] for row in rows} == {"fou", "fac", "zer", "kar", "coordinator"}
    labels = [row for row in rows if row["secret"].startswith("labels")]
    assert {row["attacker"] for row in labels} == {"fou", "fac", "zer", "kar", "coordinator"}
    assert all(row["secret"] == "labels of pix" for row in labels)
    assert all(row["value"] > 90 and row["chance"] < 20 for row in labels)
    # only the coordinator receives per-party Z_k (features of each party, scored by MSE)
    feats = [row for row in rows if row["secret"].startswith("features")]
    assert {row["attacker"] for row in feats} == {"coordinator"} and feats
    assert {row["metric"] for row in feats} == {"mse"}
    assert metrics["main_task"] == "no accuracy reported"  # MMVFL selects features
    assert sorted(p.name for p in (out / "recordings").iterdir()) == sorted(
        f"{p}.npz" for p in ("pix", "fou", "fac", "zer", "kar", "coordinator")
    )
    # the attacks again, from the recordings only (a copy of the folder: no run object)
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    r = fedviews("audit", str(copy))
    assert r.returncode == 0, r.stderr
    again = json.loads((copy / "reaudit.json").read_text())["leakage"]
    assert again == rows
    # a requested attack that does not apply to MMVFL is a one-line error
    r = fedviews("audit", str(copy), "params.attacks=['batch_label']")
    assert r.returncode == 2 and "does not apply to mmvfl" in r.stderr
    assert "Traceback" not in r.stderr


def test_audit_of_a_folder_that_is_no_audit_run(tmp_path):
    r = fedviews("audit", str(tmp_path))
    assert r.returncode == 2 and "is not a finished privacy_audit run" in r.stderr


@pytest.mark.slow
def test_apfed_audit_attacks_the_active_party_from_h_a(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    r = fedviews(
        "run", "configs/audit_apfed_mnist.toml", "params.split.n_per_class=30",
        "params.split.n_test=100", "params.run.epochs=1", "params.known_features=150",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads((out / "metrics.json").read_text())["leakage"]
    got = {(row["attack"], row["metric"]): row for row in rows}
    assert set(got) == {
        ("model completion", "label recovery %"),
        ("inverse model (ridge)", "ssim"),
        ("inverse model (ridge)", "mse"),
    }
    assert all(row["attacker"] == "shop" and row["secret"].endswith("of bank") for row in rows)
    # better than the declared baselines (most common label; the aux rows' mean image)
    assert (
        got[("model completion", "label recovery %")]["value"]
        > 2 * got[("model completion", "label recovery %")]["chance"]
    )
    assert (
        got[("inverse model (ridge)", "ssim")]["value"]
        > got[("inverse model (ridge)", "ssim")]["chance"]
    )
    assert (out / "reconstructions.png").is_file()


def test_reaudit_refuses_to_change_the_recorded_run(tmp_path):
    """The recordings are read with the run's params (Multi-VFL: batch rows from batch_size):
    a re-audit with params.run.batch_size=32 of a batch-64 run misread them without an
    error (label recovery 100 % -> 29.5 %, SSIM 0.93 -> 0.28). Only what the attacks use
    may change; params.attackers (ignored before) picks among the recorded attackers."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    r = fedviews(
        "run", "configs/audit_multivfl_mnist.toml", "params.split.n_per_class=8",
        "params.split.n_test=40", "params.run.rounds=1", "params.labelled=10",
        "params.known_features=20", "params.attackers=['strip0', 'bank']",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads((out / "metrics.json").read_text())["leakage"]
    for bad, key in [
        ("params.run.batch_size=32", "params.run"),
        ("params.federation.label_owners=['bank']", "params.federation"),
        ("data.name=fashion_mnist", "data"),
    ]:
        r = fedviews("audit", str(out), bad)
        assert r.returncode == 2 and f"{key}: the recordings are of the run" in r.stderr, bad
        assert "Traceback" not in r.stderr
    r = fedviews("audit", str(out), "params.attackers=['clinic']")
    assert r.returncode == 2 and "['clinic'] recorded nothing" in r.stderr
    r = fedviews("audit", str(out), "params.attackers=['strip0']")
    assert r.returncode == 0, r.stderr
    again = json.loads((out / "reaudit.json").read_text())["leakage"]
    assert again == [row for row in rows if row["attacker"] == "strip0"] and again
