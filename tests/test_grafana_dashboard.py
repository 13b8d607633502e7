"""The Grafana dashboard the collection ships (files/grafana/yasco-cluster.json):
well formed for Grafana's import, every panel explained, and every query naming only
metrics the agent and the watcher serve, as docs/observability.md lists them. That
each query runs and returns data during a failover is asserted against a real
Prometheus in tests/etcd/test_metrics.py and on the lab in tests/lab/test_ha.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "files" / "grafana" / "yasco-cluster.json"
DOCS = ROOT / "docs" / "observability.md"


def dashboard_queries(host: str = ".*") -> dict[str, str]:
    """Panel title (and query letter) -> its PromQL, with Grafana's variables given."""
    dashboard = json.loads(DASHBOARD.read_text())
    return {f"{panel['title']} {target['refId']}": target["expr"].replace("$host", host)
            for panel in dashboard["panels"] for target in panel.get("targets", [])}


def test_the_dashboard_imports_as_grafana_expects():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "yasco-cluster" and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["description"], f"{panel['title']}: say what it shows"
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= set(variables), f"{panel['title']}: unknown variable {used}"


def test_every_query_names_only_metrics_that_are_served():
    listed = set(re.findall(r"^\| `(yasco_[a-z_]+)`", DOCS.read_text(), flags=re.M))
    # A histogram is served as its buckets, count and sum.
    listed |= {f"{name}_{part}" for name in re.findall(
        r"^\| `(yasco_[a-z_]+)` \| histogram", DOCS.read_text(), flags=re.M)
        for part in ("bucket", "count", "sum")}
    queries = dashboard_queries()
    assert len(queries) >= 15
    for title, expr in queries.items():
        named = set(re.findall(r"\byasco_[a-z_]+", expr))
        assert named, f"{title}: queries no YASCO metric"
        assert named <= listed, f"{title}: {named - listed} is served by nothing"
