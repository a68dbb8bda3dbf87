"""No host synchronisation and no host-to-device copy per batch in the deep algorithms' training
loops (issue #33): on a GPU each one stalls the device once per batch. Counted on a CPU
(``_syncs.py``) over a fit of 4 and of 8 batches: the counts must not grow with the batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _syncs import host_traffic  # noqa: E402

from fedviews.deep import TVFL, APFed, SingleVL, SplitNN  # noqa: E402
from fedviews.deep.multivfl import MultiVFL  # noqa: E402
from fedviews.deep.sfedmv.nets import (  # noqa: E402
    BiGRUExtractor,
    make_extractor,
    new_rng_state,
    train_epochs,
)
from fedviews.deep.sfedmv.protocol import GRUConfig  # noqa: E402

BATCH = 8
_rng = np.random.default_rng(0)
IMAGES = _rng.integers(0, 256, (8 * BATCH, 28, 28), dtype=np.uint8)
Y = np.arange(8 * BATCH) % 4

FITS: dict[str, Callable[[int], Any]] = {
    "APFed-R": lambda n: APFed(variant="R", epochs=1, batch_size=BATCH).fit(IMAGES[:n], Y[:n]),
    "APFed-C": lambda n: APFed(variant="C", epochs=1, batch_size=BATCH).fit(IMAGES[:n], Y[:n]),
    "SingleVL": lambda n: SingleVL(epochs=1, batch_size=BATCH).fit(IMAGES[:n], Y[:n]),
    "TVFL": lambda n: TVFL(epochs=1, batch_size=BATCH).fit(IMAGES[:n], Y[:n]),
    "split NN": lambda n: SplitNN(n_parties=4, epochs=1, batch_size=BATCH).fit(IMAGES[:n], Y[:n]),
    "Multi-VFL": lambda n: MultiVFL(
        n_data_owners=2, n_label_owners=1, rounds=1, batch_size=BATCH, evaluate=False
    ).fit(IMAGES[:n], Y[:n], label_owner_ids=[np.arange(n)]),
}


@pytest.mark.parametrize("method", list(FITS))
def test_a_training_epoch_neither_syncs_nor_uploads_per_batch(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fit = FITS[method]
    fit(2 * BATCH)  # what a first fit of the process does once
    four = host_traffic(monkeypatch, lambda: fit(4 * BATCH))
    eight = host_traffic(monkeypatch, lambda: fit(8 * BATCH))
    assert eight == four
    assert sum(four[0].values()) > 0  # counted: the epoch's loss is read once


def test_s_fedmv_local_training_does_not_sync_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """S-FedMV's local epochs read their loss once per epoch. Not counted: its GRU on packed
    sequences, whose lengths and batch sizes PyTorch keeps on the host, and the uploads (its
    batches of variable-length sequences are padded on the host)."""
    lengths = _rng.integers(3, 9, 8 * BATCH)
    seqs = [_rng.normal(size=(t, 3)).astype(np.float32) for t in lengths]
    cfg = GRUConfig(hidden_size=4)

    def local(n: int) -> float:
        model = make_extractor(3, 4, cfg, seed=0)
        opt = torch.optim.RMSprop(model.parameters(), lr=cfg.lr)
        return train_epochs(model, opt, seqs[:n], Y[:n], 1, BATCH, new_rng_state(0), "cpu")

    local(2 * BATCH)
    lengths_on_host = [(BiGRUExtractor, "embed")]
    four, _ = host_traffic(monkeypatch, lambda: local(4 * BATCH), lengths_on_host)
    eight, _ = host_traffic(monkeypatch, lambda: local(8 * BATCH), lengths_on_host)
    assert eight == four
    assert sum(four.values()) > 0
