"""Opt-in wire encodings of split learning: bytes per round against final accuracy, beside the exact run.

Every setting trains the same federation (same initialisation and batches) for ``--rounds``
rounds (epochs) on ``--samples`` random training images and evaluates on ``--eval`` random test
images; only how activations and their gradients travel differs (``wire_activations`` /
``wire_gradients``, :class:`fedviews.federation.Codec`). Multi-VFL: 4 data owners, 1 label owner,
Adam local step. APFed-R: setting 2-1 (the active party holds the top half), SGD lr 0.01; its
accuracy is the active party's, predicting alone. Prints one line per run and writes ``--plot``.

    python benchmarks/bench_wire.py [--algorithms multivfl apfed] [--datasets mnist fashion_mnist]

``--json FILE`` writes one table per algorithm as ``{"tables": [...]}`` (``fedviews reproduce
wire_multivfl``, ``wire_apfed``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from fedviews import data
from fedviews.deep import APFed
from fedviews.deep.multivfl import MultiVFL
from fedviews.errors import FedViewsError
from fedviews.experiments import Table

#: (label, wire_activations, wire_gradients)
SETTINGS = [
    ("exact (float32)", "none", "none"),
    ("fp16 both ways", "fp16", "fp16"),
    ("bf16 both ways", "bf16", "bf16"),
    ("int8 both ways", "int8", "int8"),
    ("int8 + top-10% gradients", "int8", "topk"),
]


def train(algorithm: str, acts: str, grads: str, split: tuple, rounds: int) -> tuple[float, float]:
    """``(MB per round, test accuracy %)`` of one run."""
    X, y, Xte, yte = split
    wire: dict[str, Any] = {"wire_activations": acts, "wire_gradients": grads, "topk_ratio": 0.1}
    if algorithm == "multivfl":
        est = MultiVFL(
            n_data_owners=4, n_label_owners=1, rounds=rounds, local_optimizer="adam", lr=1e-3,
            device="cpu", **wire,
        ).fit(X, y, label_owner_ids=[np.arange(len(y))], eval_set=(Xte, yte))  # fmt: skip
        return est.run_stats_["train_bytes_per_round"] / 1e6, 100 * est.history_["accuracy"][-1]
    est = APFed(variant="R", m=2, i=1, epochs=rounds, lr=0.01, device="cpu", **wire).fit(X, y)
    return est.message_log_["total_bytes"] / rounds / 1e6, 100 * est.score(Xte, yte)


def run(algorithm: str, name: str, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    Xtr, ytr, _, Xte, yte, _ = data.image_split(name, {}, 0, 0.2)  # MNIST: a stratified fifth
    rng = np.random.default_rng(0)
    take = rng.permutation(len(ytr))[: args.samples]
    keep = rng.permutation(len(yte))[: args.eval]
    split = (Xtr[take], ytr[take], Xte[keep], yte[keep])
    out = []
    for label, acts, grads in SETTINGS:
        try:
            mb, acc = train(algorithm, acts, grads, split, args.rounds)
        except FedViewsError as exc:  # e.g. fp16 refuses values beyond its range
            print(f"{algorithm:9s} {name:14s} {label:26s} refused: {exc}", flush=True)
            continue
        out.append((label, mb, acc))
        print(
            f"{algorithm:9s} {name:14s} {label:26s} {mb:9.1f} MB/round  accuracy {acc:6.2f} %",
            flush=True,
        )
    return out


def tables(results: dict, args: argparse.Namespace) -> list[dict]:
    """One table per algorithm: setting, MB per round (of the first dataset), accuracy per
    dataset (``refused`` where the encoding refused the run)."""
    out = []
    for algorithm in args.algorithms:
        by_name = {
            n: {label: (mb, acc) for label, mb, acc in results[algorithm, n]} for n in args.datasets
        }
        rows = []
        for label, *_ in SETTINGS:
            got = [by_name[n].get(label) for n in args.datasets]
            mb = next((g[0] for g in got if g is not None), float("nan"))
            rows.append([label, mb, *(g[1] if g is not None else "refused" for g in got)])
        unit = "round" if algorithm == "multivfl" else "epoch"
        out.append(
            Table(
                f"{algorithm}: wire encodings, bytes against accuracy",
                ["setting", f"MB per {unit}", *(f"{n} accuracy %" for n in args.datasets)],
                rows,
                f"{args.samples} training images, {args.rounds} {unit}s, {args.eval} test "
                "images; same initialisation and batches for every setting.",
            ).to_dict()
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", nargs="+", default=["multivfl", "apfed"])
    ap.add_argument("--datasets", nargs="+", default=["mnist", "fashion_mnist"])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--eval", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--plot",
        type=Path,
        help="default: wire_codecs_<algorithms>.png beside --json (fedviews reproduce's run "
        "folder, which --record copies to docs/img), else in docs/img",
    )
    ap.add_argument("--json", type=Path, help="write one table per algorithm here as JSON")
    args = ap.parse_args()
    figure = f"wire_codecs_{'_'.join(args.algorithms)}.png"
    args.plot = args.plot or (args.json.parent if args.json else Path("docs/img")) / figure
    results = {(a, n): run(a, n, args) for a in args.algorithms for n in args.datasets}
    if args.json:
        args.json.write_text(json.dumps({"tables": tables(results, args)}, indent=1), "utf-8")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = len(args.datasets)
    fig, axes = plt.subplots(
        len(args.algorithms), ncols, figsize=(5 * ncols, 3.6 * len(args.algorithms)), squeeze=False
    )
    for ax, ((algorithm, name), rows) in zip(axes.ravel(), results.items(), strict=True):
        for label, mb, acc in rows:
            ax.scatter(mb, acc, s=36, label=label)
        ax.set_xlabel("MB on the wire per round")
        ax.set_ylabel(f"test accuracy after {args.rounds} rounds (%)")
        ax.set_title(f"{algorithm}, {name}, {args.samples} images", fontsize=10)
        ax.grid(alpha=0.3)
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"figure: {args.plot}")


if __name__ == "__main__":
    main()
