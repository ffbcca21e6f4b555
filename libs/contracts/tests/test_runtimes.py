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
