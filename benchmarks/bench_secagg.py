"""Secure aggregation overhead: MMVFL, V-FedMV and H-FedMV with ``defense="secagg"`` beside the
plain run (Multi-VFL's is in ``bench_defenses.py``).

Each configuration is fitted plain and secure, alternately, ``--repeat`` times in this process
(this machine is noisy: the ratio of medians is what to read); bytes are the message log's
totals (every message, key exchange included). Two data sizes: Handwritten (2,000 samples,
6 views, 10 classes) and a synthetic problem of ``--samples`` rows, where masking cost grows
with ``n x classes x (parties - 1)``; H-FedMV deals the same rows to 4 clients (every view,
pooled scaling), where it grows with ``features x classes x (clients - 1)``. Also checks
that both runs reach the same model (``Z``, or H-FedMV's global ``W_k``).

    python benchmarks/bench_secagg.py [--repeat 3] [--samples 20000] [--json FILE]

``--json FILE`` writes the table as ``{"tables": [...]}`` (``fedviews reproduce secagg_cost``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedviews import data
from fedviews.experiments import Table
from fedviews.linear import MMVFL, HFedMV, VFedMV

COLUMNS = [
    "algorithm", "data", "plain s", "secagg s", "time ratio", "plain MB", "secagg MB",
    "bytes ratio", "max |Δ| of the model vs plain",
]  # fmt: skip


def problems(n_synth: int) -> list[tuple[str, list[np.ndarray], np.ndarray]]:
    ds = data.load("handwritten")
    views, y = ds.views, ds.y
    Xs = [(X - X.mean(0)) / np.where(X.std(0) < 1e-12, 1.0, X.std(0)) for X in views]
    rng = np.random.default_rng(0)
    ys = rng.integers(0, 10, n_synth)
    synth = [
        rng.normal(size=(n_synth, 50)) + np.eye(10)[ys] @ rng.normal(size=(10, 50))
        for _ in range(4)
    ]
    return [("handwritten (n=2000, K=6)", Xs, y), (f"synthetic (n={n_synth}, K=4)", synth, ys)]


def fit(Est: type, kind: str, Xs: list[np.ndarray], y: np.ndarray, rounds: int) -> Any:
    """One fit: the consensus algorithms on all views, H-FedMV on 4 clients' rows."""
    if Est is HFedMV:
        parts = np.array_split(np.random.default_rng(1).permutation(len(y)), 4)
        clients = [([X[p] for X in Xs], y[p]) for p in parts]
        est = HFedMV(n_rounds=rounds, local_iter=1, standardize="pooled", defense=kind)
        return est.fit(clients)
    return Est(max_iter=rounds, tol=0, defense=kind).fit(Xs, y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", type=Path, help="write the table here as JSON")
    args = ap.parse_args()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    rows = []
    for name, Xs, y in problems(args.samples):
        for Est in (MMVFL, VFedMV, HFedMV):
            times: dict[str, list[float]] = {"none": [], "secagg": []}
            fitted = {}
            for _ in range(args.repeat):
                for kind in ("none", "secagg"):
                    t = time.perf_counter()
                    fitted[kind] = fit(Est, kind, Xs, y, args.rounds)
                    times[kind].append(time.perf_counter() - t)
            plain, secure = fitted["none"], fitted["secagg"]
            tp, ts = np.median(times["none"]), np.median(times["secagg"])
            bp = plain.run_stats_["total_bytes"] / 1e6
            bs = secure.run_stats_["total_bytes"] / 1e6
            if Est is HFedMV:
                diff = max(float(np.abs(a - b).max()) for a, b in zip(plain.W_, secure.W_))
            else:
                diff = float(np.abs(plain.Z_ - secure.Z_).max())
            row = [Est.__name__, name, tp, ts, ts / tp, bp, bs, bs / bp, f"{diff:.1e}"]
            rows.append(row)
            print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else v for v in row) + " |")
    if args.json:
        note = (
            f"{args.rounds} rounds; median of {args.repeat} alternating runs in one process; "
            "H-FedMV deals the rows to 4 clients, pooled scaling; bytes: every message, key "
            "exchange included."
        )
        table = Table("Secure summation: cost beside the plain run", COLUMNS, rows, note)
        args.json.write_text(json.dumps({"tables": [table.to_dict()]}, indent=1), "utf-8")


if __name__ == "__main__":
    main()
