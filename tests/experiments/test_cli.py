"""The CLI: real subprocesses, one-line errors with non-zero exits, a real (small) run."""

import json

import numpy as np
import pytest
from _cli import ROOT, fedviews


def test_bad_config_key_is_one_line_error(tmp_path):
    r = fedviews(
        "run", "configs/mmvfl_handwritten.toml", "params.bta=1", "--out", str(tmp_path / "r")
    )
    assert r.returncode == 2
    assert "error: ConfigError: unknown key params.bta; did you mean 'beta" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_missing_config_and_unknown_dataset(tmp_path):
    r = fedviews("run", "configs/does_not_exist.toml")
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    r = fedviews("datasets", "info", "handwriten")
    assert r.returncode == 2 and "handwritten" in r.stderr and "Traceback" not in r.stderr


def test_resume_of_what_is_no_run_says_so(tmp_path):
    """A missing folder and a folder of no run were both answered with advice for processes of
    a deployment started by hand."""
    r = fedviews("run", "--resume", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such folder" in r.stderr, r.stderr
    (tmp_path / "tools").mkdir()
    r = fedviews("run", "--resume", str(tmp_path / "tools"))
    assert r.returncode == 2 and "not the folder of a run (no config.json" in r.stderr, r.stderr


def test_bad_data_in_run_is_clean_error(tmp_path):
    r = fedviews(
        "run",
        "configs/mmvfl_handwritten.toml",
        'data.views=["pix","nope"]',
        "--out",
        str(tmp_path / "r"),
    )
    assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr
    # nothing ran: no folder of it is left (it held config.json and error.json only)
    assert not (tmp_path / "r").exists()
    # a folder that the user made is kept, with the error beside the config
    (tmp_path / "mine").mkdir()
    r = fedviews(
        "run",
        "configs/mmvfl_handwritten.toml",
        "data.name=handwriten",
        "--out",
        str(tmp_path / "mine"),
    )
    assert r.returncode == 2 and "did you mean 'handwritten'" in r.stderr
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["config.json", "error.json"]


def _knn1_on_every_pixel(n_folds: int) -> float:
    """The 100 % point of a party's curve needs no selection: sklearn's 1-NN on every `pix`
    feature of the experiment's folds (standardised with training statistics), mean accuracy."""
    from sklearn.neighbors import KNeighborsClassifier

    from fedviews.data import balanced_subsample, load, stratified_kfold
    from fedviews.experiments import load_config
    from fedviews.experiments._common import split_views

    cfg = load_config(ROOT / "configs/mmvfl_handwritten.toml")
    ds = load("handwritten", views=["pix"])
    ds = ds.subset(balanced_subsample(ds.y, cfg.params.n_per_class, random_state=cfg.seed))
    scores = []
    for tr, te in stratified_kfold(ds.y, n_folds, random_state=cfg.seed):
        (Xtr,), (Xte,) = split_views(list(ds.views), (tr, te), True)
        knn = KNeighborsClassifier(n_neighbors=1).fit(Xtr, ds.y[tr])
        scores.append(100.0 * np.mean(knn.predict(Xte) == ds.y[te]))
    return float(np.mean(scores))


def test_small_mmvfl_run_writes_report(tmp_path):
    out = tmp_path / "run"
    r = fedviews(
        "run",
        "configs/mmvfl_handwritten.toml",
        "params.n_folds=2",
        "params.betas=[0.1,1]",
        "params.percents=[10,50,100]",
        "--out",
        str(out),
        "-q",
    )
    assert r.returncode == 0, r.stderr
    assert "Table 2" in r.stdout and "report:" in r.stdout
    for name in (
        "config.json",
        "metrics.json",
        "message_log.json",
        "report.html",
        "accuracy_vs_percent.png",
    ):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    acc = metrics["accuracy"]["mmvfl"]["pix"]["mean"]
    assert len(acc) == 3 and acc[-1] == pytest.approx(_knn1_on_every_pixel(n_folds=2), abs=1e-9)
    log = json.loads((out / "message_log.json").read_text())
    assert set(log["crossings"]) == {f"party{k} -> coordinator" for k in range(5)} | {
        f"coordinator -> party{k}" for k in range(5)
    }
    assert all(v == ["Z_k"] for k, v in log["crossings"].items() if k.startswith("party"))


def test_datasets_list_shows_every_fetchable_dataset_as_a_row():
    """Every name that ``datasets fetch`` takes is a row of the table, with its kind (the
    sequence dataset ``watch`` was named only in a footer)."""
    from fedviews.data import list_datasets, list_sequence_datasets

    r = fedviews("datasets", "list")
    assert r.returncode == 0, r.stderr
    rows = [line.split("│")[1:4] for line in r.stdout.splitlines() if line.startswith("│ ")]
    rows = [[cell.strip() for cell in row] for row in rows if row[0].strip()]
    # and the CIFAR images that APFed's configs read from the user's copy (a newcomer saw a
    # shipped config load 'cifar10' that `datasets info cifar10` called unknown)
    images = ["cifar10", "cifar100"]
    assert [name for name, _, _ in rows] == list_datasets() + list_sequence_datasets() + images
    kinds = {name: kind for name, kind, _ in rows}
    assert kinds["handwritten"] == "table" and kinds["watch"] == "sequences"
    assert kinds["cifar10"] == "images"
    assert all(a in ("yes", "no") for n, _, a in rows if n not in images)
    assert {a for n, _, a in rows if n in images} == {"your copy"}
    info = fedviews("datasets", "info", "cifar10")
    assert info.returncode == 0 and "data.path=FOLDER" in " ".join(info.stdout.split())
    fetch = fedviews("datasets", "fetch", "cifar10")
    assert fetch.returncode == 2 and "cifar10 cannot be fetched by fedviews" in fetch.stderr
