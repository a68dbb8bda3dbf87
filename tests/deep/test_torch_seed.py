"""``torch_seed``: a seeded block draws the same whether or not other threads of the process
draw at the same time (parties hosted together, e.g. in one Flower simulation actor)."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from fedviews.deep._common import torch_seed  # noqa: E402


def _draws(seed: int, n: int = 50) -> list[float]:
    out = []
    with torch_seed(seed):
        for _ in range(n):  # many small draws: another thread gets many chances to interleave
            out.append(float(torch.rand(1)))
            time.sleep(0.001)  # let the other threads run
    return out


def test_seeded_blocks_on_threads_draw_as_alone():
    alone = {s: _draws(s) for s in range(6)}
    got: dict[int, list[float]] = {}
    start = threading.Barrier(6)

    def run(s: int) -> None:
        start.wait()
        got[s] = _draws(s)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone
    before = torch.get_rng_state()
    _draws(1)
    assert torch.equal(torch.get_rng_state(), before)  # the global state is restored
