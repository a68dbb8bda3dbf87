"""Privacy tools. Importing this package registers ``align(..., method="psi")``.

- :mod:`fedviews.privacy._psi`: ECDH private set intersection on P-256 (semi-honest).
"""

from fedviews.privacy._psi import PSI_POLICY, PSIParty, blind_ids, psi_intersect, reblind, run_psi

__all__ = ["PSI_POLICY", "PSIParty", "blind_ids", "psi_intersect", "reblind", "run_psi"]
