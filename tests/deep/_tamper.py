"""What a dishonest party's tampered array looks like, whether it sends numpy or tensors."""

from __future__ import annotations

from typing import Any

import numpy as np


def tampered(a: Any, bad: Any) -> Any:
    """``a`` cast to dtype ``bad`` (a name such as ``"int64"``) or filled with the value
    ``bad``; a tensor (split learning sends them) stays a tensor, detached from its graph."""
    import torch

    if isinstance(a, torch.Tensor):
        a = a.detach()
        return a.to(getattr(torch, bad)) if isinstance(bad, str) else torch.full_like(a, bad)
    return a.astype(bad) if isinstance(bad, str) else np.full_like(a, bad)
