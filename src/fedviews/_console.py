"""The terminal of every command (the ``fedviews`` app and the deployment commands):
one console for results, one for errors, :func:`friendly`, which turns a
fedviews error into one ``error:`` line with exit status 2 (tracebacks only with
``--debug``), and :func:`round_progress`, the progress of an estimator's ``fit``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedviews.errors import FedViewsError

console = Console()
if not console.is_terminal:  # pipes and CI logs: keep wide tables on one line
    console = Console(width=160)
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])
#: ``fedviews --debug``: show tracebacks instead of one-line errors
DEBUG = {"on": False}


def friendly(fn: F) -> F:
    """Turn fedviews errors into one-line messages with exit status 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FedViewsError as exc:
            if DEBUG["on"]:
                raise
            # soft wrap: a path or a command in the message stays on one line (copy-paste);
            # escaped: "[federation.listen]" in a message is text, not rich markup
            err_console.print(
                f"[bold red]error:[/] {type(exc).__name__}: {escape(str(exc))}",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print(
                "[bold red]interrupted[/]: partial results (if any) are in the run folder"
            )
            raise typer.Exit(130) from None

    return cast(F, wrapper)


#: called after round (or epoch) ``r`` of a fit
OnRound = Callable[[int], None]


@contextmanager
def round_progress(
    title: str,
    total: int,
    lines: Callable[[], Sequence[str]],
    verbose: bool,
    then: OnRound | None = None,
) -> Iterator[OnRound | None]:
    """The progress of a fit's rounds on stderr (never stdout), as an ``on_round_end(r)``.

    With ``verbose``, every call shows the newest of ``lines()`` (the coordinator's one
    line per finished round, with its loss or objective): on a terminal in a rich progress
    bar of ``total`` rounds, elsewhere (a log, a pipe) as one printed line per round,
    since a bar there would show only once, at the end. Without it nothing is written
    and the hook is ``then`` alone. ``then(r)``, where given, runs after the display
    (e.g. a checkpoint).
    """
    if not verbose:
        yield then
        return
    console = err_console
    if not console.is_terminal:

        def line(r: int) -> None:
            shown = lines()
            text = shown[-1] if shown else f"round {r}"
            console.print(f"{title} {text}", highlight=False, soft_wrap=True, markup=False)
            if then is not None:
                then(r)

        yield line
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}", markup=False),
        console=console,
    )
    with bar:
        task = bar.add_task(title, total=total, status="")

        def advance(r: int) -> None:
            shown = lines()
            bar.update(task, completed=r, status=shown[-1] if shown else "")
            if then is not None:
                then(r)

        yield advance
