"""Wire parties to a transport."""

from __future__ import annotations

from collections.abc import Sequence

from fedviews.federation._party import Party
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._transport import InProcessTransport, Transport


def federate(
    parties: Sequence[Party],
    policy: PrivacyPolicy,
    transport: Transport | None = None,
) -> Transport:
    """Register ``parties`` on ``transport`` (default: a new in-process one) and return it."""
    t = transport if transport is not None else InProcessTransport(policy)
    for p in parties:
        t.register(p)
    return t
