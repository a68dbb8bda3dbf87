"""Why APFed-C falls under SingleVL: its math in a plain loop, with diagnostics, on a Table 2 config.

The sibling of ``apfed_collapse.py`` (APFed-R), on the same data and with the same seeds
(its :func:`build`): APFed-C of :mod:`fedviews.deep.apfed` written out, the passive
encoders ``ENC_p`` of the paper's Table 3 and the contrastive loss of Eq. 14/16
(temperature ``--tau``, default the config's), each passive client's reply
``λ ∂L_p/∂h_A`` added to ``∂L_A/∂h_A`` in the active client's order (Eq. 9), so that
``--estimator`` (the same seed through ``APFed.fit``) equals the loop number for number.
``--lams 0`` is SingleVL.

Every ``--every`` steps it prints, and at a few steps records:

* ``L_A`` and ``L_c`` (the contrastive loss, the mean over the passive clients);
* the norms of ``∂L_A/∂h_A`` (*g_A*) and ``Σ_p λ ∂L_p/∂h_A`` (*g_c*), their cosine, and the
  norms of the gradients each puts on ``f_A``'s parameters (*θ g_A*, *θ g_c*) with their
  cosine (*θ cos*: below 0 the two objectives pull ``f_A`` apart), and how much the samples'
  gradients on ``h_A`` agree (*coh_A*, *coh_c*: :func:`coherence`), and the cosine of the
  samples' summed contrastive gradient with their summed ``h_A`` (*shrink*: near 1, a descent
  step lowers every sample's ``h_A`` along the batch's common direction);
* the units of ``h_A`` (channel, position) that are 0 on every sample of the batch (*dead*)
  and the mean norm of a sample's ``h_A`` (*h_norm*);
* the contrastive pairs' similarity (Eq. 15): the mean positive ``s(h_A_i, h_p_i)``, the mean
  negative ``s(h_A_i, h_p_j)`` and ``s(h_A_i, h_A_j)`` (``j ≠ i``);
* the class structure of ``h_A``: the mean ``s(h_A_i, h_A_j)`` over pairs of one class minus
  that over pairs of two classes (*class gap*; 0: ``h_A`` does not separate the classes);
* the effective rank (``exp`` of the entropy of the normalised singular values) of the batch's
  normalised ``h_A`` and of the first passive client's ``h_p`` (1: every sample the same
  direction, a representation collapse).

After every epoch: the active client's test accuracy (Eq. 11); after the last, that of a
*linear probe* (a logistic regression fitted on the trained ``h_A`` of the training strips,
scored on the test strips): how much of the classes ``f_A`` holds, whatever ``g_T`` made of
it (and at initialisation, the same for every λ of a seed). ``--json PATH`` writes a
record (``benchmarks/_record.py``)::

    OMP_NUM_THREADS=1 python benchmarks/apfed_c_collapse.py --dataset fashion_mnist \\
        --setting 3-2 --seeds 3 --lams 1 0 --estimator
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from _args import positive_float, run_cli
from _record import NA, write_record
from apfed_collapse import (
    CONFIGS,
    ESCAPE,
    TRACE_STEPS,
    Parties,
    Run,
    build,
    eq9,
    estimator,
    load,
    num,
    options,
)
from torch.nn import functional as F

from fedviews.deep.apfed import contrastive_loss


def _cos(u: torch.Tensor, v: torch.Tensor) -> float:
    """Cosine of two tensors taken as vectors (NaN where one is 0)."""
    den = float(u.norm() * v.norm())
    return float((u * v).sum()) / den if den > 0 else float("nan")


def coherence(g: torch.Tensor) -> float:
    """``‖Σ_i g_i‖ / Σ_i ‖g_i‖`` over the samples' gradients ``g_i`` (rows of ``g``): 1 when
    every sample pushes one way, about ``1/√n`` for ``n`` unrelated directions (NaN at 0)."""
    flat = g.flatten(1)
    den = float(flat.norm(dim=1).sum())
    return float(flat.sum(0).norm()) / den if den > 0 else float("nan")


def effective_rank(z: torch.Tensor) -> float:
    """``exp`` of the entropy of the normalised singular values of ``z`` (rows: samples)."""
    s = torch.linalg.svdvals(z.double())
    q = s / s.sum()
    q = q[q > 0]
    return float(torch.exp(-(q * q.log()).sum()))


def similarities(h_a: torch.Tensor, h_p: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """The contrastive pairs' mean cosines (Eq. 15) and the structure of the batch's ``h_A``."""
    za = F.normalize(h_a.detach().flatten(1).double(), dim=1)
    zp = F.normalize(h_p.detach().flatten(1).double(), dim=1)
    s_ap, s_aa = za @ zp.T, za @ za.T
    off = ~torch.eye(len(za), dtype=torch.bool)
    same = (y[:, None] == y[None, :]) & off
    other = y[:, None] != y[None, :]
    return {
        "pos": float(s_ap.diagonal().mean()),
        "neg_ap": float(s_ap[off].mean()),
        "neg_aa": float(s_aa[off].mean()),
        "class_gap": float(s_aa[same].mean() - s_aa[other].mean()),
        "rank_A": effective_rank(za),
        "rank_p": effective_rank(zp),
    }


def probe(parts: Parties, yte: np.ndarray) -> float:
    """Test accuracy (%) of a logistic regression on ``f_A``'s ``h_A``, each feature
    standardised (the probe does not depend on the scale of ``h_A``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    with torch.no_grad():
        train = parts.active.encoder(parts.xa).flatten(1).double().numpy()
        test = parts.active.encoder(parts.xa_test).flatten(1).double().numpy()
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))
    probe.fit(train, parts.y.numpy())
    return 100 * float((probe.predict(test) == yte).mean())


def _theta_grads(h: torch.Tensor, params: list[Any], g_a: torch.Tensor, g_c: torch.Tensor) -> Any:
    """The gradients ``g_a`` and ``g_c`` on ``h`` put on ``params``: both norms, their cosine.
    (``autograd.grad`` leaves the parameters' ``.grad`` as they are.)"""
    ga = torch.autograd.grad(h, params, g_a, retain_graph=True)
    flat_a = torch.cat([g.flatten() for g in ga])
    if not g_c.any():
        return float(flat_a.norm()), 0.0, float("nan")
    gc = torch.autograd.grad(h, params, g_c, retain_graph=True)
    flat_c = torch.cat([g.flatten() for g in gc])
    return float(flat_a.norm()), float(flat_c.norm()), _cos(flat_a, flat_c)


def measure(p: Any, parts: Parties, yte: np.ndarray, lam: float, every: int, tag: str) -> Run:
    """APFed-C's loop (``p``: the config's params) on the parties of :func:`build` (trains
    them), scored on the test labels ``yte``; ``tag`` starts its printed lines."""
    xa, y, active, opt_a = parts.xa, parts.y, parts.active, parts.opt_a
    params = list(active.encoder.parameters())
    run, step = Run(), 0
    run.probe_init = probe(parts, yte)
    for epoch, batches in enumerate(parts.batches(p)):
        for b, idx in enumerate(batches):
            h = active.encoder(xa[idx])
            h_head = h.detach().requires_grad_(True)
            loss_a = F.cross_entropy(active.head(h_head), y[idx])
            received, losses, reps = [], [], []
            for enc, opt, xp in zip(parts.passives, parts.opts_p, parts.xps, strict=True):
                h_in = h.detach().requires_grad_(True)  # what the passive client receives
                h_p = enc(xp[idx])
                loss_p = contrastive_loss(h_in, h_p, p.tau)
                opt.zero_grad()
                loss_p.backward()
                assert h_in.grad is not None
                received.append(h_in.grad * lam)
                opt.step()
                losses.append(loss_p.item())
                reps.append(h_p.detach())
            opt_a.zero_grad()
            loss_a.backward()
            assert h_head.grad is not None
            g_a = h_head.grad
            grad, g_c = eq9(g_a, received)
            last = b == len(batches) - 1
            traced = step in TRACE_STEPS or last or step % every == 0
            if traced:
                theta = _theta_grads(h, params, g_a, g_c)
            h.backward(grad)
            opt_a.step()
            if run.escape is None and loss_a.item() < ESCAPE:
                run.escape = step
            if traced:
                row = {
                    "epoch": epoch + 1,
                    "step": step,
                    "L_A": loss_a.item(),
                    "L_c": float(np.mean(losses)) if losses else float("nan"),
                    "g_A": float(g_a.norm()),
                    "g_c": float(g_c.norm()),
                    "cos": _cos(g_a, g_c),
                    "coh_A": coherence(g_a),
                    "coh_c": coherence(g_c),
                    "shrink": _cos(g_c.sum(0), h.detach().sum(0)),
                    "θ g_A": theta[0],
                    "θ g_c": theta[1],
                    "θ cos": theta[2],
                    "dead": float((h == 0).all(dim=0).float().mean()),
                    "h_norm": float(h.detach().flatten(1).norm(dim=1).mean()),
                    **similarities(h, reps[0] if reps else h, y[idx]),
                }
                print(
                    f"{tag} epoch {epoch + 1} step {step:4d}  "
                    + "  ".join(f"{k} {v:.3g}" for k, v in list(row.items())[2:]),
                    flush=True,
                )
                run.keep(row, last)
            step += 1
        run.end_epoch(parts, yte, tag)
    run.probe = probe(parts, yte)
    print(
        f"{tag}: linear probe on h_A {run.probe:.2f} % (at initialisation {run.probe_init:.2f} %)",
        flush=True,
    )
    return run


#: the columns of a trace row (a row of :attr:`Run.trace`)
TRACE_KEYS = (
    "epoch",
    "step",
    "L_A",
    "L_c",
    "g_A",
    "g_c",
    "cos",
    "coh_A",
    "coh_c",
    "shrink",
    "θ g_A",
    "θ g_c",
    "θ cos",
    "dead",
    "h_norm",
    "pos",
    "neg_ap",
    "neg_aa",
    "class_gap",
    "rank_A",
    "rank_p",
)
SUMMARY_COLUMNS = [
    "setting",
    "seed",
    "λ",
    "τ",
    "g_A step 0",
    "g_c step 0",
    "coh_A step 0",
    "coh_c step 0",
    "shrink step 0",
    "θ g_A step 0",
    "θ g_c step 0",
    "dead h_A end",
    "h_norm end",
    "pos end",
    "neg_aa end",
    "class gap end",
    "rank h_A end",
    "escape step",
    "accuracy per epoch (%)",
    "APFed.fit (%)",
    "probe at init (%)",
    "probe (%)",
    "s",
]


def _summary_row(key: list[Any], run: Run, est: float | None, seconds: float) -> list[Any]:
    first, end = run.trace[0], run.epoch_ends[-1]
    return [
        *key,
        num(first["g_A"]),
        num(first["g_c"]),
        num(first["coh_A"]),
        num(first["coh_c"]),
        num(first["shrink"]),
        num(first["θ g_A"]),
        num(first["θ g_c"]),
        num(end["dead"]),
        num(end["h_norm"]),
        num(end["pos"]),
        num(end["neg_aa"]),
        num(end["class_gap"]),
        num(end["rank_A"]),
        NA if run.escape is None else run.escape,
        ", ".join(f"{a:.2f}" for a in run.accuracy),
        NA if est is None else round(est, 2),
        round(run.probe_init, 2),
        round(run.probe, 2),
        round(seconds, 1),
    ]


def main() -> None:
    ap = options(__doc__ or "")
    ap.add_argument(
        "--tau", type=positive_float, help="contrastive temperature (default: the config's)"
    )
    args = ap.parse_args()
    p, data, note = load(args.dataset, {"lr": args.lr, "epochs": args.epochs, "tau": args.tau})
    rows, trace = [], []
    for seed in args.seeds:
        for lam in args.lams if args.lams is not None else [p.lam]:
            t0 = time.perf_counter()
            parts = build(p, data, args.setting, seed, "C")
            run = measure(p, parts, data[3], lam, args.every, f"seed {seed} λ {lam:g}")
            est = None
            if args.estimator:
                est = estimator(p, data, args.setting, lam, seed, "C")
                print(f"seed {seed} λ {lam:g}: APFed.fit test accuracy {est:.2f} %", flush=True)
            key = [args.setting, seed, lam, p.tau]
            rows.append(_summary_row(key, run, est, time.perf_counter() - t0))
            trace += [[*key, *(num(r[k]) for k in TRACE_KEYS)] for r in run.trace]
    what = (
        f"{args.dataset} {args.setting} (configs/{CONFIGS[args.dataset]}: {note}), "
        f"lr {p.lr}, {p.epochs} epochs, batch {p.batch_size}, τ {p.tau}"
    )
    tables = [
        {
            "title": f"APFed-C's plain loop per seed — {what}",
            "columns": SUMMARY_COLUMNS,
            "rows": rows,
            "note": "g_A, g_c: norms of ∂L_A/∂h_A and Σ_p λ ∂L_p/∂h_A at step 0; coh: "
            "‖Σ_i g_i‖ / Σ_i ‖g_i‖ over the samples' gradients on h_A; shrink: cosine of "
            "Σ_i g_c,i with Σ_i h_A,i; θ g_A, θ g_c: "
            "of the gradients they put on f_A's parameters; dead: the fraction of h_A's units "
            "0 on every sample of the batch; h_norm: mean ‖h_A,i‖; pos, neg_aa: mean cosine of the positive pairs "
            "(h_A_i, h_p_i) and of the active negatives (h_A_i, h_A_j); class gap: mean cosine "
            "of h_A over same-class minus different-class pairs; rank: effective rank of the "
            "batch's normalised h_A (end: the last batch); escape: the first step with "
            f"L_A < {ESCAPE}; APFed.fit: the estimator with the same seed (--estimator); probe: "
            "a logistic regression on h_A (train strips → test strips), of the initial and "
            "of the trained f_A.",
        },
    ]
    if not args.no_trace:
        columns = ["setting", "seed", "λ", "τ", *TRACE_KEYS]
        tables.append({"title": f"Trace — {what}", "columns": columns, "rows": trace})
    write_record(args.json, f"Why APFed-C falls under SingleVL: {what}", tables)


if __name__ == "__main__":
    run_cli(main)
