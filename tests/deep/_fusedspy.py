"""Spying on the joint optimiser step (deep/_fusedstep.py): which multi-tensor steps ran,
and what the optimisers hold after them."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fedviews.deep import _fusedstep


def joint_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often the joint step ran torch's multi-tensor SGD or Adam, and on how many
    parameters."""
    calls: list[int] = []
    for name in ("sgd", "adam"):
        real = getattr(_fusedstep, name)

        def spy(params: Any, *args: Any, real: Any = real, **kw: Any) -> None:
            assert kw["foreach"] is True
            calls.append(len(params))
            real(params, *args, **kw)

        monkeypatch.setattr(_fusedstep, name, spy)
    return calls


def state_tensors(opts: list[Any]) -> list[Any]:
    """Every parameter and every state tensor of ``opts``, in order."""
    out = []
    for opt in opts:
        for p in opt.param_groups[0]["params"]:
            out.append(p)
            out.extend(v for _, v in sorted(opt.state[p].items()) if torch.is_tensor(v))
    return out
