"""One optimiser step for the parties of one process that step in the same batch.

Where data owners (Multi-VFL) or passive parties (split learning) share a process, the
in-process transport runs their staged backward passes as one ``torch.autograd.backward``
(:meth:`fedviews.federation.Party.stage`) and then their optimiser steps. A pass built by
:func:`staged_backward` lets the transport run those steps as one multi-tensor
(``foreach``) step over all their parameters (:func:`step_together`) instead of one
``step()`` per party: each party keeps its own optimiser object and state (what
checkpoints, ``save``/``load`` and a launched run see), only the arithmetic runs at once.
A party that steps alone (unstaged, a label owner) takes the same multi-tensor step over
its own parameters (:func:`step_optimizers`), without ``step()``'s per-call wrappers.

A label owner whose gradients are ready when it scatters their gradients to the parties it
trains with (the split NN's) steps inside the scatter (:func:`stepping_with_staged`): in
one process its optimiser joins the first staged step that runs there, one multi-tensor
step over every party's parameters instead of two; elsewhere (the parties remote, or none
staging) it steps alone when the scatter returns. Its parameters are the label owner's
own, disjoint from the others', so when it steps changes no value (the message log counts
the joint step's time in the staged parties' handlers).

The result equals the optimisers' own ``step()``: torch's SGD and Adam compute the same
element-wise operations, in the same order, in their for-loop and multi-tensor forms, and
the parameters of different optimisers never meet. On a CPU, where ``step()`` takes the
for-loop form, parameters and states are bit-identical (``tests/deep/test_fusedstep.py``);
on CUDA ``step()`` takes the multi-tensor form too. An optimiser steps by its own
``step()`` wherever the multi-tensor step could differ from it or skip something: an
optimiser other than exactly ``torch.optim.SGD`` or ``torch.optim.Adam``, step hooks (its
own or global) or a patched ``step``, a group that asks for the for-loop or the fused
form, ``differentiable`` or ``capturable``, a tensor learning rate or betas, sparse
gradients, and a state not yet created (its first step creates it lazily). torch has no
public way to ask whether an optimiser has step hooks: this reads torch's private tables of
them, and checks at a process's first step that a hook registered by torch's public API
shows up there (:func:`check_hook_tables`: a clear error, not joint steps that skip hooks,
where a torch keeps them elsewhere).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from fedviews.errors import FedViewsError, MissingDependency
from fedviews.federation import Backward

try:
    import torch
    from torch.optim import optimizer as torch_optimizer
    from torch.optim.adam import adam
    from torch.optim.sgd import sgd
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

#: where torch keeps the step hooks of an optimiser (its attributes) and the global ones
#: (``torch.optim.optimizer``'s): private names, since torch has no public way to ask whether
#: an optimiser has a step hook; :func:`check_hook_tables` checks them at the first step
OWN_HOOKS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")
GLOBAL_HOOKS = ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")

#: what this torch's functional Adam takes (it grew: ``has_complex`` in 2.2, AdamW's
#: ``decoupled_weight_decay`` later)
_ADAM_ARGS = inspect.signature(adam).parameters
_DECOUPLED = ("decoupled_weight_decay",) if "decoupled_weight_decay" in _ADAM_ARGS else ()
#: the hyper-parameters of a group that its optimiser's step reads, by optimiser type: the
#: groups of one multi-tensor step share them all
HYPER = {
    torch.optim.SGD: ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"),
    torch.optim.Adam: ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", *_DECOUPLED),
}

#: one parameter group's part of a joint step: its parameters with a gradient and their
#: states
Part = tuple[list[Any], list[Any]]


def check_hook_tables(opt: torch.optim.Optimizer) -> None:
    """Check that a step hook registered by torch's public API (on ``opt``, a global one)
    shows up where :func:`step_optimizers` looks for hooks (:data:`OWN_HOOKS`,
    :data:`GLOBAL_HOOKS`), so that an optimiser with a hook steps by its own ``step()``
    (each hook is removed again at once).

    Raises
    ------
    FedViewsError
        Naming the table, where this torch keeps them elsewhere (a renamed private name):
        a clear error, not joint steps that skip the hooks.
    """
    registers = [
        (opt.register_step_pre_hook, opt, OWN_HOOKS[0], "torch.optim.Optimizer"),
        (opt.register_step_post_hook, opt, OWN_HOOKS[1], "torch.optim.Optimizer"),
        (torch_optimizer.register_optimizer_step_pre_hook, torch_optimizer, GLOBAL_HOOKS[0], ""),
        (torch_optimizer.register_optimizer_step_post_hook, torch_optimizer, GLOBAL_HOOKS[1], ""),
    ]
    for register, holder, name, owner in registers:

        def hook(*_: Any) -> None:
            return None

        handle = register(hook)
        try:
            table = getattr(holder, name, None)
            seen = isinstance(table, dict) and any(h is hook for h in table.values())
        finally:
            handle.remove()
        if not seen:
            where = f"{owner}.{name}" if owner else f"torch.optim.optimizer.{name}"
            raise FedViewsError(
                f"torch {torch.__version__} does not keep its optimiser step hooks in {where}, "
                "where fedviews' joint optimiser step looks for them (torch has no public way "
                "to ask): fedviews.deep._fusedstep needs updating for this torch"
            )


#: whether :func:`check_hook_tables` held in this process (run once, at its first step:
#: making an optimiser to check at import would import ``torch._dynamo``, a CPU-second)
_HOOKS_CHECKED = False


@dataclass(frozen=True)
class OptimizerStep:
    """A staged pass's ``then``: one step of a party's optimiser (:func:`step_optimizers`)."""

    optimizer: torch.optim.Optimizer

    def __call__(self) -> None:
        step_optimizers(_with_waiting([self.optimizer]))


def staged_backward(output: Any, grad: Any, optimizer: torch.optim.Optimizer) -> Backward:
    """The staged backward pass of ``output`` with its received gradient ``grad``, then a
    step of ``optimizer`` (its gradients zeroed before), which the transport runs with the
    other staged parties' as one (:func:`step_together`)."""
    return Backward((output,), (grad,), OptimizerStep(optimizer), step_together)


def step_together(steps: Sequence[Callable[[], None]]) -> None:
    """Run ``steps``, :class:`OptimizerStep` of distinct optimisers, as one
    (:func:`step_optimizers`)."""
    step_optimizers(_with_waiting([cast(OptimizerStep, s).optimizer for s in steps]))


#: per thread, the optimisers of the innermost :func:`stepping_with_staged` block not
#: stepped yet (``.optimizers``)
_WAITING = threading.local()


@contextmanager
def stepping_with_staged(optimizers: Sequence[torch.optim.Optimizer]) -> Iterator[None]:
    """Step ``optimizers`` (their gradients computed) once during the block: with the first
    staged step of other parties that runs in it in this thread (one multi-tensor step for
    them all), else when it ends. Nothing steps them if the block fails."""
    waiting = list(optimizers)
    outer = getattr(_WAITING, "optimizers", None)
    _WAITING.optimizers = waiting
    try:
        yield
    finally:
        _WAITING.optimizers = outer
    if waiting:  # no staged step took them (the parties remote, or none staged)
        step_optimizers(waiting)


def _with_waiting(optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
    """``optimizers`` and those waiting in this thread (:func:`stepping_with_staged`), which
    are then no longer waiting; unless one of them is among ``optimizers`` (it steps once
    here: the waiting ones then step at the block's end)."""
    waiting = getattr(_WAITING, "optimizers", None)
    if not waiting or not {id(o) for o in optimizers}.isdisjoint(map(id, waiting)):
        return optimizers
    taken = [*optimizers, *waiting]
    waiting.clear()
    return taken


def step_optimizers(optimizers: Sequence[torch.optim.Optimizer]) -> None:
    """One step of every optimiser of ``optimizers`` (distinct, over disjoint parameters):
    one multi-tensor step for all their parameter groups of one type and hyper-parameters;
    the optimisers that must step alone (see the module), their own ``step()``."""
    global _HOOKS_CHECKED
    if not _HOOKS_CHECKED and optimizers:
        check_hook_tables(optimizers[0])
        _HOOKS_CHECKED = True
    joint: dict[tuple[Any, ...], list[Part]] = {}
    for opt in optimizers:
        parts = _parts(opt)
        if parts is None:
            opt.step()
        else:
            for key, part in parts:
                joint.setdefault(key, []).append(part)
    with torch.no_grad():
        for key, group_parts in joint.items():
            params = [p for part in group_parts for p in part[0]]
            states = [s for part in group_parts for s in part[1]]
            hyper = dict(zip(HYPER[key[0]], key[1:], strict=True))
            (_sgd if key[0] is torch.optim.SGD else _adam)(params, states, hyper)


def _parts(opt: torch.optim.Optimizer) -> list[tuple[tuple[Any, ...], Part]] | None:
    """Each parameter group of ``opt`` with its key in a joint step (the optimiser's type
    and the group's hyper-parameters), or ``None`` where ``opt`` must step alone."""
    names = HYPER.get(type(opt))
    if (
        names is None
        # (the tables of OWN_HOOKS and GLOBAL_HOOKS, checked by check_hook_tables)
        or opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or torch_optimizer._global_optimizer_pre_hooks
        or torch_optimizer._global_optimizer_post_hooks
        or "step" in vars(opt)
        or getattr(opt, "grad_scale", None) is not None
        or getattr(opt, "found_inf", None) is not None
    ):
        return None
    out = []
    for group in opt.param_groups:
        if (
            group.get("foreach") is False
            or group.get("fused")
            or group.get("differentiable")
            or group.get("capturable")
            or any(torch.is_tensor(v) for v in (group["lr"], *group.get("betas", ())))
        ):
            return None
        part = _with_state(opt, group)
        if part is None:
            return None
        out.append(((type(opt), *(group[n] for n in names)), part))
    return out


def _with_state(opt: torch.optim.Optimizer, group: dict[str, Any]) -> Part | None:
    """The parameters of ``group`` that have a gradient, and their states; ``None`` where a
    gradient is sparse or a state is not yet created (an optimiser's first step creates
    SGD's momentum buffer, Adam's moments)."""
    stateless = type(opt) is torch.optim.SGD and group["momentum"] == 0
    key = "momentum_buffer" if type(opt) is torch.optim.SGD else "step"
    params, states = [], []
    for p in group["params"]:
        grad = p.grad
        if grad is None:
            continue
        state = opt.state.get(p)
        if grad.is_sparse or not (stateless or (state and state.get(key) is not None)):
            return None
        params.append(p)
        states.append(state)
    return params, states


def _sgd(params: list[Any], states: list[Any], hyper: dict[str, Any]) -> None:
    """``torch.optim.SGD.step`` of ``params`` (their ``states``) as one multi-tensor step."""
    sgd(
        params,
        [p.grad for p in params],
        [s["momentum_buffer"] for s in states] if hyper["momentum"] != 0 else [],
        foreach=True,
        **hyper,
    )


def _adam(params: list[Any], states: list[Any], hyper: dict[str, Any]) -> None:
    """``torch.optim.Adam.step`` of ``params`` (their ``states``) as one multi-tensor step."""
    beta1, beta2 = hyper.pop("betas")
    if "has_complex" in _ADAM_ARGS:
        hyper["has_complex"] = any(map(torch.is_complex, params))
    adam(
        params,
        [p.grad for p in params],
        [s["exp_avg"] for s in states],
        [s["exp_avg_sq"] for s in states],
        [s["max_exp_avg_sq"] for s in states] if hyper["amsgrad"] else [],
        [s["step"] for s in states],
        foreach=True,
        beta1=beta1,
        beta2=beta2,
        **hyper,
    )
