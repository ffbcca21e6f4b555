"""The worker bootstrap (ARCHITECTURE §6): `bootstrap.sh` and its helper `rlark_node.py`.

Runtimes ship both files together into every worker (the Kubernetes driver from a ConfigMap, the
local driver by copying them into the worker's directory) and run `bash bootstrap.sh` with the
inputs its header documents. Marker lines it prints are parsed by `runtime.markers`.
"""

from pathlib import Path

BOOTSTRAP_DIR = Path(__file__).resolve().parent
BOOTSTRAP_FILES = ("bootstrap.sh", "rlark_node.py")
"""The files a runtime ships; `bootstrap.sh` is the entry point."""
BOOTSTRAP_SCRIPT = "bootstrap.sh"
