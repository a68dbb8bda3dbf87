"""Why APFed-R stalls at chance: its math in a plain loop, with diagnostics, on a Table 2 config.

The data are those of ``configs/apfed_table2_{mnist,fmnist}.toml`` (``--dataset``), split
and subset by the experiment's own loader with the config's seed. The loop is APFed-R of
:mod:`fedviews.deep.apfed` written out: the paper's Table 3 networks, SGD (momentum 0.9,
weight decay 1e-4, batch 64), the per-sample L2 reconstruction loss of Eq. 12 and λ
(Eq. 8-10), with the estimator's seeds (every party's initial weights, every epoch's
batch order), so that ``--estimator`` (the same seed through ``APFed.fit``) can be compared
with it number for number. ``--lam 0`` is SingleVL.

Every ``--every`` steps it prints ``L_A``, ``L_p``, the norms of ``∂L_A/∂h_A`` and
``Σ_p λ ∂L_p/∂h_A`` (what the active encoder ``f_A`` receives from each side), the
fraction of ``h_A`` that is exactly 0, the fraction of ``h_A``'s units (channel and
position) that are 0 on every sample of the batch (dead ReLUs of ``f_A``), the fraction of
the decoders' hidden units that are 0 and the mean bias of ``f_A``'s last convolution;
after every epoch the active client's test accuracy (Eq. 11). ``--json PATH`` writes a
record (``benchmarks/_record.py``) of one row per seed and λ, and of the trace of each at
a few steps::

    OMP_NUM_THREADS=1 python benchmarks/apfed_collapse.py --dataset fashion_mnist --seeds 0 3
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _args import nonnegative_float, nonnegative_int, parser, positive_float, positive_int, run_cli
from _record import NA, json_option, write_record
from torch.nn import functional as F

from fedviews.deep import parse_setting
from fedviews.deep._apfed_nets import APFedNets, cut_strips
from fedviews.deep._common import device_batches
from fedviews.deep._split import build_module, sgd
from fedviews.deep._strips import party_seeds
from fedviews.deep.apfed import reconstruction_loss
from fedviews.experiments import load_config
from fedviews.experiments.apfed import _apfed, _load

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"mnist": "apfed_table2_mnist.toml", "fashion_mnist": "apfed_table2_fmnist.toml"}
#: the steps of the trace table (and the last step of each epoch)
TRACE_STEPS = (0, 1, 2, 5, 10, 20, 30)
#: ``L_A`` under this has left ln 10 (= 2.303, chance on 10 classes): the step the active
#: model starts to learn
ESCAPE = 2.0


@dataclass
class Run:
    """What one seed's loop measured."""

    trace: list[dict[str, float]] = field(default_factory=list)
    epoch_ends: list[dict[str, float]] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    escape: int | None = None
    #: test accuracy (%) of a linear probe on the trained ``h_A`` (``apfed_c_collapse.py``)
    probe: float = float("nan")
    probe_init: float = float("nan")

    def keep(self, row: dict[str, float], last: bool) -> None:
        """Keep a printed row: in :attr:`trace` at :data:`TRACE_STEPS` and an epoch's last
        step, in :attr:`epoch_ends` at the latter."""
        if row["step"] in TRACE_STEPS or last:
            self.trace.append(row)
        if last:
            self.epoch_ends.append(row)

    def end_epoch(self, parts: Parties, yte: np.ndarray, tag: str) -> None:
        """Score the active model alone after an epoch (and print it)."""
        self.accuracy.append(parts.accuracy(yte))
        epoch = len(self.accuracy)
        print(f"{tag} epoch {epoch}: test accuracy {self.accuracy[-1]:.2f} %", flush=True)


@dataclass
class Parties:
    """The networks, optimisers and strips of an APFed run as the estimator builds them."""

    xa: torch.Tensor
    xps: list[torch.Tensor]
    xa_test: torch.Tensor
    y: torch.Tensor
    active: Any
    passives: list[Any]
    opt_a: Any
    opts_p: list[Any]
    seed: int

    def batches(self, p: Any) -> Any:
        """Per epoch, its index batches: the active client's stream, one shuffle per epoch."""
        rng = np.random.default_rng(self.seed)
        for _ in range(p.epochs):
            order = np.random.default_rng(int(rng.integers(2**31)))
            yield device_batches(len(self.y), p.batch_size, order, torch.device("cpu"))

    def accuracy(self, yte: np.ndarray) -> float:
        """Test accuracy (%) of the active model alone (Eq. 11)."""
        with torch.no_grad():
            return 100 * float((self.active(self.xa_test).argmax(1).numpy() == yte).mean())


def build(p: Any, data: tuple[np.ndarray, ...], setting: str, seed: int, variant: str) -> Parties:
    """APFed-``variant``'s parties on the config's data (``p``: its params) with the
    estimator's seeds: every party's initial weights, the active client's batch order."""
    Xtr, ytr, Xte, _ = data
    m, i = parse_setting(setting)
    strips = [torch.tensor(s) for s in cut_strips(Xtr[:, None], m, pad=p.pad)]
    xps = [s for k, s in enumerate(strips) if k != i - 1]
    xa_test = torch.tensor(cut_strips(Xte[:, None], m, pad=p.pad)[i - 1])
    seeds = party_seeds(seed, m)
    nets = APFedNets("auto", 1)
    strip = tuple(strips[i - 1].shape[1:])
    active = nets.active(strip, 10, seeds[0])
    rep = nets.rep_shape(strip)
    passives = [
        build_module(seeds[1 + j], lambda: nets.passive(variant, strip, rep), "cpu")
        for j in range(len(xps))
    ]
    opt_settings = {"lr": p.lr, "momentum": p.momentum, "weight_decay": p.weight_decay}
    return Parties(
        strips[i - 1],
        xps,
        xa_test,
        torch.tensor(ytr).long(),
        active,
        passives,
        sgd(active.parameters(), **opt_settings),
        [sgd(n.parameters(), **opt_settings) for n in passives],
        seeds[0],
    )


def eq9(g_a: torch.Tensor, received: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``f_A`` receives (Eq. 9), summed in the active client's order (its own gradient,
    then each passive client's ``λ ∂L_p/∂h_A`` in turn: ``ActiveClient._step``, so that a
    loop equals ``APFed.fit`` bit for bit), and the passive clients' part alone."""
    grad = g_a
    for g in received:
        grad = grad + g
    return grad, sum(received, torch.zeros_like(g_a))


def measure(p: Any, parts: Parties, yte: np.ndarray, lam: float, every: int, tag: str) -> Run:
    """APFed-R's loop (``p``: the config's params) on the parties of :func:`build` (trains
    them), scored on the test labels ``yte``; ``tag`` starts its printed lines."""
    xa, xps, y, active, opt_a = parts.xa, parts.xps, parts.y, parts.active, parts.opt_a
    decoders, opts_p = parts.passives, parts.opts_p
    hidden: list[torch.Tensor] = []
    for d in decoders:
        d.deconvs[0].register_forward_hook(lambda _m, _i, out: hidden.append(out.detach()))
    run, step = Run(), 0
    for epoch, batches in enumerate(parts.batches(p)):
        for b, idx in enumerate(batches):
            h = active.encoder(xa[idx])
            h_head = h.detach().requires_grad_(True)
            loss_a = F.cross_entropy(active.head(h_head), y[idx])
            hidden.clear()
            received, losses_p = [], []
            for dec, opt, xp in zip(decoders, opts_p, xps, strict=True):
                h_p = h.detach().requires_grad_(True)  # what the passive client receives
                loss_p = reconstruction_loss(dec(h_p), xp[idx], p.recon_loss)
                opt.zero_grad()
                loss_p.backward()
                assert h_p.grad is not None
                received.append(h_p.grad * lam)
                opt.step()
                losses_p.append(loss_p.item())
            opt_a.zero_grad()
            loss_a.backward()
            assert h_head.grad is not None
            g_a = h_head.grad
            grad, g_p = eq9(g_a, received)
            h.backward(grad)  # Eq. 9: the active encoder gets both
            opt_a.step()
            if run.escape is None and loss_a.item() < ESCAPE:
                run.escape = step
            last = b == len(batches) - 1
            if step in TRACE_STEPS or last or step % every == 0:
                row = {
                    "epoch": epoch + 1,
                    "step": step,
                    "L_A": loss_a.item(),
                    "L_p": float(np.mean(losses_p)) if losses_p else math.nan,
                    "g_A": float(g_a.norm()),
                    "g_p": float(g_p.norm()),
                    "h_mean": float(h.detach().mean()),
                    "h_zero": float((h == 0).float().mean()),
                    "dead": float((h == 0).all(dim=0).float().mean()),
                    "dec_zero": float(torch.cat([F.relu(x) == 0 for x in hidden]).float().mean())
                    if hidden
                    else math.nan,
                    "bias": float(active.encoder.get_parameter("convs.1.bias").detach().mean()),
                }
                print(
                    f"{tag} epoch {epoch + 1} step {step:4d}  L_A {row['L_A']:.3f}"
                    f"  L_p {row['L_p']:.3f}  |dL_A/dh| {row['g_A']:.2e}  "
                    f"|Σλ dL_p/dh| {row['g_p']:.2e}  mean h_A {row['h_mean']:.2e}  "
                    f"h_A==0 {row['h_zero']:.3f}  "
                    f"dead h_A units {row['dead']:.3f}  decoder hidden==0 {row['dec_zero']:.3f}  "
                    f"f_A conv2 bias {row['bias']:.3f}",
                    flush=True,
                )
                run.keep(row, last)
            step += 1
        run.end_epoch(parts, yte, tag)
    return run


def estimator(
    p: Any, data: tuple[np.ndarray, ...], setting: str, lam: float, seed: int, variant: str = "R"
) -> float:
    """Test accuracy (%) of ``APFed`` (or SingleVL at λ = 0: the same, bit for bit) as the
    experiment builds it for this seed."""
    Xtr, ytr, Xte, yte = data
    est = _apfed(p, variant, setting, lam, "cpu", seed)
    return 100 * est.fit(Xtr, ytr).score(Xte, yte)


def num(x: float) -> Any:
    """A table cell: ``x`` to 4 decimals, :data:`NA` for NaN (no passive client)."""
    return NA if math.isnan(x) else round(x, 4)


def options(doc: str) -> argparse.ArgumentParser:
    """The options this script and ``apfed_c_collapse.py`` share."""
    ap = parser(doc)
    ap.add_argument("--dataset", default="mnist", choices=sorted(CONFIGS))
    ap.add_argument("--setting", default="2-1", help="m-i setting (default 2-1)")
    ap.add_argument(
        "--seeds", type=nonnegative_int, nargs="+", default=[0], help="seeds of the cells"
    )
    ap.add_argument(
        "--lams", type=nonnegative_float, nargs="+", help="λ values (default: the config's)"
    )
    ap.add_argument("--lr", type=positive_float, help="SGD learning rate (default: the config's)")
    ap.add_argument("--epochs", type=positive_int, help="epochs (default: the config's)")
    ap.add_argument("--every", type=positive_int, default=10, help="print every this many steps")
    ap.add_argument(
        "--estimator", action="store_true", help="also fit APFed with each seed and compare"
    )
    ap.add_argument(
        "--no-trace", action="store_true", help="--json: the per-seed table only, no trace"
    )
    json_option(ap)
    return ap


def load(dataset: str, given: dict[str, Any]) -> tuple[Any, tuple[np.ndarray, ...], str]:
    """The config of ``dataset`` with the ``params`` in ``given`` that are not None, its
    data as the experiment loads them, and its note."""
    torch.set_num_threads(1)
    overrides = [f"params.{k}={v!r}" for k, v in given.items() if v is not None]
    cfg = load_config(ROOT / "configs" / CONFIGS[dataset], overrides)
    Xtr, ytr, Xte, yte, note = _load(cfg, cfg.params)
    print(note, flush=True)
    return cfg.params, (Xtr, ytr, Xte, yte), note


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--recon-loss", choices=["l2", "mse"], help="default: the config's")
    args = ap.parse_args()
    given = {"lr": args.lr, "epochs": args.epochs, "recon_loss": args.recon_loss}
    p, data, note = load(args.dataset, given)
    rows, trace = [], []
    for seed in args.seeds:
        for lam in args.lams if args.lams is not None else [p.lam]:
            t0 = time.perf_counter()
            parts = build(p, data, args.setting, seed, "R")
            run = measure(p, parts, data[3], lam, args.every, f"seed {seed} λ {lam:g}")
            est = estimator(p, data, args.setting, lam, seed) if args.estimator else None
            if est is not None:
                print(f"seed {seed} λ {lam:g}: APFed.fit test accuracy {est:.2f} %", flush=True)
            rows.append(_summary_row(seed, lam, run, est, time.perf_counter() - t0))
            trace += [[seed, lam, *(num(r[k]) for k in TRACE_KEYS)] for r in run.trace]
    what = (
        f"{args.dataset} {args.setting} (configs/{CONFIGS[args.dataset]}: {note}), "
        f"lr {p.lr}, {p.epochs} epochs, batch {p.batch_size}, APFed-R loss {p.recon_loss}"
    )
    tables = [
        {
            "title": f"APFed-R's plain loop per seed — {what}",
            "columns": SUMMARY_COLUMNS,
            "rows": rows,
            "note": "g_A, g_p: norms of ∂L_A/∂h_A and Σ_p λ ∂L_p/∂h_A at step 0; dead: the "
            "fraction of h_A's units (channel, position) that are 0 on every sample of the "
            f"batch; escape: the first step with L_A < {ESCAPE} (ln 10 = 2.303 is chance); "
            "APFed.fit: the estimator with the same seed (--estimator).",
        },
    ]
    if not args.no_trace:
        tables.append(
            {"title": f"Trace — {what}", "columns": ["seed", "λ", *TRACE_KEYS], "rows": trace}
        )
    write_record(args.json, f"Why APFed-R stalls: {what}", tables)


SUMMARY_COLUMNS = [
    "seed",
    "λ",
    "g_A step 0",
    "g_p step 0",
    "dead h_A step 0",
    "dead h_A end of epoch 1",
    "dead h_A end",
    "decoder hidden = 0 end",
    "escape step",
    "accuracy per epoch (%)",
    "APFed.fit (%)",
    "s",
]
#: the columns of a trace row (a row of :attr:`Run.trace`)
TRACE_KEYS = (
    "epoch",
    "step",
    "L_A",
    "L_p",
    "g_A",
    "g_p",
    "h_mean",
    "h_zero",
    "dead",
    "dec_zero",
    "bias",
)


def _summary_row(seed: int, lam: float, run: Run, est: float | None, seconds: float) -> list[Any]:
    first = run.trace[0]
    return [
        seed,
        lam,
        num(first["g_A"]),
        num(first["g_p"]),
        num(first["dead"]),
        num(run.epoch_ends[0]["dead"]),
        num(run.epoch_ends[-1]["dead"]),
        num(run.epoch_ends[-1]["dec_zero"]),
        NA if run.escape is None else run.escape,
        ", ".join(f"{a:.2f}" for a in run.accuracy),
        NA if est is None else round(est, 2),
        round(seconds, 1),
    ]


if __name__ == "__main__":
    run_cli(main)
