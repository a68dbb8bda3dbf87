"""The one exception tree of fedviews.

Every error that fedviews raises on purpose derives from :class:`FedViewsError`,
so a caller (or the CLI) can catch one type and print a one-line message::

    FedViewsError
    ├── DataError          bad arrays, labels, IDs or dataset files
    ├── ConfigError        unknown or invalid configuration keys / values
    ├── ProtocolError      a party broke the message protocol (``party``: which one)
    │   ├── PartyUnavailable   a party died or stopped answering
    │   └── RemoteError        a party reported a failure (``reported_by``: which one)
    ├── PrivacyError       an array tried to cross the privacy barrier illegally
    ├── MissingDependency  an optional extra is not installed
    └── NotFittedError     an estimator was used before ``fit`` (also scikit-learn's
                           ``NotFittedError``, hence a ValueError and an AttributeError)

and one warning: :class:`ConvergenceWarning`, an iterative fit (MMVFL, V-FedMV) that
stopped at its iteration limit before its stopping rule held.

:class:`NotFittedError` is built on first use, so importing this module does not
import scikit-learn (about a second); :func:`check_fitted` raises it.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sklearn.exceptions import NotFittedError as _SklearnNotFittedError

__all__ = [
    "ConfigError",
    "ConvergenceWarning",
    "DataError",
    "FedViewsError",
    "MissingDependency",
    "NotFittedError",
    "PartyUnavailable",
    "PrivacyError",
    "ProtocolError",
    "RemoteError",
    "check_fitted",
]


class FedViewsError(Exception):
    """Base class of every error raised by fedviews.

    Attributes
    ----------
    party : str or None
        The peer whose message this error is about, where a receiver attributed it (the
        authenticated sender of what it received; ``None``: not attributed to a peer).
    at : str or None
        The party whose code raised it, where the transport knows it (a handler's own error
        in one process; a :class:`RemoteError`'s reporter): the party that *failed*, which
        is not always the party to blame (its input may have been poisoned).
    """

    party: str | None = None
    at: str | None = None


class DataError(FedViewsError, ValueError):
    """Input data is malformed: wrong shapes, NaN/inf, mismatched IDs, missing files."""


class ConfigError(FedViewsError, ValueError):
    """A configuration key is unknown or a value is invalid."""


class ProtocolError(FedViewsError, RuntimeError):
    """A party sent an unexpected message or failed while handling one (``party``: the
    sender of the message that broke the protocol, where the receiver knows it; ``array``:
    the array refused for its NaN or infinities, where that is the refusal)."""

    def __init__(self, *args: object, party: str | None = None, array: str | None = None) -> None:
        super().__init__(*args)
        self.party = party
        self.array = array


class PartyUnavailable(ProtocolError):
    """A party died or stopped answering.

    Attributes
    ----------
    party : str
        Name of the party that is unavailable.
    """

    def __init__(self, party: str, detail: str = "") -> None:
        names = party.split(", ")  # (several, as "a, b": the parties that did not join)
        msg = (
            f"party {party!r} is unavailable"
            if len(names) == 1
            else f"parties {', '.join(map(repr, names))} are unavailable"
        )
        super().__init__(f"{msg}: {detail}" if detail else msg, party=party)
        self.party: str = party


class RemoteError(ProtocolError):
    """A party reported that it failed (an error reply): its *report*, never re-raised under
    the type or the name its text claims, since the reporter may be dishonest.

    Attributes
    ----------
    reported_by : str
        The party that sent the report (the authenticated sender of the error reply).
    kind : str
        The error type it reported (e.g. ``"PrivacyError"``), as it wrote it.
    text : str
        What it wrote; it may name other parties, which proves nothing about them.
    """

    def __init__(self, reported_by: str, kind: str, text: str) -> None:
        super().__init__(f"{reported_by!r} reported {kind}: {text}", party=reported_by)
        self.reported_by, self.kind, self.text = reported_by, kind, text
        self.at = reported_by


class PrivacyError(FedViewsError, PermissionError):
    """An array that the algorithm's privacy policy does not allow tried to leave a party."""


class MissingDependency(FedViewsError, ImportError):
    """An optional extra is required; the message names the ``pip install`` command."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package!r} is required for this feature; install it with: "
            f"pip install 'fedviews[{extra}]'"
        )


class Terminated(KeyboardInterrupt):
    """The process was stopped by SIGTERM (``kill``, or the launcher that started it). Handled
    as Ctrl-C is (what the process knows is written, its processes are stopped: it *is* a
    ``KeyboardInterrupt``), but a run's status and the command's exit status (143) say which
    signal ended it."""

    def __init__(self) -> None:
        super().__init__("stopped by SIGTERM")


def described(exc: BaseException) -> str:
    """``exc`` as a run's status says it: ``"Type: message"``, or ``"Type"`` for one without a
    message (an interrupt), not ``"KeyboardInterrupt: "``."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class DataWarning(UserWarning):
    """Data that is used as given but looks like a mistake (e.g. float images in 0..255,
    which only ``uint8`` pixels are scaled from)."""


class ConvergenceWarning(UserWarning):
    """A fit stopped at its iteration limit (``max_iter``) before its stopping rule (``tol``)
    held: its result is that of an unconverged run (``converged_`` is False)."""


if TYPE_CHECKING:

    class NotFittedError(FedViewsError, _SklearnNotFittedError):
        """An estimator was used before ``fit`` (built by :func:`_not_fitted_error`)."""


_NOT_FITTED: list[type[FedViewsError]] = []
_NOT_FITTED_LOCK = threading.Lock()


def _not_fitted_error() -> type[FedViewsError]:
    """The class :class:`NotFittedError`, created once (this imports scikit-learn)."""
    with _NOT_FITTED_LOCK:
        if not _NOT_FITTED:
            from sklearn.exceptions import NotFittedError as SklearnNotFittedError

            class NotFittedError(FedViewsError, SklearnNotFittedError):
                """An estimator was used before ``fit``.

                Also scikit-learn's :class:`~sklearn.exceptions.NotFittedError`
                (a ValueError and an AttributeError), so scikit-learn tools and
                ``except AttributeError`` handlers treat it as theirs.
                """

            NotFittedError.__qualname__ = "NotFittedError"
            _NOT_FITTED.append(NotFittedError)
        return _NOT_FITTED[0]


def __getattr__(name: str) -> Any:
    """``fedviews.errors.NotFittedError``, created on first access."""
    if name == "NotFittedError":
        return _not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_fitted(estimator: object, *attributes: str) -> None:
    """Raise :class:`NotFittedError` unless ``estimator`` has every one of ``attributes``.

    Parameters
    ----------
    estimator : object
        The estimator about to predict, transform or export.
    *attributes : str
        Attributes that ``fit`` sets (learned state, names ending in ``_``).

    Raises
    ------
    NotFittedError
        Naming the estimator's class: ``"MultiVFL is not fitted yet: call fit(...) first"``.
    """
    if not all(hasattr(estimator, a) for a in attributes):
        raise _not_fitted_error()(
            f"{type(estimator).__name__} is not fitted yet: call fit(...) first"
        )


def require(module: str, extra: str) -> object:
    """Import ``module`` or raise :class:`MissingDependency` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependency(module, extra) from exc
