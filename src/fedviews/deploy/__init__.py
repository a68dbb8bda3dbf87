"""Deployment across processes and machines: one process per party over gRPC with mutual TLS.

Command line: ``fedviews certs init|issue|revoke``, ``fedviews coordinator``,
``fedviews party``, ``fedviews launch``, ``fedviews predict`` (the parts of a trained
model predict new rows together), ``fedviews split-data``. Each party
process loads only its own data file, aligns IDs by PSI, builds only its own
party object, and talks to the coordinator's hub over one outgoing stream (and
directly to the parties that declare an endpoint in ``[federation.listen]``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedviews.deploy._config import DeployConfig, FederationSpec, SplitSpec, load_deploy_config
    from fedviews.deploy._data import (
        PartyData,
        load_party_data,
        save_party_data,
        split_dataset,
        write_demo_data,
    )
    from fedviews.deploy._flower_launch import launch_flower, write_flower_app
    from fedviews.deploy._launch import launch, make_certs, process_env, resume_launch
    from fedviews.deploy._session import run_coordinator, run_party

# names load lazily: the transports need the ``grpc`` extra, the CLI must start fast
_WHERE = {
    name: f"fedviews.deploy.{module}"
    for module, names in [
        ("_config", "DeployConfig FederationSpec SplitSpec load_deploy_config"),
        ("_data", "PartyData load_party_data save_party_data split_dataset write_demo_data"),
        ("_flower_launch", "launch_flower write_flower_app"),
        ("_launch", "free_port launch make_certs process_env resume_launch"),
        ("_session", "run_coordinator run_party"),
    ]
    for name in names.split()
}

__all__ = [
    "DeployConfig",
    "FederationSpec",
    "PartyData",
    "SplitSpec",
    "free_port",
    "launch",
    "launch_flower",
    "load_deploy_config",
    "load_party_data",
    "make_certs",
    "process_env",
    "resume_launch",
    "run_coordinator",
    "run_party",
    "save_party_data",
    "split_dataset",
    "write_demo_data",
    "write_flower_app",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'fedviews.deploy' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
