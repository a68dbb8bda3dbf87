"""User networks: a factory given as a callable or named by import path, built and checked.

A deep algorithm's ``Params`` name its networks' factories (``bottom``, ``top``, ...):
``""`` for the algorithm's own network, ``"package.module:function"`` (a config, a
deployment: every process imports it) or, in Python, the callable itself. Each algorithm
documents the arguments its factories get. :func:`resolve_factory` turns a value into the
callable (torch-free); :func:`build_network` calls it under its own torch seed and checks
what it built: a ``torch.nn.Module`` of float32 parameters whose floating-point output on a
zero batch has the shape the algorithm needs (a :class:`~fedviews.errors.ConfigError` naming the factory otherwise).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedviews.errors import ConfigError, DataError, ProtocolError


def factory_name(value: Any) -> str:
    """How a factory is named in messages and run identities: its import path (a
    ``functools.partial``'s function's)."""
    if isinstance(value, str):
        return value
    if isinstance(value, functools.partial):
        value = value.func
    return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"


def resolve_factory(value: Any, field: str) -> Callable[..., Any] | None:
    """The factory of ``value`` (``field``: the parameter, for messages); None for ``""``.

    Raises
    ------
    ConfigError
        The import path does not import, names no attribute, or names something that is
        not callable.
    """
    if callable(value):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be a callable or an import path, got {value!r}")
    if not value:
        return None
    module, _, attr = value.partition(":")
    if not module or not attr:
        raise ConfigError(f"{field} = {value!r}: write the import path as 'package.module:name'")
    try:
        found: Any = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"{field} = {value!r}: cannot import {module!r} ({exc}); is it on PYTHONPATH?"
        ) from None
    for part in attr.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"{field} = {value!r}: {module!r} has no attribute {attr!r}")
        found = getattr(found, part)
    if not callable(found):
        raise ConfigError(f"{field} = {value!r} is a {type(found).__name__}, not a callable")
    return found


def build_network(
    factory: Callable[..., Any],
    args: Sequence[Any],
    *,
    field: str,
    seed: int | None,
    input_shape: Sequence[int],
    init: Callable[[Any], Any] | None = None,
    output: Callable[[tuple[int, ...]], str | None] | None = None,
    inputs: Callable[[Any], tuple[Any, ...]] | None = None,
    trained_alone: bool = False,
) -> Any:
    """``factory(*args)`` under torch seed ``seed`` (then ``init(module)``, in the same seeded
    stream; ``seed=None``: in the caller's stream, e.g. the second network drawn under one
    seed), checked: a ``torch.nn.Module`` of float32 parameters that maps a zero batch of
    ``input_shape`` samples to a floating-point output whose per-sample shape ``output``
    accepts (it returns what is wrong, or None). ``inputs`` (:func:`output_shape`): the arguments of the module's forward.
    ``trained_alone``: the module gets an optimizer of its own, so it must have trainable
    parameters (one that joins another network's optimizer may have none).

    Raises
    ------
    ConfigError
        The factory raised, built no module, or a module of the wrong output shape.
    """
    import torch

    from fedviews.deep._common import torch_seed

    name = factory_name(factory)
    with contextlib.nullcontext() if seed is None else torch_seed(seed):
        try:
            module = factory(*args)
        except ConfigError:
            raise
        except Exception as exc:
            call = f"{name.rpartition(':')[2]}({', '.join(map(repr, args))})"  # (no ':': all)
            raise ConfigError(
                f"{field} factory {name} failed when called as {call}: {exc}"
            ) from exc
        if not isinstance(module, torch.nn.Module):
            raise ConfigError(
                f"{field} factory {name} returned an object of type {type(module).__name__}, "
                "not a torch.nn.Module"
            )
        if init is not None:
            module = init(module)
    params = list(module.parameters())
    if trained_alone and not any(p.requires_grad for p in params):  # (torch: "an empty
        raise ConfigError(  # parameter list", from the optimizer, at the first round)
            f"{field} factory {name} builds a module without trainable parameters: it is "
            "trained with an optimizer of its own (an identity is a Linear layer to train)"
        )
    odd = sorted({str(p.dtype) for p in params if p.is_floating_point()} - {"torch.float32"})
    if odd:  # ("mixed dtype (CPU): expect parameter to have scalar type of Float")
        raise ConfigError(
            f"{field} factory {name} builds a module of {', '.join(odd)} parameters: the "
            "networks run on float32 inputs, so they must be float32 (drop .double() or "
            ".to(dtype))"
        )
    shape = output_shape(module, input_shape, f"{field} factory {name}", inputs)
    wrong = None if output is None else output(shape)
    if wrong is not None:
        raise ConfigError(f"{field} factory {name} builds a module whose output {wrong}")
    return module


def logits(n_classes: int) -> Callable[[tuple[int, ...]], str | None]:
    """The ``output`` check of :func:`build_network` for a module that returns the
    ``n_classes`` logits."""

    def check(out: tuple[int, ...]) -> str | None:
        return None if out == (n_classes,) else f"is {out}, not ({n_classes},)"

    return check


def output_shape(
    module: Any,
    input_shape: Sequence[int],
    what: str,
    inputs: Callable[[Any], tuple[Any, ...]] | None = None,
) -> tuple[int, ...]:
    """The per-sample shape of ``module``'s output on a zero batch of two ``input_shape``
    samples (two: a batch norm without running statistics needs more than one; run without
    gradients, the module's RNG state and mode restored), which must be floating point;
    ``inputs`` turns that batch into the forward's arguments (default: the batch alone)."""
    import torch

    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            x = torch.zeros((2, *input_shape))
            out = module(*(inputs(x) if inputs is not None else (x,)))
    except Exception as exc:
        raise ConfigError(
            f"{what}: its module fails on a batch of float32 samples of shape "
            f"{tuple(input_shape)}: {exc}"
        ) from exc
    finally:
        module.train(training)
    if not isinstance(out, torch.Tensor) or out.dim() < 2 or out.shape[0] != 2:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(f"{what}: its module must return a (batch, ...) tensor, got {got}")
    if not out.is_floating_point():  # (no gradient flows back through integers)
        raise ConfigError(f"{what}: its module returns {out.dtype} values, not floating point")
    return tuple(int(s) for s in out.shape[1:])


def shape_text(shape: Sequence[int]) -> str:
    """A shape as a setup value (``"32x10x28"``)."""
    return "x".join(str(int(s)) for s in shape)


def parse_shape(text: object, key: str) -> tuple[int, ...]:
    """:func:`shape_text` read back (a :class:`DataError` if ``text`` is not one)."""
    try:
        shape = tuple(int(s) for s in str(text).split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise DataError(f"setup[{key!r}] = {text!r} is not a shape such as '32x10x28'")
    return shape


def shape_info(key: str, shape: Sequence[int]) -> dict[str, int]:
    """A shape as a party reports it at setup (whole numbers): ``{"key/0": 1, "key/1": 10}``."""
    return {f"{key}/{i}": int(s) for i, s in enumerate(shape)}


def reported_shape(info: Mapping[str, Any], key: str, party: str) -> tuple[int, ...]:
    """:func:`shape_info` read back from what ``party`` reported (a :class:`ProtocolError`
    naming it if there is no such shape or a size is 0)."""
    shape: list[int] = []
    while f"{key}/{len(shape)}" in info:
        shape.append(int(info[f"{key}/{len(shape)}"]))
    if not shape or min(shape) < 1:
        raise ProtocolError(
            f"{party!r} reported no {key} shape of sizes >= 1 at setup (got {tuple(shape)})",
            party=party,
        )
    return tuple(shape)
