"""What a restarted agent needs to put an adopted worker back into its network domain: the worker's
spec records the domain and its CIDR (from the placement), old records without them stay readable,
and ``DomainTunnels.attach`` takes the domain from the spec when the placement is not seen again."""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_contracts.events.scheduler import WorkerPlaced
from rlark_contracts.samples import worker_placed
from rlark_tunnel_agent.agent.placements import to_worker_spec
from rlark_tunnel_agent.agent.tunnels import DomainTunnels
from rlark_tunnel_agent.runtime.driver import WorkerSpec
from rlark_tunnel_agent.runtime.local.record import WorkerRecord
from rlark_tunnel_agent.tunnel import ForwarderConfig, TunnelSupervisor

pytestmark = pytest.mark.unit


def placed(**domain: Any) -> WorkerPlaced:
    return worker_placed(**domain)


IN_DOMAIN = {"virtual_ip": "10.200.3.4", "domain": "d1", "domain_cidr": "10.200.0.0/16"}


def test_a_domain_placement_gives_a_spec_carrying_the_domain_and_its_cidr_through_a_json_round_trip() -> None:
    spec = to_worker_spec(placed(**IN_DOMAIN), "")
    assert (spec.domain, spec.domain_cidr, spec.virtual_ip) == (
        "d1",
        IPv4Network("10.200.0.0/16"),
        IPv4Address("10.200.3.4"),
    )
    # Both drivers record the spec as this JSON (worker.json; the worker ConfigMap's spec.json).
    assert WorkerSpec.model_validate_json(spec.model_dump_json()) == spec


def test_a_placement_without_a_whole_domain_gives_a_spec_without_one() -> None:
    assert to_worker_spec(placed(), "").domain == ""
    half = to_worker_spec(placed(virtual_ip="10.200.3.4", domain="d1"), "")
    assert (half.domain, half.domain_cidr, half.virtual_ip) == ("", None, IPv4Address("10.200.3.4"))


def test_a_record_written_before_specs_carried_the_domain_still_reads() -> None:
    recorded = json.loads(to_worker_spec(placed(**IN_DOMAIN), "").model_dump_json())
    del recorded["domain"], recorded["domain_cidr"]
    old = WorkerSpec.model_validate(recorded)
    assert (old.domain, old.domain_cidr, old.virtual_ip) == ("", None, IPv4Address("10.200.3.4"))
    record = WorkerRecord.model_validate(
        {
            "spec": recorded,
            "slot": 1,
            "header_slot": 1,
            "address": "10.213.0.2",
            "header_address": "10.213.0.2",
            "gcs_port": 6379,
            "ports": {},
            "ray_temp_dir": "/tmp/rlark-x",
            "tun_device": "rlark0",
        }
    )
    assert record.spec == old


@pytest.mark.parametrize(
    "domain",
    [
        {"domain": "d1"},
        {"domain_cidr": "10.200.0.0/16", "virtual_ip": "10.200.3.4"},
        {"domain": "d1", "domain_cidr": "10.200.0.0/16"},
        {"domain": "d1", "domain_cidr": "10.200.0.0/16", "virtual_ip": "10.9.0.1"},
    ],
)
def test_a_spec_with_part_of_a_domain_or_an_address_outside_it_is_refused(domain: dict[str, str]) -> None:
    base = json.loads(to_worker_spec(placed(), "").model_dump_json())
    with pytest.raises(ValidationError):
        WorkerSpec.model_validate({**base, **domain})


class _Landings(TunnelSupervisor):
    """Records what ``worker_landed`` was asked, without starting a forwarder."""

    def __init__(self) -> None:
        super().__init__()
        self.landed: list[tuple[str, str, str, str, IPv4Address]] = []
        self.left: list[tuple[str, str]] = []

    async def worker_landed(
        self, config: ForwarderConfig, key: Any, peers: Any, remote: Any, **kw: Any
    ) -> None:
        self.landed.append((config.domain, str(config.network), kw["worker"], kw["netns"], kw["address"]))

    async def worker_left(self, domain: str, worker: str) -> bool:
        self.left.append((domain, worker))
        return True


async def _ignore(_: TunnelEndpointAnnounced) -> None:
    return None


async def test_attach_takes_the_domain_from_the_spec_when_the_placement_is_not_seen_again(
    tmp_path: Path,
) -> None:
    supervisor = _Landings()
    restarted = DomainTunnels("alpha", tmp_path, _ignore, supervisor=supervisor)
    spec = to_worker_spec(placed(**IN_DOMAIN), "")

    device = await restarted.attach(spec, "rlark-ns-1")
    await restarted.detach(spec)  # it is a member now: detaching takes it out of its domain

    assert (
        device == ForwarderConfig(domain="d1", network=IPv4Network("10.200.0.0/16"), cluster="alpha").tun_name
    )
    assert supervisor.landed == [
        ("d1", "10.200.0.0/16", spec.worker_id, "rlark-ns-1", IPv4Address("10.200.3.4"))
    ]
    assert supervisor.left == [("d1", spec.worker_id)]
    # A spec recorded before specs carried the domain still needs its placement.
    old = spec.model_copy(update={"domain": "", "domain_cidr": None})
    with pytest.raises(ValueError, match="no network domain placement"):
        await restarted.attach(old, "rlark-ns-1")
