"""APFed / SingleVL / TVFL training speed: the federated epoch vs a plain PyTorch loop.

Both train the same networks (paper Table 3, MNIST 2-1: active encoder + head,
and a passive decoder for APFed-R, a passive encoder for APFed-C, a second
encoder for TVFL) on the same batches with SGD (lr 1e-3, momentum 0.9, weight
decay 1e-4). The federated run goes through the in-process transport: every
``h_A`` / gradient is checked against the privacy policy, logged with its wire size
and handed over as a tensor on the device. Prints samples/s of both (the best run)
and their ratio, the median over interleaved pairs of runs (goal <= 1.1 on a CPU,
<= 1.3 on a GPU).

    python benchmarks/bench_apfed.py [--samples 4000] [--repeats 2] [--threads N] [--device cpu]
    python benchmarks/bench_apfed.py --clock cpu   # CPU seconds, one torch thread: on a loaded machine

Either clock (``--clock``, ``_clock.py``) times the active party's epoch, as the plain
loop's: ``ActiveClient.train_epoch``, TVFL's ``run`` less its TVFL-A mean representation
(one pass over the training strip after the last epoch, which the plain loop does not
make); the fit's setup stays out of both. MNIST holds 10,000 images: a larger ``--samples``
uses them all (said on stderr), and every label and rate is of the images used.
"""

from __future__ import annotations

import statistics
from functools import partial
from typing import Any

import numpy as np
import torch
from _args import capped, device_option, nonnegative_int, parser, positive_int, run_cli
from _clock import CLOCKS, clock_option, cpu_of, use_clock, warm_rounds
from _record import json_option, write_record
from torch.nn import functional as F

from fedviews import data
from fedviews.deep import TVFL, APFed, SingleVL
from fedviews.deep._apfed_nets import ARCHS, ActiveNet, Decoder, Encoder, Head, cut_strips
from fedviews.deep.apfed import ActiveClient, contrastive_loss, reconstruction_loss
from fedviews.deep.apfed.baselines import TVFLActiveClient

SGD: dict[str, Any] = {"lr": 1e-3, "momentum": 0.9, "weight_decay": 1e-4}


def plain_epoch(
    method: str,
    strips: list[np.ndarray],
    y: np.ndarray,
    batch_size: int,
    device: str,
    clock: str = "wall",
) -> float:
    """Seconds of one epoch of the unsplit loop (one process, one graph, no messages)."""
    spec = ARCHS["table3"]
    hw = (strips[0].shape[2], strips[0].shape[3])
    torch.manual_seed(0)
    xa, xp = (torch.as_tensor(s, device=device) for s in strips[:2])
    yt = torch.as_tensor(y, device=device)
    if method == "TVFL":
        enc_a, enc_p = Encoder(spec, hw).to(device), Encoder(spec, hw).to(device)
        head = Head(2 * spec.feature_dim(*hw), spec.hidden, 10).to(device)
        params = [*enc_a.parameters(), *enc_p.parameters(), *head.parameters()]
    else:
        active = ActiveNet.paper(spec, hw, 10)
        passive: Any = Decoder(spec, hw) if method == "APFed-R" else Encoder(spec, hw)
        active, passive = active.to(device), passive.to(device)
        params = [*active.parameters(), *(passive.parameters() if method != "SingleVL" else [])]
    opt = torch.optim.SGD(params, **SGD)
    t0 = CLOCKS[clock]()
    order = torch.as_tensor(np.random.default_rng(0).permutation(len(y)), device=device)
    for b in range(0, len(y), batch_size):
        idx = order[b : b + batch_size]
        # the batch's rows as the parties take them (index_select: no advanced indexing)
        ba, by = xa.index_select(0, idx), yt.index_select(0, idx)
        bp = xp.index_select(0, idx) if method != "SingleVL" else None  # SingleVL: none
        if method == "TVFL":
            h = torch.cat([enc_a(ba).flatten(1), enc_p(bp).flatten(1)], 1)
            loss = F.cross_entropy(head(h), by)
        else:
            h = active.encoder(ba)
            loss = F.cross_entropy(active.head(h), by)
            if method == "APFed-R":
                loss = loss + reconstruction_loss(passive(h), bp)
            elif method == "APFed-C":
                loss = loss + contrastive_loss(h, passive(bp), 0.5)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return CLOCKS[clock]() - t0


def federated_epoch(
    method: str, images: np.ndarray, y: np.ndarray, batch_size: int, device: str, clock: str
) -> float:
    kw: dict[str, Any] = {"m": 2, "i": 1, "epochs": 1, "batch_size": batch_size, "device": device}
    kw.update(SGD)
    est: Any
    if method == "TVFL":
        est = TVFL(**kw)
    elif method == "SingleVL":
        est = SingleVL(**kw)
    else:
        est = APFed(variant=method[-1], **kw)
    driver: tuple[type, str] = (
        (TVFLActiveClient, "run") if method == "TVFL" else (ActiveClient, "train_epoch")
    )
    timer = CLOCKS[clock]
    with (
        cpu_of(driver[0], driver[1], timer) as epoch,
        cpu_of(TVFLActiveClient, "_mean_representation", timer) as mean,
    ):
        est.fit(images, y)
    return sum(epoch) - sum(mean)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--samples", type=positive_int, default=4000, help="MNIST images (at most 10,000)"
    )
    ap.add_argument("--batch-size", type=positive_int, default=64)
    ap.add_argument("--repeats", type=positive_int, default=2, help="interleaved pairs of runs")
    ap.add_argument(
        "--threads",
        type=nonnegative_int,
        help="torch threads (default: 1 with --clock cpu, else torch's default; 0: torch's default)",
    )
    device_option(ap)
    clock_option(ap)
    json_option(ap)
    args = ap.parse_args()
    use_clock(args)
    ds = data.load("mnist")
    assert ds.images is not None
    n = capped(args.samples, len(ds.y), "MNIST")
    rows = np.random.default_rng(0).permutation(len(ds.y))[:n]  # every class
    images = (ds.images[rows] / 255.0).astype(np.float32)
    y = ds.y[rows]
    strips = cut_strips(images[:, None], 2)
    print(
        f"MNIST 2-1, {n} samples, batch {args.batch_size}, "
        f"{torch.get_num_threads()} torch threads, device {args.device}, {args.clock} clock; best of "
        f"{args.repeats}, ratio: the median of the {args.repeats} interleaved pairs"
    )
    print(f"{'method':<10} {'plain (samples/s)':>18} {'federated (samples/s)':>22} {'ratio':>7}")
    bs, dev, clock = args.batch_size, args.device, args.clock
    table_rows: list[list[Any]] = []

    def pair(method: str) -> tuple[float, float]:
        """The plain and the federated seconds of one epoch of ``method``, in turn."""
        return (
            plain_epoch(method, strips, y, bs, dev, clock),
            federated_epoch(method, images, y, bs, dev, clock),
        )

    for method in ("SingleVL", "APFed-R", "APFed-C", "TVFL"):
        # interleaved, so background load hits both alike; every method warms up its own
        # networks' shapes
        pairs = warm_rounds(partial(pair, method), args.repeats)
        plain, fed = min(p for p, _ in pairs), min(f for _, f in pairs)
        ratio = statistics.median(f / p for p, f in pairs)
        print(f"{method:<10} {n / plain:>18.0f} {n / fed:>22.0f} {ratio:>7.2f}")
        pair_ratios = ", ".join(f"{f / p:.3f}" for p, f in pairs)
        table_rows.append([method, round(plain, 4), round(fed, 4), round(ratio, 3), pair_ratios])
    title = (
        f"APFed epoch: MNIST 2-1, {n} samples, batch {bs}, device {dev}, "
        f"torch threads {torch.get_num_threads()}, {clock} clock, best of {args.repeats}"
    )
    columns = ["method", "plain s / epoch", "federated s / epoch", "× plain (median)", "pairs"]
    table = {"title": title, "columns": columns, "rows": table_rows}
    write_record(args.json, title, [table], dev)


if __name__ == "__main__":
    run_cli(main)
