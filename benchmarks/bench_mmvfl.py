"""Time one full MMVFL fit on Handwritten against the naive reference, in the same process.

Both run the same number of rounds and IRLS iterations (tol = 0), so they do the
same work and must reach the same objective; the ratio is what the fast linear
algebra (cached Gram matrices, Cholesky, single-threaded BLAS for small matrices)
buys. For context, supFL (one view) is also timed against scikit-learn's
MultiTaskLasso, a related ℓ2,1-penalised regression (different loss scaling and
solver, so only the order of magnitude is comparable).

    python benchmarks/bench_mmvfl.py [--rounds 20] [--inner 10] [--repeat 3] [--json PATH]

Each of the ``--repeat`` rounds runs the fast fit, the naive one (one BLAS thread, then
BLAS's default), and the linear-algebra floor in turn, after one untimed fast fit (the
machine's load then hits them alike); supFL and MultiTaskLasso take turns the same way.
Prints the best time of each and the median of the ratios of the rounds' pairs.
``--json PATH`` also writes the times as tables (``benchmarks/_record.py``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from _args import parser, positive_float, positive_int, run_cli
from _clock import warm_rounds
from _record import json_option, median_ratio, ratio_table, write_record

from fedviews.data import load, one_hot
from fedviews.linear import MMVFL, SupFL, small_blas
from fedviews.linear._l21 import _cho_solve
from fedviews.linear.mmvfl.reference import naive_mmvfl


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """The wall seconds of one call of ``fn``, and what it returned."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def floor(Xs: list[np.ndarray], c: int, steps: int) -> Callable[[], None]:
    """The linear-algebra floor of the fit: ``steps`` Cholesky factorisations and solves of
    each view's ``d x d`` system (``X^T X + beta A``) and nothing else."""
    rng = np.random.default_rng(0)
    systems = [(X.T @ X + np.eye(X.shape[1]), rng.standard_normal((X.shape[1], c))) for X in Xs]

    def run() -> None:
        with small_blas():
            for _ in range(steps):
                for M, rhs in systems:
                    _cho_solve(M.copy(), rhs, 1.0)  # as the fit factors: LAPACK directly

    return run


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=positive_int, default=20)
    ap.add_argument("--inner", type=positive_int, default=10, help="IRLS iterations per round")
    ap.add_argument("--beta", type=positive_float, default=0.1)
    ap.add_argument("--repeat", type=positive_int, default=3, help="interleaved rounds of runs")
    json_option(ap)
    args = ap.parse_args()

    ds = load("handwritten", views=["pix", "fou", "fac", "zer", "kar"])
    Xs = [(v - v.mean(0)) / np.where(v.std(0) > 0, v.std(0), 1) for v in ds.views]
    Y, _ = one_hot(ds.y)
    print(
        f"Handwritten: {ds.n_samples} samples, views {ds.n_features}; {args.rounds} rounds x "
        f"{args.inner} IRLS iterations; best of {args.repeat} interleaved rounds"
    )

    def fast():
        return MMVFL(
            beta=args.beta,
            max_iter=args.rounds,
            tol=0,
            inner_max_iter=args.inner,
            inner_tol=0,
            random_state=0,
        ).fit(Xs, ds.y)

    def naive():
        return naive_mmvfl(Xs, Y, args.beta, 1000.0, 1000.0, 0, args.rounds, args.inner, 0)

    def naive_one_thread():
        with small_blas():  # the fair baseline: same BLAS threading as the fast code
            return naive()

    lin_alg = floor(Xs, Y.shape[1], args.rounds * args.inner)
    kept: dict[str, Any] = {}

    def one_round() -> tuple[float, float, float, float]:
        """Fast, naive (one BLAS thread, default BLAS) and floor seconds, in turn."""
        t_fast, kept["fast"] = timed(fast)
        t_naive, kept["naive"] = timed(naive_one_thread)
        return t_fast, t_naive, timed(naive)[0], timed(lin_alg)[0]

    rounds = warm_rounds(one_round, args.repeat, warm_up=fast)
    fast_t, naive_t, naive_mt_t, floor_t = (list(t) for t in zip(*rounds, strict=True))
    m, (_, _, obj) = kept["fast"], kept["naive"]
    rel = abs(m.objective_[-1] - obj[-1]) / abs(obj[-1])
    speed_up, speed_up_mt = median_ratio(naive_t, fast_t), median_ratio(naive_mt_t, fast_t)
    print(f"MMVFL fast                  : {min(fast_t):8.3f} s   objective {m.objective_[-1]:.10g}")
    print(
        f"MMVFL naive (1 BLAS thread) : {min(naive_t):8.3f} s   objective {obj[-1]:.10g}   (relative difference {rel:.1e})"
    )
    print(f"MMVFL naive (default BLAS)  : {min(naive_mt_t):8.3f} s")
    print(
        f"speed-up vs naive           : {speed_up:8.1f}x (1 thread), {speed_up_mt:.1f}x (default)   "
        "goal >= 10x   (medians of the pairs)"
    )
    print(
        f"bytes on the wire: {m.run_stats_['total_bytes']:,} in {m.run_stats_['messages']} messages"
    )
    print(
        f"floor (factor + solve only) : {min(floor_t):8.3f} s   = {median_ratio(floor_t, fast_t):.0%} of the fast fit; "
        f"the rest is the Z_k steps, objectives and the in-process message round trips"
    )

    X = Xs[0]

    def mtl():
        from sklearn.linear_model import MultiTaskLasso

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alpha = args.beta * 100 / (2 * len(X))
            return MultiTaskLasso(alpha=alpha, max_iter=1000, tol=1e-6).fit(X, Y)

    def sup():
        return SupFL(beta=args.beta * 100, max_iter=100, tol=1e-6).fit([X], ds.y)

    pairs = warm_rounds(lambda: (timed(sup)[0], timed(mtl)[0]), args.repeat)
    sup_t, mtl_t = (list(t) for t in zip(*pairs, strict=True))
    print(f"supFL (pix, IRLS)          : {min(sup_t):8.3f} s")
    print(
        f"sklearn MultiTaskLasso (CD): {min(mtl_t):8.3f} s   ratio {median_ratio(mtl_t, sup_t):.1f}x"
    )
    fit = f"MMVFL fit, Handwritten, {args.rounds} rounds × {args.inner} IRLS iterations"
    write_record(
        args.json,
        fit,
        [
            ratio_table(
                fit,
                fast_t,
                {
                    "MMVFL naive, 1 BLAS thread": naive_t,
                    "MMVFL naive, default BLAS": naive_mt_t,
                    "floor: factor + solve only": floor_t,
                },
                unit="s",
                baseline="MMVFL fast",
                ratio_column="÷ MMVFL fast",
            ),
            ratio_table(
                "supFL against scikit-learn on pix",
                sup_t,
                {"scikit-learn MultiTaskLasso (pix, CD)": mtl_t},
                unit="s",
                baseline="supFL (pix, IRLS)",
                ratio_column="÷ supFL",
            ),
        ],
        objective_relative_difference=f"{rel:.1e}",
        messages=m.run_stats_["messages"],
        bytes=m.run_stats_["total_bytes"],
    )


if __name__ == "__main__":
    run_cli(main)
