"""Counting, on a CPU, what would stall a GPU: host synchronisations and host-to-device copies.

On a CPU no copy happens, so they are counted where they are asked for: a read of a tensor's
value on the host (``item``, ``float``, ``bool``, ``tolist``, ``numpy``, ``cpu``: every path
to ``aten::_local_scalar_dense`` included) is a *sync*; a tensor made from host data
(``torch.as_tensor``/``tensor``/``from_numpy`` of a numpy array or a list) or a tensor indexed
with host indices is an *upload*. A training loop that does either once per batch has counts
that grow with the number of batches.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_READS = {
    torch.Tensor.item,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.tolist,
    torch.Tensor.numpy,
    torch.Tensor.cpu,
}
_FROM_HOST = {torch.as_tensor, torch.tensor, torch.from_numpy}
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.index_select, torch.index_select}


def _host(a: Any) -> bool:
    return isinstance(a, (np.ndarray, list))


class _Counts(Counter[str]):
    """Counts by name; none while :attr:`paused`."""

    paused = False

    def add(self, name: str) -> None:
        if not self.paused:
            self[name] += 1


class _Calls(TorchFunctionMode):
    """The torch functions asked for: host reads and uploads, by name."""

    def __init__(self, counts: _Counts) -> None:
        super().__init__()
        self.counts = counts

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if func in _READS:
            self.counts.add(f"sync:{func.__name__}")
        elif func in _FROM_HOST and not isinstance(args[0], torch.Tensor):
            self.counts.add(f"upload:{func.__name__}")
        elif func in _INDEXING and any(_host(a) for a in args[1:]):
            self.counts.add(f"upload:{func.__name__}")
        return func(*args, **(kwargs or {}))


class _Ops(TorchDispatchMode):
    """The kernels run: every read of a scalar on the host, however it was asked for."""

    def __init__(self, counts: _Counts) -> None:
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if func.overloadpacket is torch.ops.aten._local_scalar_dense:
            self.counts.add("sync:aten._local_scalar_dense")
        return func(*args, **(kwargs or {}))


def host_traffic(
    monkeypatch: pytest.MonkeyPatch,
    run: Callable[[], Any],
    host_side: Sequence[tuple[Any, str]] = (),
) -> tuple[Counter[str], Counter[str]]:
    """``(syncs, uploads)`` that ``run()`` asks for, by name (the transport's own finiteness
    check of every message it delivers left out: it is the transport's, not the algorithm's;
    so are the functions in ``host_side``, ``(owner, attribute)`` pairs, which read tensors
    that live on the host by design, e.g. a GRU on packed sequences: PyTorch keeps their
    lengths and batch sizes there)."""
    for module in ("_message", "_handover"):  # decoding's check, and the in-process hand-over's
        monkeypatch.setattr(f"fedviews.federation.{module}.first_not_finite", lambda tensors: None)
    counts = _Counts()

    def uncounted(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            counts.paused = True
            try:
                return func(*args, **kwargs)
            finally:
                counts.paused = False

        return call

    for owner, name in host_side:
        monkeypatch.setattr(owner, name, uncounted(getattr(owner, name)))
    with _Calls(counts), _Ops(counts):
        run()
    syncs = Counter({k: v for k, v in counts.items() if k.startswith("sync:")})
    return syncs, counts - syncs
