"""The staged parties' optimiser steps of one batch: every optimiser's own ``step()`` against
one multi-tensor step over all of them (``fedviews.deep._fusedstep.step_together``).

The optimisers are those of a run's parties after one epoch (their state created): the split
NN's passive parties (SGD with momentum, ``bench_splitnn.py``'s federation) and Multi-VFL's
data owners (their bottoms as ``bench_multivfl.py`` builds them, with SGD, Multi-VFL's
default local step, and Adam). Each step gets the same small gradients. Prints, per set,
microseconds per batch (the median over ``--repeats`` interleaved timings of ``--batches``
steps) and the saving per batch.

    python benchmarks/bench_fusedstep.py [--batches 2000] [--repeats 5] [--device cpu]

Run it with ``PYTHONPATH`` at another checkout's ``src`` to compare two versions.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _clock import CLOCKS
from bench_splitnn import federation

from fedviews.deep._fusedstep import OptimizerStep, step_together
from fedviews.deep.multivfl import build_models


def per_batch(fn: Callable[[], object], n: int, clock: Callable[[], float]) -> float:
    """Microseconds per call of ``fn`` over ``n`` calls."""
    t0 = clock()
    for _ in range(n):
        fn()
    return (clock() - t0) / n * 1e6


def splitnn_optimizers(device: str) -> list[Any]:
    """The passive parties' SGD optimisers of a 4-party split NN after one epoch on 512
    random strips (their momentum buffers created)."""
    rng = np.random.default_rng(0)
    images, y = rng.random((512, 28, 28), dtype=np.float32), rng.integers(0, 10, 512)
    fed = federation(images, y, 4, 64, device)
    fed()
    passives: list[Any] = [fed.parties[p] for p in ("p0", "p1", "p2")]
    return [p.opt for p in passives]


def multivfl_optimizers(kind: str, device: str) -> list[Any]:
    """Optimisers (``"sgd"`` or ``"adam"``, Multi-VFL's local steps at lr 1e-3) of four data
    owners' bottoms on 7-row strips of 28 x 28 images (not stepped yet)."""
    bottoms, _ = build_models([7, 7, 7, 7], 28, 10, random_state=0)
    opts = []
    for net in bottoms:
        net.to(device)
        opt = (torch.optim.Adam if kind == "adam" else torch.optim.SGD)(net.parameters(), lr=1e-3)
        opts.append(opt)
    return opts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = ap.parse_args()
    clock = CLOCKS[args.clock]
    sets = {
        "split NN, 3 passive parties, SGD momentum 0.9": splitnn_optimizers(args.device),
        "Multi-VFL, 4 data owners, SGD": multivfl_optimizers("sgd", args.device),
        "Multi-VFL, 4 data owners, Adam": multivfl_optimizers("adam", args.device),
    }
    print(
        f"staged optimiser steps per batch, device {args.device}, torch threads "
        f"{torch.get_num_threads()}, {args.clock} clock, {args.batches} batches x "
        f"{args.repeats} repeats"
    )
    for name, opts in sets.items():
        gen = torch.Generator().manual_seed(0)
        for opt in opts:
            for p in opt.param_groups[0]["params"]:
                p.grad = (torch.randn(p.shape, generator=gen) * 1e-6).to(p.device)
            opt.step()  # the state, as after a first batch

        def own(opts: list[Any] = opts) -> None:
            for opt in opts:
                opt.step()

        def joint(opts: list[Any] = opts) -> None:
            step_together([OptimizerStep(opt) for opt in opts])

        times: dict[str, list[float]] = {"own": [], "joint": []}
        for i in range(args.repeats):  # interleaved, so background load hits both alike
            for k in ("own", "joint") if i % 2 == 0 else ("joint", "own"):
                times[k].append(per_batch(own if k == "own" else joint, args.batches, clock))
        mine, ours = statistics.median(times["own"]), statistics.median(times["joint"])
        print(
            f"{name:<48}: own step() {mine:7.1f} us, joint {ours:7.1f} us per batch "
            f"(saves {mine - ours:.1f} us, x{ours / mine:.2f})"
        )


if __name__ == "__main__":
    main()
