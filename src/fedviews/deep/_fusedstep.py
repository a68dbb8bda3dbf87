"""One optimiser step for the parties of one process that step in the same batch.

Where data owners (Multi-VFL) or passive parties (split learning) share a process, the
in-process transport runs their staged backward passes as one ``torch.autograd.backward``
(:meth:`fedviews.federation.Party.stage`) and then their optimiser steps. A pass built by
:func:`staged_backward` lets the transport run those steps as one multi-tensor
(``foreach``) step over all their parameters (:func:`step_together`) instead of one
``step()`` per party: each party keeps its own optimiser object and state (what
checkpoints, ``save``/``load`` and a launched run see), only the arithmetic runs at once.

The result equals the parties' own steps: torch's SGD and Adam compute the same
element-wise operations, in the same order, in their for-loop and multi-tensor forms.
On a CPU, where a party's own step takes the for-loop form, the parameters and states
are bit-identical (``tests/deep/test_fusedstep.py``); on CUDA both take the multi-tensor
form. An optimiser steps alone, by its own ``step()``, wherever the joint step could
differ from it or skip something: an optimiser other than exactly ``torch.optim.SGD`` or
``torch.optim.Adam``, step hooks (its own or global) or a patched ``step``, a group that
asks for the for-loop or the fused form, ``differentiable`` or ``capturable``, a tensor
learning rate, sparse gradients, a state not yet created (an optimiser's first step
creates it lazily) and hyper-parameters that no other staged optimiser shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from fedviews.errors import MissingDependency
from fedviews.federation import Backward

try:
    import torch
    from torch.optim.adam import adam
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
    from torch.optim.sgd import sgd
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc

#: the hyper-parameters of a group that its optimiser's step reads, by optimiser type: the
#: groups of one multi-tensor step share them all
HYPER = {
    torch.optim.SGD: ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"),
    torch.optim.Adam: (
        "lr",
        "betas",
        "eps",
        "weight_decay",
        "amsgrad",
        "maximize",
        "decoupled_weight_decay",
    ),
}


@dataclass(frozen=True)
class OptimizerStep:
    """A staged pass's ``then``: one step of a party's optimiser (alone: ``step()``)."""

    optimizer: torch.optim.Optimizer

    def __call__(self) -> None:
        self.optimizer.step()


def staged_backward(output: Any, grad: Any, optimizer: torch.optim.Optimizer) -> Backward:
    """The staged backward pass of ``output`` with its received gradient ``grad``, then a
    step of ``optimizer`` (its gradients zeroed before), which the transport runs with the
    other staged parties' as one (:func:`step_together`)."""
    return Backward((output,), (grad,), OptimizerStep(optimizer), step_together)


def step_together(steps: Sequence[Callable[[], None]]) -> None:
    """Run ``steps`` (:class:`OptimizerStep` of distinct optimisers, whose parameters are
    disjoint as the staged graphs are): one multi-tensor step for the optimisers that
    share a type and hyper-parameters, every other optimiser's own ``step()``."""
    joint: dict[tuple[Any, ...], list[torch.optim.Optimizer]] = {}
    for step in steps:
        opt = cast(OptimizerStep, step).optimizer
        joint.setdefault(_key(opt) or (opt,), []).append(opt)
    for key, opts in joint.items():
        if len(opts) == 1:  # no other optimiser shares its key, or it steps alone
            opts[0].step()
        else:
            with torch.no_grad():
                (_sgd if key[0] is torch.optim.SGD else _adam)(opts)


def _key(opt: torch.optim.Optimizer) -> tuple[Any, ...] | None:
    """The key of ``opt`` in a joint step (its type and hyper-parameters), or ``None``
    where it must step alone (see the module; also with several parameter groups)."""
    names = HYPER.get(type(opt))
    if (
        names is None
        or len(opt.param_groups) != 1
        or opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or _global_optimizer_pre_hooks
        or _global_optimizer_post_hooks
        or "step" in vars(opt)
        or getattr(opt, "grad_scale", None) is not None
        or getattr(opt, "found_inf", None) is not None
    ):
        return None
    group = opt.param_groups[0]
    if (
        group["foreach"] is False
        or group["fused"]
        or group["differentiable"]
        or group.get("capturable")
        or any(torch.is_tensor(v) for v in (group["lr"], *group.get("betas", ())))
        or not all(_ready(opt, group, p) for p in group["params"] if p.grad is not None)
    ):
        return None
    return (type(opt), *(group[n] for n in names))


def _ready(opt: torch.optim.Optimizer, group: dict[str, Any], p: Any) -> bool:
    """Whether parameter ``p`` (with a gradient) takes the joint step: a dense gradient and
    the state that its optimiser's first step creates (SGD's momentum buffer, Adam's
    moments)."""
    if p.grad is None or p.grad.is_sparse:
        return False
    state = opt.state.get(p)
    if type(opt) is torch.optim.SGD:
        return group["momentum"] == 0 or (state or {}).get("momentum_buffer") is not None
    return bool(state)


def _with_grads(opts: Sequence[torch.optim.Optimizer]) -> list[tuple[Any, dict[str, Any]]]:
    """Every parameter with a gradient of ``opts`` (of one group each), in their order,
    with its state."""
    return [
        (p, opt.state[p]) for opt in opts for p in opt.param_groups[0]["params"] if p.grad is not None
    ]


def _sgd(opts: Sequence[torch.optim.Optimizer]) -> None:
    """``torch.optim.SGD.step`` of ``opts`` (of one key) as one multi-tensor step."""
    g = opts[0].param_groups[0]
    params = _with_grads(opts)
    sgd(
        [p for p, _ in params],
        [p.grad for p, _ in params],
        [s["momentum_buffer"] for _, s in params] if g["momentum"] != 0 else [],
        foreach=True,
        weight_decay=g["weight_decay"],
        momentum=g["momentum"],
        lr=g["lr"],
        dampening=g["dampening"],
        nesterov=g["nesterov"],
        maximize=g["maximize"],
    )


def _adam(opts: Sequence[torch.optim.Optimizer]) -> None:
    """``torch.optim.Adam.step`` of ``opts`` (of one key) as one multi-tensor step."""
    g = opts[0].param_groups[0]
    params = _with_grads(opts)
    adam(
        [p for p, _ in params],
        [p.grad for p, _ in params],
        [s["exp_avg"] for _, s in params],
        [s["exp_avg_sq"] for _, s in params],
        [s["max_exp_avg_sq"] for _, s in params] if g["amsgrad"] else [],
        [s["step"] for _, s in params],
        foreach=True,
        has_complex=any(torch.is_complex(p) for p, _ in params),
        decoupled_weight_decay=g["decoupled_weight_decay"],
        amsgrad=g["amsgrad"],
        beta1=g["betas"][0],
        beta2=g["betas"][1],
        lr=g["lr"],
        weight_decay=g["weight_decay"],
        eps=g["eps"],
        maximize=g["maximize"],
    )
