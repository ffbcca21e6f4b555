"""Every setting of the agent, its runtime drivers and its sidecars comes through a validated settings
class: the Kubernetes driver's ``RLARK_K8S_*``, the local runtime's ``RLARK_LOCAL_NETNS``, the sidecars'
secrets and the data path's profile directory included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from rlark_tunnel_agent import files_server
from rlark_tunnel_agent.files_server import FilesServerSettings
from rlark_tunnel_agent.main import make_driver_factory
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.manifests import FILES_SECRET_ENV, TOKEN_ENV
from rlark_tunnel_agent.runtime.local.cluster import LocalCluster, LocalNode
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
from rlark_tunnel_agent.settings import TunnelAgentSettings
from rlark_tunnel_agent.tunnel import sidecar
from rlark_tunnel_agent.tunnel.node import NodeConfig
from rlark_tunnel_agent.tunnel.sidecar import SidecarSettings

pytestmark = pytest.mark.unit


def test_the_kubernetes_driver_reads_its_rlark_k8s_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_K8S_SSH_PORT", "2022")
    monkeypatch.setenv("RLARK_K8S_IMAGE_PULL_SECRETS", "registry-a, registry-b")
    monkeypatch.setenv("RLARK_K8S_NETWORK_SIDECAR_COMMAND", "/bin/sidecar,--verbose")
    monkeypatch.setenv("RLARK_K8S_RUN_AS_USER", "")
    monkeypatch.setenv("RLARK_K8S_RUNNING_WITHOUT_MARKERS", "true")
    monkeypatch.setenv("RLARK_K8S_CPU_REQUEST", "2")
    config = KubernetesDriverConfig()
    assert config.ssh_port == 2022
    assert config.image_pull_secrets == ("registry-a", "registry-b")
    assert config.network_sidecar_command == ("/bin/sidecar", "--verbose")
    assert config.run_as_user is None  # empty: the image's user
    assert config.running_without_markers is True
    assert config.cpu_request == "2"
    assert config.files_sidecar_command == ("python", "-m", "rlark_tunnel_agent.files_server")


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_K8S_NAMESPACE", "from-env")
    monkeypatch.setenv("RLARK_K8S_IMAGE_PULL_SECRETS", "from-env")
    config = KubernetesDriverConfig(namespace="given", image_pull_secrets=("given",))
    assert (config.namespace, config.image_pull_secrets) == ("given", ("given",))


def test_an_invalid_rlark_k8s_value_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLARK_K8S_IMAGE_PULL_POLICY", "Sometimes")
    with pytest.raises(ValidationError, match="image_pull_policy"):
        KubernetesDriverConfig()


def test_an_unknown_driver_argument_is_refused() -> None:
    with pytest.raises(ValidationError, match="no_such_setting"):
        KubernetesDriverConfig(no_such_setting=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(("value", "netns"), [(None, True), ("0", False), ("false", False), ("1", True)])
def test_rlark_local_netns_reaches_the_local_driver_through_the_agent_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str | None, netns: bool
) -> None:
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text("cluster: c1\nnodes:\n  - name: n0\n")
    monkeypatch.delenv("RLARK_LOCAL_NETNS", raising=False)
    if value is not None:
        monkeypatch.setenv("RLARK_LOCAL_NETNS", value)
    settings = TunnelAgentSettings(config=cluster_file, state_dir=tmp_path / "state")
    assert settings.local_netns is netns
    driver = make_driver_factory(settings)("c1", None, None)
    assert isinstance(driver, LocalDriver)
    assert driver.use_netns is (netns and os.geteuid() == 0)  # namespaces need root


def test_the_local_driver_itself_reads_no_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLARK_LOCAL_NETNS", "0")
    cluster = LocalCluster(cluster="c1", nodes=(LocalNode(name="n0"),))
    driver = LocalDriver(cluster, LocalDriverOptions(state_dir=tmp_path, detect_gpus=False))
    assert driver.use_netns is (os.geteuid() == 0)


def test_the_network_sidecar_takes_its_token_from_the_variable_the_driver_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "t0ken")
    assert SidecarSettings().tunnel_token.get_secret_value() == "t0ken"
    assert "t0ken" not in repr(SidecarSettings())
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(SystemExit) as exited:
        sidecar.main(["--agent", "127.0.0.1:1", "--worker", "w", "--address", "10.0.0.2/24"])
    assert exited.value.code == 2  # argparse: RLARK_TUNNEL_TOKEN is not set


def test_the_files_sidecar_takes_its_secret_from_the_variable_the_driver_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(FILES_SECRET_ENV, "s3cret")
    assert FilesServerSettings().files_secret.get_secret_value() == "s3cret"
    monkeypatch.delenv(FILES_SECRET_ENV)
    with pytest.raises(SystemExit, match=FILES_SECRET_ENV):
        files_server.main(["--port", "1", "--job", "j"])


def test_the_data_path_profile_directory_is_a_setting_of_the_agent_and_of_a_test_bed_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLARK_TUNNEL_PROFILE_DIR", "/tmp/profiles")
    assert TunnelAgentSettings().tunnel_profile_dir == "/tmp/profiles"
    node = NodeConfig.from_json(
        {
            "domain": "d1",
            "network": "10.77.0.0/16",
            "cluster": "a",
            "private_key_file": "/nonexistent",
            "control": "/nonexistent.sock",
            "dataplane_profile_dir": "/tmp/profiles",
        }
    )
    assert node.forwarder.dataplane_profile_dir == "/tmp/profiles"
