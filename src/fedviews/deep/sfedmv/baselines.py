"""S-FedMV's baselines of the paper's Table 3 that train extractors without a federation.

``extractors="local"`` (every client alone, from its own initial GRUs) and
``"centralized"`` (one holder of the pooled sequences): :func:`train_local_extractors`
with the same seeds and schedule as the federated stage 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedviews.deep._common import require_torch, resolve_device
from fedviews.deep.sfedmv.nets import Extractor, make_extractor, new_rng_state, train_epochs
from fedviews.deep.sfedmv.parties import RoundCallback
from fedviews.deep.sfedmv.protocol import GRUConfig, view_seeds

__all__ = ["train_local_extractors"]

torch = require_torch()


def train_local_extractors(
    views: list[list[np.ndarray]],
    y: np.ndarray,
    n_classes: int,
    cfg: GRUConfig,
    *,
    random_state: int | None = 0,
    client_index: int = 0,
    device: Any = "cpu",
    on_round: RoundCallback | None = None,
    report_as: int | None = None,
    own_init: bool = False,
) -> list[Extractor]:
    """One data holder trains its per-view extractors alone (no messages).

    ``n_rounds * local_epochs`` epochs with one persistent RMSProp per view and
    the RNG streams of client ``client_index`` of the federation. The initial
    GRU is the federation server's (``own_init=False``: FedAvg with one client
    then gives exactly this result) or drawn from the holder's own stream
    (``own_init=True``: clients that never talk start from unrelated GRUs).
    ``on_round(view, t, report_as, model)`` is called every ``local_epochs`` epochs.
    """
    cfg.validate()
    dev = resolve_device(device) if isinstance(device, str) else device
    models = []
    for k, seqs in enumerate(views):
        init_seed, seed = view_seeds(random_state, k, client_index)
        model = make_extractor(
            seqs[0].shape[1], n_classes, cfg, seed + 1 if own_init else init_seed
        ).to(dev)
        opt = torch.optim.RMSprop(model.parameters(), lr=cfg.lr)
        rng = new_rng_state(seed)
        for t in range(1, cfg.n_rounds + 1):
            train_epochs(model, opt, seqs, y, cfg.local_epochs, cfg.batch_size, rng, dev)
            if on_round is not None:
                on_round(k, t, report_as, model)
        models.append(model)
    return models
