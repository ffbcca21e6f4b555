"""Pure translation of a worker placement event into the runtime's `WorkerSpec`."""

from __future__ import annotations

from ipaddress import IPv4Network

from rlark_contracts.events.scheduler import WorkerPlaced

from rlark_tunnel_agent.runtime.driver import Mount, MountType, WorkerSpec


class UnsupportedPlacement(ValueError):
    """A placement this runtime cannot honour (reported back as a failed worker, with this reason)."""


def to_worker_spec(placed: WorkerPlaced, header_address: str) -> WorkerSpec:
    mounts = []
    known = {t.value for t in MountType}
    for mount in placed.mounts:
        if mount.type not in known:
            raise UnsupportedPlacement(f"mount {mount.name!r} has an unknown type {mount.type!r}")
        mounts.append(
            Mount(
                type=MountType(mount.type),
                source=mount.source,
                target=mount.path,
                read_only=mount.read_only,
                secret_ref=mount.secret_ref,
            )
        )
    # A domain counts only as a whole (name, CIDR, virtual IP), as ``DomainTunnels.placed`` reads it.
    domain = placed.domain if placed.domain and placed.domain_cidr and placed.virtual_ip else ""
    return WorkerSpec(
        job_id=placed.job_id,
        worker_id=placed.worker_id,
        cluster=placed.cluster,
        role=placed.role,
        index=placed.index,
        rank=placed.rank,
        num_nodes=placed.num_nodes,
        is_header=placed.is_header,
        node_name=placed.node,
        gpus=placed.gpus,
        total_gpus=placed.total_gpus,
        image=placed.image,
        prepare_script=placed.prepare_script,
        run_script=placed.run_script if placed.is_header else "",
        env=dict(placed.env),
        mounts=tuple(mounts),
        ssh_public_keys=tuple(placed.ssh_public_keys),
        header_address="" if placed.is_header else header_address,
        ray_port=placed.ray_port,
        virtual_ip=placed.virtual_ip,
        domain=domain,
        domain_cidr=IPv4Network(placed.domain_cidr, strict=False) if domain else None,
        outputs=tuple(placed.outputs),
        tensorboard_dir=placed.tensorboard_dir,
        join_deadline_s=float(placed.join_deadline_s),
        rlinf_config=placed.rlinf_config,
        owner=placed.owner,
    )
