"""A thin, blocking layer over the official `kubernetes` client that speaks plain JSON dicts.

The driver runs every call here in a worker thread. Responses are read raw (``_preload_content=False``)
and parsed with ``json``: the client's model deserialisation costs more than the API round trip for
large lists, and the driver reads manifests as dicts anyway. "Already exists" on create and "not
found" on delete are results, not errors: side effects are idempotent by construction.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines as _iter_resp_lines

Obj = dict[str, Any]

_iter_lines: Callable[[Any], Iterator[str]] = _iter_resp_lines
_load_kube_config: Callable[..., None] = k8s_config.load_kube_config
_load_incluster_config: Callable[..., None] = k8s_config.load_incluster_config

KINDS = ("pod", "service", "config_map", "secret", "network_policy")
"""Kinds the driver touches; of secrets only create and delete (never read: the agent's Role has no get).
NetworkPolicies are networking.k8s.io/v1's, the rest core/v1's."""

ASSIGNED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""Pods of every namespace that hold resources on a node (kube-scheduler's own field selector). A
watch with it reports a pod that finishes as DELETED (it leaves the selection)."""


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class KubernetesApiError(RuntimeError):
    """An API call failed in a way that may pass (404 namespace, 403, 5xx, connection): worth a retry.

    The message is the API server's own, short enough for a worker's reason.
    """


def api_error(exc: ApiException, doing: str) -> Exception:
    """``exc`` as a short error: ValueError when the server refused the object itself (400, 422: a
    retry cannot help), KubernetesApiError otherwise."""
    message = ""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        message = str(json.loads(exc.body or "{}").get("message") or "")
    text = f"{doing}: Kubernetes API {exc.status} {exc.reason or ''}".rstrip()
    text = f"{text}: {message}" if message else text
    return ValueError(text) if exc.status in (400, 422) else KubernetesApiError(text)


def annotation(obj: Obj, key: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    return str(value) if value is not None else None


def label(obj: Obj, key: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(key)
    return str(value) if value is not None else None


def namespace_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def age_s(obj: Obj) -> float:
    """Seconds since the object was created (0 when it says not)."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return 0.0
    created = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - created).total_seconds()


def load_api_client(
    kubeconfig: Path | None, context: str | None = None, pool_size: int = 32
) -> k8s_client.ApiClient:
    """An ApiClient from a kubeconfig file, or from the pod's service account when none is given."""
    configuration = k8s_client.Configuration()
    if kubeconfig is not None:
        _load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=configuration)
    else:
        _load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return k8s_client.ApiClient(configuration)


def _json(response: Any) -> Any:
    return json.loads(response.data or b"null")


class Kube:
    """Core/v1 (and networking/v1) calls used by the driver, on dicts. Thread-safe (urllib3 pool)."""

    def __init__(self, api_client: k8s_client.ApiClient, request_timeout_s: float = 30.0) -> None:
        self.api_client = api_client
        self.core = k8s_client.CoreV1Api(api_client)
        self.networking = k8s_client.NetworkingV1Api(api_client)
        self._timeout = request_timeout_s
        self._open: set[Any] = set()
        self._lock = threading.Lock()

    def _method(self, verb: str, kind: str) -> Callable[..., Any]:
        if kind not in KINDS:
            raise ValueError(f"unsupported kind {kind}")
        api = self.networking if kind == "network_policy" else self.core
        method: Callable[..., Any] = getattr(api, f"{verb}_namespaced_{kind}")
        return method

    def create(self, kind: str, namespace: str, body: Obj) -> Obj | None:
        """The created object, or None when one of that name already exists (409)."""
        try:
            created: Obj = _json(
                self._method("create", kind)(
                    namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            )
            return created
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            found: Obj = _json(
                self._method("read", kind)(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                )
            )
            return found
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, kind: str, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        """True when this call deleted it (or started its graceful deletion), False when absent."""
        kwargs: dict[str, Any] = {"propagation_policy": "Background"}
        if grace_period_s is not None:
            kwargs["grace_period_seconds"] = grace_period_s
        try:
            self._method("delete", kind)(
                name, namespace, _preload_content=False, _request_timeout=self._timeout, **kwargs
            )
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def patch(self, kind: str, namespace: str, name: str, body: Obj) -> Obj | None:
        """Strategic-merge patch; None when the object is gone."""
        try:
            patched: Obj = _json(
                self._method("patch", kind)(
                    name, namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            )
            return patched
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_items(self, kind: str, namespace: str, selector: str) -> tuple[list[Obj], str]:
        """Items and the list's resourceVersion (to watch from)."""
        result = _json(
            self._method("list", kind)(
                namespace, label_selector=selector, _preload_content=False, _request_timeout=self._timeout
            )
        )
        return list(result.get("items") or []), str(result["metadata"].get("resourceVersion", ""))

    def list_nodes(self) -> tuple[list[Obj], str]:
        result = _json(self.core.list_node(_preload_content=False, _request_timeout=self._timeout))
        return list(result.get("items") or []), str(result["metadata"].get("resourceVersion", ""))

    def list_assigned_pods(self) -> tuple[list[Obj], str]:
        """Pods of every namespace bound to a node and not finished (`ASSIGNED_PODS`)."""
        result = _json(
            self.core.list_pod_for_all_namespaces(
                field_selector=ASSIGNED_PODS, _preload_content=False, _request_timeout=self._timeout
            )
        )
        return list(result.get("items") or []), str(result["metadata"].get("resourceVersion", ""))

    def list_service_cidrs(self) -> list[str] | None:
        """The CIDRs of every ``networking.k8s.io/v1`` ServiceCIDR (the service networks the API server
        allocates ClusterIPs from); None when the server does not serve them (404) or the agent may not
        list them (403)."""
        try:
            result = _json(
                k8s_client.NetworkingV1Api(self.api_client).list_service_cidr(
                    _preload_content=False, _request_timeout=self._timeout
                )
            )
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise
        cidrs: list[str] = []
        for item in result.get("items") or []:
            cidrs += [c for c in (item.get("spec") or {}).get("cidrs") or [] if c not in cidrs]
        return cidrs

    def list_pod_metrics(self, namespace: str, selector: str) -> list[Obj] | None:
        """The ``metrics.k8s.io/v1beta1`` PodMetrics of the namespace's pods matching ``selector``; None when
        the cluster does not serve the metrics API (404, or 503 while its aggregated server is down) or the
        agent may not list it there (403)."""
        try:
            result = _json(
                k8s_client.CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                    "metrics.k8s.io",
                    "v1beta1",
                    namespace,
                    "pods",
                    label_selector=selector,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            )
        except ApiException as exc:
            if exc.status in (403, 404, 503):
                return None
            raise
        return list(result.get("items") or [])

    def patch_node(self, name: str, body: Obj) -> Obj:
        patched: Obj = _json(
            self.core.patch_node(name, body, _preload_content=False, _request_timeout=self._timeout)
        )
        return patched

    def _stream(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[str]:
        response = call(*args, _preload_content=False, **kwargs)
        with self._lock:
            self._open.add(response)
        try:
            yield from _iter_lines(response)
        finally:
            with self._lock:
                self._open.discard(response)
            response.release_conn()

    def watch(
        self,
        kind: str,
        namespace: str | None,
        selector: str,
        resource_version: str,
        timeout_s: int,
    ) -> Iterator[tuple[str, Obj]]:
        """Watch events (type, object) from ``resource_version`` until the server ends the watch.

        ``kind`` is a namespaced kind of `KINDS`, ``node``, or ``assigned_pod`` (`ASSIGNED_PODS`, every
        namespace; ``namespace`` and ``selector`` are then ignored).

        BOOKMARK events are yielded too (they carry only a newer resourceVersion). Raises
        `WatchExpired` on 410 Gone.
        """
        kwargs: dict[str, Any] = {
            "watch": True,
            "resource_version": resource_version,
            "timeout_seconds": timeout_s,
            "allow_watch_bookmarks": True,
            "_request_timeout": (10, timeout_s + 30),
        }
        if kind == "node":
            lines = self._stream(self.core.list_node, **kwargs)
        elif kind == "assigned_pod":
            lines = self._stream(
                self.core.list_pod_for_all_namespaces, field_selector=ASSIGNED_PODS, **kwargs
            )
        else:
            lines = self._stream(self._method("list", kind), namespace, label_selector=selector, **kwargs)
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise WatchExpired(status.get("message", "resource version too old"))
                raise ApiException(status=status.get("code", 500), reason=status.get("message"))
            yield event["type"], event["object"]

    def pod_log_lines(self, namespace: str, name: str, container: str, follow: bool) -> Iterator[str]:
        """The container's log from its first line; with ``follow`` until the container ends."""
        return self._stream(
            self.core.read_namespaced_pod_log,
            name,
            namespace,
            container=container,
            follow=follow,
            # A quiet log times out after 10 minutes; the follower reconnects and skips what it saw.
            _request_timeout=(10, 600) if follow else self._timeout,
        )

    def close_streams(self) -> None:
        """Abort every open watch and log stream (their iterators then end with an error)."""
        with self._lock:
            responses = list(self._open)
        for response in responses:
            with contextlib.suppress(Exception):  # best effort: the thread sees the stop flag too
                response.shutdown()
            with contextlib.suppress(Exception):
                response.close()
