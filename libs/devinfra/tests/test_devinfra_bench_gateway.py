"""The gateway benchmark's reading of wrk's report (the benchmark itself runs in `make bench gateway`)."""

from __future__ import annotations

import pytest
from rlark_devinfra.benches.gateway import parse_wrk

REPORT = """Running 8s test @ http://127.0.0.1:8080/api/v1/nodes
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    45.10ms   12.01ms 210.33ms   80.00%
    Req/Sec     1.10k   100.00     1.30k    70.00%
  Latency Distribution
     50%   43.21ms
     75%   50.00ms
     90%   60.00ms
     99%  101.50ms
  8800 requests in 8.00s, 10.00MB read
  Non-2xx or 3xx responses: 12
Requests/sec:   1100.25
Transfer/sec:      1.25MB
"""


def test_rate_percentiles_and_refusals_are_read_in_seconds() -> None:
    got = parse_wrk(REPORT)
    assert got["rps"] == pytest.approx(1100.25)
    assert got["p50_s"] == pytest.approx(0.04321)
    assert got["p99_s"] == pytest.approx(0.1015)
    assert got["non_2xx"] == 12
    assert got["socket_errors"] == 0


def test_a_report_without_a_latency_distribution_is_an_error() -> None:
    with pytest.raises(ValueError, match="no rate or latency"):
        parse_wrk("Requests/sec: 10\n")
