"""What the tests of ``benchmarks/apfed_collapse.py`` and ``apfed_c_collapse.py`` share."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_bench(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """The benchmark script ``benchmarks/NAME.py``, imported as its siblings import it (by
    name: its dataclasses need their module in ``sys.modules``)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def bands() -> tuple[np.ndarray, ...]:
    """120 + 40 images of 10 classes (a bright band per class), 28 rows as MNIST's."""
    rng = np.random.default_rng(0)
    y = np.tile(np.arange(10), 16)
    X = rng.random((160, 28, 28)).astype(np.float32) * 0.3
    for c in range(10):
        X[y == c, :, 2 * c : 2 * c + 4] += 0.7
    return X[:120], y[:120], X[120:], y[120:]
