"""The FedMV experiment configs run end to end (tiny overrides)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedviews.errors import ConfigError
from fedviews.experiments import ExperimentConfig, fedmv, load_config, run_experiment
from fedviews.linear import HFedMV, VFedMV

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FAST = [
    "params.n_repeats=2",
    "params.zetas=[8]",
    "params.etas=[16]",
    "params.max_iter=3",
    "params.inner_max_iter=2",
]


def _main_accuracy(cfg: ExperimentConfig, seed: int) -> float:
    """Test accuracy (%) of V-FedMV or H-FedMV fitted directly on the experiment's split of
    ``seed`` with its params (a one-point grid: zetas[0], etas[0])."""
    p = cfg.params
    ds, y = fedmv._load(cfg, p)
    s = fedmv._split(list(ds.views), y, p, seed)
    kw = {"beta": p.beta, "zeta": p.zetas[0], "eta": p.etas[0], "random_state": seed}
    if cfg.experiment == "fedmv_horizontal":
        model = HFedMV(
            n_rounds=p.n_rounds, local_iter=p.local_iter, inner_max_iter=p.inner_max_iter, **kw
        ).fit(fedmv._clients(s, p, seed))
    else:
        model = VFedMV(max_iter=p.max_iter, inner_max_iter=p.inner_max_iter, **kw).fit(s.Xtr, s.ytr)
    return 100.0 * float(np.mean(model.predict(s.Xte) == s.yte))


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("fedmv_vertical_handwritten_binary", []),
        ("fedmv_horizontal_handwritten_label_skew", ["params.n_rounds=2"]),
    ],
)
def test_fedmv_config_runs(tmp_path: Path, name: str, extra: list[str]) -> None:
    cfg = load_config(CONFIGS / f"{name}.toml", [*FAST, *extra])
    out, res = run_experiment(cfg, out_dir=tmp_path, quiet=True)
    metrics = json.loads((out / "metrics.json").read_text())
    main = "V-FedMV" if "vertical" in name else "H-FedMV"
    # the table holds the estimator's own test accuracy on each repeat's split, mean ± std
    got = [_main_accuracy(cfg, seed) for seed in (cfg.seed, cfg.seed + 1)]
    assert [rep[main]["accuracy"] for rep in metrics["per_repeat"]] == got
    assert metrics["results"][main]["accuracy"] == [np.mean(got), np.std(got)]
    chance = 50.0 if "binary" in name else 10.0  # balanced binary task; 10 digits
    assert min(got) > (100.0 + chance) / 2  # at most half of chance's error
    assert len(res.tables) == 2  # ours + the paper's (context)
    log = json.loads((out / "message_log.json").read_text())
    crossed = {a for names in log["crossings"].values() for a in names}
    assert crossed <= (
        {"Z", "Z_k", "Z_test", "Z_k_test"}
        | {f"W_{k}" for k in range(5)}
        | {f"W_local_{k}" for k in range(5)}
    )


def test_fedmv_config_rejects_bad_method() -> None:
    with pytest.raises(ConfigError, match="unknown method"):
        load_config(CONFIGS / "fedmv_vertical_handwritten.toml", ['params.methods=["hfedmv"]'])


def test_unconverged_fits_are_recorded_and_said(tmp_path: Path) -> None:
    """An experiment whose V-FedMV fits stop at max_iter records converged: false and says so."""
    from rich.console import Console

    console = Console(record=True, width=200)
    cfg = load_config(CONFIGS / "fedmv_vertical_handwritten_binary.toml", FAST)
    # quiet (`fedviews run -q`) drops the progress, not this warning
    out, _ = run_experiment(cfg, out_dir=tmp_path / "a", console=console, quiet=True)
    conv = json.loads((out / "metrics.json").read_text())["converged"]
    # the (zeta, eta) grid's one fit, then V-FedMV and the pairwise fits of every repeat
    assert conv["converged"] is False and conv["unconverged_fits"] >= 3
    assert "warning: converged: false" in console.export_text()
    cfg = load_config(
        CONFIGS / "fedmv_vertical_handwritten_binary.toml", [*FAST, "params.max_iter=2000"]
    )
    out, _ = run_experiment(cfg, out_dir=tmp_path / "b", quiet=True)
    conv = json.loads((out / "metrics.json").read_text())["converged"]
    assert conv == {"unconverged_fits": 0, "converged": True}


def test_fedmv_fig6_table_is_the_estimators_score(tmp_path: Path) -> None:
    """Each point of the Fig. 6 experiment is V-FedMV's own test score with that view's zeta_k
    (or eta) set and the others at base, on the experiment's split."""
    from sklearn.model_selection import train_test_split

    from fedviews.experiments._common import split_views
    from fedviews.experiments._metrics import pm

    over = [
        "params.values=[1,32]",
        "params.n_repeats=1",
        "params.n_per_class=30",
        "params.max_iter=3",
        "params.inner_max_iter=2",
    ]
    cfg = load_config(CONFIGS / "fedmv_fig6_handwritten.toml", over)
    out, res = run_experiment(cfg, out_dir=tmp_path, quiet=True)
    metrics = json.loads((out / "metrics.json").read_text())
    ds, y = fedmv._load(cfg, fedmv.FedMVVerticalParams(n_per_class=30))
    tr, te = train_test_split(np.arange(len(y)), test_size=0.2, stratify=y, random_state=cfg.seed)
    Xtr, Xte = split_views(list(ds.views), (tr, te), True)

    def accuracy(zeta: list[float], eta: float) -> float:
        m = VFedMV(
            beta=4.0, zeta=zeta, eta=eta, max_iter=3, inner_max_iter=2, random_state=cfg.seed
        ).fit(Xtr, y[tr])
        return 100.0 * float(np.mean(m.predict(Xte) == y[te]))

    # zeta_2 (fou) = 1 and = 32 with the others at 8; eta = 1 with every zeta_k = 8
    fou = [accuracy([8, z, 8, 8, 8], 8) for z in (1, 32)]
    eta1 = accuracy([8] * 5, 1)
    assert [a for a, _ in metrics["results"]["ζ_2 (fou)"]["accuracy"]] == fou
    assert metrics["results"]["η"]["accuracy"][0] == [eta1, None]  # one split: no std
    rows = {r[0]: r for r in res.tables[0].rows}
    assert rows["ζ_2 (fou)"][1:3] == [pm(a, None) for a in fou]  # the mean alone
    assert rows["ζ_2 (fou)"][4] == max(fou) - min(fou)
    assert min(fou) > 55.0  # 10 classes: at most half of chance's error
    assert eta1 > 20.0  # eta = 1 pulls Z to the labels slowly: 3 rounds are far from converged
    assert (out / "hyperparams.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("params.values=[]", "params.values"),
        ("params.values=[0, 8]", "params.values"),
        ("params.base=0", "params.base"),
        ('params.average="binary"', "positive_classes"),
    ],
)
def test_fedmv_fig6_config_rejects_bad_grid(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(CONFIGS / "fedmv_fig6_handwritten.toml", [override])
