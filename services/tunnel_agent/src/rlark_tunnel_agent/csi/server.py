"""The CSI node plugin's gRPC servers and its registration with the kubelet.

``python -m rlark_tunnel_agent csi-node --driver-name D --node-id N --kubelet-dir K`` serves the CSI Identity and
Node services on ``<K>/plugins/<D>/csi.sock`` and the kubelet's plugin registration service on
``<K>/plugins_registry/<D>-reg.sock``: the kubelet watches that directory, asks GetInfo (a ``CSIPlugin`` named
``D`` whose endpoint is the CSI socket, CSI version 1.0.0), calls NodeGetInfo there and records the driver in the
node's CSINode object, then says how it went (NotifyRegistrationStatus). Removing the registration socket on
exit unregisters the plugin; the pods' mounts stay (their rclone processes run on, `node`).

What node-driver-registrar and a driver's node plugin are in a CSI driver's DaemonSet, in one process
(``deploy/agent/csi``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import structlog

from rlark_tunnel_agent.csi import proto
from rlark_tunnel_agent.csi.node import CsiError, NodeService

log = structlog.get_logger(__name__)

PLUGIN_TYPE = "CSIPlugin"
SUPPORTED_VERSIONS = ("1.0.0",)
MAX_SOCKET_PATH = 107
"""``sun_path`` holds 108 bytes, the terminating NUL included (the kubelet's own sockets share the limit)."""


def csi_socket(kubelet_dir: Path, driver_name: str) -> Path:
    return kubelet_dir / "plugins" / driver_name / "csi.sock"


def registration_socket(kubelet_dir: Path, driver_name: str) -> Path:
    return kubelet_dir / "plugins_registry" / f"{driver_name}-reg.sock"


def _unary(method: proto.Method, call: Callable[[Any], Any]) -> grpc.RpcMethodHandler:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return call(request)
        except CsiError as exc:
            log.warning("call refused", method=method.name, code=exc.code.name, reason=exc.message)
            context.abort(exc.code, exc.message)
        except Exception:
            # The request may hold secrets: only the method and the traceback's own lines are logged.
            log.exception("call failed", method=method.name)
            context.abort(grpc.StatusCode.INTERNAL, f"{method.name} failed; see the plugin's log")

    return grpc.unary_unary_rpc_method_handler(
        handle,
        request_deserializer=method.request.FromString,
        response_serializer=method.response.SerializeToString,
    )


def _handlers(methods: list[tuple[proto.Method, Callable[[Any], Any]]]) -> list[grpc.GenericRpcHandler]:
    by_service: dict[str, dict[str, grpc.RpcMethodHandler]] = {}
    for method, call in methods:
        by_service.setdefault(method.service, {})[method.name] = _unary(method, call)
    return [grpc.method_handlers_generic_handler(service, table) for service, table in by_service.items()]


def csi_handlers(service: NodeService) -> list[grpc.GenericRpcHandler]:
    """The csi.v1 Identity and Node services."""
    return _handlers(
        [
            (proto.GET_PLUGIN_INFO, service.get_plugin_info),
            (proto.GET_PLUGIN_CAPABILITIES, service.get_plugin_capabilities),
            (proto.PROBE, service.probe),
            (proto.NODE_GET_CAPABILITIES, service.node_get_capabilities),
            (proto.NODE_GET_INFO, service.node_get_info),
            (proto.NODE_PUBLISH_VOLUME, service.node_publish_volume),
            (proto.NODE_UNPUBLISH_VOLUME, service.node_unpublish_volume),
        ]
    )


@dataclass
class Registration:
    """The kubelet's plugin registration service for one driver (what node-driver-registrar serves)."""

    driver_name: str
    endpoint: Path
    registered: threading.Event = field(default_factory=threading.Event)
    error: str = ""

    def get_info(self, _request: Any) -> Any:
        return proto.GET_INFO.response(
            type=PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=str(self.endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def notify_registration_status(self, request: Any) -> Any:
        if request.plugin_registered:
            log.info("registered with the kubelet", driver=self.driver_name)
            self.error = ""
            self.registered.set()
        else:
            self.error = request.error
            log.error("the kubelet refused the driver", driver=self.driver_name, error=request.error)
        return proto.NOTIFY_REGISTRATION_STATUS.response()

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        return _handlers(
            [
                (proto.GET_INFO, self.get_info),
                (proto.NOTIFY_REGISTRATION_STATUS, self.notify_registration_status),
            ]
        )


def serve_unix(path: Path, handlers: list[grpc.GenericRpcHandler], workers: int = 8) -> grpc.Server:
    """A started gRPC server on the Unix socket ``path`` (a stale socket there is replaced; mode 600)."""
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"{path}: a Unix socket's path has at most {MAX_SOCKET_PATH} bytes")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=path.name))
    server.add_generic_rpc_handlers(handlers)
    server.add_insecure_port(f"unix:{path}")
    server.start()
    path.chmod(0o600)
    return server


@dataclass
class Plugin:
    """The running plugin: its CSI server and its registration server."""

    csi: grpc.Server
    registrar: grpc.Server
    registration: Registration
    sockets: tuple[Path, Path]

    def stop(self, grace_s: float = 5.0) -> None:
        """Unregister (the registration socket goes first), then stop serving."""
        registration_path, csi_path = self.sockets[1], self.sockets[0]
        registration_path.unlink(missing_ok=True)
        self.registrar.stop(grace_s).wait()
        self.csi.stop(grace_s).wait()
        csi_path.unlink(missing_ok=True)


def start(service: NodeService, kubelet_dir: Path, csi_path: Path | None = None) -> Plugin:
    """Serve the CSI socket, then the registration socket (the kubelet may dial the endpoint at once)."""
    endpoint = csi_path or csi_socket(kubelet_dir, service.driver_name)
    csi = serve_unix(endpoint, csi_handlers(service))
    registration = Registration(service.driver_name, endpoint)
    registration_path = registration_socket(kubelet_dir, service.driver_name)
    registrar = serve_unix(registration_path, registration.handlers(), workers=2)
    log.info(
        "CSI node plugin serving",
        driver=service.driver_name,
        node_id=service.node_id,
        endpoint=str(endpoint),
        registration=str(registration_path),
    )
    return Plugin(csi, registrar, registration, (endpoint, registration_path))


def run_until_signalled(plugin: Plugin) -> None:
    """Block until SIGTERM or SIGINT, then stop the plugin (the mounts stay)."""
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    with contextlib.suppress(KeyboardInterrupt):
        stopping.wait()
    plugin.stop()
