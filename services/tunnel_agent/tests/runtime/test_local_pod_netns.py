"""Pod-like local workers, for real (root): their hostname, `/etc/hosts`, resolver and container paths,
their unprivileged user and root of their own, seen from inside their namespaces; each cluster's own bridge
and subnet.

Workers hold in their prepare script (no Ray), and the test looks into them with `nsenter` — the same
namespaces a worker's processes have.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from local_runtime_helpers import (
    CLUSTER,
    Recorder,
    assert_nothing_left,
    make_options,
    remove_bridge,
    spec,
)
from rlark_tunnel_agent.runtime.driver import Mount, MountType
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions
from rlark_tunnel_agent.runtime.local.isolation import BASIC_DEVICES, UID_RANGE
from rlark_tunnel_agent.runtime.markers import PrepareStarted

pytestmark = pytest.mark.netns

HOLD = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'


def inside(pid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run `argv` in the namespaces (network, mount, UTS) of the worker process `pid`."""
    return subprocess.run(
        ["nsenter", f"--target={pid}", "--net", "--mount", "--uts", "--", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def on_host(path: str) -> bool:
    """The path exists (or is a dangling link) in the host's mount namespace."""
    return os.path.lexists(path)


def host_mounts_under(path: Path) -> list[str]:
    """Mount points of this (the host's) mount namespace at or below `path`."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(path) or point.startswith(f"{path}/"):
            found.append(point)
    return found


async def started(driver: LocalDriver, recorder: Recorder, worker_id: str) -> int:
    """The pid of the worker's bootstrap once it runs its prepare script (its namespaces are set up)."""
    await recorder.wait_for(
        lambda: any(isinstance(m, PrepareStarted) for m in recorder.markers(worker_id)),
        60,
        f"{worker_id} to start its prepare script",
    )
    record = driver.record(worker_id)
    assert record is not None
    assert record.pid is not None
    return record.pid


async def test_a_worker_has_its_pods_hostname_hosts_resolver_and_container_paths(
    driver: LocalDriver, recorder: Recorder, tmp_path: Path
) -> None:
    assert driver.use_netns
    top = f"/rlark-pod-test-{uuid.uuid4().hex[:8]}"  # container paths nobody's host has
    shared, models = tmp_path / "shared", tmp_path / "models"
    models.mkdir()
    (models / "weights.bin").write_bytes(b"w" * 16)
    mounts = (
        Mount(type=MountType.HOST_PATH, source=str(shared), target=f"{top}/data"),
        Mount(type=MountType.HOST_PATH, source=str(models), target=f"{top}/models", read_only=True),
        Mount(type=MountType.EMPTY_DIR, target="/tmp/rlark-pod-test-scratch"),
    )
    header = spec("job-pod", "header", 0, rank=0, num_nodes=2, prepare_script=HOLD, run_script="true",
                  mounts=mounts, outputs=(f"{top}/outputs",), tensorboard_dir=f"{top}/data/tb")  # fmt: skip
    worker = spec("job-pod", "rollout", 0, rank=1, num_nodes=2, prepare_script=HOLD, node_name="node-b",
                  mounts=mounts, outputs=(f"{top}/outputs",))  # fmt: skip
    await driver.ensure_worker(header)
    await driver.ensure_worker(worker)
    pid = await started(driver, recorder, header.worker_id)
    peer_pid = await started(driver, recorder, worker.worker_id)
    own = driver.record(header.worker_id)
    peer = driver.record(worker.worker_id)
    assert own is not None
    assert peer is not None

    # The hostname is the pod's, and it resolves to the worker's own address (not 127.0.0.1).
    assert inside(pid, "hostname").stdout.strip() == "rlark-job-pod-header-0"
    resolved = inside(
        pid, sys.executable, "-c", "import socket; print(socket.gethostbyname(socket.gethostname()))"
    )
    assert resolved.stdout.strip() == own.address, resolved.stderr
    # Each worker resolves the other by both names — the one created after it too — and back.
    for name in ("rlark-job-pod-rollout-0", "rlark-job-pod-rollout-0.rlark-job-pod"):
        answer = inside(pid, "getent", "hosts", name)
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.split()[0] == peer.address
    assert inside(peer_pid, "getent", "hosts", "rlark-job-pod-header-0").stdout.split()[0] == own.address
    reverse = inside(pid, "getent", "hosts", peer.address)
    assert reverse.stdout.split()[:2] == [peer.address, "rlark-job-pod-rollout-0"]
    # An address nobody maps (the bridge's gateway) fails at once instead of waiting for a nameserver
    # that no worker can reach: the deadline is far below the old 2 x 5 s resolver timeout.
    unknown = inside(pid, "timeout", "4", "getent", "hosts", str(IPv4Address(own.address) - 1))
    assert unknown.returncode == 2, (unknown.returncode, unknown.stdout, unknown.stderr)

    # A name the agent learns later (a domain's allocation) is appended to the running worker's file.
    await driver.learn_addresses("job-pod", {"job-pod-remote-0": "10.99.0.7"})
    assert inside(pid, "getent", "hosts", "rlark-job-pod-remote-0").stdout.split()[0] == "10.99.0.7"

    # Mounts at their container paths: writes land on the host source; readOnly refuses writes.
    wrote = inside(pid, "sh", "-c", f"echo checkpoint > {top}/data/ckpt.txt && ls {top}/models")
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.split() == ["weights.bin"]
    assert (shared / "ckpt.txt").read_text() == "checkpoint\n"
    refused = inside(pid, "sh", "-c", f"echo x > {top}/models/new.bin")
    assert refused.returncode != 0
    assert "Read-only file system" in refused.stderr
    assert not on_host(str(models / "new.bin"))
    # Outputs, the TensorBoard dir and emptyDirs are the worker's own, kept in its directory.
    for path in (f"{top}/outputs/o.txt", f"{top}/data/tb/events.out", "/tmp/rlark-pod-test-scratch/s"):
        written = inside(pid, "sh", "-c", f"mkdir -p {Path(path).parent} && echo {Path(path).name} > {path}")
        assert written.returncode == 0, (path, written.stderr)
    wdir = driver.worker_dir(header.worker_id)
    assert (wdir / "fs" / top.lstrip("/") / "outputs" / "o.txt").read_text() == "o.txt\n"
    assert (shared / "tb" / "events.out").read_text() == "events.out\n"
    assert (wdir / "fs" / "tmp" / "rlark-pod-test-scratch" / "s").read_text() == "s\n"
    assert inside(peer_pid, "test", "-e", f"{top}/outputs/o.txt").returncode != 0
    # The worker's own directory (its bootstrap, scripts, logs) is where it always was.
    assert inside(pid, "test", "-f", str(wdir / "bootstrap" / "bootstrap.sh")).returncode == 0

    # None of it reached the host: no container path, no mount, no hostname change.
    assert not on_host(top)
    assert not on_host("/tmp/rlark-pod-test-scratch")
    assert host_mounts_under(driver.state_dir) == []
    assert socket.gethostname() != "rlark-job-pod-header-0"

    for worker_id in (header.worker_id, worker.worker_id):
        await driver.stop_worker(worker_id)
    assert_nothing_left(driver, [header.worker_id, worker.worker_id])
    assert host_mounts_under(driver.state_dir) == []


@contextlib.contextmanager
def tmpfs_at(path: Path, options: str) -> Iterator[None]:
    """A tmpfs mounted at `path` in the host's namespace while the block runs."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


async def test_a_read_only_mount_is_read_only_all_the_way_down_its_submounts_too(
    driver: LocalDriver, recorder: Recorder, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    cache = models / "cache"
    cache.mkdir(parents=True)
    top = f"/rlark-ro-test-{uuid.uuid4().hex[:8]}"
    mounts = (Mount(type=MountType.HOST_PATH, source=str(models), target=f"{top}/models", read_only=True),)
    header = spec("job-ro", "header", 0, rank=0, num_nodes=1, prepare_script=HOLD, run_script="true",
                  mounts=mounts)  # fmt: skip
    with tmpfs_at(cache, "nosuid,size=1m"):  # a mount below the hostPath, writable on the host
        await driver.ensure_worker(header)
        pid = await started(driver, recorder, header.worker_id)
        # As root inside, even: the hostPath and the mount below it refuse writes.
        for path in (f"{top}/models/new.bin", f"{top}/models/cache/new.bin"):
            refused = inside(pid, "sh", "-c", f"echo x > {path}")
            assert refused.returncode != 0, path
            assert "Read-only file system" in refused.stderr, (path, refused.stderr)
        assert not (models / "new.bin").exists()
        assert not (cache / "new.bin").exists()
        # The submount keeps its own options besides: read-only and still nosuid.
        flags = inside(
            pid, sys.executable, "-c", f"import os; print(os.statvfs('{top}/models/cache').f_flag)"
        )
        assert int(flags.stdout) & (os.ST_RDONLY | os.ST_NOSUID) == os.ST_RDONLY | os.ST_NOSUID, flags
        (cache / "host.txt").write_text("the host's own mount stays writable\n")
        await driver.stop_worker(header.worker_id)
    assert_nothing_left(driver, [header.worker_id])


REMOUNT_EACH = """
import json, os, sys
from rlark_tunnel_agent.runtime.local import pod_init

source, target = sys.argv[1], sys.argv[2]
pod_init._mount("tmpfs", source + "/sub dir", "tmpfs", pod_init.MS_NOSUID | pod_init.MS_NODEV)
pod_init._bind(source, target, read_only=False)
pod_init._remount_read_only_each(target)  # what kernels before 5.12 get
found = {}
for path in (target, target + "/sub dir"):
    try:
        open(path + "/new", "w").close()
        found[path] = ["written"]
    except OSError as exc:
        found[path] = [os.strerror(exc.errno)]
    flags = os.statvfs(path).f_flag
    found[path] += [name for name in ("ST_NOSUID", "ST_NODEV") if flags & getattr(os, name)]
print(json.dumps(found))
"""


def test_without_mount_setattr_each_mount_below_a_read_only_bind_is_remounted_keeping_its_options(
    tmp_path: Path,
) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    (source / "sub dir").mkdir(parents=True)  # a space: mountinfo escapes it
    target.mkdir()
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", REMOUNT_EACH, str(source),
         str(target)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {
        str(target): ["Read-only file system"],
        f"{target}/sub dir": ["Read-only file system", "ST_NOSUID", "ST_NODEV"],
    }
    assert host_mounts_under(tmp_path) == []  # all of it in the namespace that ended


def bootstrap_of(pid: int) -> int:
    """The worker's bootstrap: the one child of the `unshare` process the driver started (pid 1 inside)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def ids(pid: int) -> dict[str, list[str]]:
    """The Uid, Gid and Groups lines of a process's status."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        k: v.split() for k, _, v in (line.partition(":") for line in lines) if k in ("Uid", "Gid", "Groups")
    }


async def test_workers_run_as_their_jobs_user_in_a_root_without_the_agents_state_or_other_workers(
    driver: LocalDriver, recorder: Recorder
) -> None:
    secret = driver.state_dir.parent / "internal-secret"
    secret.write_text("not for workers\n")
    secret.chmod(0o644)
    first = spec("job-iso-a", "header", 0, rank=0, num_nodes=1, prepare_script=HOLD, run_script="true",
                 owner="alice")  # fmt: skip
    second = spec("job-iso-b", "header", 0, rank=0, num_nodes=1, prepare_script=HOLD, run_script="true",
                  node_name="node-b", owner="bob")  # fmt: skip
    await driver.ensure_worker(first)
    await driver.ensure_worker(second)
    pid, other_pid = (
        await started(driver, recorder, first.worker_id),
        await started(driver, recorder, second.worker_id),
    )
    own, other = driver.record(first.worker_id), driver.record(second.worker_id)
    assert own is not None
    assert other is not None
    assert own.uid in UID_RANGE
    assert other.uid in UID_RANGE
    assert own.uid != other.uid  # one user per job owner

    # The bootstrap runs as the job's user for good (real, effective, saved), with no other group.
    uid = str(own.uid)
    assert ids(bootstrap_of(pid)) == {"Uid": [uid] * 4, "Gid": [uid] * 4, "Groups": []}
    as_worker = ("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups")
    assert inside(pid, *as_worker, "id", "-un").stdout.strip() == "rlark"
    # Its own pid and IPC namespaces: it is pid 1 there and sees only its own processes.
    assert "bootstrap.sh" in inside(pid, "cat", "/proc/1/cmdline").stdout
    for kind in ("pid", "ipc", "mnt"):
        mine = os.readlink(f"/proc/{bootstrap_of(pid)}/ns/{kind}")
        assert mine != os.readlink(f"/proc/self/ns/{kind}"), kind
        assert mine != os.readlink(f"/proc/{bootstrap_of(other_pid)}/ns/{kind}"), kind

    # Nothing of the agent's state but its own directory; nothing of the other worker.
    assert inside(pid, "test", "-e", str(secret)).returncode != 0
    assert inside(pid, "ls", str(driver.state_dir / "workers")).stdout.split() == [first.worker_id]
    assert inside(pid, "test", "-e", str(driver.worker_dir(second.worker_id))).returncode != 0
    assert (
        inside(pid, "test", "-e", str(driver.state_dir / "workers" / first.worker_id / "scripts")).returncode
        == 0
    )
    # In its own directory, its user reads its scripts and writes its home, not the driver's record.
    wdir = driver.worker_dir(first.worker_id)
    assert inside(pid, *as_worker, "touch", str(wdir / "home" / "mine")).returncode == 0
    refused = inside(pid, *as_worker, "cat", str(wdir / "worker.json"))
    assert "Permission denied" in refused.stderr
    refused = inside(pid, *as_worker, "touch", "/etc/x", str(wdir / "x"))
    assert refused.stderr.count("cannot touch") == 2, refused.stderr
    # Devices: the harmless ones, its ptys and shared memory, nothing of the host's.
    shown = set(inside(pid, "ls", "/dev").stdout.split())
    assert shown == {*BASIC_DEVICES, "pts", "ptmx", "shm", "fd", "stdin", "stdout", "stderr"}

    for worker_id in (first.worker_id, second.worker_id):
        await driver.stop_worker(worker_id)
    assert_nothing_left(driver, [first.worker_id, second.worker_id])


async def test_two_local_clusters_get_their_own_bridges_and_subnets(tmp_path: Path) -> None:
    drivers = [
        LocalDriver(CLUSTER, LocalDriverOptions(state_dir=tmp_path / name / "local-test", detect_gpus=False))
        for name in ("one", "two")
    ]
    try:
        for driver in drivers:
            await driver.start()
        bridges = [driver.bridge for driver in drivers]
        subnets = [driver.subnet for driver in drivers]
        assert bridges[0] != bridges[1]
        assert not subnets[0].overlaps(subnets[1])
        addresses = [await asyncio.to_thread(_bridge_address, bridge) for bridge in bridges]
        assert [a.split("/")[0] for a in addresses] == [str(s.network_address + 1) for s in subnets]
        # The first worker of each cluster gets the first address of its own subnet: never the same one.
        for driver, subnet in zip(drivers, subnets, strict=True):
            await driver.ensure_worker(spec("job-net", "header", 0, rank=0, num_nodes=1, prepare_script=HOLD,
                                            run_script="true"))  # fmt: skip
            record = driver.record("job-net-header-0")
            assert record is not None
            assert IPv4Address(record.address) in subnet
        first = [d.record("job-net-header-0").address for d in drivers]  # type: ignore[union-attr]
        assert first[0] != first[1]
        # A driver started again on the same state directory keeps its bridge and subnet.
        await drivers[0].stop_worker("job-net-header-0")
        await drivers[0].close()
        again = LocalDriver(
            CLUSTER, LocalDriverOptions(state_dir=tmp_path / "one" / "local-test", detect_gpus=False)
        )
        await again.start()
        assert (again.bridge, again.subnet) == (bridges[0], subnets[0])
        await again.close()
    finally:
        for driver in drivers:
            for worker_id in await driver.list_workers():
                await driver.stop_worker(worker_id)
            await driver.close()
            await driver.remove_network()


async def test_an_explicit_subnet_another_interface_uses_is_refused(tmp_path: Path) -> None:
    first = LocalDriver(CLUSTER, make_options(tmp_path / "a"))
    await first.start()
    try:
        clash = make_options(tmp_path / "b", subnet=first.subnet)
        second = LocalDriver(CLUSTER, clash)
        with pytest.raises(RuntimeError, match=f"RLARK_LOCAL_SUBNET {first.subnet} overlaps"):
            await second.start()
        assert not _link_exists(clash.bridge or "")
    finally:
        await first.close()
        remove_bridge(first.bridge)


def _bridge_address(bridge: str) -> str:
    out = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", bridge], capture_output=True, text=True)
    return out.stdout.split()[3]


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True).returncode == 0


async def test_a_hostpath_source_through_a_link_a_job_planted_is_refused_and_nothing_is_made_there(
    driver: LocalDriver, tmp_path: Path
) -> None:
    # A job that could write the allowed `shared` left `l -> victim` there; the policy allowed the path as
    # written. As root the agent would have made (and chowned to the job) a directory inside `victim`.
    shared, victim = tmp_path / "shared", tmp_path / "victim"
    shared.mkdir()
    victim.mkdir()
    (shared / "l").symlink_to(victim)
    mount = Mount(type=MountType.HOST_PATH, source=str(shared / "l" / "made"), target="/data")
    header = spec("job-link-src", "header", 0, rank=0, num_nodes=1, run_script="true", mounts=(mount,))

    with pytest.raises(ValueError, match="symbolic link") as refused:
        await driver.ensure_worker(header)

    assert str(victim) in str(refused.value)
    assert list(victim.iterdir()) == []


async def test_a_mount_target_through_a_link_inside_another_mount_is_refused_before_anything_is_made(
    driver: LocalDriver, tmp_path: Path
) -> None:
    # The job's own hostPath holds `l -> victim`; an emptyDir at <mount>/l/x would have been made by the
    # agent, as root, inside victim (through its fs/ view), or by pod_init through the host's old root.
    shared, victim = tmp_path / "shared", tmp_path / "victim"
    shared.mkdir()
    victim.mkdir()
    (shared / "l").symlink_to(victim)
    mounts = (
        Mount(type=MountType.HOST_PATH, source=str(shared), target="/data"),
        Mount(type=MountType.EMPTY_DIR, target="/data/l/x"),
    )
    header = spec("job-link-dst", "header", 0, rank=0, num_nodes=1, run_script="true", mounts=mounts)

    with pytest.raises(ValueError, match="leads through a symbolic link"):
        await driver.ensure_worker(header)

    assert list(victim.iterdir()) == []
