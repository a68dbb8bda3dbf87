"""The terminal of every command (the ``fedviews`` app and the deployment commands):
one console for results, one for errors, and :func:`friendly`, which turns a
fedviews error into one ``error:`` line with exit status 2 (tracebacks only with
``--debug``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape

from fedviews.errors import FedViewsError, Terminated

console = Console()
if not console.is_terminal:  # pipes and CI logs: keep wide tables on one line
    console = Console(width=160)
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])
#: ``fedviews --debug``: show tracebacks instead of one-line errors
DEBUG = {"on": False}
#: the context object of the commands when ``fedviews`` runs as its own process
#: (:func:`fedviews.cli.main`), not called in-process (tests): such a command may end it
OWN_PROCESS = object()


def friendly(fn: F) -> F:
    """Turn fedviews errors into one-line messages with exit status 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (FedViewsError, OSError) as exc:  # OSError: a path of the user's (exists...)
            if DEBUG["on"]:
                raise
            text = str(exc)
            if isinstance(exc, OSError) and not isinstance(exc, FedViewsError):
                text = (exc.strerror or text) + (f": {exc.filename}" if exc.filename else "")
            # soft wrap: a path or a command in the message stays on one line (copy-paste);
            # escaped: "[federation.listen]" in a message is text, not rich markup
            err_console.print(
                f"[bold red]error:[/] {type(exc).__name__}: {escape(text)}",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(2) from None
        except KeyboardInterrupt as exc:  # Ctrl-C (130), or `kill` (SIGTERM, 143)
            killed = isinstance(exc, Terminated)
            err_console.print(
                f"[bold red]{'terminated (SIGTERM)' if killed else 'interrupted'}[/]: "
                "partial results (if any) are in the run folder"
            )
            raise typer.Exit(143 if killed else 130) from None

    return cast(F, wrapper)
