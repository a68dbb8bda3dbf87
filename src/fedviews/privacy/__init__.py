"""Privacy tools. Importing this package registers ``align(..., method="psi")``.

- :mod:`fedviews.privacy._psi`: ECDH private set intersection in ristretto255
  (semi-honest, non-colluding; leaks set and intersection sizes), with
  independent alignment groups per session; its group operations in
  :mod:`fedviews.privacy._psi_group`.
"""

from fedviews.privacy._psi import PSI_POLICY, PSIParty, psi_intersect, run_psi
from fedviews.privacy._psi_group import blind_ids, hash_ids, new_key, reblind

__all__ = [
    "PSI_POLICY",
    "PSIParty",
    "blind_ids",
    "hash_ids",
    "new_key",
    "psi_intersect",
    "reblind",
    "run_psi",
]
