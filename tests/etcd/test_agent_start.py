"""The agent's self-fence when it starts: an agent restarted while its host is cut off
from etcd holds no lease, but the lease its earlier run renewed may still stand and
will expire; unless it registers by a TTL less the margin after it started, it
destroys the host's HA domains, as if its last renewal had been then. Against real
etcd and libvirt's built-in test driver, with the agent's own threads."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import libvirt
import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_config import AgentConfig
from ansible_collections.yasco.cluster.plugins.module_utils.agent.host_agent import Agent

from .conftest import closed_port_url, wait_for

URI = "test:///default"  # one state per process: the agent's connection sees ours
TTL, MARGIN = 6, 2


def domain_xml(name: str, kind: str) -> str:
    return (f"<domain type='test'><name>{name}</name><memory>65536</memory>"
            f"<os><type>hvm</type></os><metadata><yasco:vm xmlns:yasco='{lv.METADATA_NS}' "
            f"kind='{kind}'/></metadata></domain>")


class Running:
    """An HA domain and a plain one, started on the test driver (transient: a domain
    destroyed is gone)."""

    def __init__(self) -> None:
        self.conn = libvirt.open(URI)
        suffix = uuid.uuid4().hex[:6]
        self.names = {kind: f"{kind}-{suffix}" for kind in ("ha", "plain")}
        for kind, name in self.names.items():
            self.conn.createXML(domain_xml(name, kind))

    def active(self, kind: str) -> bool:
        try:
            return bool(self.conn.lookupByName(self.names[kind]).isActive())
        except libvirt.libvirtError:
            return False

    def close(self) -> None:
        for kind, name in self.names.items():
            if self.active(kind):
                self.conn.lookupByName(name).destroy()
        self.conn.close()


@pytest.fixture(name="running")
def fixture_running() -> Iterator[Running]:
    running = Running()
    yield running
    running.close()


def start_agent(endpoints: list[str], **settings) -> Agent:
    settings.setdefault("cluster", f"t{uuid.uuid4().hex[:8]}")
    config = AgentConfig(host="hv1", endpoints=endpoints, ttl=TTL, margin=MARGIN,
                         libvirt_uri=URI, **settings)
    config.check("test")
    agent = Agent(config)
    for target in (agent.heartbeat, agent.fencer):
        threading.Thread(target=target, daemon=True).start()
    return agent


def stop_agent(agent: Agent) -> None:
    agent.leaving.set()
    agent.stopping.set()


def test_an_agent_started_without_etcd_destroys_its_ha_domains_before_a_ttl(running):
    started = time.monotonic()
    agent = start_agent([closed_port_url()])
    try:
        assert wait_for(lambda: not running.active("ha"), TTL + 5), (
            "the HA domain still runs: the agent never self-fenced")
        assert time.monotonic() - started < TTL, "self-fenced after the old lease's expiry"
        assert running.active("plain")
        # the fence is recorded just after its destroys return: wait for the record
        assert wait_for(lambda: agent.fences, 5), "the self-fence destroyed but was never recorded"
        assert agent.fences[0]["destroyed"] == [running.names["ha"]]
    finally:
        stop_agent(agent)


def test_an_agent_that_registers_keeps_its_ha_domains(etcd, running):
    agent = start_agent([etcd.url])
    try:
        assert wait_for(lambda: agent.lease, 5), "the agent did not register"
        time.sleep(2 * TTL)
        assert running.active("ha") and not agent.fences
    finally:
        stop_agent(agent)


@pytest.mark.parametrize("ttl", [2.5, 4.4])
def test_the_lease_granted_lasts_at_least_the_ttl_the_self_fence_counts_on(etcd, ttl):
    """etcd's TTLs are whole seconds; the self-fence comes ttl - margin after a renewal,
    so a lease granted shorter than ttl (2 for 2.5, 4 for 4.4) could expire first."""
    config = AgentConfig(host="hv1", endpoints=[etcd.url], cluster=f"t{uuid.uuid4().hex[:8]}",
                         ttl=ttl, margin=1.0, libvirt_uri=URI)
    config.check("test")
    agent = Agent(config)
    with EtcdClient([etcd.url]) as client:
        agent.register(client)
        try:
            granted = client.lease_info(agent.lease, keys=False).granted_ttl
        finally:
            client.revoke_lease(agent.lease)
    assert granted >= ttl


def test_the_fencer_pets_systemds_watchdog_every_second_while_it_runs(
        etcd, running, tmp_path: Path, monkeypatch):
    """Under systemd (Type=notify, WatchdogSec=), the agent's fencer, the thread that
    must never hang, tells systemd it is alive; systemd restarts an agent that stops."""
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(path)
        systemd.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        agent = start_agent([etcd.url])
        try:
            pets = [systemd.recv(64) for dummy in range(3)]
            assert pets == [b"WATCHDOG=1"] * 3
        finally:
            stop_agent(agent)
        time.sleep(1.5)  # what was sent before the stop
        systemd.settimeout(0.2)
        while True:
            try:
                systemd.recv(64)
            except TimeoutError:
                break
        with pytest.raises(TimeoutError):
            systemd.settimeout(2.5)
            systemd.recv(64)
