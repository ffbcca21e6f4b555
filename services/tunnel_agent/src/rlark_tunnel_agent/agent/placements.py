"""Pure translation of a worker placement event into the runtime's `WorkerSpec`.

Every field of `WorkerPlaced` travels into `WorkerSpec` under its own name, as is; only the fields in
`TRANSLATED` are stated here, each because the runtime reads it in another name or form. So a field added
to the placement reaches the runtime without a third statement of it, and `WorkerSpec` (``extra="forbid"``)
refuses one it does not declare: it cannot be dropped on the way without a test failing
(`tests/agent/test_agent_placement_fields.py`).
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Final

from rlark_contracts.events.scheduler import Mount as PlacedMount
from rlark_contracts.events.scheduler import WorkerPlaced

from rlark_tunnel_agent.runtime.driver import Mount, MountType, WorkerSpec

TRANSLATED: Final = frozenset({"node", "mounts", "run_script", "header_address", "domain", "domain_cidr"})
"""The placement's fields `to_worker_spec` states itself; every other one is carried by name."""


class UnsupportedPlacement(ValueError):
    """A placement this runtime cannot honour (reported back as a failed worker, with this reason)."""


def to_worker_spec(placed: WorkerPlaced, header_address: str) -> WorkerSpec:
    # A domain counts only as a whole (name, CIDR, virtual IP), as ``DomainTunnels.placed`` reads it.
    domain = placed.domain if placed.domain and placed.domain_cidr and placed.virtual_ip else ""
    return WorkerSpec.model_validate(
        {
            **placed.model_dump(exclude=set(TRANSLATED)),
            "node_name": placed.node,
            "mounts": tuple(_mount(mount) for mount in placed.mounts),
            "run_script": placed.run_script if placed.is_header else "",
            "header_address": "" if placed.is_header else header_address,
            "domain": domain,
            "domain_cidr": IPv4Network(placed.domain_cidr, strict=False) if domain else None,
        }
    )


def _mount(mount: PlacedMount) -> Mount:
    """The runtime's mount: the placement's by name, its ``path`` as the ``target`` (its ``name`` only
    labels it in the job's document)."""
    if mount.type not in {t.value for t in MountType}:
        raise UnsupportedPlacement(f"mount {mount.name!r} has an unknown type {mount.type!r}")
    return Mount.model_validate({**mount.model_dump(exclude={"name", "path"}), "target": mount.path})
