"""One optimiser step for the parties of one process (deep/_fusedstep.py): equal, bit for
bit on a CPU, to every party's own step, and only where it can be."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fusedspy import joint_calls, state_tensors  # noqa: E402
from torch.utils.hooks import RemovableHandle  # noqa: E402

from fedviews.deep import _fusedstep  # noqa: E402
from fedviews.deep._fusedstep import (  # noqa: E402
    OptimizerStep,
    step_together,
    stepping_with_staged,
)
from fedviews.errors import FedViewsError  # noqa: E402

SGD, Adam = torch.optim.SGD, torch.optim.Adam
SETTINGS = [
    (SGD, {"lr": 0.05}),
    (SGD, {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}),
    (SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "maximize": True}),
    (SGD, {"lr": 0.05, "momentum": 0.5, "dampening": 0.3}),
    (Adam, {"lr": 1e-2}),
    (Adam, {"lr": 1e-2, "betas": (0.8, 0.9), "weight_decay": 0.01, "amsgrad": True}),
    (Adam, {"lr": 1e-2, "weight_decay": 0.01, "decoupled_weight_decay": True}),
]


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _parties(n: int = 3, device: str = "cpu") -> list[Any]:
    """``n`` parties' networks of different shapes, each with its own initial weights."""
    torch.manual_seed(0)
    return [
        torch.nn.Sequential(torch.nn.Linear(5 + i, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)).to(
            device
        )
        for i in range(n)
    ]


def _grads(nets: list[Any], step: int) -> None:
    """Seeded gradients of every parameter (the same for copies of the same networks)."""
    gen = torch.Generator().manual_seed(step)
    for net in nets:
        for p in net.parameters():
            p.grad = torch.randn(p.shape, generator=gen).to(p.device)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize(("cls", "kw"), SETTINGS)
def test_one_step_together_equals_every_optimisers_own_step(cls, kw, device, monkeypatch) -> None:
    """Five steps of three parties' optimisers as one multi-tensor step leave every
    parameter and state tensor bit for bit as each optimiser's own step (the for-loop on a
    CPU, the multi-tensor form on CUDA); the first step, which creates the state, is each
    one's own."""
    calls = joint_calls(monkeypatch)
    alone, fused = _parties(device=device), _parties(device=device)
    opts_alone = [cls(n.parameters(), **kw) for n in alone]
    opts_fused = [cls(n.parameters(), **kw) for n in fused]
    for step in range(5):
        _grads(alone, step)
        _grads(fused, step)
        for opt in opts_alone:
            opt.step()
        step_together([OptimizerStep(opt) for opt in opts_fused])
    stateless = cls is SGD and not kw.get("momentum")
    assert calls == [12] * (5 if stateless else 4)  # 3 networks of 4 parameters each
    for a, b in zip(state_tensors(opts_alone), state_tensors(opts_fused), strict=True):
        assert torch.equal(a, b)
    for opt in opts_fused:  # each keeps its own state, as its own step leaves it
        assert set(opt.state) <= set(opt.param_groups[0]["params"])
        assert opt.state_dict()["param_groups"] == opts_alone[0].state_dict()["param_groups"]


def test_only_optimisers_that_share_type_and_hyper_parameters_step_together(monkeypatch) -> None:
    """A joint step takes the optimisers of one type and one set of hyper-parameters; the
    others step alone (their own ``step()``): another learning rate, a step hook, a
    parameter without a gradient is left out, and the result stays each one's own."""
    calls = joint_calls(monkeypatch)
    alone, fused = _parties(6), _parties(6)

    def build(nets: list[Any]) -> list[Any]:
        opts = [SGD(n.parameters(), lr=0.1, momentum=0.9) for n in nets[:3]]
        opts.append(SGD(nets[3].parameters(), lr=0.2, momentum=0.9))
        opts.append(torch.optim.AdamW(nets[4].parameters()))
        opts.append(SGD(nets[5].parameters(), lr=0.1, momentum=0.9))
        opts[5].register_step_post_hook(lambda *a: None)
        return opts

    opts_alone, opts_fused = build(alone), build(fused)
    for step in range(3):
        _grads(alone, step)
        _grads(fused, step)
        for nets in (alone, fused):
            nets[2][2].bias.grad = None  # a parameter without a gradient is not stepped
        for opt in opts_alone:
            opt.step()
        step_together([OptimizerStep(opt) for opt in opts_fused])
    assert calls == [11, 4, 11, 4]  # the first three together, the fourth its own
    for a, b in zip(state_tensors(opts_alone), state_tensors(opts_fused), strict=True):
        assert torch.equal(a, b)


def test_a_waiting_optimiser_steps_with_the_first_staged_step_else_at_the_end(monkeypatch) -> None:
    """An optimiser waiting in a block (a label owner's, its gradients computed before it
    scatters) joins the first staged step that runs in it (one multi-tensor step), else steps
    alone at its end: once either way, bit for bit as its own ``step()``; not where the block
    fails; a staged step of its own is a step of its own."""
    calls = joint_calls(monkeypatch)
    alone, fused = _parties(), _parties()
    opts_alone = [SGD(n.parameters(), lr=0.1, momentum=0.9) for n in alone]
    opts_fused = [SGD(n.parameters(), lr=0.1, momentum=0.9) for n in fused]
    for step in range(4):
        _grads(alone, step)
        _grads(fused, step)
        for opt in opts_alone:
            opt.step()
        with stepping_with_staged(opts_fused[:1]):
            if step % 2:  # the others' staged step takes the waiting one with it
                step_together([OptimizerStep(opt) for opt in opts_fused[1:]])
            else:  # none staged (the parties remote): it steps when the block ends
                for opt in opts_fused[1:]:
                    opt.step()
    # (the first step creates the states) 3 x 4 parameters as one; the first alone at the end
    assert calls == [12, 4, 12]
    for a, b in zip(state_tensors(opts_alone), state_tensors(opts_fused), strict=True):
        assert torch.equal(a, b)
    before = [t.clone() for t in state_tensors(opts_fused)]
    with pytest.raises(RuntimeError, match="failed"), stepping_with_staged(opts_fused[:1]):
        raise RuntimeError("the scatter failed")
    for a, b in zip(before, state_tensors(opts_fused), strict=True):
        assert torch.equal(a, b)
    calls.clear()
    with stepping_with_staged(opts_fused[:1]):
        step_together([OptimizerStep(opts_fused[0])])
    assert calls == [4, 4]  # the staged step its own, then the waiting one
    opts_alone[0].step()
    opts_alone[0].step()
    for a, b in zip(state_tensors(opts_alone), state_tensors(opts_fused), strict=True):
        assert torch.equal(a, b)


def test_a_staged_split_nn_epoch_takes_the_joint_step_and_equals_the_unstaged_one(
    monkeypatch,
) -> None:
    """In a split NN run in one process, every party's optimiser (the label owner's too) steps
    as one after their first batch, and every party ends bit for bit as in the run without
    staging (one backward pass and one step of its own per passive party)."""
    import numpy as np

    from fedviews.data import PartyData
    from fedviews.deep.splitnn.spec import SplitNNParams
    from fedviews.federation import InProcessTransport, Roster, RunSpec, build_in_process

    rng = np.random.default_rng(0)
    images, y = rng.random((200, 28, 28)).astype(np.float32), rng.integers(0, 3, 200)
    names = ["p0", "p1", "p2", "a"]
    strips = np.array_split(images, 4, axis=1)
    ids = np.arange(len(y))

    def run(batch_backward: bool) -> dict[str, list[Any]]:
        datas = {n: PartyData(ids, s) for n, s in zip(names, strips, strict=True)}
        datas["a"] = PartyData(ids, strips[-1], y)
        params = SplitNNParams(epochs=2, batch_size=32, evaluate=False)
        spec = RunSpec("splitnn", params, Roster(tuple(names), label_owner="a"))
        fed = build_in_process(
            spec, datas, transport=lambda p: InProcessTransport(p, batch_backward=batch_backward)
        )
        fed()
        return {n: state_tensors([fed.parties[n].opt]) for n in names}

    calls = joint_calls(monkeypatch)
    staged = run(True)
    # 7 batches an epoch; after the first (each optimiser's own step creates its momentum
    # buffers) the label owner's step (4 parameters) with the passive parties' (3 x 4) as one
    assert calls == [16] * (2 * 7 - 1)
    calls.clear()
    unstaged = run(False)
    # every passive party's own; the label owner's with the first of them
    assert calls == [8, 4, 4] * (2 * 7 - 1)
    for n in names:
        for a, b in zip(staged[n], unstaged[n], strict=True):
            assert torch.equal(a, b)


def test_an_optimiser_with_a_global_step_hook_steps_alone(monkeypatch) -> None:
    """While a global step hook is registered, every optimiser steps by its own ``step()``
    (which runs the hook); without it they step together."""
    calls = joint_calls(monkeypatch)
    nets = _parties(2)
    opts = [SGD(n.parameters(), lr=0.1) for n in nets]
    seen: list[Any] = []
    handle = _fusedstep.torch_optimizer.register_optimizer_step_pre_hook(
        lambda o, *_: seen.append(o)
    )
    try:
        _grads(nets, 0)
        step_together([OptimizerStep(opt) for opt in opts])
    finally:
        handle.remove()
    assert calls == [] and seen == opts
    _grads(nets, 1)
    step_together([OptimizerStep(opt) for opt in opts])
    assert calls == [8] and seen == opts


@pytest.mark.parametrize("renamed", [*_fusedstep.OWN_HOOKS, *_fusedstep.GLOBAL_HOOKS])
def test_a_torch_that_keeps_its_step_hooks_elsewhere_is_a_clear_error(renamed, monkeypatch):
    """torch has no public way to ask whether an optimiser has step hooks: where a torch
    keeps them under another private name than the joint step reads, the check (run at
    a process's first step) says so by name instead of letting joint steps skip hooks."""
    opt = SGD(_parties(1)[0].parameters(), lr=0.1)
    _fusedstep.check_hook_tables(opt)  # this torch: where they are looked for
    kind = renamed.split("_")[-2]  # pre, post
    table: OrderedDict[int, Any] = OrderedDict()  # where this torch's register_* puts hooks

    def register(hook: Any) -> Any:
        handle = RemovableHandle(table)
        table[handle.id] = hook
        return handle

    if renamed in _fusedstep.GLOBAL_HOOKS:
        monkeypatch.setattr(
            _fusedstep.torch_optimizer, f"register_optimizer_step_{kind}_hook", register
        )
    else:
        monkeypatch.setattr(
            torch.optim.Optimizer, f"register_step_{kind}_hook", lambda _, h: register(h)
        )
    with pytest.raises(FedViewsError, match=f"step hooks in [a-z.A-Z]*{renamed}, where"):
        _fusedstep.check_hook_tables(opt)
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    monkeypatch.setattr(_fusedstep, "_HOOKS_CHECKED", False)  # a process's first step
    with pytest.raises(FedViewsError, match=renamed):
        step_together([OptimizerStep(opt)])
