"""Run a command on a fake GPU machine: `unshare --mount --propagation private python3 fake_gpu_machine.py
GPUS MODEL TOTAL_MIB -- command...` (root).

In the new mount namespace `/dev` becomes a tmpfs holding the host's entries (bound back, so the command and
its children see the same devices) plus fake NVIDIA nodes: `nvidiactl`, `nvidia-uvm` and `nvidia-uvm-tools` as
character devices with `/dev/null`'s numbers, and each GPU `nvidia<N>` as a regular file holding its state
(see the fake torch). Nothing changes in the host's `/dev`; it all goes with the namespace.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
STATE_BYTES = 1024


def mount(*args: str) -> None:
    # --no-canonicalize: a source under /proc/<pid>/fd/ must not be resolved back to the covered path.
    subprocess.run(["mount", "--no-canonicalize", *args], check=True)


def fake_dev(gpus: int, model: str, total_mib: int) -> None:
    # The host's /dev stays reachable by a descriptor once covered (as pod_init.py's shadows do): no mount
    # point of its own is left behind in the host's file system.
    null = os.stat("/dev/null").st_rdev
    handle = os.open("/dev", os.O_PATH | os.O_DIRECTORY)
    host = f"/proc/{os.getpid()}/fd/{handle}"
    mount("-t", "tmpfs", "-o", "mode=755", "rlark-fake-dev", "/dev")
    for name in sorted(os.listdir(host)):
        source, target = os.path.join(host, name), os.path.join("/dev", name)
        if name.startswith("nvidia"):
            continue  # a real GPU's nodes stay out: this machine is the fake one
        try:
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
            elif os.path.isdir(source):
                os.mkdir(target)
                mount("--rbind", source, target)
            else:
                open(target, "a").close()
                mount("--bind", source, target)
        except (OSError, subprocess.CalledProcessError) as exc:  # an odd entry of some machine's /dev
            print(f"fake_gpu_machine: /dev/{name} left out: {exc}", file=sys.stderr)
    for name in CONTROL:
        os.mknod(f"/dev/{name}", 0o666 | stat.S_IFCHR, null)
        os.chmod(f"/dev/{name}", 0o666)  # noqa: S103 - as the real nodes are
    for index in range(gpus):
        state = {"name": model, "uuid": f"GPU-00000000-0000-4000-8000-{index:012d}", "total_mib": total_mib}
        path = f"/dev/nvidia{index}"
        with open(path, "w") as fh:
            fh.write(json.dumps(state).ljust(STATE_BYTES))
        os.chmod(path, 0o666)  # noqa: S103 - as the real nodes are


def main() -> None:
    gpus, model, total_mib, sep, *command = sys.argv[1:]
    assert sep == "--", __doc__
    assert command, __doc__
    fake_dev(int(gpus), model, int(total_mib))
    os.execvp(command[0], command)  # noqa: S606 - the command under test, on the fake machine


if __name__ == "__main__":
    main()
