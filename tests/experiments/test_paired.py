"""The paired-by-fold difference, its Student-t interval and the verdict rule."""

import numpy as np
import pytest
from scipy import stats

from fedviews.experiments._metrics import paired_difference, verdict_line

A = [91.2, 88.5, 90.1, 92.3, 89.7]
B = [90.0, 88.9, 89.0, 91.1, 88.2]


def test_paired_difference_equals_scipy_paired_t_interval():
    d = paired_difference(A, B)
    ci = stats.ttest_rel(A, B).confidence_interval(0.95)
    assert d["n"] == 5
    assert d["mean"] == pytest.approx(np.mean(np.subtract(A, B)), rel=1e-12)
    assert d["std"] == pytest.approx(np.std(np.subtract(A, B), ddof=1), rel=1e-12)
    assert (d["low"], d["high"]) == pytest.approx((ci.low, ci.high), rel=1e-12)


@pytest.mark.parametrize(
    "a,b,word",
    [
        (A, B, "not distinguishable"),  # +0.92 with one fold at -0.4: the interval holds 0
        ([2.0, 2.5, 3.0, 2.2, 2.8], [0.0] * 5, "higher"),
        ([0.0] * 5, [2.0, 2.5, 3.0, 2.2, 2.8], "lower"),
        ([5.0], [1.0], "not distinguishable"),  # one fold: no interval
    ],
)
def test_verdict_rule(a, b, word):
    d = paired_difference(a, b)
    inside = not (d["low"] > 0 or d["high"] < 0)  # nan bounds (one fold) count as holding 0
    assert word == ("not distinguishable" if inside else "higher" if d["low"] > 0 else "lower")
    interval = "s" if len(a) > 1 else ", no interval"  # one fold: no "[nan, nan]"
    assert verdict_line("MMVFL - supFL", d).endswith(f"over {len(a)} fold{interval}: {word}")


def test_verdict_line_format():
    d = {"n": 5, "mean": 1.234, "low": -0.5, "high": 2.96, "verdict": "inconclusive"}
    assert verdict_line("MMVFL - supFL", d) == (
        "MMVFL - supFL: +1.23 [-0.50, +2.96] over 5 folds: not distinguishable"
    )


def test_mmvfl_pairs_folds_of_the_best_beta_accuracy():
    from fedviews.experiments.mmvfl import _paired_by_fold

    rng = np.random.default_rng(0)
    best = rng.uniform(50, 100, size=(3, 5, 4, 6))  # [alg, fold, view, p]
    algs = ("supfl", "mmvfl", "supmvlfl")
    paired = _paired_by_fold(best, algs, ("supfl", "supmvlfl"))
    for b, base in ((0, "supfl"), (2, "supmvlfl")):
        per_fold = (best[1] - best[b]).mean(axis=(1, 2))
        ci = stats.ttest_rel(best[1].mean(axis=(1, 2)), best[b].mean(axis=(1, 2)))
        lo, hi = ci.confidence_interval(0.95)
        assert paired[base]["n"] == 5
        assert paired[base]["mean"] == pytest.approx((best[1] - best[b]).mean(), rel=1e-12)
        assert paired[base]["mean"] == pytest.approx(per_fold.mean(), rel=1e-12)
        assert (paired[base]["low"], paired[base]["high"]) == pytest.approx((lo, hi), rel=1e-12)
