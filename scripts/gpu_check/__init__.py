"""`scripts/gpu-check`: one prepared check of every GPU-specific path of RLark, for a lent GPU machine.

`main.py` drives the real agent code (node discovery, the local runtime's GPU assignment and device isolation,
usage sampling) and the inventory's node accounting below Ray; `probe.py` is what runs inside its workers;
`nvidia.py` reads `nvidia-smi` itself as the reference; `verdicts.py` turns what was seen into PASS, FAIL or
SKIP lines; `report.py` prints them and writes the JSON report. See docs/gpu-checks/README.md.
"""
