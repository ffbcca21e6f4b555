"""The project's benchmarks, one module per measured part, run by ``make bench`` (``rlark_devinfra.bench``).

They live here, not in the packages they measure, so no service image carries them (issue 16); each
module imports the code it measures and can also be run on its own (``python -m
rlark_devinfra.benches.<name>``). docs/benchmarks.md explains every measure and its target.
"""
