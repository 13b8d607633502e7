"""Prometheus metrics of the agent and the HA watcher, scraped by a real Prometheus
that loads the alerting rules the collection ships (files/prometheus/yasco.rules.yml):
against real etcd and libvirt's test driver, a host is cut off from etcd, self-fences,
and the alerts an operator relies on fire from what the two processes serve, while
every query of the shipped Grafana dashboard has data."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import (
    cluster_events, host_states, watcher_view)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys, metrics
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_config import (
    AgentConfig, ConfigError)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.domain_watch import (
    start_libvirt_event_loop)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.host_agent import Agent
from ansible_collections.yasco.cluster.plugins.module_utils.watcher import leader_looks, watcher

from ..test_grafana_dashboard import dashboard_queries
from .conftest import ROOT, CuttableLink, free_port, wait_for
from .test_agent_start import TTL, MARGIN, URI, Running
from .test_etcd_hosts_source import LEADER_TTL, RunningSource, wait_until_leading

RULES = ROOT / "files" / "prometheus" / "yasco.rules.yml"
DOCS = ROOT / "docs" / "observability.md"
WAIT = 30


@pytest.fixture(name="running")
def fixture_running() -> Iterator[Running]:
    running = Running()
    yield running
    running.close()


class Prometheus:
    """A real Prometheus scraping `targets` every second, evaluating the shipped rules
    every second."""

    def __init__(self, directory: Path, targets: dict[str, str]) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not installed: run make setup"
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(RULES)],
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [t]}]}
                                     for job, t in targets.items()]}
        (directory / "prometheus.yml").write_text(json.dumps(config))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = (directory / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address={self.url.split('//')[1]}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        assert wait_for(self._ready, WAIT), "Prometheus did not start: " + (
            directory / "prometheus.log").read_text()[-2000:]

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as reply:
                return reply.status == 200
        except OSError:
            return False

    def api(self, path: str, **query: str) -> Any:
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?"
                                    f"{urllib.parse.urlencode(query)}", timeout=5) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query, None when it has none."""
        result = self.api("query", query=expr)["result"]
        assert len(result) <= 1, f"{expr}: {result}"
        return float(result[0]["value"][1]) if result else None

    def firing(self) -> set[tuple[str, str]]:
        """(alert name, host or vm) of every firing alert."""
        return {(a["labels"]["alertname"], a["labels"].get("host") or a["labels"].get("vm", ""))
                for a in self.api("alerts")["alerts"] if a["state"] == "firing"}

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(WAIT)
        self.log.close()


def scrape(listen: str) -> dict[str, Any]:
    """Family name (counters without _total) -> its samples, from /metrics."""
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def start_agent(endpoint: str, cluster: str, listen: str) -> Agent:
    config = AgentConfig(host="hv1", endpoints=[endpoint], cluster=cluster, ttl=TTL,
                         margin=MARGIN, libvirt_uri=URI, reconcile=1.0,
                         metrics_listen=listen)
    config.check("test")
    agent = Agent(config)
    start_libvirt_event_loop()  # as run() does: the publisher follows domain events
    agent.serve_metrics()
    for target in (agent.heartbeat, agent.fencer, agent.publisher):
        threading.Thread(target=target, daemon=True).start()
    return agent


def test_a_host_cut_off_shows_in_the_metrics_and_fires_the_shipped_alerts(
        etcd, running, tmp_path):
    cluster = f"t{uuid.uuid4().hex[:8]}"
    ha = running.names["ha"]
    began = time.time()
    with EtcdClient([etcd.url]) as client:
        client.put(etcd_keys.vdm_ha_key(cluster=cluster), to_json(
            {"vms": {ha: {"kind": "ha", "memory_mb": 64, "vcpus": 1}}, "hosts": {"hv1": {}},
             "failures_to_tolerate": 1}))
        client.put(etcd_keys.vm_key(ha, cluster=cluster),
                   to_json({"state": "running", "host": "hv1"}))
    link = CuttableLink(etcd.url)
    listen = {"agent": f"127.0.0.1:{free_port()}", "watcher": f"127.0.0.1:{free_port()}"}
    source = RunningSource({"endpoints": [etcd.url], "cluster": cluster, "leader_ttl": LEADER_TTL,
                            "settle": 0.3, "hold_down": 600, "reconcile_interval": 0.5,
                            "metrics_listen": listen["watcher"], "name": "w1"})
    agent = prometheus = None
    try:
        # The watcher reads the hosts before the agent registers, so that it sees the
        # registration as host_up (a host already up when it starts is not news).
        wait_until_leading(source)
        agent = start_agent(link.url, cluster, listen["agent"])
        assert wait_for(lambda: agent.lease, 10), "the agent did not register"
        prometheus = Prometheus(tmp_path, {"yasco-agent": listen["agent"],
                                           "yasco-watcher": listen["watcher"]})

        # Every metric the shipped rules name is served by one of the two.
        served = set(scrape(listen["agent"])) | set(scrape(listen["watcher"]))
        named = {re.sub("_total$", "", name)
                 for name in re.findall(r"\byasco_[a-z_]+", RULES.read_text())}
        assert named <= served, f"the rules name metrics nobody serves: {named - served}"
        documented = set(re.findall(r"`(yasco_[a-z_]+)`", DOCS.read_text()))
        undocumented = {n for n in served if n not in documented and f"{n}_total" not in
                        documented}
        assert not undocumented, f"served but not in docs/observability.md: {undocumented}"
        named_in_tables = set(re.findall(r"^\| `(yasco_[a-z_]+)`", DOCS.read_text(), re.M))
        assert named_in_tables <= served | {f"{n}_total" for n in served}

        healthy = {'yasco_agent_lease_held{host="hv1"}': 1.0,
                   'yasco_agent_domains{host="hv1",kind="ha",state="running"}': 1.0,
                   'yasco_host_up{host="hv1"}': 1.0, 'yasco_watcher_leader{watcher="w1"}': 1.0,
                   f'yasco_ha_vm_domains{{vm="{ha}"}}': 1.0, f'yasco_ha_vm_down{{vm="{ha}"}}': 0.0,
                   'yasco_agent_self_fences_total{host="hv1"}': 0.0,
                   'yasco_ha_failures_planned': 1.0, 'yasco_ha_failures_tolerated': 1.0}
        assert wait_for(lambda: all(prometheus.value(q) == v for q, v in healthy.items()),
                        WAIT), {q: prometheus.value(q) for q in healthy}
        assert not {name for name, dummy in prometheus.firing()} & {
            "YascoHostDown", "YascoWatcherWithoutLeader", "YascoAgentSelfFenced"}

        # A live migration the history records, with its figures, as the rebalance role
        # writes it: counted once, its time and pause in the histograms.
        with EtcdClient([etcd.url]) as client:
            cluster_events.append(client, cluster_events.event(
                "migrated", vm=ha, host="hv1", by="return_home", details={
                    "from": "hv2", "total_ms": 3200, "downtime_ms": 40}), cluster=cluster)
        migrated = {'yasco_migrations_total{by="return_home",watcher="w1"}': 1.0,
                    "yasco_migration_seconds_count": 1.0, "yasco_migration_seconds_sum": 3.2,
                    "yasco_migration_pause_seconds_count": 1.0,
                    'yasco_migration_pause_seconds_bucket{le="0.05"}': 1.0,
                    'yasco_migration_pause_seconds_bucket{le="0.025"}': 0.0}
        assert wait_for(lambda: all(prometheus.value(q) == v for q, v in migrated.items()),
                        WAIT), {q: prometheus.value(q) for q in migrated}

        link.requests = False  # hv1 loses etcd: it self-fences, its lease expires
        after = {'yasco_agent_lease_held{host="hv1"}': 0.0,
                 'yasco_agent_self_fences_total{host="hv1"}': 1.0,
                 'yasco_agent_self_fenced_domains_total{host="hv1"}': 1.0,
                 'yasco_host_up{host="hv1"}': 0.0, f'yasco_ha_vm_down{{vm="{ha}"}}': 1.0,
                 'yasco_ha_failures_tolerated': 0.0}
        assert wait_for(lambda: all(prometheus.value(q) == v for q, v in after.items()),
                        TTL + WAIT), {q: prometheus.value(q) for q in after}
        assert not running.active("ha") and running.active("plain")
        assert wait_for(lambda: {("YascoHostDown", "hv1"), ("YascoAgentSelfFenced", "hv1")}
                        <= prometheus.firing(), WAIT), prometheus.firing()
        events = {s.labels["type"]: s.value for s in scrape(listen["watcher"])[
            "yasco_watcher_events"] if s.name.endswith("_total")}
        assert events == {**dict.fromkeys(watcher_view.EVENT_TYPES, 0), "host_up": 1,
                          "host_down": 1}
        # Every query of the shipped Grafana dashboard runs, with data over all of it.
        for title, expr in dashboard_queries().items():
            found = prometheus.api("query_range", query=expr, start=f"{began:.3f}",
                                   end=f"{time.time():.3f}", step="1")["result"]
            assert found, f"dashboard panel {title}: {expr} has no data"
    finally:
        if agent is not None:
            agent.leaving.set()
            agent.stopping.set()
        source.stop()
        link.close()
        if prometheus is not None:
            prometheus.close()


def test_every_event_the_watcher_emits_is_counted_from_zero():
    source = "".join(Path(module.__file__).read_text() for module in (watcher, leader_looks))
    emitted = set(re.findall(r'_emit\(queue, "([a-z_]+)"', source))
    # What the hosts' states report, the event source emits (its _report).
    emitted |= set(re.findall(r'Report\("([a-z_]+)"', Path(host_states.__file__).read_text()))
    assert len(emitted) >= 8 and "_emit(queue, kind" not in source
    assert emitted == set(watcher_view.EVENT_TYPES)


def test_a_metrics_address_that_is_no_address_is_refused_naming_the_setting():
    config = AgentConfig(host="hv1", endpoints=["http://127.0.0.1:2379"],
                         metrics_listen="9731")
    with pytest.raises(ConfigError, match=r"test: metrics_listen: '9731' is not "
                                          r"address:port \(e\.g\. 0\.0\.0\.0:9731"):
        config.check("test")


def test_a_port_taken_leaves_the_agent_running_without_metrics(caplog):
    taken = f"127.0.0.1:{free_port()}"
    first = metrics.serve(taken, lambda: [metrics.gauge("x", "x.", 1)], "first")
    try:
        config = AgentConfig(host="hv1", endpoints=["http://127.0.0.1:2379"],
                             metrics_listen=taken)
        config.check("test")
        Agent(config).serve_metrics()
        assert f"NO METRICS: agent: metrics_listen: cannot listen on {taken}" in caplog.text
        assert scrape(taken) == {"yasco_x": scrape(taken)["yasco_x"]}  # the first serves on
    finally:
        first.shutdown()
        first.server_close()
