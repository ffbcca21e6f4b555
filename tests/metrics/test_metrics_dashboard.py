"""The Grafana dashboard under ``deploy/grafana`` reads only metrics some RLark service or agent exposes
(the list the scrape test checks against real processes), and has a panel for each of them."""

from __future__ import annotations

import pytest
from metric_names import ALL, expressions, load_dashboard, names_in

pytestmark = pytest.mark.unit


def test_every_metric_the_dashboard_reads_is_one_rlark_exposes() -> None:
    read = set().union(*(names_in(expr) for expr in expressions(load_dashboard())))
    assert read, "the dashboard has no expressions"
    assert read - ALL == set(), "the dashboard reads metrics no RLark component exposes"


def test_every_metric_rlark_exposes_has_a_panel() -> None:
    read = set().union(*(names_in(expr) for expr in expressions(load_dashboard())))
    assert ALL - read == set()


def test_the_dashboard_asks_for_its_prometheus_datasource_and_every_panel_uses_it() -> None:
    dashboard = load_dashboard()
    (variable,) = dashboard["templating"]["list"]
    assert (variable["type"], variable["query"], variable["name"]) == (
        "datasource",
        "prometheus",
        "datasource",
    )
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_a_histograms_series_are_read_as_the_histogram() -> None:
    expr = "histogram_quantile(0.99, sum by (le) (rate(rlark_placement_seconds_bucket[5m])))"
    assert names_in(expr) == {"rlark_placement_seconds"}
    assert names_in("rate(rlark_tunnel_bytes_total[1m]) / rlark_unknown_count") == {
        "rlark_tunnel_bytes_total",
        "rlark_unknown_count",
    }
