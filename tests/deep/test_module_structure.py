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


class _Factories:
    """A module of factories on the path whose activation can be edited after a fit, as a
    user edits theirs: ``ACT`` in ``code`` is ``Tanh`` first."""

    def __init__(self, tmp_path, monkeypatch, name: str, code: str) -> None:
        self.file, self.name, self.code, self.mp = tmp_path / f"{name}.py", name, code, monkeypatch
        self.file.write_text(code.replace("ACT", "Tanh"))
        monkeypatch.syspath_prepend(str(tmp_path))

    def edit(self) -> None:
        import sys

        self.file.write_text(self.code.replace("ACT", "Sigmoid"))
        self.mp.delitem(sys.modules, self.name)


def test_a_saved_apfed_refuses_a_head_factory_that_now_builds_another_network(
    tmp_path, monkeypatch
):
    """APFed's estimator kept torch state dicts, checked by names and shapes only: a head
    factory edited after the fit (``Tanh`` to ``Sigmoid``) loaded and predicted otherwise."""
    from fedviews.deep import APFed

    code = (
        "import math\nfrom torch import nn\n\n\ndef head(shape, n):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 8), nn.ACT(), "
        "nn.Linear(8, n))\n"
    )
    factories = _Factories(tmp_path, monkeypatch, "heads_zz", code)
    rng = np.random.default_rng(0)
    X, y = rng.random((48, 28, 28)).astype(np.float32), np.arange(48) % 3
    kw = {"epochs": 1, "batch_size": 16, "device": "cpu", "random_state": 3}
    est = APFed(m=2, i=1, head="heads_zz:head", **kw).fit(X, y)
    est.save(tmp_path / "m")
    again = APFed.load(tmp_path / "m")
    np.testing.assert_array_equal(again.predict(X), est.predict(X))
    factories.edit()
    with pytest.raises(DataError, match=r"'net' was saved from another network.*Tanh.*Sigmoid"):
        APFed.load(tmp_path / "m")


def test_a_saved_multivfl_refuses_a_top_factory_that_now_builds_another_network(
    tmp_path, monkeypatch
):
    """Multi-VFL's estimator kept the label owners' tops as torch state dicts (shapes
    checked only; the bottoms carried their structure already)."""
    from fedviews.deep.multivfl import MultiVFL

    code = (
        "import math\nfrom torch import nn\n\n\ndef top(shape, n):\n"
        "    return nn.Sequential(nn.Linear(math.prod(shape), 8), nn.ACT(), nn.Linear(8, n))\n"
    )
    factories = _Factories(tmp_path, monkeypatch, "tops_zz", code)
    rng = np.random.default_rng(0)
    Xs = [rng.random((48, 6)).astype(np.float32), rng.random((48, 5)).astype(np.float32)]
    y = np.arange(48) % 3
    kw = {"n_data_owners": 2, "rounds": 1, "batch_size": 16, "device": "cpu", "verbose": False}
    est = MultiVFL(top="tops_zz:top", random_state=3, **kw).fit(Xs, y)
    est.save(tmp_path / "m")
    again = MultiVFL.load(tmp_path / "m")
    np.testing.assert_array_equal(again.predict(Xs), est.predict(Xs))
    factories.edit()
    with pytest.raises(
        DataError, match=r"label_owner_0: checkpointed 'top' was saved from another network"
    ):
        MultiVFL.load(tmp_path / "m")


def test_a_saved_sfedmv_refuses_an_extractor_factory_that_now_builds_another_network(
    tmp_path, monkeypatch
):
    """S-FedMV's estimator kept its extractors as torch state dicts (shapes checked only)."""
    from fedviews.deep import SFedMV

    code = (
        "import torch\nfrom torch import nn\n\n\nclass Mean(nn.Module):\n"
        "    def __init__(self, c):\n        super().__init__()\n"
        "        self.lin, self.act = nn.Linear(c, 4), nn.ACT()\n\n"
        "    def forward(self, x, lengths):\n        return self.act(self.lin(x)).mean(1)\n\n\n"
        "def extractor(c, view):\n    return Mean(c)\n"
    )
    factories = _Factories(tmp_path, monkeypatch, "extractors_zz", code)
    rng = np.random.default_rng(0)

    def client(n: int) -> tuple[list[list[np.ndarray]], np.ndarray]:
        views = [[rng.random((5, c)).astype(np.float32) for _ in range(n)] for c in (3, 2)]
        return views, np.arange(n) % 3

    clients = [client(24), client(24)]
    kw = {"n_rounds": 1, "local_epochs": 1, "batch_size": 8, "fusion_rounds": 2, "device": "cpu"}
    est = SFedMV(extractor="extractors_zz:extractor", random_state=3, **kw).fit(clients)
    est.save(tmp_path / "m")
    again = SFedMV.load(tmp_path / "m")
    np.testing.assert_array_equal(again.predict(clients[0][0]), est.predict(clients[0][0]))
    factories.edit()
    with pytest.raises(
        DataError,
        match=r"view 0's saved extractor: checkpointed 'extractor' was saved from another",
    ):
        SFedMV.load(tmp_path / "m")
