"""``benchmarks/apfed_c_collapse.py``: its plain loop is APFed-C as the estimator trains it, and
its diagnostics measure what they say."""

from __future__ import annotations

from types import ModuleType

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402
from _collapse import bands, load_bench  # noqa: E402

from fedviews.experiments.apfed import APFedTableParams, _apfed  # noqa: E402


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_bench(monkeypatch, "apfed_c_collapse")


@pytest.mark.parametrize(("setting", "lam"), [("3-2", 1.0), ("2-1", 0.0)])
def test_the_loop_trains_the_estimators_active_model(
    bench: ModuleType, setting: str, lam: float
) -> None:
    """Same seed → the loop's ``f_A``/``g_T`` equal ``APFed.fit``'s bit for bit (with two passive
    clients too, whose replies it adds in the active client's order), and its test accuracy is
    the estimator's score."""
    p = APFedTableParams(epochs=2, batch_size=32, lr=0.01)
    data = bands()
    parts = bench.build(p, data, setting, 4, "C")
    run = bench.measure(p, parts, data[3], lam, 100, "test")
    est = _apfed(p, "C", setting, lam, "cpu", 4).fit(data[0], data[1])
    for (name, a), b in zip(
        parts.active.state_dict().items(), est.active_.net.state_dict().values()
    ):
        assert torch.equal(a, b), name
    assert run.accuracy[-1] == 100 * est.score(data[2], data[3])
    assert len(run.accuracy) == 2 and run.epoch_ends[-1]["step"] == 7  # 4 batches per epoch
    row = run.trace[0]
    assert (row["g_c"] > 0) == (lam > 0) and row["L_c"] > 0


def test_coherence_and_effective_rank(bench: ModuleType) -> None:
    g = torch.randn(4, 3, 2, generator=torch.Generator().manual_seed(0))
    assert bench.coherence(g[:1].expand(4, 3, 2)) == pytest.approx(1.0)
    assert bench.coherence(torch.cat([g[:1], -g[:1]])) == pytest.approx(0.0, abs=1e-7)
    assert bench.effective_rank(torch.ones(5, 3)) == pytest.approx(1.0)
    assert bench.effective_rank(torch.eye(4)) == pytest.approx(4.0)


def test_similarities_of_the_contrastive_pairs(bench: ModuleType) -> None:
    """Positive pairs ``(h_A_i, h_p_i)``, negatives ``j ≠ i``, and the class gap of ``h_A``."""
    h_a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    h_p = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 3.0]])
    s = bench.similarities(h_a, h_p, torch.tensor([0, 0, 1]))
    assert s["pos"] == pytest.approx(2 / 3)  # 1, 0, 1
    assert s["neg_ap"] == pytest.approx(
        2 / 6
    )  # s(a0,p1)=0, s(a0,p2)=0, s(a1,p0)=1, s(a1,p2)=0, s(a2,p1)=1
    assert s["neg_aa"] == pytest.approx(2 / 6)  # only a0~a1 (both ways) are similar
    assert s["class_gap"] == pytest.approx(1.0)  # same class: 1; two classes: 0
