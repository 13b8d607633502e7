"""A guest crash libvirt reports to the agent (a kernel panic, through the domain's
pvpanic device, or a hung guest's watchdog) goes into the cluster's history, once,
even when etcd answered only later. Against real etcd and libvirt's built-in test driver: the lab's tests make a
real guest panic (tests/lab/test_ha.py)."""

from __future__ import annotations

import uuid

import libvirt
import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_config import AgentConfig
from ansible_collections.yasco.cluster.plugins.module_utils.agent.host_agent import Agent

from .conftest import closed_port_url
from .test_agent_start import URI, Running


def test_a_guest_crash_goes_into_the_history_once_etcd_answers(etcd):
    cluster = f"t{uuid.uuid4().hex[:8]}"
    config = AgentConfig(host="hv1", endpoints=[etcd.url], cluster=cluster, libvirt_uri=URI)
    config.check("test")
    agent, running = Agent(config), Running()
    try:
        dom = running.conn.lookupByName(running.names["ha"])
        agent.domain_event(running.conn, dom, libvirt.VIR_DOMAIN_EVENT_STOPPED,
                           libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED, None)
        agent.domain_event(running.conn, dom, libvirt.VIR_DOMAIN_EVENT_CRASHED,
                           libvirt.VIR_DOMAIN_EVENT_CRASHED_PANICKED, None)
        agent.watchdog_event(running.conn, dom, libvirt.VIR_DOMAIN_EVENT_WATCHDOG_RESET, None)
        assert agent.wake_publisher.is_set()
        with EtcdClient([closed_port_url()], timeout=1) as unreachable:
            with pytest.raises(EtcdError):
                agent.record_crashes(unreachable)
        assert [c["vm"] for c in agent.crashes] == [running.names["ha"]] * 2, "crashes lost"
        with etcd.client() as client:
            agent.record_crashes(client)
            agent.record_crashes(client)
            events = cluster_events.recent(client, 10, cluster=cluster)
    finally:
        running.close()
    assert [(e["kind"], e.get("host"), e.get("vm"), e.get("by")) for e in events] == [
        ("crashed", "hv1", running.names["ha"], "agent")] * 2
    assert "panicked" in events[0]["details"]["reason"]
    assert "watchdog expired and it was reset" in events[1]["details"]["reason"]
    assert agent.crashes == []
