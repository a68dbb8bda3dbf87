"""A network saved with its structure: loading its weights into another one is refused.

A user's factory changed after training (``nn.Tanh`` became ``nn.Sigmoid``, every shape the
same) loaded the saved weights without a word and predicted at chance, from ``load`` as from
``fedviews predict``; only a change of shape was refused.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedviews.deep._common import STRUCTURE, load_module, module_arrays  # noqa: E402
from fedviews.errors import DataError  # noqa: E402

nn = torch.nn


def _net(act: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), act(), nn.Linear(3, 2))


def test_weights_load_into_the_same_network_and_not_into_another():
    saved = module_arrays("bottom", _net(nn.Tanh))
    assert bytes(saved["bottom" + STRUCTURE]).decode() == repr(_net(nn.Tanh))
    same = _net(nn.Tanh)
    with torch.no_grad():
        for p in same.parameters():
            p.zero_()
    load_module("bottom", same, saved, "alice")
    for k, v in same.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), saved[f"bottom/{k}"])
    with pytest.raises(
        DataError,
        match=r"alice: checkpointed 'bottom' was saved from another "
        r"network.*'\(1\): Tanh\(\)' is now '\(1\): Sigmoid\(\)'",
    ):
        load_module("bottom", _net(nn.Sigmoid), saved, "alice")


def test_a_state_without_its_structure_still_loads():
    """What older versions wrote (no structure) loads as before: by names and shapes."""
    saved = module_arrays("bottom", _net(nn.Tanh))
    del saved["bottom" + STRUCTURE]
    load_module("bottom", _net(nn.Sigmoid), saved, "alice")
