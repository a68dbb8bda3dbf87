"""Parties that train with a torch optimizer pay its one-time import when they are built.

The first ``torch.optim`` optimizer a process builds imports ``torch._dynamo`` (about a
CPU-second). In one process that happens once; a deployed party that built its first
optimizer inside round 1 paid it in the timed training (Multi-VFL's label owners did).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import torch

    from fedviews.deep.multivfl import LabelOwner, build_models
    from fedviews.deep.sfedmv import SequenceClient
    from fedviews.deep.sfedmv.protocol import GRUConfig

    assert "torch._dynamo" not in sys.modules, "imported before any party was built"
    if sys.argv[1] == "multivfl":
        _, top = build_models([7, 7], 28, 10, random_state=0)
        LabelOwner("lo", np.zeros(4, np.int64), top, {"a": (32, 7, 28), "b": (32, 7, 28)}, batch_size=2,
                   local_epochs=1, local_optimizer="sgd", lr=0.1, device=torch.device("cpu"))
    else:
        views = [[np.zeros((5, 3), np.float32)] * 4]
        SequenceClient("c", views, np.zeros(4, np.int64), 2, GRUConfig(), [1],
                       torch.device("cpu"))
    print("torch._dynamo" in sys.modules)
    """
)


@pytest.mark.parametrize("algorithm", ["multivfl", "sfedmv"])
def test_building_a_party_pays_the_first_optimizer_import(algorithm: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, algorithm], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
