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


def test_a_saved_apfed_refuses_a_head_factory_that_now_builds_another_network(
    tmp_path, monkeypatch
):
    """APFed's estimator kept torch state dicts, checked by names and shapes only: a head
    factory edited after the fit (``Tanh`` to ``Sigmoid``) loaded and predicted otherwise."""
    import sys

    from fedviews.deep import APFed

    mod = tmp_path / "heads_zz.py"
    code = (
        "import math\nfrom torch import nn\n\n\ndef head(shape, n):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 8), nn.ACT(), "
        "nn.Linear(8, n))\n"
    )
    mod.write_text(code.replace("ACT", "Tanh"))
    monkeypatch.syspath_prepend(str(tmp_path))
    rng = np.random.default_rng(0)
    X, y = rng.random((48, 28, 28)).astype(np.float32), np.arange(48) % 3
    kw = {"epochs": 1, "batch_size": 16, "device": "cpu", "random_state": 3}
    est = APFed(m=2, i=1, head="heads_zz:head", **kw).fit(X, y)
    est.save(tmp_path / "m")
    again = APFed.load(tmp_path / "m")
    np.testing.assert_array_equal(again.predict(X), est.predict(X))
    mod.write_text(code.replace("ACT", "Sigmoid"))
    monkeypatch.delitem(sys.modules, "heads_zz")
    with pytest.raises(DataError, match=r"'net' was saved from another network.*Tanh.*Sigmoid"):
        APFed.load(tmp_path / "m")
