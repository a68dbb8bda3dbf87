"""The command line that every benchmark shares.

* :func:`parser`: a script's parser, its description the first paragraph of the script's
  docstring and its epilog the docstring's command lines, alike in every script;
* argument types that refuse a size that makes no sense before any work, with argparse's
  one-line error and exit status 2 (``argument --samples: must be a positive integer, got
  -5``): :func:`positive_int`, :func:`nonnegative_int`, :func:`int_at_least`,
  :func:`positive_float`, :func:`nonnegative_float`, :func:`fraction`;
* :func:`device_option`: ``--device``, refused at once where this machine has no such device
  (``--device cuda: no CUDA device is available here (torch 2.13.0+cpu, CPU build)``);
* :func:`capped`: a number of images that the data do not hold, cut to what they hold, and
  said so on stderr;
* :func:`run_cli`: runs a script's ``main``; a fedviews error (a missing extra, with its
  ``pip install`` hint) ends it with one line on stderr instead of a traceback.

A script that needs an extra (``flwr``, ``grpc``, ...) imports what needs it inside the
functions that use it, so that ``--help`` works without the extra and its absence is
reported by :func:`run_cli`.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "capped",
    "device_option",
    "fraction",
    "int_at_least",
    "nonnegative_float",
    "nonnegative_int",
    "parser",
    "positive_float",
    "positive_int",
    "run_cli",
]

T = TypeVar("T")

#: the width of the description and epilog (``RawDescriptionHelpFormatter`` keeps their lines)
WIDTH = 88


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser: its description the first paragraph of ``doc`` (the script's
    docstring, joined and re-wrapped), its epilog the docstring's indented paragraphs (the
    command lines it shows), as they are."""
    paragraphs = re.split(r"\n[ \t]*\n", (doc or "").strip("\n"))
    description = textwrap.fill(
        " ".join(paragraphs[0].replace("``", "").split()), WIDTH, break_on_hyphens=False
    )
    examples = [
        textwrap.dedent(p).rstrip()
        for p in paragraphs[1:]
        if "benchmarks/" in p and all(line[:1] in (" ", "\t") for line in p.splitlines())
    ]
    epilog = "examples:\n" + textwrap.indent("\n".join(examples), "  ") if examples else None
    return argparse.ArgumentParser(
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _checked(kind: Callable[[str], T], ok: Callable[[T], bool], what: str) -> Callable[[str], T]:
    """An argparse type: ``kind(text)`` where ``ok`` holds for it, else argparse's error
    ``argument --x: must be WHAT, got TEXT``."""

    def check(text: str) -> T:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    return check


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low``."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(
        low, f"an integer of at least {low}"
    )
    return _checked(int, lambda v: v >= low, what)


def _finite(ok: Callable[[float], bool]) -> Callable[[float], bool]:
    return lambda v: math.isfinite(v) and ok(v)


#: argparse types of counts and sizes: ``--samples``, ``--repeats``, ...
positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)
#: argparse types of real numbers (finite): megabytes, learning rates, penalties, fractions
positive_float = _checked(float, _finite(lambda v: v > 0), "a positive number")
nonnegative_float = _checked(float, _finite(lambda v: v >= 0), "a non-negative number")
fraction = _checked(float, _finite(lambda v: 0 <= v <= 1), "a number from 0 to 1")


def device_problem(name: str) -> str | None:
    """Why torch cannot compute on device ``name`` on this machine (``None``: it can). Imports
    torch only for a device other than ``cpu``."""
    if name == "cpu":
        return None
    import torch

    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        return "not a torch device (e.g. cpu, cuda, cuda:1)"
    build = f"torch {torch.__version__}, " + (
        f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    )
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return f"no CUDA device is available here ({build})"
        if dev.index is not None and dev.index >= count:
            return f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1} ({build})"
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        return f"no MPS device is available here ({build})"
    return None


class _Device(argparse.Action):
    """``--device``: refused by the parser (exit status 2) where torch has no such device."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        problem = device_problem(str(values))
        if problem is not None:
            parser.error(f"{option_string} {values}: {problem}")
        setattr(namespace, self.dest, values)


def device_option(ap: argparse.ArgumentParser, default: str = "cpu") -> None:
    """The ``--device`` option of a benchmark (checked when given: the default is ``cpu``)."""
    ap.add_argument(
        "--device",
        action=_Device,
        default=default,
        help=f"torch device, e.g. cpu, cuda, cuda:1 (default: {default})",
    )


def capped(requested: int, held: int, what: str, option: str = "--samples") -> int:
    """``requested`` images, or the ``held`` ones where ``what`` (e.g. ``"MNIST"``) holds
    fewer: then said on stderr, so that a run is never labelled with a size it did not use."""
    if requested <= held:
        return requested
    print(
        f"{what} holds {held:,} images: using {held:,} (not {option} {requested:,})",
        file=sys.stderr,
        flush=True,
    )
    return held


def run_cli(main: Callable[[], None]) -> None:
    """Run a benchmark's ``main``: a fedviews error ends it with ``PROG: error: MESSAGE`` on
    stderr, no traceback, and exit status 2 for a missing extra (its message names the
    ``pip install`` command), 1 for any other (a refused configuration, missing data)."""
    from fedviews.errors import FedViewsError, MissingDependency

    try:
        main()
    except FedViewsError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        raise SystemExit(2 if isinstance(exc, MissingDependency) else 1) from None
