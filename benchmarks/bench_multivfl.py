"""Multi-VFL runtime overhead: one federated epoch vs a plain single-process PyTorch loop.

Both train the same split network (D bottoms + top, same initialisation) on the
same Fashion-MNIST batches with the same local optimizer; the federated run
goes through the in-process transport (privacy check, message log, wire bytes
counted; activations and gradients handed over as tensors on the device). Prints
the time ratio, the median over the interleaved pairs of runs (goal <= 1.1 on a
CPU, <= 1.3 on a GPU), and the bytes sent per batch and per round next to the raw
activation/gradient sizes.

    python benchmarks/bench_multivfl.py [--samples 5000] [--data-owners 4] [--repeats 2] [--device cpu]
    python benchmarks/bench_multivfl.py --device cuda --profile 20   # + where one epoch's time goes
    python benchmarks/bench_multivfl.py --clock cpu   # CPU seconds: on a loaded machine
    python benchmarks/bench_multivfl.py --clock cpu --without-finiteness   # + what those checks cost

``--clock cpu`` (``_clock.py``) times both with this process's CPU time and torch on one
thread: the federated epoch is the label owner's ``train_round``, inside which every data
owner's handler runs. Fashion-MNIST's training set holds 60,000 images: a larger
``--samples`` uses them all (said on stderr).
"""

from __future__ import annotations

import contextlib
import cProfile
import pstats
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from _args import capped, parser, positive_int, run_cli
from _clock import cpu_of, print_ratio, ratio_options, use_clock, warm_rounds
from _record import json_option, ratio_table, write_record

from fedviews import data
from fedviews.deep.multivfl import MultiVFL, build_models, epoch_order, round_seed
from fedviews.deep.multivfl.nets import SplitNet
from fedviews.deep.multivfl.parties import LabelOwner
from fedviews.federation import InProcessTransport
from fedviews.federation._handover import FiniteChecks


def plain_epoch(
    images: np.ndarray,
    y: np.ndarray,
    d: int,
    batch_size: int,
    lr: float,
    device: str,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds for one epoch of the unsplit loop over the batches Multi-VFL uses in round 1."""
    strips = [
        s.reshape(len(images), 1, -1, 28)
        for s in np.array_split(images.astype(np.float32) / 255, d, axis=1)
    ]
    bottoms, top = build_models([s.shape[2] for s in strips], 28, 10, random_state=0)
    net = SplitNet(bottoms, top).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=lr)  # MultiVFL's default local step
    xs = [torch.as_tensor(np.ascontiguousarray(s), device=device) for s in strips]
    yt = torch.as_tensor(y, device=device)
    t0 = clock()
    order = torch.as_tensor(epoch_order(round_seed(0, 1), 1, 0, len(y)), device=device)
    for b in range(0, len(y), batch_size):
        idx = order[b : b + batch_size]
        loss = torch.nn.functional.cross_entropy(
            net([x.index_select(0, idx) for x in xs]), yt.index_select(0, idx)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return clock() - t0


def federated_epoch(
    images: np.ndarray,
    y: np.ndarray,
    d: int,
    batch_size: int,
    lr: float,
    device: str,
    batch_backward: bool = True,
) -> MultiVFL:
    """One round of Multi-VFL in one process (``batch_backward=False``: one backward pass per
    data owner instead of one for them all)."""
    est = MultiVFL(
        transport=lambda policy: InProcessTransport(policy, batch_backward=batch_backward),
        n_data_owners=d,
        n_label_owners=1,
        optimizer="fedavg",
        rounds=1,
        batch_size=batch_size,
        lr=lr,
        device=device,
    )
    return est.fit(images, y, label_owner_ids=[np.arange(len(y))])


@contextlib.contextmanager
def finiteness_off(off: bool) -> Iterator[None]:
    """With ``off``, the in-process transport queues no finiteness check (an ablation, to
    time what the checks cost: never in a run)."""
    add_many = FiniteChecks.add_many
    if off:
        FiniteChecks.add_many = lambda self, handed: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        FiniteChecks.add_many = add_many  # type: ignore[method-assign]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--samples",
        type=positive_int,
        default=5000,
        help="samples of the one label owner (paper: 5000; at most 60,000)",
    )
    ap.add_argument("--data-owners", type=positive_int, default=4)
    ap.add_argument("--batch-size", type=positive_int, default=64)
    ap.add_argument("--repeats", type=positive_int, default=2, help="interleaved rounds of runs")
    ratio_options(ap, "data owner")
    ap.add_argument(
        "--without-finiteness",
        action="store_true",
        help="also time the federated run without the transport's finiteness checks (what "
        "they cost; an ablation, never a run's setting)",
    )
    json_option(ap)
    args = ap.parse_args()
    clock = use_clock(args)
    ds = data.load("fashion_mnist", subset="train")
    assert ds.images is not None  # an image dataset
    n = capped(args.samples, len(ds.y), "Fashion-MNIST's training set")
    images, y = ds.images[:n], ds.y[:n]
    d, bs, lr = args.data_owners, args.batch_size, 1e-3

    def timed(batch_backward: bool, unchecked: bool = False) -> tuple[MultiVFL, float]:
        with cpu_of(LabelOwner, "train_round") as cpu, finiteness_off(unchecked):
            est = federated_epoch(images, y, d, bs, lr, args.device, batch_backward)
        return est, cpu[0] if args.clock == "cpu" else est.history_["train_seconds"][0]

    def runs() -> tuple[float, float, float, float, MultiVFL]:
        """Plain, federated, (``--one-backward-each``) unbatched and
        (``--without-finiteness``) unchecked seconds, in turn, and the federated run's
        estimator."""
        plain = plain_epoch(images, y, d, bs, lr, args.device, clock)
        est, fed = timed(True)
        each = timed(False)[1] if args.one_backward_each else 0.0
        bare = timed(True, unchecked=True)[1] if args.without_finiteness else 0.0
        return plain, fed, each, bare, est

    timings = warm_rounds(runs, args.repeats)  # interleaved: load hits all alike
    plain_t, fed_t, each_t, bare_t, ests = (list(t) for t in zip(*timings, strict=True))
    est = ests[-1]
    s = est.run_stats_
    n_batches = int(s["batches_per_round"])
    raw_act = s["raw_activation_bytes_per_sample"]
    raw_batch = 2 * raw_act * len(y) / n_batches  # activations forward + gradients backward
    top_bytes = sum(v.nbytes for v in est.server_.params.values())
    print(
        f"D={d}, K=1, FedAvg, {len(y)} samples, batch {bs}, {n_batches} batches, device {args.device}, torch threads {torch.get_num_threads()}, {args.clock} clock"
    )
    print(
        f"plain loop      : {min(plain_t):8.3f} s/epoch  (runs {', '.join(f'{t:.3f}' for t in plain_t)})"
    )
    print(
        f"Multi-VFL       : {min(fed_t):8.3f} s/epoch  (runs {', '.join(f'{t:.3f}' for t in fed_t)})"
    )
    print_ratio("ratio", fed_t, plain_t)
    if args.one_backward_each:
        print(
            f"one backward per data owner: {min(each_t):.3f} s/epoch  "
            f"(runs {', '.join(f'{t:.3f}' for t in each_t)})"
        )
        print_ratio("ratio, unbatched", each_t, plain_t)
    if args.without_finiteness:
        print(
            f"without finiteness checks: {min(bare_t):.3f} s/epoch  "
            f"(runs {', '.join(f'{t:.3f}' for t in bare_t)})"
        )
        print_ratio("ratio, unchecked", bare_t, plain_t)
    print(
        f"bytes per batch : {s['train_bytes_per_batch'] / 1e6:8.3f} MB on the wire vs {raw_batch / 1e6:.3f} MB raw activations + gradients"
    )
    print(
        f"bytes per round : {s['train_bytes_per_round'] / 1e6:8.3f} MB on the wire vs "
        f"{(raw_batch * n_batches + 2 * top_bytes) / 1e6:.3f} MB raw (activations + gradients + top model up and down)"
    )
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        federated_epoch(images, y, d, bs, lr, args.device)
        prof.disable()
        print(f"\none more federated epoch, profiled ({args.profile} costliest by own time):")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    measured = (
        {"Multi-VFL, in-process": fed_t}
        | ({"one backward per data owner": each_t} if args.one_backward_each else {})
        | ({"without finiteness checks (ablation)": bare_t} if args.without_finiteness else {})
    )
    title = (
        f"Multi-VFL epoch: D={d} data owners, K=1, FedAvg, {len(y)} Fashion-MNIST samples, batch "
        f"{bs} ({n_batches} batches), device {args.device}, torch threads {torch.get_num_threads()}"
        f", {args.clock} clock"
    )
    write_record(args.json, title, [ratio_table(title, plain_t, measured)], args.device)


if __name__ == "__main__":
    run_cli(main)
