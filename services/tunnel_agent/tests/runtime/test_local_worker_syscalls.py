"""Issue 31, item 2: a job on the local runtime runs under a system-call filter like Kubernetes' RuntimeDefault.

Before, a job's processes could make user namespaces of their own (and, as root in them, mount namespaces and
mounts) and use the kernel's keyrings, with no seccomp filter at all. The probes run as a job's prepare script
would, inside a real worker; the run script then does ordinary Ray work, which the filter must leave alone.
"""

from __future__ import annotations

import pytest
from local_runtime_helpers import Recorder, spec
from rlark_tunnel_agent.runtime.driver import WorkerPhase
from rlark_tunnel_agent.runtime.local.driver import LocalDriver

pytestmark = pytest.mark.netns

PROBES = r"""
probe() {
  local out
  if out=$("$@" 2>&1); then echo "PROBE $1 $2: allowed"; else echo "PROBE $1 $2: ${out##*: }"; fi
}
probe unshare -U true
probe unshare -Um true
probe unshare -m true
probe unshare -Urm mount -t tmpfs none /tmp
probe python3 -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
sys.exit(0 if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0 else os.strerror(ctypes.get_errno()))'
probe python3 -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
sys.exit(0 if libc.syscall(keyctl, 0, -3, 1) >= 0 else os.strerror(ctypes.get_errno()))'
grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '
"""
# Each probe's line names its command's first two words (the Python ones: `python3 -c`, in this order).
REFUSED = "Operation not permitted"

RAY_WORK = """
python3 - <<'PY'
import threading
import ray

ray.init()

@ray.remote
def square(x):
    return x * x

print("ray answered", sum(ray.get([square.remote(i) for i in range(4)])))
done = []
worker = threading.Thread(target=lambda: done.append(1))
worker.start()
worker.join()
print("threads run", len(done))
PY
"""


async def test_a_job_cannot_make_namespaces_mount_or_use_keyrings_and_ray_still_runs(
    driver: LocalDriver, recorder: Recorder
) -> None:
    assert driver.use_netns
    header = spec("job-sys", "header", 0, rank=0, num_nodes=1, prepare_script=PROBES, run_script=RAY_WORK)
    await driver.ensure_worker(header)
    final = await driver.wait_exited(header.worker_id)

    lines = [line.text for line in await driver.tail_logs(header.worker_id, 500)]
    probes = [line.removeprefix("PROBE ") for line in lines if line.startswith("PROBE ")]
    assert probes == [
        f"unshare -U: {REFUSED}",  # no user namespace, so none of the privileges one gives
        f"unshare -Um: {REFUSED}",
        f"unshare -m: {REFUSED}",
        f"unshare -Urm: {REFUSED}",
        f"python3 -c: {REFUSED}",  # mount(2)
        f"python3 -c: {REFUSED}",  # keyctl(2)
    ], lines[-60:]
    assert "Seccomp: 2" in lines  # a filter is installed
    assert "NoNewPrivs: 1" in lines
    assert (final.phase, final.exit_code) == (WorkerPhase.SUCCEEDED, 0), lines[-40:]
    assert "ray answered 14" in lines
    assert "threads run 1" in lines
