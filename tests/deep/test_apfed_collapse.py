"""``benchmarks/apfed_collapse.py``: its plain loop is APFed-R as the estimator trains it."""

from __future__ import annotations

from types import ModuleType

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402
from _collapse import bands, load_bench  # noqa: E402

from fedviews.experiments.apfed import APFedTableParams, _apfed  # noqa: E402


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_bench(monkeypatch, "apfed_collapse")


@pytest.mark.parametrize(("setting", "lam"), [("3-2", 1.0), ("2-1", 0.5)])
def test_the_loop_trains_the_estimators_models(bench: ModuleType, setting: str, lam: float) -> None:
    """Same seed → the loop's active model and decoders equal ``APFed.fit``'s bit for bit (with
    two passive clients too, whose gradients it adds in the active client's order), and its
    test accuracy is the estimator's score."""
    p = APFedTableParams(epochs=2, batch_size=32, lr=0.01)
    data = bands()
    parts = bench.build(p, data, setting, 4, "R")
    run = bench.measure(p, parts, data[3], lam, 100, "test")
    est = _apfed(p, "R", setting, lam, "cpu", 4).fit(data[0], data[1])
    nets = [(parts.active, est.active_.net)]
    nets += [(a, b.net) for a, b in zip(parts.passives, est.passives_, strict=True)]
    for ours, theirs in nets:
        for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
            assert torch.equal(a, b), name
    assert run.accuracy[-1] == 100 * est.score(data[2], data[3])
    assert len(run.accuracy) == 2 and run.epoch_ends[-1]["step"] == 7  # 4 batches per epoch
    assert (run.trace[0]["g_p"] > 0) == (lam > 0)
