"""Opt-in wire encodings of Multi-VFL: bytes per round against final accuracy, beside the exact run.

Every setting trains the same Multi-VFL federation (D data owners, 1 label owner, the same
initialisation and batches) for ``--rounds`` rounds on ``--samples`` random training
images and evaluates on ``--eval`` random test images; only how activations and their gradients
travel differs (``wire_activations`` / ``wire_gradients``, :mod:`fedviews.federation._codec`).
Prints a table per dataset and writes ``--plot`` (accuracy against bytes per round).

    python benchmarks/bench_wire.py [--datasets mnist fashion_mnist] [--samples 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedviews import data
from fedviews.deep.multivfl import MultiVFL

#: (label, wire_activations, wire_gradients)
SETTINGS = [
    ("exact (float32)", "none", "none"),
    ("fp16 both ways", "fp16", "fp16"),
    ("bf16 both ways", "bf16", "bf16"),
    ("int8 both ways", "int8", "int8"),
    ("int8 + top-10% gradients", "int8", "topk"),
]


def run(name: str, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    Xtr, ytr, _, Xte, yte, _ = data.image_split(name, {}, 0, 0.2)  # MNIST: a stratified fifth
    rng = np.random.default_rng(0)
    take = rng.permutation(len(ytr))[: args.samples]
    X, y = Xtr[take], ytr[take]
    keep = rng.permutation(len(yte))[: args.eval]
    out = []
    for label, acts, grads in SETTINGS:
        est = MultiVFL(
            n_data_owners=4,
            n_label_owners=1,
            rounds=args.rounds,
            local_optimizer="adam",
            wire_activations=acts,
            wire_gradients=grads,
            topk_ratio=0.1,
            device="cpu",
        ).fit(X, y, label_owner_ids=[np.arange(len(y))], eval_set=(Xte[keep], yte[keep]))
        mb = est.run_stats_["train_bytes_per_round"] / 1e6
        acc = 100 * est.history_["accuracy"][-1]
        out.append((label, mb, acc))
        print(f"{name:14s} {label:26s} {mb:9.1f} MB/round  accuracy {acc:6.2f} %", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["mnist", "fashion_mnist"])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--eval", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--plot", type=Path, default=Path("docs/img/wire_codecs_multivfl.png"))
    args = ap.parse_args()
    results = {name: run(name, args) for name in args.datasets}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, (name, rows) in zip(axes[0], results.items(), strict=True):
        for label, mb, acc in rows:
            ax.scatter(mb, acc, s=30)
            ax.annotate(label, (mb, acc), fontsize=7, xytext=(4, 2), textcoords="offset points")
        ax.set_xlabel("MB on the wire per round")
        ax.set_ylabel(f"test accuracy after {args.rounds} rounds (%)")
        ax.set_title(f"Multi-VFL, {name}, {args.samples} images")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"figure: {args.plot}")


if __name__ == "__main__":
    main()
