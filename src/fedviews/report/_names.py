"""One display name per method: every table, legend and report uses :func:`method_name`.

JSON files keep the registry keys (``"supfl"``); what a person reads is the name the
method's paper gives it (``"supFL"``).
"""

from __future__ import annotations

#: registry key -> display name
METHOD_NAMES: dict[str, str] = {
    "mmvfl": "MMVFL",
    "supfl": "supFL",
    "supmvlfl": "supMVLFL",
    "vfedmv": "V-FedMV",
    "hfedmv": "H-FedMV",
    "sfedmv": "S-FedMV",
    "multivfl": "Multi-VFL",
    "apfed": "APFed",
    "apfed_r": "APFed-R",
    "apfed_c": "APFed-C",
    "tvfl": "TVFL",
    "singlevl": "SingleVL",
    "splitnn": "SplitNN",
    "mv_local": "MV w/o FL",
    "single_view_fl": "Single View FL",
    "single_view": "Single View w/o FL",
    "pairwise": "Pairwise FL",
    "fedavg": "FedAvg",
    "fedadam": "FedAdam",
    "fedyogi": "FedYogi",
    "feddemonadam": "FedDemonAdam",
}


def method_name(key: str) -> str:
    """The display name of the method registered as ``key`` (``key`` itself if unknown).

    Parameters
    ----------
    key : str
        A registry key (``"supfl"``, ``"multivfl"``), in any case.

    Returns
    -------
    str
        ``"supFL"``, ``"Multi-VFL"``, ...
    """
    return METHOD_NAMES.get(key.lower(), key)
