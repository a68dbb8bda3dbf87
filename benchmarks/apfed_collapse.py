"""Why APFed-R collapses to chance at lr 0.03: its math in a plain loop, with diagnostics.

MNIST 2-1 (the active client holds the top 14 rows and the labels, the passive
client the bottom 14), the paper's Table 3 networks and optimiser (SGD, momentum
0.9, weight decay 1e-4, batch 64), APFed-R with the per-sample L2 reconstruction
loss of Eq. 12 and λ (Eq. 8-10, as :mod:`fedviews.deep.apfed` computes them). Every
10 steps it prints ``L_A``, ``L_p``, the norms of ``∂L_A/∂h_A`` and
``λ ∂L_p/∂h_A`` (what the active encoder receives from each side), the fraction of
``h_A`` that is exactly 0 (dead ReLUs of ``f_A``), the fraction of the decoder's
hidden units that are 0 and the mean bias of ``f_A``'s last convolution; after every
epoch the active client's test accuracy (Eq. 11). ``--lam 0`` is SingleVL. ``--json PATH``
also writes both as tables (``benchmarks/_record.py``), from which ``docs/algorithms/apfed.md``
quotes its numbers.

    python benchmarks/apfed_collapse.py --lr 0.03 --lam 1 --epochs 1
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _record import json_option, write_record
from sklearn.model_selection import train_test_split
from torch.nn import functional as F

from fedviews import data
from fedviews.deep._apfed_nets import ARCHS, ActiveNet, Decoder, cut_strips
from fedviews.deep.apfed import reconstruction_loss

#: what the loop records every 10 steps
STEP_COLUMNS = [
    "epoch",
    "step",
    "L_A",
    "L_p",
    "|dL_A/dh_A|",
    "|λ dL_p/dh_A|",
    "h_A == 0",
    "decoder hidden == 0",
    "f_A conv2 bias mean",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, default=0.03)
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=3000)
    ap.add_argument("--recon-loss", default="l2", choices=["l2", "mse"])
    ap.add_argument("--seed", type=int, default=0)
    json_option(ap)
    args = ap.parse_args()
    torch.set_num_threads(1)

    ds = data.load("mnist")  # the split of configs/apfed_table2_mnist.toml
    assert ds.images is not None
    img = ds.images.astype(np.float32)[:, None] / 255.0
    tr, te = train_test_split(np.arange(len(img)), test_size=0.2, stratify=ds.y, random_state=0)
    tr, _ = train_test_split(tr, train_size=args.n_train, stratify=ds.y[tr], random_state=0)
    xa, xp = (torch.tensor(s) for s in cut_strips(img[tr], 2))
    xa_test, y_test = torch.tensor(cut_strips(img[te], 2)[0]), ds.y[te]
    y = torch.tensor(ds.y[tr]).long()

    torch.manual_seed(args.seed)
    spec = ARCHS["table3"]
    active, decoder = ActiveNet.paper(spec, (14, 28), 10), Decoder(spec, (14, 28))
    sgd = {"lr": args.lr, "momentum": 0.9, "weight_decay": 1e-4}
    opt_a = torch.optim.SGD(active.parameters(), **sgd)
    opt_p = torch.optim.SGD(decoder.parameters(), **sgd)
    hidden: list[torch.Tensor] = []
    decoder.deconvs[0].register_forward_hook(lambda _m, _i, out: hidden.append(out.detach()))
    rng = np.random.default_rng(args.seed)
    step = 0
    steps: list[list[float | int]] = []
    accuracies: list[list[float | int]] = []
    for epoch in range(args.epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(y), 64):
            idx = torch.tensor(order[start : start + 64])
            h = active.encoder(xa[idx])
            h_head = h.detach().requires_grad_(True)
            loss_a = F.cross_entropy(active.head(h_head), y[idx])
            h_p = h.detach().requires_grad_(True)  # what the passive client receives
            hidden.clear()
            loss_p = reconstruction_loss(decoder(h_p), xp[idx], args.recon_loss)
            opt_a.zero_grad()
            opt_p.zero_grad()
            loss_p.backward()
            loss_a.backward()
            assert h_head.grad is not None and h_p.grad is not None
            g_a, g_p = h_head.grad, args.lam * h_p.grad
            h.backward(g_a + g_p)  # Eq. 9: the active encoder gets both
            opt_a.step()
            opt_p.step()
            if step % 10 == 0:
                row = [
                    epoch,
                    step,
                    round(loss_a.item(), 3),
                    round(loss_p.item(), 3),
                    round(float(g_a.norm()), 4),
                    round(float(g_p.norm()), 4),
                    round(float((h == 0).float().mean()), 3),
                    round(float((F.relu(hidden[0]) == 0).float().mean()), 3),
                    round(float(active.encoder.get_parameter("convs.1.bias").detach().mean()), 3),
                ]
                steps.append(row)
                print(
                    "  ".join(f"{c} {v}" for c, v in zip(STEP_COLUMNS, row, strict=True)),
                    flush=True,
                )
            step += 1
        with torch.no_grad():
            acc = float((active(xa_test).argmax(1).numpy() == y_test).mean())
        accuracies.append([epoch, round(100 * acc, 2)])
        print(f"epoch {epoch}: test accuracy {acc:.4f}", flush=True)
    title = f"APFed-R in a plain loop, lr {args.lr:g}, λ {args.lam:g}, {args.recon_loss} loss"
    write_record(
        args.json,
        title,
        [
            {"title": "every 10 steps", "columns": STEP_COLUMNS, "rows": steps},
            {
                "title": "after each epoch",
                "columns": ["epoch", "test accuracy %"],
                "rows": accuracies,
            },
        ],
    )


if __name__ == "__main__":
    main()
