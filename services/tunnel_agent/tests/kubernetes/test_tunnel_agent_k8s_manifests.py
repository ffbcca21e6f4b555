"""The worker pod and job objects the Kubernetes driver renders: every field deliberate.

The golden file pins the whole pod; the assertions below name the properties that matter most
(no privilege, GPU limits, escaping) so a golden update cannot silently drop them.
Regenerate the golden file after a deliberate change with RLARK_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_driver_helpers import header_spec, worker_spec
from pydantic import SecretStr
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.kubernetes import manifests, names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.network import SidecarAccess

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
OWNER = {"metadata": {"name": "rlark-job-a-job", "uid": "0d6f4c1e-1111-2222-3333-444455556666"}}
CONFIG = KubernetesDriverConfig(
    namespace="rlark-workers", shm_size="16Gi", network_sidecar_image="registry.example.com/rlark/net:1.0"
)
OWNER_REF = manifests.owner_reference(OWNER)
TOKEN = "tok-3f9a1c77e2b54d0d9a6b1e0c4f2d8a11"
ACCESS = SidecarAccess(
    agent_host="rlark-tunnel-agent.rlark-agent.svc",
    agent_port=8106,
    address=IPv4Interface("10.200.0.5/16"),
    mtu=65000,
    token=TOKEN,
)


def _check_golden(name: str, manifest: dict[str, Any]) -> None:
    rendered = yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=120)
    path = GOLDEN / name
    if os.environ.get("RLARK_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"golden file {path} missing: run with RLARK_UPDATE_GOLDEN=1 once"
    assert rendered == path.read_text(), (
        f"{name} differs from the golden file (RLARK_UPDATE_GOLDEN=1 to accept)"
    )


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_header_pod_matches_the_golden_snapshot() -> None:
    owner = manifests.owner_reference(OWNER)
    _check_golden("header_pod.yaml", manifests.worker_pod(header_spec("job-a", "gpu-node-1"), CONFIG, owner))


def test_plain_worker_pod_in_the_restricted_namespace_matches_the_golden_snapshot() -> None:
    pod = manifests.worker_pod(worker_spec("job-a", "gpu-node-2", 0), CONFIG, OWNER_REF)
    assert pod["metadata"]["namespace"] == "rlark-workers"
    _check_golden("worker_pod.yaml", pod)


def test_domain_worker_pod_with_network_sidecar_matches_the_golden_snapshot() -> None:
    owner = manifests.owner_reference(OWNER)
    spec = worker_spec(
        "job-a",
        "gpu-node-2",
        0,
        virtual_ip=IPv4Address("10.200.0.5"),
        env={"RLARK_DOMAIN_CIDR": "10.200.0.0/16"},
    )
    pod = manifests.worker_pod(spec, CONFIG, owner, ACCESS)
    _check_golden("domain_worker_pod.yaml", pod)
    namespace = manifests.worker_namespace(spec, CONFIG)
    assert pod["metadata"]["namespace"] == namespace == "rlark-workers-privileged"
    _check_golden("domain_worker_secret.yaml", manifests.worker_secret(spec, namespace, owner, TOKEN))
    assert TOKEN not in yaml.safe_dump(pod)  # only the Secret holds it


def test_the_sidecar_dials_its_agent_as_its_worker_with_the_token_from_the_workers_secret() -> None:
    spec = worker_spec("job-a", "n2", 0, virtual_ip=IPv4Address("10.200.0.5"))
    pod = manifests.worker_pod(spec, CONFIG, manifests.owner_reference(OWNER), ACCESS)
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["command"] == ["python", "-m", "rlark_tunnel_agent.tunnel.sidecar"]
    assert sidecar["args"] == [
        "--agent",
        "rlark-tunnel-agent.rlark-agent.svc:8106",
        "--worker",
        spec.worker_id,
        "--address",
        "10.200.0.5/16",
        "--mtu",
        "65000",
    ]
    assert _env(sidecar)["RLARK_TUNNEL_TOKEN"] == {
        "secretKeyRef": {"name": names.worker_secret_name(spec.worker_id), "key": "token"}
    }
    assert sidecar["restartPolicy"] == "Always"  # native sidecar: up before the worker starts
    assert "/sys/class/net/rlark0" in " ".join(sidecar["startupProbe"]["exec"]["command"])
    assert _env(pod["spec"]["containers"][0])["RLINF_COMM_NET_DEVICES"] == "rlark0"
    secret = manifests.worker_secret(spec, "rlark-workers", manifests.owner_reference(OWNER), TOKEN)
    assert secret["metadata"]["name"] == names.worker_secret_name(spec.worker_id)
    assert secret["stringData"] == {"token": TOKEN}
    assert secret["immutable"] is True
    assert secret["metadata"]["ownerReferences"][0]["uid"] == OWNER["metadata"]["uid"]


def test_without_the_agents_access_or_an_image_no_sidecar_is_rendered() -> None:
    spec = worker_spec("job-a", "n2", 0, virtual_ip=IPv4Address("10.200.0.5"))
    owner = manifests.owner_reference(OWNER)
    for pod in (
        manifests.worker_pod(spec, CONFIG, owner),
        manifests.worker_pod(spec, KubernetesDriverConfig(), owner, ACCESS),
    ):
        assert "initContainers" not in pod["spec"]
        env = _env(pod["spec"]["containers"][0])
        # No TUN device holds the virtual IP: Ray and collectives use the pod's own IP and eth0.
        assert env["RLINF_COMM_NET_DEVICES"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert env["RLARK_NODE_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["RLARK_VIRTUAL_IP"] == "10.200.0.5"


def test_job_objects_match_the_golden_snapshot() -> None:
    owner = manifests.owner_reference(OWNER)
    spec = header_spec("job-a", "gpu-node-1")
    _check_golden("job_service.yaml", manifests.headless_service("job-a", "rlark-workers", 6379, owner))
    namespace = manifests.worker_namespace(spec, CONFIG)  # its hostPath mount: the privileged one
    _check_golden("worker_config_map.yaml", manifests.worker_config_map(spec, namespace, owner))


def test_worker_container_has_no_privilege_and_drops_every_capability() -> None:
    pod = manifests.worker_pod(header_spec("job-a", "n1"), CONFIG, manifests.owner_reference(OWNER))
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in spec
    assert "hostPID" not in spec
    assert "hostIPC" not in spec
    (worker,) = spec["containers"]
    security = worker["securityContext"]
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # No virtual IP: no network sidecar; the outputs' files sidecar has no capability either.
    assert [c["name"] for c in spec["initContainers"]] == [manifests.FILES_CONTAINER]
    assert spec["initContainers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_only_the_network_sidecar_gets_net_admin_and_only_with_a_virtual_ip() -> None:
    spec = worker_spec("job-a", "n2", 0, virtual_ip=IPv4Address("10.200.0.5"))
    pod = manifests.worker_pod(spec, CONFIG, manifests.owner_reference(OWNER), ACCESS)
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert sidecar["securityContext"]["privileged"] is False
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert _env(pod["spec"]["containers"][0])["RLARK_NODE_IP"] == "10.200.0.5"
    no_image = KubernetesDriverConfig()
    assert (
        "initContainers"
        not in manifests.worker_pod(spec, no_image, manifests.owner_reference(OWNER), ACCESS)["spec"]
    )


def test_pod_is_bound_to_the_placed_node_with_equal_gpu_request_and_limit() -> None:
    pod = manifests.worker_pod(
        header_spec("job-a", "gpu-node-7", gpus=4), CONFIG, manifests.owner_reference(OWNER)
    )
    assert pod["spec"]["nodeName"] == "gpu-node-7"
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}
    cpu_only = manifests.worker_pod(
        header_spec("job-a", "n", gpus=0), KubernetesDriverConfig(), manifests.owner_reference(OWNER)
    )
    assert cpu_only["spec"]["containers"][0]["resources"] == {}


def test_user_env_is_escaped_and_cannot_override_platform_variables() -> None:
    spec = header_spec(
        "job-a", "n1", env={"PRICE": "$(HOME) costs $5", "RLARK_NODE_RANK": "7", "RLINF_X": "1"}
    )
    env = _env(manifests.worker_pod(spec, CONFIG, manifests.owner_reference(OWNER))["spec"]["containers"][0])
    assert env["PRICE"] == "$$(HOME) costs $$5"  # Kubernetes turns "$$" back into "$": no expansion
    assert env["RLARK_NODE_RANK"] == "0"
    assert env["RLARK_IS_HEADER"] == "1"
    assert env["RLARK_RUN_SCRIPT"] == "/opt/rlark/worker/run.sh"
    assert env["RLARK_NODE_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    names_in_order = [
        e["name"]
        for e in manifests.worker_pod(spec, CONFIG, manifests.owner_reference(OWNER))["spec"]["containers"][
            0
        ]["env"]
    ]
    assert names_in_order.count("RLARK_NODE_RANK") == 1


def test_only_a_worker_holding_gpus_is_asked_to_report_them_at_the_agents_interval() -> None:
    config = KubernetesDriverConfig(namespace="rlark-workers", gpu_sample_interval_s=15.0)
    owner = manifests.owner_reference(OWNER)
    holding = _env(
        manifests.worker_pod(header_spec("job-a", "n1", gpus=2), config, owner)["spec"]["containers"][0]
    )
    without = _env(
        manifests.worker_pod(header_spec("job-a", "n1", gpus=0), config, owner)["spec"]["containers"][0]
    )
    # A pod without a GPU request may still see its node's GPUs (NVIDIA_VISIBLE_DEVICES=all): not its own.
    assert holding["RLARK_GPU_SAMPLE_S"] == "15"
    assert "RLARK_GPU_SAMPLE_S" not in without


def test_mount_sources_map_to_host_path_pvc_csi_and_empty_dir_volumes() -> None:
    pod = manifests.worker_pod(header_spec("job-a", "n1"), CONFIG, manifests.owner_reference(OWNER))
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert volumes["mount-0"]["hostPath"] == {"path": "/data/datasets", "type": "Directory"}
    assert volumes["mount-1"]["persistentVolumeClaim"] == {"claimName": "checkpoints", "readOnly": False}
    assert mounts["mount-1"]["subPath"] == "job-a"
    assert volumes["mount-2"]["csi"] == {
        "driver": "s3.csi.example.com",
        "readOnly": True,
        "volumeAttributes": {"bucket": "models", "prefix": "a"},
    }
    assert volumes["mount-3"] == {"name": "mount-3", "emptyDir": {}}


def test_spec_pvc_and_object_storage_mounts_become_a_claim_and_a_csi_volume_naming_the_secret() -> None:
    config = CONFIG.model_copy(update={"object_storage_csi_driver": "s3.csi.aws.com"})
    spec = header_spec(
        "job-a",
        "n1",
        mounts=(
            Mount(type=MountType.PVC, source="checkpoints", target="/ckpt"),
            Mount(
                type=MountType.OBJECT_STORAGE,
                source="s3://models/rl/run-7",
                target="/models",
                read_only=True,
                secret_ref="s3-reader",
            ),
        ),
    )
    pod = manifests.worker_pod(spec, config, manifests.owner_reference(OWNER))
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["mount-0"]["persistentVolumeClaim"] == {"claimName": "checkpoints", "readOnly": False}
    assert volumes["mount-1"]["csi"] == {
        "driver": "s3.csi.aws.com",
        "readOnly": True,
        "volumeAttributes": {"bucketName": "models", "prefix": "rl/run-7/"},
        "nodePublishSecretRef": {"name": names.bucket_secret_name(spec.worker_id, 0)},
    }
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["mount-1"] == {"name": "mount-1", "mountPath": "/models", "readOnly": True}


CREDENTIALS = (
    '{"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3cr3t-value", "endpoint": "https://s3.lab:9000"}'
)


def test_each_credential_secret_of_object_storage_mounts_becomes_one_secret_the_csi_volumes_name() -> None:
    config = CONFIG.model_copy(update={"object_storage_csi_driver": "s3.csi.aws.com"})
    bucket = Mount(
        type=MountType.OBJECT_STORAGE, source="s3://ckpt/run", target="/ckpt", secret_ref="rw-keys"
    )
    spec = header_spec(
        "job-a",
        "n1",
        mounts=(
            Mount(type=MountType.OBJECT_STORAGE, source="s3://data", target="/data", secret_ref="ro-keys"),
            bucket,
            bucket.model_copy(update={"source": "s3://ckpt/tb", "target": "/tb"}),
        ),
        secrets=("ro-keys", "rw-keys"),
        secret_values={
            "ro-keys": SecretStr(CREDENTIALS),
            "rw-keys": SecretStr(CREDENTIALS.replace("AKIA", "AKIB")),
        },
    )
    owner = manifests.owner_reference(OWNER)
    secrets = manifests.bucket_secrets(spec, "ns", owner)
    assert [s["metadata"]["name"] for s in secrets] == [
        names.bucket_secret_name(spec.worker_id, 0),
        names.bucket_secret_name(spec.worker_id, 1),
    ]
    ro, rw = (s["stringData"] for s in secrets)
    assert ro == {
        "accessKeyID": "AKIAEXAMPLE",
        "secretAccessKey": "s3cr3t-value",
        "endpoint": "https://s3.lab:9000",
        "region": "us-east-1",
        "key_id": "AKIAEXAMPLE",
        "access_key": "s3cr3t-value",
    }
    assert rw["accessKeyID"] == "AKIBEXAMPLE"
    assert all(s["immutable"] and s["metadata"]["ownerReferences"] == [owner] for s in secrets)
    pod = manifests.worker_pod(spec, config, owner)
    refs = [v["csi"]["nodePublishSecretRef"]["name"] for v in pod["spec"]["volumes"] if "csi" in v]
    assert refs == [
        secrets[0]["metadata"]["name"],
        secrets[1]["metadata"]["name"],
        secrets[1]["metadata"]["name"],
    ]
    assert "s3cr3t-value" not in str(pod)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "rw-keys: the secret's value did not reach the agent"),
        ({"rw-keys": SecretStr('{"accessKeyId": "AKIA", "secretAccessKey": "s3cr3t-value"}')}, "endpoint"),
        ({"rw-keys": SecretStr("s3cr3t-value")}, "not a JSON object"),
    ],
)
def test_a_bucket_credential_secret_that_is_missing_or_no_credential_document_is_refused_naming_it(
    values: dict[str, SecretStr], message: str
) -> None:
    mount = Mount(type=MountType.OBJECT_STORAGE, source="s3://ckpt", target="/ckpt", secret_ref="rw-keys")
    spec = header_spec("job-a", "n1", mounts=(mount,), secrets=("rw-keys",), secret_values=values)
    with pytest.raises(ValueError, match=message) as refused:
        manifests.bucket_secrets(spec, "ns", manifests.owner_reference(OWNER))
    assert "s3cr3t-value" not in str(refused.value)


@pytest.mark.parametrize(
    ("driver", "secret_ref", "source", "message"),
    [
        ("", "s3-reader", "s3://models", "RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER"),
        ("s3.csi.aws.com", None, "s3://models", "secretRef"),
        ("s3.csi.aws.com", "s3-reader", "models", "bucket URL"),
    ],
)
def test_object_storage_mounts_the_cluster_cannot_honour_are_refused_with_the_reason(
    driver: str, secret_ref: str | None, source: str, message: str
) -> None:
    config = CONFIG.model_copy(update={"object_storage_csi_driver": driver})
    mount = Mount(type=MountType.OBJECT_STORAGE, source=source, target="/models", secret_ref=secret_ref)
    with pytest.raises(ValueError, match=message):
        manifests.worker_pod(
            header_spec("job-a", "n1", mounts=(mount,)), config, manifests.owner_reference(OWNER)
        )


@pytest.mark.parametrize("source", ["relative/path", "/data/../etc", "pvc://", "csi://?a=b"])
def test_unusable_mount_sources_are_refused(source: str) -> None:
    spec = header_spec("job-a", "n1", mounts=(Mount(type=MountType.HOST_PATH, source=source, target="/x"),))
    with pytest.raises(ValueError, match="/x"):
        manifests.worker_pod(spec, CONFIG, manifests.owner_reference(OWNER))


def test_worker_config_map_carries_scripts_keys_and_the_recorded_spec() -> None:
    spec = header_spec("job-a", "n1")
    cm = manifests.worker_config_map(spec, "ns", manifests.owner_reference(OWNER))
    assert cm["data"]["authorized_keys"].splitlines() == list(spec.ssh_public_keys)
    assert cm["data"]["prepare.sh"] == spec.prepare_script
    assert cm["data"]["run.sh"] == spec.run_script
    assert manifests.spec_from_config_map(cm) == spec
    assert "PRIVATE" not in str(cm)


def test_names_are_deterministic_dns_labels_and_keep_distinct_ids_distinct() -> None:
    long_id = "j" * 80 + "-header-0"
    assert names.pod_name("job-a-header-0") == "rlark-job-a-header-0"
    assert names.pod_name(long_id) == names.pod_name(long_id)
    assert len(names.pod_name(long_id)) <= 63
    assert len(names.worker_config_name(long_id)) <= 63
    assert names.worker_config_name(long_id).endswith("-cfg")
    assert names.pod_name("a.b-0") != names.pod_name("a-b-0")
    assert names.label_value(long_id) != names.label_value(long_id + "x")
    assert len(names.label_value(long_id)) <= 63
    assert names.label_value("job-a") == "job-a"
    assert names.worker_dns_name("job-a-header-0", "job-a", "ns") == "rlark-job-a-header-0.rlark-job-a.ns.svc"


PLAIN_MOUNTS = (
    Mount(type=MountType.HOST_PATH, source="pvc://checkpoints/job-a", target="/ckpt"),
    Mount(type=MountType.HOST_PATH, source="csi://s3.csi.example.com?bucket=models", target="/models"),
    Mount(type=MountType.EMPTY_DIR, target="/scratch"),
    Mount(type=MountType.PVC, source="datasets", target="/datasets", read_only=True),
)
HOST_PATH = Mount(type=MountType.HOST_PATH, source="/data/datasets", target="/datasets", read_only=True)


def test_a_worker_without_host_path_or_sidecar_goes_to_the_restricted_namespace() -> None:
    for spec in (
        header_spec("job-a", "n1", mounts=PLAIN_MOUNTS),
        worker_spec("job-a", "n2", 0),
        # A virtual IP without a sidecar image: only exported, no capability, so still restricted.
        worker_spec("job-a", "n2", 1, num_nodes=3, virtual_ip=IPv4Address("10.200.0.6")),
    ):
        no_image = KubernetesDriverConfig()
        assert manifests.privileged_needs(spec, no_image) == ()
        assert manifests.worker_namespace(spec, no_image) == "rlark-workers"
    assert (
        manifests.worker_namespace(header_spec("job-a", "n1", mounts=PLAIN_MOUNTS), CONFIG) == "rlark-workers"
    )


def test_a_host_path_mount_or_the_network_sidecar_sends_the_worker_to_the_privileged_namespace() -> None:
    host_path = header_spec("job-a", "n1", mounts=(*PLAIN_MOUNTS, HOST_PATH))
    assert manifests.privileged_needs(host_path, CONFIG) == ("hostPath mount /datasets",)
    domain = worker_spec("job-a", "n2", 0, virtual_ip=IPv4Address("10.200.0.5"))
    assert manifests.privileged_needs(domain, CONFIG) == ("network sidecar (NET_ADMIN, /dev/net/tun)",)
    for spec in (host_path, domain):
        assert manifests.worker_namespace(spec, CONFIG) == "rlark-workers-privileged"
        assert manifests.worker_pod(spec, CONFIG, OWNER_REF, ACCESS)["metadata"]["namespace"] == (
            "rlark-workers-privileged"
        )
    # The namespaces are settings; naming the same one twice puts every worker there.
    one = KubernetesDriverConfig(namespace="gpu-jobs", privileged_namespace="gpu-jobs")
    assert one.worker_namespaces == ("gpu-jobs",)
    assert manifests.worker_namespace(host_path, one) == "gpu-jobs"
    assert "dnsConfig" not in manifests.worker_pod(host_path, one, OWNER_REF)["spec"]


def test_each_pod_also_searches_the_other_worker_namespace_so_peers_resolve_across_both() -> None:
    plain = manifests.worker_pod(worker_spec("job-a", "n2", 0), CONFIG, OWNER_REF)
    privileged = manifests.worker_pod(header_spec("job-a", "n1"), CONFIG, OWNER_REF)
    assert plain["spec"]["dnsConfig"] == {"searches": ["rlark-workers-privileged.svc.cluster.local"]}
    assert privileged["spec"]["dnsConfig"] == {"searches": ["rlark-workers.svc.cluster.local"]}
    # Both answer to <hostname>.<job service>: the same subdomain, a headless Service in each namespace.
    assert plain["spec"]["subdomain"] == privileged["spec"]["subdomain"] == names.service_name("job-a")


def test_a_namespace_setting_that_is_not_a_dns_label_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="privileged_namespace"):
        KubernetesDriverConfig(privileged_namespace="Workers_Privileged")


def test_a_worker_with_a_ray_token_sees_it_only_in_its_own_secret_never_in_its_config_map_or_pod_spec() -> (
    None
):
    ray = "f" * 64
    spec = header_spec("job-a", "gpu-node-1").model_copy(
        update={"ray_token": SecretStr(ray), "ray_authenticated": True}
    )
    config_map = manifests.worker_config_map(spec, "rlark-workers", OWNER_REF)
    pod = manifests.worker_pod(spec, CONFIG, OWNER_REF)
    secret = manifests.worker_secret(spec, "rlark-workers", OWNER_REF)
    assert ray not in yaml.safe_dump(config_map)
    assert ray not in yaml.safe_dump(pod)
    assert secret["stringData"] == {"ray-token": ray}
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "rlark-secrets"]
    assert volume["secret"] == {
        "secretName": secret["metadata"]["name"],
        "items": [{"key": "ray-token", "path": ".ray-token"}],
        "defaultMode": 0o440,
    }
    worker = pod["spec"]["containers"][0]
    assert {"name": "rlark-secrets", "mountPath": manifests.SECRETS_MOUNT, "readOnly": True} in worker[
        "volumeMounts"
    ]
    env = _env(worker)
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN_PATH"]) == (
        "token",
        f"{manifests.SECRETS_MOUNT}/.ray-token",
    )
    # A restarted agent's recorded spec (the ConfigMap's) still mounts the token its Secret holds.
    recorded = manifests.spec_from_config_map(config_map)
    assert recorded.ray_token is None
    assert recorded.ray_authenticated
    assert manifests.worker_pod(recorded, CONFIG, OWNER_REF)["spec"]["volumes"] == pod["spec"]["volumes"]


def test_a_jobs_network_policy_lets_in_and_out_only_the_jobs_pods_the_agent_dns_and_public_addresses() -> (
    None
):
    config = KubernetesDriverConfig(namespace="rlark-workers", agent_cidrs=("192.0.2.7",))
    policy = manifests.job_network_policy("job-a", "rlark-workers", config, OWNER_REF)
    spec = policy["spec"]
    assert policy["metadata"]["ownerReferences"] == [OWNER_REF]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["podSelector"]["matchLabels"][names.JOB_LABEL] == "job-a"
    [ingress] = spec["ingress"]
    job_pods, agent_pods, agent_host = ingress["from"]
    assert job_pods["podSelector"]["matchLabels"][names.JOB_LABEL] == "job-a"
    assert job_pods["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "rlark-workers",
        "rlark-workers-privileged",
    ]
    assert agent_pods["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "rlark-agent"}
    assert agent_host == {"ipBlock": {"cidr": "192.0.2.7/32"}}
    same, dns, public = spec["egress"]
    assert same["to"] == ingress["from"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert public["to"][0]["ipBlock"]["except"] == list(config.worker_egress_except)
    assert "10.0.0.0/8" in config.worker_egress_except
    assert "169.254.0.0/16" in config.worker_egress_except  # cloud metadata


def test_the_policys_cidrs_are_checked_when_the_agent_starts() -> None:
    with pytest.raises(ValueError, match="agent_cidrs"):
        KubernetesDriverConfig(agent_cidrs=("not-a-network",))
