"""Where a reproduction ran: the record's ``machine`` (CPU, cores, GPU, library versions)
and what of it can move a run's numbers."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

__all__ = ["machine", "machine_changes"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: str) -> dict[str, Any]:
    """Where a run ran: CPU model and cores (the ones this process may use), GPU, OS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = "none"
    if device != "cpu":
        try:
            import torch

            if torch.cuda.is_available():
                gpu = torch.cuda.get_device_name(0)
        except ImportError:
            pass
    out: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": cores,
        "gpu": gpu,
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
    }
    for lib in ("numpy", "torch"):
        try:
            out[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


#: what a record's ``machine`` says that can move a run's last digits
_COMPUTE_KEYS = ("cpu", "cores", "gpu", "numpy", "torch")


def machine_changes(committed: Any, now: dict[str, Any]) -> list[str]:
    """How ``now`` (:func:`machine`) differs from a record's ``machine`` in what can move a
    run's numbers (CPU model, cores, GPU, numpy and torch versions; a key that the record
    lacks is not compared): ``["cpu: AMD EPYC -> Intel Xeon", ...]``."""
    if not isinstance(committed, dict):
        return []
    return [
        f"{k}: {committed[k]} -> {now[k]}"
        for k in _COMPUTE_KEYS
        if k in committed and k in now and str(committed[k]) != str(now[k])
    ]
