"""What a pod-like local worker may see and be, the pure parts: its uid, passwd and group lines, the host paths of
its root, its device nodes, its cgroup limits; and how the cgroup v2 probe reads a machine."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rlark_tunnel_agent.runtime.driver import Mount, MountType, WorkerSpec
from rlark_tunnel_agent.runtime.local import cgroups, host_files, pod_init
from rlark_tunnel_agent.runtime.local.cluster import LocalNode
from rlark_tunnel_agent.runtime.local.isolation import (
    BASIC_DEVICES,
    UID_RANGE,
    WORKER_USER,
    cgroup_limits,
    device_nodes,
    group_text,
    passwd_text,
    system_paths,
    uid_identity,
    worker_uid,
)
from rlark_tunnel_agent.runtime.local.pod import Bind, container_binds

pytestmark = pytest.mark.unit

HOST_PASSWD = "root:x:0:0:root:/root:/bin/bash\nsshd:x:101:65534::/run/sshd:/usr/sbin/nologin\n"
HOST_GROUP = "root:x:0:\nsudo:x:27:alice\n"
DEV = ["null", "zero", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidia2",
       "nvidia3", "nvidia-caps", "sda", "kvm"]  # fmt: skip


def test_an_owners_uid_is_unprivileged_stable_and_never_one_another_owner_holds() -> None:
    uid = worker_uid(uid_identity("alice", "job-a"))
    assert uid in UID_RANGE
    assert uid > 65535
    # every worker of every job of alice, on every agent, gets the same one (re-runs write the same outputs)
    assert worker_uid(uid_identity("alice", "job-b")) == uid
    assert worker_uid(uid_identity("bob", "job-a")) != uid
    assert worker_uid(uid_identity("alice", "job-a"), taken={uid}) not in {uid, 0}


def test_a_placement_without_an_owner_gets_a_uid_of_its_job() -> None:
    assert uid_identity("", "job-a") == "job:job-a"
    assert worker_uid(uid_identity("", "job-a")) != worker_uid(uid_identity("", "job-b"))
    assert uid_identity("job-a", "x") != uid_identity("", "job-a")  # a user named like a job is not that job


def test_the_workers_passwd_and_group_name_its_user_once_with_its_home() -> None:
    uid = 2_000_000_007
    clash = f"{HOST_PASSWD}{WORKER_USER}:x:1000:1000::/home/rlark:/bin/sh\nother:x:{uid}:1::/:/bin/sh\n"
    passwd = passwd_text(clash, uid, "/state/workers/w/home", "RLark job job-a")
    lines = passwd.splitlines()
    assert lines[:2] == HOST_PASSWD.splitlines()
    assert lines[2:] == [f"rlark:x:{uid}:{uid}:RLark job job-a:/state/workers/w/home:/bin/bash"]
    group = group_text(HOST_GROUP, uid).splitlines()
    assert group == [*HOST_GROUP.splitlines(), f"rlark:x:{uid}:"]


def test_the_root_holds_the_system_trees_and_the_interpreter_outside_them_only() -> None:
    exists = {"/bin", "/usr", "/etc", "/lib", "/lib64", "/opt", "/home", "/root", "/var"}
    paths = system_paths(
        ["/root/.pyenv/versions/3.11.7", "/work/main/.venv/bin", "/work/main/.venv", "/usr/bin", "/"], exists
    )
    assert paths == ("/bin", "/lib", "/lib64", "/usr", "/etc", "/opt", "/work/main/.venv",
                     "/root/.pyenv/versions/3.11.7")  # fmt: skip
    assert "/home" not in paths
    assert "/var" not in paths


def test_a_gpu_worker_gets_the_control_nodes_and_its_own_gpus_nodes_only() -> None:
    given = device_nodes([1, 3], DEV)
    assert given == ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia1", "nvidia3")
    assert sorted(set(DEV) - set(given) & {f"nvidia{n}" for n in range(8)}) == ["nvidia0", "nvidia2"]
    assert device_nodes([], DEV) == ()  # a CPU worker sees no NVIDIA node at all
    assert device_nodes([7], DEV) == ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")  # absent: not invented


def test_pod_init_binds_the_same_basic_devices_the_plan_assumes() -> None:
    assert pod_init.BASIC_DEVICES == BASIC_DEVICES


def test_limits_are_the_virtual_nodes_cpus_and_memory() -> None:
    assert cgroup_limits(LocalNode(name="n", cpu=2.5, memory=4 << 30)) == {
        "cpu.max": "250000 100000",
        "memory.max": str(4 << 30),
    }
    assert cgroup_limits(LocalNode(name="n", cpu=0.001)) == {"cpu.max": "1000 100000"}


MOUNTINFO_HYBRID = (
    "30 23 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "35 30 0:30 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n"
    "36 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
)


def test_the_probe_reads_the_cgroup2_mount_and_the_agents_cgroup() -> None:
    assert cgroups.cgroup2_mount(MOUNTINFO_HYBRID) == Path("/sys/fs/cgroup/unified")
    assert cgroups.cgroup2_mount("36 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n") is None
    assert (
        cgroups.own_cgroup("4:memory:/x\n0::/system.slice/rlark.service\n") == "/system.slice/rlark.service"
    )
    assert cgroups.own_cgroup("0::/\n") == "/"
    assert cgroups.own_cgroup("4:memory:/x\n") is None


def _machine(tmp_path: Path, mountinfo: str, proc_cgroup: str) -> tuple[Path, Path]:
    info, group = tmp_path / "mountinfo", tmp_path / "cgroup"
    info.write_text(mountinfo.replace("/sys/fs/cgroup/unified", str(tmp_path / "unified")))
    group.write_text(proc_cgroup)
    return info, group


def test_without_cpu_and_memory_controllers_limits_are_reported_as_not_enforced(tmp_path: Path) -> None:
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    probe = cgroups.probe("abc", *_machine(tmp_path, MOUNTINFO_HYBRID, "0::/\n"))
    assert probe.base is None
    assert "offers hugetlb" in probe.reason
    assert "not cpu and memory" in probe.reason
    assert list((tmp_path / "unified").iterdir()) == [tmp_path / "unified" / "cgroup.controllers"]
    nothing = cgroups.probe("abc", *_machine(tmp_path, "", "0::/\n"))
    assert nothing == cgroups.CgroupProbe(None, "no cgroup v2 hierarchy is mounted on this machine")


def test_in_the_root_cgroup_workers_get_a_subtree_with_cpu_and_memory(tmp_path: Path) -> None:
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory io\n")
    (root / "cgroup.subtree_control").write_text("")
    base = root / "rlark-abc"
    base.mkdir()
    (base / "cgroup.subtree_control").write_text("cpu memory")  # a kernel would show what was enabled
    probe = cgroups.probe("abc", *_machine(tmp_path, MOUNTINFO_HYBRID, "0::/\n"))
    assert probe == cgroups.CgroupProbe(base)
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +memory"
    worker = cgroups.create(base, "w1", {"cpu.max": "200000 100000", "memory.max": "1024"})
    assert (worker / "cpu.max").read_text() == "200000 100000"
    assert (worker / "memory.max").read_text() == "1024"
    for leftover in worker.iterdir():  # a kernel's cgroup directory has no files of its own to remove
        leftover.unlink()
    cgroups.remove(worker)
    cgroups.remove(worker)  # idempotent
    assert not worker.exists()


def test_a_path_leading_through_a_link_names_where_it_really_leads(tmp_path: Path) -> None:
    real, elsewhere = tmp_path / "real", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    (real / "l").symlink_to(elsewhere)

    assert pod_init.link_on_the_way(str(real / "sub" / "missing")) is None
    assert pod_init.link_on_the_way(str(real / "l" / "missing")) == str(elsewhere / "missing")
    assert pod_init.link_on_the_way(str(real / "l")) == str(elsewhere)
    # Below `within` only: a link above it (the worker directory's own path) is the runtime's business.
    assert pod_init.link_on_the_way(str(real / "l" / "x"), within=str(real / "l")) is None


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "one-step-per-component"])
def test_a_path_is_opened_and_made_beneath_its_root_never_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openat2: bool
) -> None:
    if not openat2:  # what a kernel before 5.6 gets
        monkeypatch.setattr(pod_init, "_openat2", lambda dir_fd, relative: None)
    real, elsewhere = tmp_path / "real", tmp_path / "elsewhere"
    (real / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (real / "l").symlink_to(elsewhere)
    root = str(tmp_path)

    fd = pod_init.open_beneath(root, str(real / "sub"))
    assert os.path.samestat(os.fstat(fd), (real / "sub").stat())
    os.close(fd)
    for through_a_link in (real / "l", real / "l" / "x"):
        with pytest.raises(OSError, match="symbolic link") as refused:
            pod_init.open_beneath(root, str(through_a_link))
        assert refused.value.errno == errno.ELOOP
        with pytest.raises(OSError, match="symbolic link") as refused:
            pod_init.make_beneath(root, str(through_a_link / "new"))
        assert refused.value.errno == errno.ELOOP
    with pytest.raises(pod_init.SetupError):
        pod_init.open_beneath(str(real), str(elsewhere))  # not below its root
    fd, made = pod_init.make_beneath(root, str(real / "new" / "dir"))
    os.close(fd)
    assert made
    assert (real / "new" / "dir").is_dir()
    fd, made = pod_init.make_beneath(root, str(real / "new" / "dir"))
    os.close(fd)
    assert not made  # it existed: whoever made it keeps it
    assert list(elsewhere.iterdir()) == []


FILTERED = """
import ctypes, errno, os, tempfile, threading
from rlark_tunnel_agent.runtime.local import pod_init

libc = ctypes.CDLL(None, use_errno=True)
pod_init._libc.prctl(pod_init.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
pod_init.SyscallFilter().load()

def errno_of(result):
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]

print("unshare user", errno_of(libc.unshare(0x10000000)))
print("unshare mount", errno_of(libc.unshare(0x00020000)))
print("unshare files", errno_of(libc.unshare(0x00000400)))
print("clone3", errno_of(libc.syscall(435, None, 0)))
print("mount", errno_of(libc.mount(b"none", tempfile.mkdtemp().encode(), b"tmpfs", 0, None)))
found = []
thread = threading.Thread(target=lambda: found.append("ran"))
thread.start()
thread.join()
print("thread", found[0])
pid = os.fork()
if pid == 0:
    os._exit(0)
print("fork", os.waitpid(pid, 0)[1])
"""


def test_the_syscall_filter_refuses_namespaces_and_mounts_and_keeps_threads_and_processes() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FILTERED], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert dict(line.rsplit(" ", 1) for line in done.stdout.splitlines()) == {
        "unshare user": "EPERM",
        "unshare mount": "EPERM",
        "unshare files": "ok",  # no namespace: allowed
        "clone3": "ENOSYS",  # the C library then falls back to clone, whose flags the filter reads
        "mount": "EPERM",
        "thread": "ran",
        "fork": "0",
    }


def test_chown_tree_never_follows_a_link_top_or_inside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("host")
    top = tmp_path / "top"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "file").write_text("job")
    (top / "to-outside").symlink_to(outside)
    swapped = tmp_path / "swapped"
    swapped.symlink_to(outside)  # a directory the driver made, swapped for a link before the chown

    host_files.chown_tree(top, 4242)
    host_files.chown_tree(swapped, 4242)

    assert {(top / p).lstat().st_uid for p in ("", "sub", "sub/file", "to-outside")} == {4242}
    assert outside.stat().st_uid == 0
    assert (outside / "f").stat().st_uid == 0


def test_a_jobs_binds_are_checked_for_links_and_the_runtimes_own_are_not(tmp_path: Path) -> None:
    mounts = (
        Mount(type=MountType.HOST_PATH, source="/data/a", target="/data"),
        Mount(type=MountType.EMPTY_DIR, target="/scratch"),
    )
    worker = WorkerSpec(
        job_id="job-a", worker_id="job-a-header-0", role="header", index=0, rank=0, num_nodes=1,
        is_header=True, node_name="n", mounts=mounts, outputs=("/outputs/x",),
    )  # fmt: skip
    own = Bind(source="/etc/hosts-of-worker", target="/etc/hosts", file=True)

    binds = {b.target: b.within for b in container_binds(worker, tmp_path, extra=[own])}

    assert binds == {"/data": "/", "/scratch": str(tmp_path), "/outputs/x": str(tmp_path), "/etc/hosts": ""}
