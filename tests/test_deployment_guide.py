"""The lab's Kubernetes guide (docs/deploying.md, which the README points a lab to) is the commands the deployment test runs, and the manifests' own READMEs say
what that test found a lab must do (issue 32, ADR 0027)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rlark_devinfra.k8s import deployment

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _guide() -> str:
    text = (ROOT / "docs/deploying.md").read_text()
    start = text.index("### On Kubernetes: a lab's guide")
    return text[start : text.index("\n## ", start)]


def test_every_command_the_deployment_test_runs_is_in_the_lab_guide_in_its_order() -> None:
    guide = _guide()
    position = 0
    for step in deployment.GUIDE:
        for command in step.commands:
            found = guide.find(command, position)
            assert found >= 0, (
                f"{step.title}: not in docs/deploying.md's guide after what precedes it: {command}"
            )
            position = found + len(command)


def test_the_namespace_comes_before_the_secrets_that_live_in_it() -> None:
    for steps in (deployment.SECRETS.commands, deployment.DEPLOY_AGENT.commands):
        assert "namespace.yaml" in steps[0]
        assert "create secret" in steps[1]
    assert (
        "kubectl apply -f deploy/kubernetes/namespace.yaml"
        in (ROOT / "deploy/kubernetes/README.md").read_text()
    )
    assert "kubectl apply -f deploy/agent/namespace.yaml" in (ROOT / "deploy/agent/README.md").read_text()


def test_the_agent_readme_names_the_cli_command_that_registers_a_cluster_and_the_sidecar_image_setting() -> (
    None
):
    text = (ROOT / "deploy/agent/README.md").read_text()
    assert "rlark cluster create" not in text
    assert "rlark clusters register" in text
    assert "RLARK_K8S_NETWORK_SIDECAR_IMAGE` to the agent image" in text.replace("\n   ", " ")


def test_no_readme_tells_a_kubectl_user_to_run_kustomize_edit_alone() -> None:
    text = (ROOT / "deploy/kubernetes/README.md").read_text()
    assert "set yours with `kustomize edit set image`" not in text


def test_the_scheduler_worker_ships_with_a_standby_leader() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/scheduler.yaml").read_text()))
    worker = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "scheduler-worker"
    )
    assert worker["spec"]["replicas"] >= 2
