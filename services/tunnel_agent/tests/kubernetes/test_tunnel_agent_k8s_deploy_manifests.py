"""deploy/kubernetes and deploy/agent pass the real API server's validation (server-side dry-run),
and the agent's RBAC grants what the driver needs and nothing more (SubjectAccessReview)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import FailToCreateError, create_from_dict
from rlark_devinfra.paths import repo_root
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube

pytestmark = pytest.mark.k8s

AGENT_USER = "system:serviceaccount:rlark-agent:rlark-tunnel-agent"
WORKER_NAMESPACES = ("rlark-workers", "rlark-workers-privileged")
"""The agent's RLARK_NAMESPACE (Pod Security restricted) and RLARK_PRIVILEGED_NAMESPACE."""


def _documents(directory: Path, extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in [*kustomization["resources"], *extra]:
        docs += [d for d in yaml.safe_load_all((directory / name).read_text()) if d]
    return docs


def _create_namespaces(kube: Kube, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        if doc["kind"] == "Namespace":
            try:
                kube.core.create_namespace(doc)
            except ApiException as exc:
                if exc.status != 409:
                    raise


@pytest.mark.parametrize(
    ("folder", "extra"),
    [("deploy/kubernetes", ("secrets.example.yaml",)), ("deploy/agent", ())],
)
def test_deployment_manifests_pass_server_side_dry_run(
    admin_kube: Kube, folder: str, extra: tuple[str, ...]
) -> None:
    docs = _documents(repo_root() / folder, extra)
    kinds = {d["kind"] for d in docs}
    assert "Namespace" in kinds
    assert "Deployment" in kinds
    _create_namespaces(admin_kube, docs)  # namespaced objects are validated inside them
    for doc in docs:
        if doc["kind"] == "Namespace":
            continue
        try:
            create_from_dict(admin_kube.api_client, doc, dry_run="All")
        except FailToCreateError as exc:
            # AlreadyExists comes from storage, after decoding, defaulting, admission and
            # validation passed (the RBAC test below creates the agent's objects for real).
            if all(e.status == 409 for e in exc.api_exceptions):
                continue
            pytest.fail(f"{folder}: {doc['kind']}/{doc['metadata']['name']} rejected: {exc}")
        except Exception as exc:
            pytest.fail(f"{folder}: {doc['kind']}/{doc['metadata']['name']} rejected: {exc}")


def test_the_csi_driver_s_manifests_pass_server_side_dry_run_and_match_the_test_bed_s(
    admin_kube: Kube,
) -> None:
    """deploy/agent/csi (ADR 0024): the CSIDriver is the one the real-pods test bed creates, and the node
    plugin's DaemonSet runs `csi-node` privileged with the kubelet directory shared both ways."""
    from rlark_devinfra.k8s.realnode import csi_driver_manifest

    docs = _documents(repo_root() / "deploy/agent/csi")
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"Namespace", "CSIDriver", "DaemonSet"}
    assert by_kind["CSIDriver"]["metadata"]["name"] == csi_driver_manifest()["metadata"]["name"]
    assert by_kind["CSIDriver"]["spec"] == csi_driver_manifest()["spec"]
    [container] = by_kind["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "csi-node"
    assert f"--driver-name={csi_driver_manifest()['metadata']['name']}" in container["args"]
    assert container["securityContext"]["privileged"] is True
    kubelet = next(m for m in container["volumeMounts"] if m["mountPath"] == "/var/lib/kubelet")
    assert kubelet["mountPropagation"] == "Bidirectional"
    _create_namespaces(admin_kube, docs)
    for doc in docs:
        if doc["kind"] == "Namespace":
            continue
        try:
            create_from_dict(admin_kube.api_client, doc, dry_run="All")
        except FailToCreateError as exc:
            if all(e.status == 409 for e in exc.api_exceptions):
                continue  # the test bed's own CSIDriver of that name
            pytest.fail(f"deploy/agent/csi: {doc['kind']}/{doc['metadata']['name']} rejected: {exc}")


def test_control_plane_has_migrate_jobs_api_deployments_and_services_for_every_service() -> None:
    docs = _documents(repo_root() / "deploy/kubernetes")
    by_kind: dict[str, set[str]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], set()).add(doc["metadata"]["name"])
    for service in ("gateway", "inventory", "keys", "netdomain", "scheduler"):
        assert f"{service}-migrate" in by_kind["Job"]
        assert f"{service}-api" in by_kind["Deployment"]
        assert service in by_kind["Service"]
    for service in ("inventory", "keys", "netdomain", "scheduler"):
        assert f"{service}-worker" in by_kind["Deployment"]
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                security = container["securityContext"]
                assert security["allowPrivilegeEscalation"] is False
                assert security["privileged"] is False
                assert security["capabilities"] == {"drop": ["ALL"]}


def _allowed(
    kube: Kube,
    verb: str,
    resource: str,
    namespace: str = "",
    subresource: str = "",
    group: str = "",
    name: str = "",
) -> bool:
    attributes = k8s_client.V1ResourceAttributes(
        verb=verb,
        resource=resource,
        name=name or None,
        namespace=namespace or None,
        subresource=subresource or None,
        group=group or None,
    )
    review = k8s_client.V1SubjectAccessReview(
        spec=k8s_client.V1SubjectAccessReviewSpec(
            user=AGENT_USER, groups=["system:serviceaccounts"], resource_attributes=attributes
        )
    )
    result = k8s_client.AuthorizationV1Api(kube.api_client).create_subject_access_review(review)
    return bool(result.status.allowed)


def _replace(kube: Kube, doc: dict[str, Any]) -> None:
    rbac = k8s_client.RbacAuthorizationV1Api(kube.api_client)
    name, namespace = doc["metadata"]["name"], doc["metadata"].get("namespace")
    replace = {
        "ServiceAccount": lambda: kube.core.replace_namespaced_service_account(name, namespace, doc),
        "ClusterRole": lambda: rbac.replace_cluster_role(name, doc),
        "ClusterRoleBinding": lambda: rbac.replace_cluster_role_binding(name, doc),
        "Role": lambda: rbac.replace_namespaced_role(name, namespace, doc),
        "RoleBinding": lambda: rbac.replace_namespaced_role_binding(name, namespace, doc),
    }
    replace[doc["kind"]]()


def test_the_agent_role_grants_what_the_driver_needs_and_nothing_more(admin_kube: Kube) -> None:
    docs = _documents(repo_root() / "deploy/agent")
    _create_namespaces(admin_kube, docs)
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            try:
                create_from_dict(admin_kube.api_client, doc)
            except Exception as exc:  # FailToCreateError wraps 409 on a re-run against kept servers
                if "AlreadyExists" not in str(exc):
                    raise
                _replace(admin_kube, doc)  # kept servers hold an older version: test this one
    for verb in ("get", "list", "watch", "patch"):
        assert _allowed(admin_kube, verb, "nodes"), verb
    # What other pods hold on each node (GPUs of pods RLark did not create): list and watch, anywhere.
    for verb in ("list", "watch"):
        assert _allowed(admin_kube, verb, "pods", "kube-system"), verb
    assert not _allowed(admin_kube, "delete", "nodes")
    # The cluster's service networks, reported so that no network domain overlaps them: list only.
    assert _allowed(admin_kube, "list", "servicecidrs", group="networking.k8s.io")
    assert not _allowed(admin_kube, "create", "servicecidrs", group="networking.k8s.io")
    assert not _allowed(admin_kube, "create", "secrets", "rlark-agent")
    # Its durable state (tunnel host keys, ADR 0018): get and patch that one Secret, by name, nothing more.
    for verb in ("get", "patch"):
        assert _allowed(admin_kube, verb, "secrets", "rlark-agent", name="rlark-tunnel-agent-state"), verb
        assert not _allowed(admin_kube, verb, "secrets", "rlark-agent", name="rlark-agent-credential"), verb
    for verb in ("list", "watch", "delete"):
        assert not _allowed(admin_kube, verb, "secrets", "rlark-agent"), verb
    assert not _allowed(admin_kube, "create", "pods", "default")
    assert not _allowed(admin_kube, "list", "pods", "kube-system", group="metrics.k8s.io")
    assert not _allowed(admin_kube, "get", "pods", "kube-system", "log")
    for verb in ("create", "delete", "patch", "update"):
        assert not _allowed(admin_kube, verb, "pods", "kube-system"), verb

    # The same grants in both worker namespaces (restricted and privileged).
    for workers in WORKER_NAMESPACES:
        for resource in ("pods", "services", "configmaps"):
            for verb in ("get", "list", "watch", "create", "delete"):
                assert _allowed(admin_kube, verb, resource, workers), (verb, resource, workers)
        assert _allowed(admin_kube, "patch", "configmaps", workers)
        assert _allowed(admin_kube, "get", "pods", workers, "log")
        # Network sidecar tokens: the agent writes and removes its workers' Secrets, never reads any.
        assert _allowed(admin_kube, "create", "secrets", workers)
        assert _allowed(admin_kube, "delete", "secrets", workers)
        for verb in ("get", "list", "watch", "patch", "update"):
            assert not _allowed(admin_kube, verb, "secrets", workers), (verb, workers)
        # Workers' CPU and memory (ADR 0017): their pods' metrics, listed; nothing else of the metrics API.
        assert _allowed(admin_kube, "list", "pods", workers, group="metrics.k8s.io")
        assert not _allowed(admin_kube, "list", "nodes", group="metrics.k8s.io")
        assert not _allowed(admin_kube, "create", "pods", workers, "exec")
        assert not _allowed(admin_kube, "create", "roles", workers)
        assert not _allowed(admin_kube, "update", "pods", workers)


def test_the_worker_namespaces_enforce_restricted_and_privileged_and_the_agent_names_both() -> None:
    docs = _documents(repo_root() / "deploy/agent")
    labels = {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d["kind"] == "Namespace"}
    restricted, privileged = WORKER_NAMESPACES
    enforce = "pod-security.kubernetes.io/enforce"
    assert labels[restricted][enforce] == "restricted"
    assert labels[privileged][enforce] == "privileged"
    for name in WORKER_NAMESPACES:  # every pod that is not restricted is reported, in both
        assert labels[name]["pod-security.kubernetes.io/warn"] == "restricted"
        assert labels[name]["pod-security.kubernetes.io/audit"] == "restricted"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["RLARK_NAMESPACE"], env["RLARK_PRIVILEGED_NAMESPACE"]) == WORKER_NAMESPACES


def test_the_agent_gets_the_gateway_url_and_its_credential_only_from_a_secret() -> None:
    docs = _documents(repo_root() / "deploy/agent")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "rlark-tunnel-agent"
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["RLARK_GATEWAY_URL"]["value"].startswith("https://")
    assert env["RLARK_AGENT_CREDENTIAL"]["valueFrom"]["secretKeyRef"] == {
        "name": "rlark-agent-credential",
        "key": "credential",
    }
    assert "value" not in env["RLARK_AGENT_CREDENTIAL"]
    assert env["RLARK_RUNTIME"]["value"] == "kubernetes"
    # Tunnel host keys outlive the pod: in the Secret the manifests create, not on the emptyDir.
    (state,) = [d for d in docs if d["kind"] == "Secret"]
    assert env["RLARK_STATE_SECRET"]["value"] == state["metadata"]["name"] == "rlark-tunnel-agent-state"
    assert env["RLARK_STATE_SECRET_NAMESPACE"]["value"] == state["metadata"]["namespace"]
    assert "data" not in state  # the agent fills it; apply never overwrites what it wrote
    security = container["securityContext"]
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}


def test_the_agents_service_exposes_the_port_the_network_sidecars_dial() -> None:
    docs = _documents(repo_root() / "deploy/agent")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (service,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "rlark-tunnel-agent"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container_ports[ports["sidecars"]["targetPort"]] == int(env["RLARK_TUNNEL_SIDECAR_LISTEN_PORT"])
    assert ports["sidecars"]["port"] == int(env["RLARK_TUNNEL_SIDECAR_ADVERTISE_PORT"])
    meta = service["metadata"]
    assert env["RLARK_TUNNEL_SIDECAR_ADVERTISE_HOST"] == f"{meta['name']}.{meta['namespace']}.svc"
    assert env["RLARK_K8S_NETWORK_SIDECAR_IMAGE"] == container["image"]  # the image holds the sidecar


def test_the_peers_service_exposes_every_port_of_the_agents_tunnel_range() -> None:
    docs = _documents(repo_root() / "deploy/agent")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (peers,) = [
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "rlark-tunnel-agent-peers"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    first, count = int(env["RLARK_TUNNEL_LISTEN_PORT"]), int(env["RLARK_TUNNEL_LISTEN_PORTS"])
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    exposed = sorted(container_ports[p["targetPort"]] for p in peers["spec"]["ports"])
    assert exposed == list(range(first, first + count))
    assert sorted(p["port"] for p in peers["spec"]["ports"]) == exposed  # peers dial the port announced
    assert peers["spec"]["type"] == "LoadBalancer"
    assert peers["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
