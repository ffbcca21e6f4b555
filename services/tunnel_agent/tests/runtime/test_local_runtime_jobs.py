"""Real jobs on the local runtime: real processes, real Ray heads and workers, real namespaces.

The driver runs workers in network namespaces when the tests run as root, as plain processes on
127.0.0.1 otherwise; one test forces the plain mode so both are exercised on a root machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import site
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from local_runtime_helpers import (
    CLUSTER,
    Recorder,
    add_netns,
    assert_nothing_left,
    make_options,
    netns_names,
    plain_spec,
    process_alive,
    remove_bridge,
    run_python,
    spec,
    start_stray_process,
)
from rlark_tunnel_agent.runtime.driver import Mount, WorkerPhase
from rlark_tunnel_agent.runtime.local.driver import LocalDriver
from rlark_tunnel_agent.runtime.markers import (
    EXIT_PEERS_UNREACHABLE,
    NodesJoined,
    OutputManifest,
    PeersReachable,
    PeersUnreachable,
    PrepareFailed,
    RayHeadUp,
    RunExited,
    RunStarted,
    parse_marker_line,
)

KEYS = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh0ZXN0a2V5b25lZm9ydGhlcmxhcmt0ZXN0cw alice@laptop",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHNlY29uZGtleWZvcnRoZXJsYXJrdGVzdHN4eA bob@desk",
)

# Every worker records the environment its prepare script saw (before `ray start`).
PREPARE_RECORDS_ENV = """
echo "preparing $RLARK_WORKER_ID"
env | grep -E '^(RLINF_NODE_RANK|RLARK_[A-Z_]+|RAY_ADDRESS)=' | sort \
  > "${RLARK_OUTPUTS%%:*}/prepare_env.txt"
"""

# The run script asks Ray, from inside the job: how many alive nodes, and which RLINF_NODE_RANK
# each node's Ray worker processes inherited (Ray freezes the environment at `ray start`).
RUN_INSPECTS_RAY = """
python3 - <<'PY'
import json, os
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]

@ray.remote(num_cpus=0)
def rank():
    return os.environ.get("RLINF_NODE_RANK")

ranks = ray.get([
    rank.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
    ).remote()
    for n in alive
])
out = os.environ["RLARK_OUTPUTS"].split(":")[0]
with open(os.path.join(out, "ray_nodes.json"), "w") as fh:
    json.dump({"alive": len(alive), "ranks": sorted(ranks)}, fh)
os.makedirs(os.path.join(out, "checkpoints", "global_step_1"), exist_ok=True)
with open(os.path.join(out, "checkpoints", "global_step_1", "actor.pt"), "wb") as fh:
    fh.write(b"w" * 4096)
print("training done")
PY
"""


def read_env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


@pytest.mark.heavy
async def test_three_worker_job_joins_runs_and_leaves_nothing_behind(
    driver: LocalDriver, recorder: Recorder, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-volume"
    header = spec(
        "job-ok",
        "header",
        0,
        rank=0,
        num_nodes=3,
        prepare_script=PREPARE_RECORDS_ENV,
        run_script=RUN_INSPECTS_RAY,
        ssh_public_keys=KEYS,
        gpus=1,
        total_gpus=3,
        mounts=(Mount(type="hostPath", source=str(shared), target="/data"),),
        outputs=("/data/out",),
    )
    workers = [
        spec(
            "job-ok",
            "rollout",
            i,
            rank=i + 1,
            num_nodes=3,
            prepare_script=PREPARE_RECORDS_ENV,
            ssh_public_keys=KEYS,
            gpus=1,
            node_name=f"node-{'bc'[i]}",
        )
        for i in range(2)
    ]
    all_ids = [header.worker_id] + [w.worker_id for w in workers]
    for worker_spec in (header, *workers):
        await driver.ensure_worker(worker_spec)
    # Placements are delivered at least once: a second ensure changes nothing.
    pid_before = driver.record(header.worker_id).pid  # type: ignore[union-attr]
    await driver.ensure_worker(header)
    assert driver.record(header.worker_id).pid == pid_before  # type: ignore[union-attr]
    assert await driver.list_workers() == sorted(all_ids)

    final = await driver.wait_exited(header.worker_id)
    assert final.phase == WorkerPhase.SUCCEEDED, await driver.tail_logs(header.worker_id, 40)
    assert final.exit_code == 0

    markers = recorder.markers(header.worker_id)
    kinds = [type(m) for m in markers]
    assert RayHeadUp in kinds
    assert kinds.index(RayHeadUp) < kinds.index(RunStarted) < kinds.index(RunExited)
    joined = [m for m in markers if isinstance(m, NodesJoined)]
    assert (joined[-1].joined, joined[-1].expected) == (3, 3)
    assert joined[-1].gpus == 3
    assert [m.exit_code for m in markers if isinstance(m, RunExited)] == [0]
    # Before its run script the Header reached every other worker's raylet and object manager.
    header_ip = driver.record(header.worker_id).header_address  # type: ignore[union-attr]
    assert kinds.index(NodesJoined) < kinds.index(PeersReachable) < kinds.index(RunStarted)
    [reached] = [m for m in markers if isinstance(m, PeersReachable)]
    peer_records = [r for r in (driver.record(w.worker_id) for w in workers) if r is not None]
    expected = {
        (r.address, port)
        for r in peer_records
        for port in (r.ports.node_manager_port, r.ports.object_manager_port)
    }
    if driver.use_netns:
        assert {(p.address, p.port) for p in reached.peers} == expected
        assert reached.addresses == {r.address for r in peer_records}
        assert header_ip not in reached.addresses
    else:  # one shared address, which Ray reports as the host's rather than 127.0.0.1
        assert sorted(p.port for p in reached.peers) == sorted(port for _, port in expected)
    assert len(reached.peers) == 4
    assert all(p.connect_ms >= 0 for p in reached.peers)
    phases = [s.phase for s in recorder.statuses(header.worker_id)]
    assert phases[0] == WorkerPhase.CREATED
    assert WorkerPhase.RAY_HEAD_UP in phases
    assert WorkerPhase.RUNNING in phases

    # The run script's view of Ray: three alive nodes whose processes carry ranks 0, 1, 2.
    ray_view = json.loads((shared / "out" / "ray_nodes.json").read_text())
    assert ray_view == {"alive": 3, "ranks": ["0", "1", "2"]}

    # Each prepare script saw its own rank exactly once, and the platform's variables.
    envs = [
        read_env_file(shared / "out" / "prepare_env.txt"),
        *(
            read_env_file(driver.worker_dir(w.worker_id) / "fs" / "outputs" / "prepare_env.txt")
            for w in workers
        ),
    ]
    assert sorted(e["RLINF_NODE_RANK"] for e in envs) == ["0", "1", "2"]
    for env, worker_spec in zip(envs, (header, *workers), strict=True):
        assert env["RLARK_JOB_ID"] == "job-ok"
        assert env["RLARK_ROLE"] == worker_spec.role
        assert env["RLARK_WORKER_INDEX"] == str(worker_spec.index)
        assert env["RLARK_NUM_NODES"] == "3"
        assert env["RAY_ADDRESS"].startswith(f"{header_ip}:")

    # authorized_keys: exactly the given keys, file 600 in a 700 directory, on every worker.
    for worker_id in all_ids:
        ssh_dir = driver.worker_dir(worker_id) / "home" / ".ssh"
        assert (ssh_dir / "authorized_keys").read_text().splitlines() == list(KEYS)
        assert stat.S_IMODE((ssh_dir / "authorized_keys").stat().st_mode) == 0o600
        assert stat.S_IMODE(ssh_dir.stat().st_mode) == 0o700

    # The manifest lists the checkpoint the run script wrote onto the mounted volume.
    manifests = [m for m in recorder.markers(header.worker_id) if isinstance(m, OutputManifest)]
    assert len(manifests) == 1
    listed = {f.path: f.size for f in manifests[0].files}
    assert listed["checkpoints/global_step_1/actor.pt"] == 4096
    assert not manifests[0].truncated

    # The other workers stay up until stopped; stopping leaves no process and no namespace.
    for w in workers:
        status = await driver.get_status(w.worker_id)
        assert status is not None
        assert status.phase == WorkerPhase.JOINED
    for worker_id in all_ids:
        await driver.stop_worker(worker_id)
        await driver.stop_worker(worker_id)  # idempotent
    assert_nothing_left(driver, all_ids)
    for w in workers:
        status = await driver.get_status(w.worker_id)
        assert status is not None
        assert status.phase == WorkerPhase.STOPPED
    assert (await driver.get_status(header.worker_id)).phase == WorkerPhase.SUCCEEDED  # type: ignore[union-attr]
    assert await driver.list_workers() == []
    # A redelivered placement does not bring a stopped worker back.
    await driver.ensure_worker(workers[0])
    assert await driver.list_workers() == []


async def test_failing_prepare_script_fails_the_worker_with_its_exit_code(
    driver: LocalDriver, recorder: Recorder
) -> None:
    header = spec(
        "job-prep",
        "header",
        0,
        rank=0,
        num_nodes=1,
        prepare_script="echo installing deps\necho 'pip: no such package' >&2\nexit 7\necho never",
        run_script="echo should not run",
    )
    await driver.ensure_worker(header)
    final = await driver.wait_exited(header.worker_id)

    assert (final.phase, final.exit_code) == (WorkerPhase.FAILED, 7)
    assert "prepare script exited with 7" in final.reason
    assert [m.exit_code for m in recorder.markers(header.worker_id) if isinstance(m, PrepareFailed)] == [7]
    assert not any(isinstance(m, RayHeadUp) for m in recorder.markers(header.worker_id))
    tail = [line.text for line in await driver.tail_logs(header.worker_id, 20)]
    assert "installing deps" in tail
    assert "pip: no such package" in tail
    assert "never" not in tail


async def test_stdout_and_stderr_lines_are_numbered_once_in_the_order_written(
    driver: LocalDriver, recorder: Recorder
) -> None:
    # The control plane stores lines by (worker, number): two streams numbered apart would collide
    # and lose one of them (a failing script's error on stderr, typically).
    header = spec("job-streams", "header", 0, rank=0, num_nodes=1,
                  prepare_script="echo out-1\necho err-1 >&2\necho out-2\necho err-2 >&2\nexit 5",
                  run_script="true")  # fmt: skip
    await driver.ensure_worker(header)
    await driver.wait_exited(header.worker_id)

    lines = await driver.tail_logs(header.worker_id, 100)
    numbers = [line.seq for line in lines]
    assert numbers == list(range(1, len(lines) + 1))
    texts = [line.text for line in lines]
    ours = [t for t in texts if t in {"out-1", "err-1", "out-2", "err-2"}]
    assert ours == ["out-1", "err-1", "out-2", "err-2"]


async def test_prepare_script_runs_with_errexit_and_pipefail(driver: LocalDriver, recorder: Recorder) -> None:
    header = spec("job-pipe", "header", 0, rank=0, num_nodes=1,
                  prepare_script="false | cat\necho after-the-pipe", run_script="true")  # fmt: skip
    await driver.ensure_worker(header)
    final = await driver.wait_exited(header.worker_id)

    assert (final.phase, final.exit_code) == (WorkerPhase.FAILED, 1)
    assert "after-the-pipe" not in [line.text for line in await driver.tail_logs(header.worker_id)]


async def test_run_script_exit_code_is_the_workers_even_when_stopped_at_once(
    driver: LocalDriver, recorder: Recorder
) -> None:
    header = spec("job-run3", "header", 0, rank=0, num_nodes=1,
                  run_script="echo step\nexit 3\necho never")  # fmt: skip
    await driver.ensure_worker(header)
    await recorder.wait_for(
        lambda: any(isinstance(m, RunExited) for m in recorder.markers(header.worker_id)),
        within=120,
        what="the run script to exit",
    )
    # The agent stops a job's workers as soon as the Header's run script ends; the bootstrap
    # is still cleaning up then, and must finish (the output manifest comes last).
    await driver.stop_worker(header.worker_id)
    final = await driver.get_status(header.worker_id)

    assert final is not None
    assert (final.phase, final.exit_code) == (WorkerPhase.FAILED, 3)
    markers = recorder.markers(header.worker_id)
    assert [m.exit_code for m in markers if isinstance(m, RunExited)] == [3]
    assert any(isinstance(m, OutputManifest) for m in markers)
    assert_nothing_left(driver, [header.worker_id])


async def test_a_stop_that_comes_while_its_worker_is_created_stops_it(driver: LocalDriver) -> None:
    """A job whose Header fails at once is stopped while its other workers may still be being created: the
    stop waits for the creation and then stops the worker, instead of finding no worker and leaving it to
    run on."""
    worker = spec("job-early-stop", "rollout", 0, rank=1, num_nodes=2, prepare_script="sleep 600")
    creating = asyncio.create_task(driver.ensure_worker(worker))
    await asyncio.sleep(0)  # the creation has begun (it holds the driver's lock)
    await driver.stop_worker(worker.worker_id)
    await creating
    status = await driver.get_status(worker.worker_id)
    assert status is not None
    assert status.phase == WorkerPhase.STOPPED, status
    assert_nothing_left(driver, [worker.worker_id])


def unroute_tcp(netns: str, address: str, port: int) -> None:
    """Inside namespace `netns`, TCP to `address:port` has no route ("Network is unreachable").

    A policy rule, so every other port of that address still works; it goes away with the
    namespace. (This kernel has no packet filter to drop packets silently instead.)
    """
    subprocess.run(
        ["ip", "netns", "exec", netns, "ip", "rule", "add", "to", f"{address}/32", "ipproto", "tcp",
         "dport", str(port), "unreachable"],
        check=True,
    )  # fmt: skip


@pytest.mark.netns
async def test_a_peer_that_does_not_answer_fails_the_header_before_its_run_script(
    driver: LocalDriver, recorder: Recorder
) -> None:
    assert driver.use_netns
    header = spec("job-reach", "header", 0, rank=0, num_nodes=2, run_script="echo the-run-script-ran",
                  env={"RLARK_REACH_DEADLINE_S": "4"})  # fmt: skip
    worker = spec("job-reach", "rollout", 0, rank=1, num_nodes=2)
    await driver.ensure_worker(header)
    await driver.ensure_worker(worker)
    peer = driver.record(worker.worker_id)
    header_netns = driver.record(header.worker_id).netns  # type: ignore[union-attr]
    assert peer is not None
    assert header_netns is not None
    # The worker still joins (it calls the Header's GCS, and the GCS checks its raylet), but the
    # Header has no route to its object manager: what the check is there to catch.
    unroute_tcp(header_netns, peer.address, peer.ports.object_manager_port)

    final = await driver.wait_exited(header.worker_id)

    assert (final.phase, final.exit_code) == (WorkerPhase.FAILED, EXIT_PEERS_UNREACHABLE)
    assert final.reason == (
        f"peer {peer.address} did not answer on {peer.ports.object_manager_port} (Ray object manager) "
        "within 4s: Network is unreachable"
    ), await driver.tail_logs(header.worker_id, 40)
    markers = recorder.markers(header.worker_id)
    [unreachable] = [m for m in markers if isinstance(m, PeersUnreachable)]
    assert [(f.address, f.port, f.service) for f in unreachable.failed] == [
        (peer.address, peer.ports.object_manager_port, "Ray object manager")
    ]
    assert [(a.address, a.port) for a in unreachable.answered] == [
        (peer.address, peer.ports.node_manager_port)
    ]
    assert not any(isinstance(m, RunStarted | PeersReachable) for m in markers)
    assert "the-run-script-ran" not in [line.text for line in await driver.tail_logs(header.worker_id, 200)]
    for worker_id in (header.worker_id, worker.worker_id):
        await driver.stop_worker(worker_id)
    assert_nothing_left(driver, [header.worker_id, worker.worker_id])


# Inside its namespace a worker's communication device carries its Ray address; the Header's dashboard and
# state API answer on the Header's address (not only on loopback) at the address every worker is given.
DEVICE_CARRIES_THE_ADDRESS = """
ip -o -4 addr show dev "$RLINF_COMM_NET_DEVICES" | grep -F " $RLARK_NODE_IP/"
test "$GLOO_SOCKET_IFNAME,$NCCL_SOCKET_IFNAME" = "$RLINF_COMM_NET_DEVICES,$RLINF_COMM_NET_DEVICES"
echo "device $RLINF_COMM_NET_DEVICES carries $RLARK_NODE_IP"
"""
RUN_ASKS_THE_STATE_API = (
    DEVICE_CARRIES_THE_ADDRESS
    + """
python3 - <<'PY'
import os, urllib.request
from ray.util.state import list_nodes
assert os.environ["RAY_API_SERVER_ADDRESS"] == "http://%s:%s" % (
    os.environ["RLARK_NODE_IP"], os.environ["RLARK_RAY_DASHBOARD_PORT"])
print("state API lists", len(list_nodes()), "nodes")
with urllib.request.urlopen(os.environ["RAY_API_SERVER_ADDRESS"] + "/api/version", timeout=30) as answer:
    print("dashboard answered", answer.status)
PY
"""
)


@pytest.mark.netns
async def test_collectives_use_the_namespaces_eth0_and_the_header_serves_the_state_api(
    driver: LocalDriver,
) -> None:
    assert driver.use_netns
    header = spec("job-comm", "header", 0, rank=0, num_nodes=2, run_script=RUN_ASKS_THE_STATE_API)
    worker = spec("job-comm", "rollout", 0, rank=1, num_nodes=2, prepare_script=DEVICE_CARRIES_THE_ADDRESS)
    await driver.ensure_worker(header)
    await driver.ensure_worker(worker)

    final = await driver.wait_exited(header.worker_id)

    lines = [line.text for line in await driver.tail_logs(header.worker_id, 500)]
    assert (final.phase, final.exit_code) == (WorkerPhase.SUCCEEDED, 0), lines[-40:]
    header_ip = driver.record(header.worker_id).address  # type: ignore[union-attr]
    assert f"device eth0 carries {header_ip}" in lines
    assert "state API lists 2 nodes" in lines
    assert "dashboard answered 200" in lines
    worker_ip = driver.record(worker.worker_id).address  # type: ignore[union-attr]
    worker_lines = [line.text for line in await driver.tail_logs(worker.worker_id, 500)]
    assert f"device eth0 carries {worker_ip}" in worker_lines
    for worker_id in (header.worker_id, worker.worker_id):
        await driver.stop_worker(worker_id)
    assert_nothing_left(driver, [header.worker_id, worker.worker_id])


WAIT_FOR_GO = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'


async def test_authorized_keys_are_rewritten_in_a_running_worker(
    driver: LocalDriver, recorder: Recorder
) -> None:
    header = spec("job-keys", "header", 0, rank=0, num_nodes=1, ssh_public_keys=KEYS[:1],
                  prepare_script=WAIT_FOR_GO, run_script="true")  # fmt: skip
    await driver.ensure_worker(header)
    # As root the worker's sshd reads the runtime's own copy (root writes nothing in the worker's home);
    # as plain processes the home copy.
    own = "scripts/authorized_keys" if driver.use_netns else "home/.ssh/authorized_keys"
    keys_file = driver.worker_dir(header.worker_id) / own
    await recorder.wait_for(
        lambda: any(s.phase == WorkerPhase.PREPARING for s in recorder.statuses(header.worker_id)),
        within=30,
        what="the prepare script to start",
    )
    assert keys_file.read_text().splitlines() == [KEYS[0]]
    pid = driver.record(header.worker_id).pid  # type: ignore[union-attr]

    await driver.update_authorized_keys(header.worker_id, [KEYS[1], ""])

    assert keys_file.read_text().splitlines() == [KEYS[1]]
    record = driver.record(header.worker_id)
    assert record is not None
    if record.uid is None:
        assert stat.S_IMODE(keys_file.stat().st_mode) == 0o600
    else:  # root's file, readable by the worker's group only
        assert stat.S_IMODE(keys_file.stat().st_mode) == 0o640
        assert (keys_file.stat().st_uid, keys_file.stat().st_gid) == (0, record.uid)
    # Nothing restarted: same bootstrap process, still preparing.
    assert driver.record(header.worker_id).pid == pid  # type: ignore[union-attr]
    assert (await driver.get_status(header.worker_id)).phase == WorkerPhase.PREPARING  # type: ignore[union-attr]

    await driver.stop_worker(header.worker_id)
    assert (await driver.get_status(header.worker_id)).phase == WorkerPhase.STOPPED  # type: ignore[union-attr]
    assert_nothing_left(driver, [header.worker_id])


FIRST_AGENT = """
import asyncio, sys
from pathlib import Path
from local_runtime_helpers import CLUSTER, make_options, spec
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions

async def main() -> None:
    options = LocalDriverOptions.model_validate_json(Path(sys.argv[1]).read_text())
    driver = LocalDriver(CLUSTER, options)
    await driver.start()
    header = spec("job-adopt", "header", 0, rank=0, num_nodes=1,
                  prepare_script='while [ ! -e "$HOME/go" ]; do sleep 0.2; done', run_script="true")
    await driver.ensure_worker(header)
    print(driver.record(header.worker_id).pid, driver.tag, int(driver.use_netns))
    await driver.close()

asyncio.run(main())
"""


async def test_restarted_driver_adopts_live_workers_and_reaps_strays(tmp_path: Path) -> None:
    options = make_options(tmp_path / "state")
    # The first agent is a process of its own that starts a worker and exits, as an agent does
    # when it restarts: the worker must outlive it.
    (tmp_path / "options.json").write_text(options.model_dump_json())
    out = run_python(FIRST_AGENT, str(tmp_path / "options.json"))
    pid_text, tag, netns_flag = out.strip().splitlines()[-1].split()
    pid, use_netns = int(pid_text), netns_flag == "1"
    worker_id = "job-adopt-header-0"
    assert process_alive(pid)

    # Leftovers of workers the driver no longer knows: a process carrying our tag, a namespace.
    stray = start_stray_process(f"{tag}/ghost-worker-0")
    stray_ns = f"rlark-{tag}-0123456789"
    if use_netns:
        add_netns(stray_ns)

    second = LocalDriver(CLUSTER, options)
    recorder = Recorder(second)
    await second.start()
    try:
        assert stray.wait(timeout=5) == -9
        assert stray_ns not in netns_names()
        assert await second.list_workers() == [worker_id]
        assert second.record(worker_id).pid == pid  # type: ignore[union-attr]
        await recorder.wait_for(
            lambda: any(s.phase == WorkerPhase.PREPARING for s in recorder.statuses(worker_id)),
            within=10,
            what="the adopted worker's status to be rebuilt from its log",
        )
        await second.stop_worker(worker_id)
        assert (await second.get_status(worker_id)).phase == WorkerPhase.STOPPED  # type: ignore[union-attr]
        assert_nothing_left(second, [worker_id])
    finally:
        await recorder.close()
        await second.close()
        if second.use_netns:
            remove_bridge(options.bridge)


async def test_plain_processes_with_port_blocks_form_a_ray_cluster(tmp_path: Path) -> None:
    drv = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=False))
    await drv.start()
    try:
        header = plain_spec("job-plain", "header", 0, rank=0, num_nodes=2,
                      run_script='python3 -c "import ray; ray.init(); '
                      'assert sum(n[\'Alive\'] for n in ray.nodes()) == 2"')  # fmt: skip
        worker = plain_spec("job-plain", "rollout", 0, rank=1, num_nodes=2)
        await drv.ensure_worker(header)
        await drv.ensure_worker(worker)
        records = [drv.record(w.worker_id) for w in (header, worker)]
        assert all(r is not None and r.netns is None and r.address == "127.0.0.1" for r in records)
        assert records[0].ports != records[1].ports  # type: ignore[union-attr]
        final = await drv.wait_exited(header.worker_id)
        assert (final.phase, final.exit_code) == (WorkerPhase.SUCCEEDED, 0), await drv.tail_logs(
            header.worker_id, 30
        )
        # Both nodes share one address (Ray reports the host's for 127.0.0.1): the Header checked
        # the other worker's port block, not its own.
        logged = [parse_marker_line(line.text) for line in await drv.tail_logs(header.worker_id, 500)]
        [reached] = [m for m in logged if isinstance(m, PeersReachable)]
        peer_ports = records[1].ports  # type: ignore[union-attr]
        assert sorted(p.port for p in reached.peers) == [
            peer_ports.node_manager_port,
            peer_ports.object_manager_port,
        ]
        assert len(reached.addresses) == 1
        for w in (header, worker):
            await drv.stop_worker(w.worker_id)
        assert_nothing_left(drv, [header.worker_id, worker.worker_id])
    finally:
        await drv.close()


# An agent started with `uv run` (as a developer starts one in this workspace): its workers are its
# descendants, and Ray looks for `uv run` among a driver's ancestors. The file is named `run` and run
# as `uv run` (argv[0] "uv"), so Ray sees exactly that ancestor.
AGENT_UNDER_UV_RUN = """
import asyncio, os, site, sys
from pathlib import Path
for directory in os.environ["TEST_SITE_PACKAGES"].split(os.pathsep):
    site.addsitedir(directory)  # with argv[0] "uv" Python does not find its virtual environment
from local_runtime_helpers import CLUSTER, assert_nothing_left, spec
from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions

RUN = '''
python3 - <<'PY'
import ray
ray.init()

@ray.remote
def answer():
    return 42

print("task answered", ray.get(answer.remote()))
PY
'''

async def main():
    options = LocalDriverOptions.model_validate_json(Path(sys.argv[1]).read_text())
    driver = LocalDriver(CLUSTER, options)
    await driver.start()
    header = spec("job-uvrun", "header", 0, rank=0, num_nodes=1, run_script=RUN)
    await driver.ensure_worker(header)
    final = await driver.wait_exited(header.worker_id)
    for line in await driver.tail_logs(header.worker_id, 500):
        print("LOG", line.text)
    print("FINAL", final.phase.value, final.exit_code)
    await driver.stop_worker(header.worker_id)  # an ended worker keeps its namespace until it is stopped
    assert_nothing_left(driver, [header.worker_id])
    await driver.close()

asyncio.run(main())
"""


async def test_a_job_runs_ray_when_the_agent_was_started_with_uv_run_inside_a_project(
    tmp_path: Path,
) -> None:
    project = tmp_path / "checkout"  # the agent's state inside a uv project, as `.state/agent` is
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "checkout"\nversion = "0"\n')
    options = make_options(project / ".state" / "agent", python_bin_dir=Path(sys.executable).parent)
    (tmp_path / "options.json").write_text(options.model_dump_json())
    launcher = tmp_path / "launcher"
    launcher.mkdir()
    (launcher / "run").write_text(AGENT_UNDER_UV_RUN)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parent),
        "TEST_SITE_PACKAGES": os.pathsep.join(site.getsitepackages()),
    }
    done = await asyncio.to_thread(
        subprocess.run,
        ["uv", "run", str(tmp_path / "options.json")],
        executable=sys.executable,
        cwd=launcher,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        final = [line for line in done.stdout.splitlines() if line.startswith("FINAL ")]
        assert final == ["FINAL Succeeded 0"], done.stdout[-3000:]
        assert "LOG task answered 42" in done.stdout.splitlines()
    finally:
        if options.use_netns is not False and os.geteuid() == 0:
            remove_bridge(options.bridge)
