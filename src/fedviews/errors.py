"""The one exception tree of fedviews.

Every error that fedviews raises on purpose derives from :class:`FedViewsError`,
so a caller (or the CLI) can catch one type and print a one-line message::

    FedViewsError
    ├── DataError          bad arrays, labels, IDs or dataset files
    ├── ConfigError        unknown or invalid configuration keys / values
    ├── ProtocolError      a party broke the message protocol
    │   └── PartyUnavailable   a party died or stopped answering
    ├── PrivacyError       an array tried to cross the privacy barrier illegally
    └── MissingDependency  an optional extra is not installed
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DataError",
    "FedViewsError",
    "MissingDependency",
    "PartyUnavailable",
    "PrivacyError",
    "ProtocolError",
]


class FedViewsError(Exception):
    """Base class of every error raised by fedviews."""


class DataError(FedViewsError, ValueError):
    """Input data is malformed: wrong shapes, NaN/inf, mismatched IDs, missing files."""


class ConfigError(FedViewsError, ValueError):
    """A configuration key is unknown or a value is invalid."""


class ProtocolError(FedViewsError, RuntimeError):
    """A party sent an unexpected message or failed while handling one."""


class PartyUnavailable(ProtocolError):
    """A party died or stopped answering.

    Attributes
    ----------
    party : str
        Name of the party that is unavailable.
    """

    def __init__(self, party: str, detail: str = "") -> None:
        self.party = party
        msg = f"party {party!r} is unavailable"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class PrivacyError(FedViewsError, PermissionError):
    """An array that the algorithm's privacy policy does not allow tried to leave a party."""


class MissingDependency(FedViewsError, ImportError):
    """An optional extra is required; the message names the ``pip install`` command."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package!r} is required for this feature; install it with: "
            f"pip install 'fedviews[{extra}]'"
        )


def require(module: str, extra: str) -> object:
    """Import ``module`` or raise :class:`MissingDependency` naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependency(module, extra) from exc
