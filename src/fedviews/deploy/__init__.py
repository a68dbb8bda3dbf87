"""Deployment across processes and machines: one process per party over gRPC with mutual TLS.

Command line: ``fedviews certs init|issue|revoke``, ``fedviews coordinator``,
``fedviews party``, ``fedviews launch``, ``fedviews split-data``. Each party
process loads only its own data file, aligns IDs by PSI, builds only its own
party object, and talks to the coordinator's hub over one outgoing stream.
"""

from fedviews.deploy._apps import MMVFLDeployParams, get_app, register_app
from fedviews.deploy._config import DeployConfig, FederationSpec, SplitSpec, load_deploy_config
from fedviews.deploy._data import PartyData, load_party_data, save_party_data, split_dataset
from fedviews.deploy._launch import launch, make_certs
from fedviews.deploy._session import run_coordinator, run_party

__all__ = [
    "DeployConfig",
    "FederationSpec",
    "MMVFLDeployParams",
    "PartyData",
    "SplitSpec",
    "get_app",
    "launch",
    "load_deploy_config",
    "load_party_data",
    "make_certs",
    "register_app",
    "run_coordinator",
    "run_party",
    "save_party_data",
    "split_dataset",
]
