"""The database benchmark runs end to end on a small domain and reports consistent numbers."""

from __future__ import annotations

import pytest
from rlark_devinfra.benches.netdomain import bench_db_allocations

pytestmark = pytest.mark.integration


async def test_db_bench_allocates_through_the_repository_and_reports_latency(database_url: str) -> None:
    result = await bench_db_allocations(database_url, n_in_use=2_000, cidr="10.100.0.0/20", operations=40)

    assert result["n_in_use"] == 2_000
    assert result["allocations"] == 80
    assert result["in_use_after"] == 2_000 + 40  # churn releases one address per allocation
    assert float(result["allocations_per_s"]) > 0
    assert float(result["p50_ms"]) <= float(result["p99_ms"]) <= float(result["max_ms"])
