"""FedMV Fig. 5 (``fedmv_tsne``): the class-separation table equals the silhouette and the
leave-one-out 1-NN accuracy by their definitions, for every panel of the figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from _cli import ROOT

from fedviews.errors import DataError
from fedviews.experiments import fedmv, load_config, run_experiment
from fedviews.experiments._metrics import class_separation
from fedviews.linear import VFedMV

SMALL = [
    "params.n_samples=40",
    "params.max_iter=2",
    "params.inner_max_iter=2",
    "params.n_rounds=2",
]


def _naive(A: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Silhouette and leave-one-out 1-NN accuracy (%) with loops, by their definitions."""
    n = len(y)

    def d(i: int, j: int) -> float:
        return math.sqrt(sum((float(a) - float(b)) ** 2 for a, b in zip(A[i], A[j], strict=True)))

    s, hits = [], 0
    for i in range(n):
        own = [d(i, j) for j in range(n) if j != i and y[j] == y[i]]
        if not own:  # alone in its class
            s.append(0.0)
        else:
            a = sum(own) / len(own)
            b = min(
                sum(d(i, j) for j in range(n) if y[j] == c) / sum(1 for j in range(n) if y[j] == c)
                for c in set(y.tolist()) - {y[i]}
            )
            s.append((b - a) / max(a, b))
        best, nearest = math.inf, -1
        for j in range(n):
            if j != i and d(i, j) < best:
                best, nearest = d(i, j), j
        hits += int(y[nearest] == y[i])
    return sum(s) / n, 100.0 * hits / n


def test_class_separation_is_silhouette_and_1nn_by_their_definitions() -> None:
    rng = np.random.default_rng(3)
    y = np.array([0] * 8 + [1] * 9 + [2] * 7 + [3])  # class 3 alone: silhouette 0 there
    A = rng.normal(size=(len(y), 4)) + y[:, None]
    A[5] = A[10] = A[2]  # ties at distance 0 across classes 0 and 1: the first one counts
    got = class_separation(A, y)
    silhouette, knn1 = _naive(A, y)
    assert got["silhouette"] == pytest.approx(silhouette, rel=1e-12)
    assert got["knn1"] == knn1
    assert 0.0 < knn1 < 100.0


@pytest.mark.parametrize("y", [np.zeros(6), np.arange(6), np.arange(5)])
def test_class_separation_refuses_labels_it_cannot_score(y: np.ndarray) -> None:
    with pytest.raises(DataError, match="class separation needs"):
        class_separation(np.ones((6, 2)), y)


def test_fedmv_tsne_table_scores_every_panel_in_its_own_space(tmp_path: Path) -> None:
    from sklearn.model_selection import train_test_split

    from fedviews.experiments._common import split_views

    cfg = load_config(ROOT / "configs" / "fedmv_tsne_handwritten.toml", SMALL)
    out, _ = run_experiment(cfg, out_dir=tmp_path, quiet=True)
    metrics = json.loads((out / "metrics.json").read_text())
    (table,) = metrics["tables"]
    # max_iter = 2 stops V-FedMV before its tol holds: the run says so
    assert metrics["converged"] == {"unconverged_fits": 1, "converged": False}
    ds, y = fedmv._load(cfg, fedmv.FedMVVerticalParams())
    names = list(ds.view_names)
    # a row per panel of the figure: each view, then X_k W_k and Z test of each method
    learned = [f"{n}: X W" for n in names] + ["Z test"]
    assert [r[:3] for r in table["rows"]] == (
        [["input", n, X.shape[1]] for n, X in zip(names, ds.views, strict=True)]
        + [[m, panel, 10] for m in ("V-FedMV", "H-FedMV") for panel in learned]
    )
    # the experiment's held-out samples, rebuilt: standardised views and V-FedMV's Z test
    tr, te = train_test_split(np.arange(len(y)), test_size=0.3, stratify=y, random_state=cfg.seed)
    Xtr, Xte = split_views(list(ds.views), (tr, te), True)
    show = np.random.default_rng(cfg.seed).permutation(len(te))[:40]
    v = VFedMV(
        beta=4.0, zeta=8.0, eta=16.0, max_iter=2, inner_max_iter=2, random_state=cfg.seed
    ).fit(Xtr, y[tr])
    rows = {(r[0], r[1]): r[3:] for r in table["rows"]}
    for key, A in (
        (("input", "pix"), Xte[0][show]),
        (("V-FedMV", "Z test"), v.decision_function([X[show] for X in Xte])),
    ):
        silhouette, knn1 = _naive(A, y[te][show])
        assert rows[key][0] == pytest.approx(silhouette, rel=1e-9), key
        assert rows[key][1] == knn1, key
    assert rows[("input", "pix")][1] > 30.0  # 10 digits: 1-NN on pixels is far above chance
