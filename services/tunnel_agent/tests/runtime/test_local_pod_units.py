"""Pod-like local workers, the pure parts: names, hosts file, resolver, bind plan, process-mode refusals,
and each local cluster's own bridge and subnet."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path

import pytest
from local_runtime_helpers import spec
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.kubernetes import names
from rlark_tunnel_agent.runtime.local.netns import (
    SUBNET_POOL,
    NetnsError,
    choose_subnet,
    default_bridge,
    parse_networks,
    subnet_candidates,
)
from rlark_tunnel_agent.runtime.local.pod import (
    HOSTS_HEADER,
    RESOLV_CONF,
    Bind,
    HostEntry,
    container_binds,
    hiding_refusal,
    host_paths_to_create,
    hosts_file,
    missing_host_lines,
    pod_plan,
    process_mode_refusal,
    volume_dir,
)

WDIR = Path("/state/workers/job-a-header-0")


def test_a_worker_is_named_as_its_pod_and_under_the_jobs_service_as_on_kubernetes() -> None:
    entry = HostEntry("job-a-header-0", "job-a", "10.1.0.2")
    assert entry.names == (names.pod_name("job-a-header-0"), "rlark-job-a-header-0.rlark-job-a")
    assert entry.names[1] == f"{names.pod_name('job-a-header-0')}.{names.service_name('job-a')}"
    assert entry.line() == "10.1.0.2\trlark-job-a-header-0\trlark-job-a-header-0.rlark-job-a\n"


def test_long_or_dotted_ids_get_the_same_hashed_names_as_pods() -> None:
    worker_id = "job.with.dots-" + "x" * 80 + "-header-0"
    hostname = HostEntry(worker_id, "job.with.dots", "10.1.0.2").names[0]
    assert hostname == names.pod_name(worker_id)
    assert len(hostname) <= 63
    assert "." not in hostname


def test_the_hosts_file_maps_localhost_then_each_worker_once() -> None:
    entries = [
        HostEntry("job-a-header-0", "job-a", "10.1.0.2"),
        HostEntry("job-a-rollout-0", "job-a", "10.1.0.3"),
        HostEntry("job-a-header-0", "job-a", "10.9.9.9"),  # a name already given keeps its address
    ]
    text = hosts_file(entries)
    assert text.startswith(HOSTS_HEADER)
    lines = text.splitlines()[2:]
    assert lines == [
        "10.1.0.2\trlark-job-a-header-0\trlark-job-a-header-0.rlark-job-a",
        "10.1.0.3\trlark-job-a-rollout-0\trlark-job-a-rollout-0.rlark-job-a",
    ]


def test_only_missing_workers_are_appended_and_appending_twice_adds_nothing() -> None:
    first = HostEntry("job-a-header-0", "job-a", "10.1.0.2")
    second = HostEntry("job-a-rollout-0", "job-a", "10.1.0.3")
    text = hosts_file([first])
    added = missing_host_lines(text, [first, second])
    assert added == second.line()
    assert missing_host_lines(text + added, [first, second]) == ""


def test_the_resolver_lists_no_nameserver_and_gives_up_at_once() -> None:
    lines = [line for line in RESOLV_CONF.splitlines() if not line.startswith("#")]
    assert lines == ["options timeout:1 attempts:1"]
    assert not any(line.split()[:1] == ["nameserver"] for line in RESOLV_CONF.splitlines())


def test_mounts_outputs_and_tensorboard_dir_are_bound_at_their_container_paths_parents_first() -> None:
    worker = spec(
        "job-a",
        "header",
        0,
        rank=0,
        num_nodes=1,
        mounts=(
            Mount(type=MountType.HOST_PATH, source="/srv/code", target="/code", read_only=True),
            Mount(type=MountType.EMPTY_DIR, target="/data/scratch"),
            Mount(type=MountType.HOST_PATH, source="/srv/ckpt", target="/data"),
        ),
        outputs=("/data/outputs", "/results", "/results/run-1", "relative/out"),
        tensorboard_dir="/tb/logs",
    )
    binds = container_binds(worker, WDIR)
    assert [(b.target, b.source, b.read_only) for b in binds] == [
        ("/code", "/srv/code", True),
        ("/data", "/srv/ckpt", False),
        ("/results", str(WDIR / "fs" / "results"), False),
        ("/data/scratch", str(WDIR / "fs" / "data" / "scratch"), False),
        ("/tb/logs", str(WDIR / "fs" / "tb" / "logs"), False),
    ]
    # An output inside a mount or inside another output needs no bind; relative ones stay in the workdir.
    assert all(b.target not in ("/data/outputs", "/results/run-1") for b in binds)
    assert volume_dir(WDIR, "/results") == WDIR / "fs" / "results"


def test_a_hostpath_file_is_bound_as_a_file_and_a_mount_declared_twice_is_refused() -> None:
    worker = spec(
        "job-a", "header", 0, rank=0, num_nodes=1, outputs=(),
        mounts=(Mount(type=MountType.HOST_PATH, source="/srv/conf.yaml", target="/etc/app.yaml"),),
    )  # fmt: skip
    [bind] = container_binds(worker, WDIR, is_file=lambda path: path == "/srv/conf.yaml")
    assert bind == Bind(source="/srv/conf.yaml", target="/etc/app.yaml", file=True, within="/")
    twice = spec(
        "job-a", "header", 0, rank=0, num_nodes=1,
        mounts=(Mount(source="/srv/a", target="/a"), Mount(source="/srv/b", target="/a/")),
    )  # fmt: skip
    with pytest.raises(ValueError, match="mount /a: declared twice"):
        container_binds(twice, WDIR)


def test_the_plan_binds_the_workers_own_files_etc_and_paths_into_a_new_root_and_runs_as_its_user() -> None:
    worker = spec("job-a", "header", 0, rank=0, num_nodes=1, outputs=("/outputs",))
    ray_tmp = "/tmp/rlark-abc-123"
    plan = pod_plan(
        worker, WDIR, ("/bin/bash", str(WDIR / "bootstrap" / "bootstrap.sh")),
        uid=2_000_000_123, system=("/usr", "/etc"), ray_temp_dir=ray_tmp, devices=("nvidiactl", "nvidia1"),
    )  # fmt: skip
    assert plan.hostname == "rlark-job-a-header-0"
    assert {b.target: b.source for b in plan.binds} == {
        str(WDIR): str(WDIR),
        ray_tmp: ray_tmp,
        "/etc/hosts": str(WDIR / "etc" / "hosts"),
        "/etc/resolv.conf": str(WDIR / "etc" / "resolv.conf"),
        "/etc/passwd": str(WDIR / "etc" / "passwd"),
        "/etc/group": str(WDIR / "etc" / "group"),
        "/outputs": str(WDIR / "fs" / "outputs"),
    }
    assert [b.target for b in plan.binds][:1] == ["/outputs"]  # depth order: parents before children
    assert plan.exec == ("/bin/bash", str(WDIR / "bootstrap" / "bootstrap.sh"))
    assert (plan.cwd, plan.scratch) == (str(WDIR), str(WDIR / "pod" / "root"))
    assert (plan.uid, plan.system, plan.devices, plan.cgroup) == (
        2_000_000_123,
        ("/usr", "/etc"),
        ("nvidiactl", "nvidia1"),
        "",
    )


def test_a_mount_that_would_hide_the_workers_own_files_is_refused() -> None:
    needed = ("/work/main/.state/agent", "/work/main/.venv")
    covering = spec(
        "job-a", "header", 0, rank=0, num_nodes=1, outputs=(), mounts=(Mount(source="/srv", target="/work"),)
    )
    assert hiding_refusal(container_binds(covering, WDIR), needed) == (
        "mount /work: it would hide /work/main/.state/agent, which this local cluster's workers run from; "
        "mount it elsewhere"
    )
    beside = spec("job-a", "header", 0, rank=0, num_nodes=1, mounts=(Mount(source="/srv", target="/work2"),))
    assert hiding_refusal(container_binds(beside, WDIR), needed) is None


@pytest.mark.parametrize(
    ("mount", "reason"),
    [
        (
            Mount(source="/srv/m", target="/srv/m", read_only=True),
            "mount /srv/m: readOnly cannot be enforced",
        ),
        (
            Mount(type=MountType.EMPTY_DIR, target="/scratch"),
            "mount /scratch: an emptyDir needs a mount namespace",
        ),
        (
            Mount(source="/srv/code", target="/code"),
            "mount /code: the hostPath /srv/code cannot appear at /code",
        ),
    ],
)
def test_plain_processes_refuse_what_they_cannot_honour_naming_the_mount(mount: Mount, reason: str) -> None:
    worker = spec("job-a", "header", 0, rank=0, num_nodes=1, mounts=(mount,))
    refusal = process_mode_refusal(worker)
    assert refusal is not None
    assert refusal.startswith(reason)
    assert "run the agent as root" in refusal


def test_plain_processes_honour_a_hostpath_at_its_own_path_and_create_outputs_outside_mounts() -> None:
    worker = spec(
        "job-a", "header", 0, rank=0, num_nodes=1,
        mounts=(Mount(source="/srv/m", target="/srv/m/"),),
        outputs=("/srv/m/out", "/results", "/results", "rel"), tensorboard_dir="/tb",
    )  # fmt: skip
    assert process_mode_refusal(worker) is None
    assert host_paths_to_create(worker) == [("outputs", "/results"), ("tensorboardDir", "/tb")]


def test_each_cluster_gets_its_own_bridge_and_subnet() -> None:
    tags = ("a1b2c3", "d4e5f6")
    bridges = [default_bridge(tag) for tag in tags]
    assert bridges[0] != bridges[1]
    assert all(len(b) <= 15 for b in bridges)
    firsts = [next(subnet_candidates(tag)) for tag in tags]
    assert firsts[0] != firsts[1]
    assert all(net.subnet_of(SUBNET_POOL) and net.prefixlen == 24 for net in firsts)
    # The order is the tag's: the same on every start.
    assert [next(subnet_candidates(tags[0])) for _ in range(2)] == [firsts[0]] * 2


def test_a_subnet_in_use_anywhere_on_the_machine_is_skipped() -> None:
    candidates = list(subnet_candidates("a1b2c3"))
    assert len(candidates) == 4096
    assert len(set(candidates)) == 4096
    taken = [candidates[0], IPv4Network(candidates[1].network_address).supernet(new_prefix=16)]
    chosen = choose_subnet(candidates, taken)
    assert not any(chosen.overlaps(net) for net in taken)
    with pytest.raises(NetnsError, match="RLARK_LOCAL_SUBNET"):
        choose_subnet(candidates[:1], taken)


def test_networks_in_use_are_read_from_ip_but_the_bridges_own() -> None:
    addrs = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "2: eth0    inet 10.0.2.15/24 brd 10.0.2.255 scope global eth0\\       valid_lft forever\n"
        "5: rlkbr1    inet 10.210.7.1/24 brd 10.210.7.255 scope global rlkbr1\\       valid_lft forever\n"
    )
    routes = (
        "default via 10.0.2.2 dev eth0\n"
        "10.0.2.0/24 dev eth0 proto kernel scope link src 10.0.2.15\n"
        "10.210.7.0/24 dev rlkbr1 proto kernel scope link src 10.210.7.1\n"
        "172.30.0.0/16 via 10.0.2.9 dev eth0\n"
    )
    found = set(parse_networks(addrs, routes, exclude_device="rlkbr1"))
    assert found == {
        IPv4Network("127.0.0.0/8"),
        IPv4Network("10.0.2.0/24"),
        IPv4Network("172.30.0.0/16"),
    }
    assert IPv4Network("10.210.7.0/24") in parse_networks(addrs, routes, exclude_device="rlkbr2")
