"""Time one full MMVFL fit on Handwritten against the naive reference, in the same process.

Both run the same number of rounds and IRLS iterations (tol = 0), so they do the
same work and must reach the same objective; the ratio is what the fast linear
algebra (cached Gram matrices, Cholesky, single-threaded BLAS for small matrices)
buys. For context, supFL (one view) is also timed against scikit-learn's
MultiTaskLasso, a related ℓ2,1-penalised regression (different loss scaling and
solver, so only the order of magnitude is comparable).

    python benchmarks/bench_mmvfl.py [--rounds 20] [--inner 10] [--repeat 3] [--json PATH]

``--json PATH`` also writes the times as tables (``benchmarks/_record.py``).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import scipy.linalg as sla
from _record import json_option, write_record

from fedviews.data import load, one_hot
from fedviews.linear import MMVFL, SupFL, small_blas
from fedviews.linear.mmvfl.reference import naive_mmvfl


def best_of(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def floor(Xs: list[np.ndarray], c: int, steps: int, repeat: int) -> float:
    """The linear-algebra floor of the fit: ``steps`` Cholesky factorisations and solves of
    each view's ``d x d`` system (``X^T X + beta A``) and nothing else."""
    rng = np.random.default_rng(0)
    systems = [(X.T @ X + np.eye(X.shape[1]), rng.standard_normal((X.shape[1], c))) for X in Xs]

    def run() -> None:
        with small_blas():
            for _ in range(steps):
                for M, rhs in systems:
                    cf = sla.cho_factor(M, lower=False, check_finite=False)
                    sla.cho_solve(cf, rhs, check_finite=False)

    return best_of(run, repeat)[0]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=3)
    json_option(ap)
    args = ap.parse_args()

    ds = load("handwritten", views=["pix", "fou", "fac", "zer", "kar"])
    Xs = [(v - v.mean(0)) / np.where(v.std(0) > 0, v.std(0), 1) for v in ds.views]
    Y, _ = one_hot(ds.y)
    print(
        f"Handwritten: {ds.n_samples} samples, views {ds.n_features}; {args.rounds} rounds x {args.inner} IRLS iterations"
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

    t_fast, m = best_of(fast, args.repeat)
    with small_blas():  # the fair baseline: same BLAS threading as the fast code
        t_naive, (_, _, obj) = best_of(naive, 1)
    t_naive_mt, _ = best_of(naive, 1)
    rel = abs(m.objective_[-1] - obj[-1]) / abs(obj[-1])
    print(f"MMVFL fast                  : {t_fast:8.3f} s   objective {m.objective_[-1]:.10g}")
    print(
        f"MMVFL naive (1 BLAS thread) : {t_naive:8.3f} s   objective {obj[-1]:.10g}   (relative difference {rel:.1e})"
    )
    print(f"MMVFL naive (default BLAS)  : {t_naive_mt:8.3f} s")
    print(
        f"speed-up vs naive           : {t_naive / t_fast:8.1f}x (1 thread), {t_naive_mt / t_fast:.1f}x (default)   goal >= 10x"
    )
    print(
        f"bytes on the wire: {m.run_stats_['total_bytes']:,} in {m.run_stats_['messages']} messages"
    )
    t_floor = floor(Xs, Y.shape[1], args.rounds * args.inner, args.repeat)
    print(
        f"floor (factor + solve only) : {t_floor:8.3f} s   = {t_floor / t_fast:.0%} of the fast fit; "
        f"the rest is the Z_k steps, objectives and the in-process message round trips"
    )

    X = Xs[0]
    t_sup, _ = best_of(
        lambda: SupFL(beta=args.beta * 100, max_iter=100, tol=1e-6).fit([X], ds.y), args.repeat
    )
    from sklearn.linear_model import MultiTaskLasso

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_mtl, _ = best_of(
            lambda: MultiTaskLasso(
                alpha=args.beta * 100 / (2 * len(X)), max_iter=1000, tol=1e-6
            ).fit(X, Y),
            args.repeat,
        )
    print(f"supFL (pix, IRLS)          : {t_sup:8.3f} s")
    print(f"sklearn MultiTaskLasso (CD): {t_mtl:8.3f} s   ratio {t_mtl / t_sup:.1f}x")
    fit = f"MMVFL fit, Handwritten, {args.rounds} rounds × {args.inner} IRLS iterations"
    runs = [
        ("MMVFL fast", t_fast),
        ("MMVFL naive, 1 BLAS thread", t_naive),
        ("MMVFL naive, default BLAS", t_naive_mt),
        ("floor: factor + solve only", t_floor),
    ]
    sup = [("supFL (pix, IRLS)", t_sup), ("scikit-learn MultiTaskLasso (pix, CD)", t_mtl)]
    write_record(
        args.json,
        fit,
        [
            {
                "title": fit,
                "columns": ["run", "s (best)", "÷ MMVFL fast"],
                "rows": [[name, round(t, 4), round(t / t_fast, 2)] for name, t in runs],
            },
            {
                "title": "supFL against scikit-learn on pix",
                "columns": ["run", "s (best)", "÷ supFL"],
                "rows": [[name, round(t, 4), round(t / t_sup, 1)] for name, t in sup],
            },
        ],
        objective_relative_difference=f"{rel:.1e}",
        messages=m.run_stats_["messages"],
        bytes=m.run_stats_["total_bytes"],
    )


if __name__ == "__main__":
    main()
