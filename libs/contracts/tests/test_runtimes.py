"""Which mount types each cluster runtime gives a worker, and the sentence a refusal says in every language."""

from __future__ import annotations

import pytest
from rlark_contracts.messages import LANGUAGES, catalogue
from rlark_contracts.runtimes import KUBERNETES, LOCAL, MOUNT_TYPES, mount_refusal, mounts

pytestmark = pytest.mark.unit

ALL_TYPES = ("hostPath", "emptyDir", "pvc", "objectStorage")


def test_a_local_cluster_mounts_host_paths_empty_dirs_and_buckets_and_kubernetes_every_type() -> None:
    assert [t for t in ALL_TYPES if mounts(LOCAL, t)] == ["hostPath", "emptyDir", "objectStorage"]
    assert [t for t in ALL_TYPES if mounts(KUBERNETES, t)] == list(ALL_TYPES)


def test_a_refusal_names_the_field_the_cluster_what_it_mounts_and_the_type_refused() -> None:
    refused = mount_refusal("spec.tasks[1].mounts[0].type", "laptop", LOCAL, "pvc")
    assert refused == (
        'spec.tasks[1].mounts[0].type: cluster "laptop" runs workers as local processes: it mounts '
        "hostPath, emptyDir, objectStorage only, not pvc. Run this role on a Kubernetes cluster to mount pvc"
    )
    assert refused is not None
    assert refused.key == "mount_type_unsupported.local"
    assert "不能挂载 pvc" in refused.render("zh-CN")
    assert mount_refusal("f", "laptop", LOCAL, "hostPath") is None
    assert mount_refusal("f", "laptop", LOCAL, "objectStorage") is None
    assert mount_refusal("f", "gpu-a", KUBERNETES, "objectStorage") is None


def test_a_runtime_the_table_does_not_name_is_not_judged() -> None:
    assert mounts("slurm", "pvc")
    assert mount_refusal("f", "hpc", "slurm", "pvc") is None


@pytest.mark.parametrize("runtime", sorted(MOUNT_TYPES))
def test_every_runtime_that_refuses_a_type_says_why_in_every_language(runtime: str) -> None:
    if set(MOUNT_TYPES[runtime]) >= set(ALL_TYPES):
        return
    for lang in LANGUAGES:
        assert f"mount_type_unsupported.{runtime}" in catalogue(lang), lang


def test_a_type_the_cluster_s_agent_is_not_set_up_for_is_refused_naming_the_setting_it_needs() -> None:
    refused = mount_refusal(
        "spec.tasks[0].mounts[0].type", "gpu-a", KUBERNETES, "objectStorage", ["objectStorage"]
    )
    assert refused == (
        'spec.tasks[0].mounts[0].type: cluster "gpu-a" cannot mount objectStorage now: its agent is not set up '
        "for it (it needs RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER); it mounts hostPath, emptyDir, pvc. Ask the "
        "cluster's administrator, or run this role on another cluster"
    )
    assert refused is not None
    assert refused.key == "mount_type_unconfigured"
    assert "RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER" in refused.render("zh-CN")
    assert mount_refusal("f", "gpu-a", KUBERNETES, "pvc", ["objectStorage"]) is None
    # The runtime's own refusal comes first: a local cluster never mounts a claim, set up or not.
    local = mount_refusal("f", "laptop", LOCAL, "pvc", ["pvc"])
    assert local is not None
    assert local.key == "mount_type_unsupported.local"
