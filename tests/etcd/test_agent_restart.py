"""The agent's restart in place of an HA VM whose domain stopped for a failure
(module_utils/agent/agent_restart.py), against real etcd and libvirt's built-in test
driver: what etcd must say for it to restart one, what it writes for the
reconciler and the history, and its budget. The test driver's domains have no RBD
disk; the lab kills a real QEMU whose disk lock must be broken (tests/lab/test_ha.py)."""

from __future__ import annotations

import threading
import uuid
from typing import Iterator

import libvirt
import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.agent import agent_restart
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_config import AgentConfig
from ansible_collections.yasco.cluster.plugins.module_utils.agent.host_agent import Agent

from .conftest import wait_for
from .test_agent_start import MARGIN, TTL, URI, domain_xml

STOPPED, DESTROYED = libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED


class Defined:
    """An HA and a plain domain, defined (persistent) and running on the test driver."""

    def __init__(self) -> None:
        self.conn = libvirt.open(URI)
        suffix = uuid.uuid4().hex[:6]
        self.names = {kind: f"{kind}-{suffix}" for kind in ("ha", "plain")}
        for kind, name in self.names.items():
            self.conn.defineXML(domain_xml(name, kind)).create()

    def dom(self, kind: str):
        return self.conn.lookupByName(self.names[kind])

    def kill(self, kind: str) -> None:
        self.dom(kind).destroy()

    def active(self, kind: str) -> bool:
        return bool(self.dom(kind).isActive())

    def close(self) -> None:
        for kind in self.names:
            dom = self.dom(kind)
            if dom.isActive():
                dom.destroy()
            dom.undefine()
        self.conn.close()


@pytest.fixture(name="defined")
def fixture_defined() -> Iterator[Defined]:
    defined = Defined()
    yield defined
    defined.close()


@pytest.fixture(name="agent")
def fixture_agent(etcd) -> Iterator[Agent]:
    """An agent with its heartbeat, fencer and restarter, restarting once per window.
    ceph_conf only enables restarts: a domain without RBD disks needs no Ceph, and the
    storage probe does not run."""
    config = AgentConfig(host="hv1", endpoints=[etcd.url], cluster=f"t{uuid.uuid4().hex[:8]}",
                         ttl=TTL, margin=MARGIN, libvirt_uri=URI, address="10.0.0.11",
                         ceph_conf="/nonexistent/ceph.conf", storage_grace=600)
    config.check("test")
    agent = Agent(config)
    for target in (agent.heartbeat, agent.fencer, agent.restarter):
        threading.Thread(target=target, daemon=True).start()
    assert wait_for(lambda: agent.lease, 10), "the agent did not register"
    yield agent
    agent.leaving.set()
    agent.stopping.set()


def put(etcd, key: str, value) -> None:
    with etcd.client() as client:
        client.put(key, to_json(value))


def restarts(etcd, agent: Agent, vm: str):
    with etcd.client() as client:
        found = client.get_json(etcd_keys.restart_key("hv1", vm, cluster=agent.config.cluster))
        events = [e for e in cluster_events.recent(client, 20, cluster=agent.config.cluster)
                  if e["kind"] == "restarted"]
    return found, events


def dies(agent: Agent, defined: Defined, kind: str = "ha") -> None:
    """The domain stops, and libvirt tells the agent (the test driver's event loop
    does not run here)."""
    dom = defined.dom(kind)
    defined.kill(kind)
    agent.domain_event(defined.conn, dom, STOPPED, DESTROYED, None)


def test_an_ha_vm_recorded_here_is_restarted_once_per_window_and_the_reconciler_told(
        etcd, agent, defined):
    cluster, vm = agent.config.cluster, defined.names["ha"]
    put(etcd, etcd_keys.vm_key(vm, cluster=cluster), {"host": "hv1", "state": "running"})
    dies(agent, defined)
    assert wait_for(lambda: defined.active("ha"), 10), "not restarted in place"
    assert wait_for(lambda: restarts(etcd, agent, vm)[1], 5), "no history event"
    found, (event,) = restarts(etcd, agent, vm)
    assert (found["state"], found["count"]) == ("restarted", 1)
    assert found["reason"] == "its domain was destroyed"
    assert (event["host"], event["vm"], event["by"]) == ("hv1", vm, "agent")
    assert event["details"]["reason"] == ("its domain was destroyed: restarted in place by "
                                          "its agent (1 of 1 within 600 s)")
    assert agent.restarted == 1
    # Again within the window: left to the reconciler, which relocates it.
    dies(agent, defined)
    assert not wait_for(lambda: defined.active("ha"), 2), "restarted beyond its budget"
    assert restarts(etcd, agent, vm)[0]["count"] == 1 and agent.restarted == 1


@pytest.mark.parametrize("case", ["requested stopped", "recorded elsewhere", "maintenance",
                                  "disarmed", "fenced", "no record", "plain VM"])
def test_nothing_is_restarted_that_etcd_does_not_say_runs_here(etcd, agent, defined, case):
    cluster, kind = agent.config.cluster, "plain" if case == "plain VM" else "ha"
    vm = defined.names[kind]
    record = {"host": "hv2" if case == "recorded elsewhere" else "hv1", "state": "running"}
    if case != "no record":
        put(etcd, etcd_keys.vm_key(vm, cluster=cluster), record)
    if case == "requested stopped":
        put(etcd, etcd_keys.requested_key(vm, cluster=cluster), {"state": "stopped"})
    if case == "maintenance":
        put(etcd, etcd_keys.maintenance_key("hv1", cluster=cluster), {"by": "drain"})
    if case == "disarmed":
        put(etcd, etcd_keys.disarmed_key(cluster=cluster), {"mode": "ignore-failures"})
    if case == "fenced":  # by an evacuation, until the host's return lifts it
        put(etcd, etcd_keys.fence_key("hv1", cluster=cluster),
            {"by": "evacuate", "method": "ceph-blocklist", "ceph_addrs": ["10.0.0.11"]})
    dies(agent, defined, kind)
    assert not wait_for(lambda: defined.active(kind), 2), f"{case}: restarted"
    assert restarts(etcd, agent, vm) == (None, [])


def test_a_self_fenced_agent_restarts_nothing(etcd, agent, defined):
    cluster, vm = agent.config.cluster, defined.names["ha"]
    put(etcd, etcd_keys.vm_key(vm, cluster=cluster), {"host": "hv1", "state": "running"})
    with agent.lock:
        agent.disconnected = True  # as its fencer leaves it, until it registers again
    dies(agent, defined)
    assert not wait_for(lambda: defined.active("ha"), 2), "restarted while self-fenced"
    assert agent.unfit() == "no lease held (self-fenced, or not registered)"


def test_restarts_in_place_are_off_without_a_ceph_client_or_when_set_to_0(etcd):
    for settings in ({}, {"ceph_conf": "/etc/ceph/ceph.conf", "restart_in_place": 0}):
        config = AgentConfig(host="hv1", endpoints=[etcd.url], **settings)
        config.check("test")
        assert Agent(config).in_place is None, settings
    assert agent_restart.STOP_REASONS.keys() == {0, 1, 2, 5}


def test_the_agents_restart_and_a_relocations_claim_exclude_each_other(etcd):
    """The agent says it restarts a VM in place only while the VM's record is as it
    read it; the reconciler's claim of a start elsewhere holds only while the agent's
    restarts/ key is as the reconciler read it. Raced from the same reads, again and
    again, exactly one of the two wins each time: never two starts."""
    cluster = f"t{uuid.uuid4().hex[:8]}"
    in_place = agent_restart.InPlace("hv1", cluster, ["10.0.0.11"], {},
                                     agent_restart.Budget(3, 60))
    agent_won = 0
    with etcd.client() as agent_etcd, etcd.client() as watcher_etcd:
        for round_ in range(24):
            vm = f"web{round_}"
            record_key = etcd_keys.vm_key(vm, cluster=cluster)
            said_key = etcd_keys.restart_key("hv1", vm, cluster=cluster)
            if round_ % 2:  # an earlier restart in place stands: its revision counts
                agent_etcd.put(said_key, to_json({"state": "restarted", "count": 1}))
            record = watcher_etcd.put(record_key, to_json({"host": "hv1", "state": "running"}))
            said = watcher_etcd.get(said_key)
            read = (record, said.mod_revision if said is not None else 0)
            start = threading.Barrier(2)
            won: dict[str, bool] = {}

            def agent() -> None:
                start.wait()
                try:
                    in_place.say_restarting(agent_etcd, vm, 0, "killed", read)
                    won["agent"] = True
                except agent_restart.Declined:
                    won["agent"] = False

            def reconciler() -> None:
                start.wait()
                won["reconciler"] = watcher_etcd.put_if(
                    record_key, to_json({"host": "hv2", "state": "starting", "from": "hv1"}),
                    mod_revision=read[0], unchanged={said_key: read[1]}).succeeded

            racers = [threading.Thread(target=agent), threading.Thread(target=reconciler)]
            for racer in racers:
                racer.start()
            for racer in racers:
                racer.join(30)
            assert sorted(won.values()) == [False, True], (round_, won)
            agent_won += won["agent"]
            # And the agent's last word before it starts the domain loses to a claim
            # made after its first.
            if won["agent"]:
                said = agent_etcd.get(said_key).mod_revision
                assert watcher_etcd.put_if(
                    record_key, to_json({"host": "hv2", "state": "starting"}),
                    mod_revision=read[0], unchanged={said_key: read[1]}).succeeded is False
                assert watcher_etcd.put_if(
                    record_key, to_json({"host": "hv2", "state": "starting"}),
                    mod_revision=read[0], unchanged={said_key: said}).succeeded is True
                with pytest.raises(agent_restart.Declined):
                    in_place.say_restarting(agent_etcd, vm, 0, "killed", (read[0], said))
    print(f"\nthe agent won {agent_won} of 24 races, the reconciler the rest")
