"""The files sidecar in a worker pod (ADR 0013): only for a worker declaring outputs or a ``tensorboardDir`` a
volume holds; it mounts exactly those volumes, read-only, at the worker's own paths; it runs as the job's
unprivileged uid with no capability, no privilege escalation and small requests; its secret reaches it only
by reference to the worker's Secret. (Pod Security ``restricted`` admitting it: the API server judges that in
``test_tunnel_agent_k8s_pod_security.py``.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_driver_helpers import header_spec, worker_spec
from rlark_tunnel_agent.files_server import roots_from_json
from rlark_tunnel_agent.runtime.driver import Mount, MountType, OutputRoot
from rlark_tunnel_agent.runtime.kubernetes import manifests, names
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig

pytestmark = pytest.mark.unit

OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "0d6f4c1e-1111-2222-3333-444455556666"}
CONFIG = KubernetesDriverConfig(
    namespace="rlark-workers", files_sidecar_image="registry.example.com/rlark/agent:1.0"
)
MOUNTS = (
    Mount(type=MountType.HOST_PATH, source="pvc://checkpoints/job-a", target="/ckpt"),
    Mount(type=MountType.EMPTY_DIR, target="/scratch"),
    Mount(type=MountType.HOST_PATH, source="csi://s3.csi.example.com?bucket=models", target="/models"),
)


def _files_sidecar(pod: dict[str, Any]) -> dict[str, Any] | None:
    found = [c for c in pod["spec"].get("initContainers", []) if c["name"] == manifests.FILES_CONTAINER]
    return found[0] if found else None


def _arg(container: dict[str, Any], name: str) -> str | None:
    args = container["args"]
    return args[args.index(name) + 1] if name in args else None


def _pod(**extra: Any) -> dict[str, Any]:
    return manifests.worker_pod(header_spec("job-a", "n1", mounts=MOUNTS, **extra), CONFIG, OWNER)


def test_the_sidecar_mounts_only_the_volumes_holding_the_outputs_read_only_at_the_workers_paths() -> None:
    pod = _pod(outputs=("/ckpt/out", "/scratch/eval"), tensorboard_dir="/scratch/tb")
    sidecar = _files_sidecar(pod)
    assert sidecar is not None
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    assert set(mounts) == {"/ckpt", "/scratch", "/tmp"}  # not /models, not $HOME, no ConfigMap
    assert mounts["/ckpt"] == {"name": "mount-0", "mountPath": "/ckpt", "readOnly": True, "subPath": "job-a"}
    assert mounts["/scratch"] == {"name": "mount-1", "mountPath": "/scratch", "readOnly": True}
    (worker,) = pod["spec"]["containers"]
    assert {"name": "mount-1", "mountPath": "/scratch", "readOnly": False} in worker["volumeMounts"]
    assert {"name": "files-tmp", "emptyDir": {"sizeLimit": "256Mi"}} in pod["spec"]["volumes"]
    roots = roots_from_json(_arg(sidecar, "--roots") or "")
    assert roots == [
        OutputRoot("/ckpt/out", "/ckpt", ("out",)),
        OutputRoot("/scratch/eval", "/scratch", ("eval",)),
    ]
    assert _arg(sidecar, "--tensorboard-dir") == "/scratch/tb"


def test_relative_outputs_are_served_from_the_workers_home() -> None:
    sidecar = _files_sidecar(_pod(outputs=("results",), tensorboard_dir="runs/tb"))
    assert sidecar is not None
    home = {"name": "home", "mountPath": CONFIG.home_dir, "readOnly": True}
    assert home in sidecar["volumeMounts"]
    assert json.loads(_arg(sidecar, "--roots") or "") == [
        {"path": "results", "anchor": CONFIG.home_dir, "parts": ["work", "results"]}
    ]
    assert _arg(sidecar, "--tensorboard-dir") == f"{CONFIG.home_dir}/work/runs/tb"


def test_the_sidecar_runs_as_the_jobs_uid_without_privilege_and_with_small_requests() -> None:
    sidecar = _files_sidecar(_pod(outputs=("/ckpt/out",)))
    assert sidecar is not None
    security = sidecar["securityContext"]
    assert security["runAsNonRoot"] is True
    assert (security["runAsUser"], security["runAsGroup"]) == (CONFIG.run_as_user, CONFIG.run_as_group)
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert sidecar["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "2Gi"},
    }
    assert sidecar["restartPolicy"] == "Always"  # native sidecar: listening before the worker starts
    assert sidecar["image"] == "registry.example.com/rlark/agent:1.0"
    assert sidecar["ports"] == [{"name": "rlark-files", "containerPort": 8109, "protocol": "TCP"}]
    assert _arg(sidecar, "--host") == "$(RLARK_POD_IP)"


def test_the_secret_reaches_only_the_sidecar_by_reference_to_the_workers_secret() -> None:
    spec = header_spec("job-a", "n1", mounts=MOUNTS, outputs=("/ckpt/out",))
    pod = manifests.worker_pod(spec, CONFIG, OWNER)
    sidecar = _files_sidecar(pod)
    assert sidecar is not None
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["RLARK_FILES_SECRET"] == {
        "name": "RLARK_FILES_SECRET",
        "valueFrom": {"secretKeyRef": {"name": names.worker_secret_name(spec.worker_id), "key": "files"}},
    }
    assert all(e["name"] != "RLARK_FILES_SECRET" for e in pod["spec"]["containers"][0]["env"])
    assert "shareProcessNamespace" not in pod["spec"]  # the worker cannot read the sidecar's environment
    secret = manifests.worker_secret(spec, "rlark-workers", OWNER, files_secret="s3cr3t")
    assert secret["stringData"] == {"files": "s3cr3t"}
    assert "s3cr3t" not in json.dumps(pod)


@pytest.mark.parametrize(
    ("spec", "config"),
    [
        (header_spec("job-a", "n1", mounts=MOUNTS, outputs=()), CONFIG),  # nothing declared
        (worker_spec("job-a", "n2", 0), CONFIG),
        (
            header_spec("job-a", "n1", mounts=MOUNTS, outputs=("/ckpt/out",)),
            KubernetesDriverConfig(),
        ),  # no image
        (
            header_spec("job-a", "n1", mounts=MOUNTS, outputs=("/ckpt/out",)),
            CONFIG.model_copy(update={"run_as_user": None}),  # the job's uid is the image's: unknown
        ),
        (header_spec("job-a", "n1", mounts=MOUNTS, outputs=("/opt/results",)), CONFIG),  # in no volume
    ],
)
def test_no_sidecar_without_something_a_volume_holds_an_image_and_the_jobs_uid(
    spec: Any, config: KubernetesDriverConfig
) -> None:
    assert not manifests.wants_files_sidecar(spec, config)
    assert _files_sidecar(manifests.worker_pod(spec, config, OWNER)) is None


def test_the_network_sidecars_image_serves_when_no_files_image_is_set() -> None:
    config = KubernetesDriverConfig(network_sidecar_image="registry.example.com/rlark/net:1.0")
    sidecar = _files_sidecar(
        manifests.worker_pod(header_spec("job-a", "n1", mounts=MOUNTS, outputs=("/ckpt/out",)), config, OWNER)
    )
    assert sidecar is not None
    assert sidecar["image"] == "registry.example.com/rlark/net:1.0"


def test_the_files_sidecar_keeps_a_worker_in_the_restricted_namespace() -> None:
    spec = header_spec("job-a", "n1", mounts=MOUNTS, outputs=("/ckpt/out",), tensorboard_dir="/scratch/tb")
    assert manifests.wants_files_sidecar(spec, CONFIG)
    assert manifests.privileged_needs(spec, CONFIG) == ()
    assert manifests.worker_namespace(spec, CONFIG) == CONFIG.namespace
