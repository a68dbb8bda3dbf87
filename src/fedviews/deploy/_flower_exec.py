"""A warm executor for a Flower SuperNode: fedviews' ClientApp in one long-lived process.

In its default ``--isolation subprocess`` a SuperNode starts Flower's SuperExec, which
launches a new ``flwr-clientapp`` process for **every** message: Python starts, imports
Flower and fedviews (≈ 1.6 s on an idle core, all parties' at once on a shared machine),
and the party is rebuilt from its data file and ``Context.state`` (:mod:`._flower_node`).
Started with ``--isolation process`` the SuperNode leaves its tasks to an executor of
the operator's choice (Flower's own is ``flower-superexec``). :class:`WarmExecutor` is
one that runs fedviews' ClientApp in its own process for every task: the party object
stays live between messages (:func:`~._flower_node.node_for` finds it by its
generation), so a message costs its handler, not a process start and a rebuild; and a
per-batch party (split NN, Multi-VFL, APFed) waits in its handler's thread here between
the tasks that relay its messages and bring their replies (:mod:`._flower_relay`), so
those algorithms run on the deployment engine only with this executor.

It speaks the SuperNode's Runtime API as ``flower-superexec`` and ``flwr-clientapp`` do
(``AcquireTask``, then per task ``PullTaskInput``/``PullMessages``, the reply with
``PushMessages``, the updated context with ``PushTaskOutput``), and it serves only
fedviews' app: a run whose FAB names another ClientApp gets a Flower error reply that
says so. This uses Flower's Runtime API modules of flwr 1.42 (tested with 1.42.0;
:data:`AVAILABLE` is False on an flwr without them; :func:`~._flower_launch.launch_flower` then keeps Flower's own
executor). The command line is ``fedviews flower executor``.
"""

from __future__ import annotations

import importlib
import io
import logging
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from fedviews.errors import MissingDependency, described, require

require("flwr", "flower")

try:
    import httpx
    from flwr.app import Context
    from flwr.app import Message as FlowerMessage
    from flwr.app.error import Error
    from flwr.common.config import get_fab_config
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.proto.runtime_pb2 import AcquireTaskRequest, SendTaskHeartbeatRequest
    from flwr.supercore.constant import TaskType
    from flwr.supercore.heartbeat import HeartbeatSender
    from flwr.supercore.interceptors import (
        RuntimeTokenHttpInterceptor,
        RuntimeVersionHttpInterceptor,
    )
    from flwr.supercore.protobuf.client import ProtobufClientInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supernode.runtime.run_clientapp import (
        pull_task_input,
        push_message,
        push_task_output,
    )
except ImportError:  # an flwr without the Runtime API modules of 1.42
    AVAILABLE = False
else:
    AVAILABLE = True

from fedviews.deploy._flower import client_app  # noqa: E402
from fedviews.deploy._flower_node import APP_MODULE  # noqa: E402

#: the ClientApps of fedviews' Flower app: the module that
#: :func:`~._flower_launch.write_flower_app` writes, and fedviews' own
CLIENT_APPS = (f"{APP_MODULE}:client_app", "fedviews.deploy._flower:client_app")
CLIENT_APP = CLIENT_APPS[0]

log = logging.getLogger("fedviews.flower")


def _clientapp_of(fab: bytes) -> str:
    """The ``clientapp`` component that a FAB's ``pyproject.toml`` names ("" if none)."""
    components = get_fab_config(fab).get("tool", {}).get("flwr", {}).get("app", {})
    return str(components.get("components", {}).get("clientapp", ""))


def _install(fab: bytes) -> None:
    """Unpack fedviews' app module and its config files where this process finds them (the
    end of ``sys.path``), as ``flwr-clientapp`` does: a run config path relative to the app
    (``deploy-config``) is then found next to the app's module
    (:func:`~._flower_node.run_config_path`). Only the module (located, never imported: this
    executor runs fedviews' own ClientApp) and ``*.toml`` files are unpacked, so a FAB cannot
    put code of its own in front of, or beside, what this process imports."""
    folder = tempfile.mkdtemp(prefix="fedviews-flower-app-")
    with zipfile.ZipFile(io.BytesIO(fab)) as z:
        wanted = [
            n
            for n in z.namelist()
            if n == f"{APP_MODULE}.py" or (n.endswith(".toml") and "/" not in n)
        ]
        z.extractall(folder, members=wanted)
    sys.path.append(folder)
    importlib.invalidate_caches()


def _heartbeat(client: RuntimeHttpClient) -> bool:
    """One task heartbeat; False (retried by Flower's sender) where it did not get through.
    Unlike ``flwr-clientapp``'s, a refused one does not interrupt this process: only the
    task ends (its reply is then refused by the SuperNode)."""
    try:
        return bool(client.SendTaskHeartbeat(SendTaskHeartbeatRequest()).success)
    except httpx.HTTPError:
        return False


class WarmExecutor:
    """Run every ClientApp task of one SuperNode in this process (fedviews' app only).

    Parameters
    ----------
    runtime_api : str
        ``host:port`` of the SuperNode's Runtime API (``flower-supernode --port``).
    root_certificates : path, optional
        CA certificate of a Runtime API served with TLS (``--ssl-certfile``); None: plain
        HTTP (a SuperNode started without ``--ssl-certfile``).
    poll_interval : float
        Seconds between two ``AcquireTask`` calls while the SuperNode has no task.
    """

    def __init__(
        self,
        runtime_api: str,
        *,
        root_certificates: Path | None = None,
        poll_interval: float = 0.05,
    ) -> None:
        if not AVAILABLE:
            raise MissingDependency("flwr>=1.42", "flower")
        self.runtime_api = runtime_api
        self.certificates = root_certificates.read_bytes() if root_certificates else None
        self.poll_interval = poll_interval
        self.tasks = 0
        self._apps: dict[str, str] = {}  # FAB hash -> its clientapp component

    def _client(self, token: str = "") -> RuntimeHttpClient:
        """A Runtime API client: the SuperExec's (no token), or a task's (its token)."""
        interceptors: list[ProtobufClientInterceptor] = [
            RuntimeVersionHttpInterceptor(component_name="flwr-clientapp" if token else "SuperExec")
        ]
        if token:
            interceptors.append(RuntimeTokenHttpInterceptor(token))
        return RuntimeHttpClient.from_server_address(
            server_address=self.runtime_api,
            insecure=self.certificates is None,
            root_certificates=self.certificates,
            interceptors=interceptors,
            retry_invoker=make_simple_http_retry_invoker(),
        )

    def serve(self, stop: threading.Event | None = None) -> None:
        """Acquire and run tasks until ``stop`` is set (or forever)."""
        stop = stop or threading.Event()
        client = self._client()
        request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP.value])
        try:
            while not stop.is_set():
                res = client.AcquireTask(request)
                if res.HasField("task") and res.token:
                    try:
                        self.run_task(res.token)
                    except Exception:  # one task lost (e.g. the SuperNode restarted), not the node
                        log.exception("a ClientApp task failed in the fedviews executor")
                else:
                    stop.wait(self.poll_interval)
        finally:
            client.close()

    def run_task(self, token: str) -> None:
        """One task, as ``flwr-clientapp`` runs it: pull, answer, push reply and context."""
        client = self._client(token)
        heartbeat = HeartbeatSender(lambda: _heartbeat(client))
        heartbeat.start()
        context: Context | None = None
        status, details = SubStatus.FAILED, "the fedviews executor failed"
        try:
            message, context, _, fab = pull_task_input(client)
            app = self._apps.get(fab.hash_str)
            if app is None:
                app = self._apps[fab.hash_str] = _clientapp_of(fab.content)
                if app in CLIENT_APPS:
                    _install(fab.content)
            if app in CLIENT_APPS:
                try:
                    reply = client_app(message=message, context=context)
                    status, details = SubStatus.COMPLETED, ""
                except Exception as exc:  # as flwr-clientapp: an error reply, the task failed
                    log.exception("fedviews ClientApp failed")
                    details = described(exc)
                    reply = FlowerMessage(
                        Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details),
                        reply_to=message,
                    )
            else:
                details = (
                    f"this SuperNode's executor (fedviews flower executor) runs {CLIENT_APP} "
                    f"only, not {app or 'an app without a clientapp'!r}: start the SuperNode "
                    "without --isolation process for other Flower apps"
                )
                reply = FlowerMessage(
                    Error(code=ErrorCode.LOAD_CLIENT_APP_EXCEPTION, reason=details),
                    reply_to=message,
                )
            push_message(client, reply, context)
        finally:
            push_task_output(client, context, status, details)
            heartbeat.stop()
            client.close()
            self.tasks += 1
