"""Plain JSON values from results: numpy scalars and arrays, paths, dataclasses."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np


def to_jsonable(obj: Any) -> Any:
    """Convert ``obj`` recursively into values :func:`json.dumps` accepts.

    Parameters
    ----------
    obj : Any
        Dicts (keys become strings), lists and tuples, numpy arrays and
        scalars, paths, dataclass instances, or plain JSON values.

    Returns
    -------
    Any
        The same structure built from dicts, lists, strings, numbers, booleans
        and ``None``; NaN and infinite floats become ``None``.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    return obj
