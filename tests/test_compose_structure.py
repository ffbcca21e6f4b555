"""docker-compose.yml cannot run here (no Docker engine): check that it stays consistent with the code.

Every service has a one-shot migrate step and api + worker processes, each command names a real entry
point, every RLARK_ setting in the file is a field of that service's settings class, and every build target
exists in the Dockerfile.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml
from rlark_devinfra.stack import SERVICES

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()

SETTINGS = {
    "rlark_gateway": "rlark_gateway.settings:GatewaySettings",
    "rlark_inventory": "rlark_inventory.settings:InventorySettings",
    "rlark_keys": "rlark_keys.settings:KeysSettings",
    "rlark_netdomain": "rlark_netdomain.settings:NetdomainSettings",
    "rlark_notifier": "rlark_notifier.settings:NotifierSettings",
    "rlark_scheduler": "rlark_scheduler.settings:SchedulerSettings",
    "rlark_tunnel_agent": "rlark_tunnel_agent.settings:TunnelAgentSettings",
}


def settings_fields(module: str) -> set[str]:
    path, _, name = SETTINGS[module].partition(":")
    cls = getattr(importlib.import_module(path), name)
    return set(cls.model_fields)


def module_of(entry: dict) -> str:  # type: ignore[type-arg]
    if entry.get("build", {}).get("target") == "agent" or entry.get("image", "").startswith("rlark/agent"):
        return "rlark_tunnel_agent"
    return str(entry["command"][0])


@pytest.mark.parametrize("service", [s.name for s in SERVICES])
def test_every_service_has_migrate_api_and_worker(service: str) -> None:
    services = COMPOSE["services"]
    for role in ("migrate", "api", "worker"):
        entry = services[f"{service}-{role}"]
        assert entry["command"] == [f"rlark_{service}", role]
    assert services[f"{service}-migrate"]["restart"] == "no"
    for role in ("api", "worker"):
        assert services[f"{service}-{role}"]["depends_on"][f"{service}-migrate"]["condition"] == (
            "service_completed_successfully"
        )


@pytest.mark.parametrize("name", sorted(COMPOSE["services"]))
def test_settings_in_compose_are_real_settings_fields(name: str) -> None:
    entry = COMPOSE["services"][name]
    if name in ("postgres", "kafka"):
        return
    module = module_of(entry)
    importlib.import_module(module)
    fields = settings_fields(module)
    for key in entry.get("environment", {}):
        assert key.startswith("RLARK_"), key
        assert key.removeprefix("RLARK_").lower() in fields, f"{name}: {key} is not a setting of {module}"


def test_build_targets_exist_and_databases_match_services() -> None:
    targets = set(re.findall(r"^FROM \S+ AS (\S+)$", DOCKERFILE, flags=re.M))
    for entry in COMPOSE["services"].values():
        if "build" in entry:
            assert entry["build"]["target"] in targets
    init = (ROOT / "deploy" / "compose" / "postgres-init.sql").read_text()
    assert set(re.findall(r"CREATE DATABASE (\w+);", init)) == {f"rlark_{s.name}" for s in SERVICES}


def test_gateway_is_the_only_published_port() -> None:
    published = [n for n, e in COMPOSE["services"].items() if e.get("ports")]
    assert published == ["gateway-api"]
    # Its API and its tools origin (ADR 0012), each on the port its settings name.
    gateway = COMPOSE["services"]["gateway-api"]
    env = gateway["environment"]
    assert "tools_port" in settings_fields("rlark_gateway")
    assert sorted(gateway["ports"]) == sorted(
        f"{env[name]}:{env[name]}" for name in ("RLARK_HTTP_PORT", "RLARK_TOOLS_PORT")
    )


def test_agent_image_ships_the_go_data_path_its_setting_names() -> None:
    agent = DOCKERFILE.split(" AS agent\n", 1)[1]
    copied = re.search(r"^COPY --from=tunnel-dp \S+ (\S+)$", agent, flags=re.M)
    setting = re.search(r"^ENV RLARK_TUNNEL_DATAPLANE=(\S+)$", agent, flags=re.M)
    assert copied
    assert setting
    assert copied.group(1) == setting.group(1)
    assert "tunnel_dataplane" in settings_fields("rlark_tunnel_agent")
    # The builder's Go (the public image the GO_BASE argument names by default) is at least the module's `go`
    # directive (else `go build` refuses it).
    assert re.search(r"^FROM \$\{GO_BASE\} AS tunnel-dp$", DOCKERFILE, flags=re.M)
    builder = re.search(r"^ARG GO_BASE=golang:(\d+)\.(\d+)\S*$", DOCKERFILE, flags=re.M)
    go_mod = (ROOT / "services/tunnel_agent/dataplane/go.mod").read_text()
    wanted = re.search(r"^go (\d+)\.(\d+)", go_mod, flags=re.M)
    assert builder
    assert wanted
    assert tuple(map(int, builder.groups())) >= tuple(map(int, wanted.groups()))
