"""The HA watcher's event source, yasco.cluster.etcd_hosts, against a real etcd: what
it emits for lease expiries, planned stops, returns and maintenance requests, that
failures together make one event, that a dead endpoint listed first delays nothing,
and that only the leader of several watchers emits.

Each watcher runs in a thread of its own with its own event loop, as ansible-rulebook
runs a source. Nothing here asserts a duration: where an event must not come, a later
event that must come shows that the watcher has got past the point."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import ha_view

from .conftest import closed_port_url, wait_for

SOURCE = (Path(__file__).resolve().parents[2] / "extensions" / "eda" / "plugins"
          / "event_source" / "etcd_hosts.py")
WAIT = 30.0
# The watchers' leader lease in these tests: a leader steps down after 0.6 of it with
# no keepalive, and a shorter one stepped down on a loaded machine, so that what it
# saw while not leading was left to a leader that was not there.
LEADER_TTL = 6


def load_source():
    spec = importlib.util.spec_from_file_location("yasco_etcd_hosts", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


etcd_hosts = load_source()


class RunningSource:
    """One watcher, as ansible-rulebook runs it, and the events it put on its queue."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.watcher = etcd_hosts.Watcher(args)
        self.events: queue.Queue = queue.Queue()
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task | None = None
        started = threading.Event()

        events = self.events

        class Bridge:  # the asyncio queue ansible-rulebook hands a source
            async def put(self, event: dict[str, Any]) -> None:
                events.put(event["yasco"])

        async def main() -> None:
            self.task = asyncio.current_task()
            started.set()
            await self.watcher.run(Bridge())

        def serve() -> None:
            try:
                self.loop.run_until_complete(main())
            except asyncio.CancelledError:
                pass

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        started.wait(WAIT)

    def next(self) -> dict[str, Any]:
        try:
            return self.events.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no event within {WAIT} s") from None

    def stop(self) -> None:
        if self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(WAIT)


@pytest.fixture(name="cluster")
def fixture_cluster() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(name="start")
def fixture_start(etcd, cluster) -> Iterator:
    running: list[RunningSource] = []

    def start(**args: Any) -> RunningSource:
        # A dead endpoint first: the watcher must not depend on any one member.
        options = {"endpoints": [closed_port_url(), etcd.url], "cluster": cluster,
                   "leader_ttl": LEADER_TTL, "settle": 0.3, **args}
        source = RunningSource(options)
        running.append(source)
        return source

    yield start
    for source in running:
        source.stop()


def register(client, cluster: str, host: str, ttl: int = 60) -> int:
    lease = client.grant_lease(ttl).id
    client.put_json(etcd_keys.registered_key(host, cluster=cluster), {"address": host})
    client.put_json(etcd_keys.alive_key(host, cluster=cluster), {"host": host}, lease=lease)
    return lease


def web_on_hv1(client, cluster: str) -> int:
    """hv1 and hv2 registered, VM web recorded running on hv1; hv1's lease."""
    lease = register(client, cluster, "hv1")
    register(client, cluster, "hv2")
    client.put(etcd_keys.vm_key("web", cluster=cluster),
               to_json({"host": "hv1", "state": "running"}))
    return lease


def wait_until_leading(source: RunningSource, renewing: tuple | None = None) -> None:
    """Until `source` leads, renewing the (client, lease) in `renewing`: a short lease
    that ran out before the watcher read the hosts would make no event, as a host down
    with no VM on it is not news to a new leader."""
    def leading() -> bool:
        if renewing is not None:
            client, lease = renewing
            client.keepalive_once(lease)
        return source.watcher.leader and source.watcher.ready.is_set()

    assert wait_for(leading, WAIT), "the watcher did not lead"


def test_a_lease_that_expires_is_a_host_down_and_a_new_lease_a_host_up(etcd, cluster, start):
    with etcd.client() as client:
        lease = register(client, cluster, "hv1", ttl=1)
        register(client, cluster, "hv2")
        source = start()
        wait_until_leading(source, renewing=(client, lease))
        del lease  # not renewed from now on: it expires
        down = source.next()
        assert (down["type"], down["hosts"], down["down"]) == ("host_down", ["hv1"], ["hv1"])
        assert down["cluster"] == cluster and not down["resync"]
        register(client, cluster, "hv1")
        up = source.next()
        assert (up["type"], up["hosts"], up["down"]) == ("host_up", ["hv1"], [])
        assert up["registration"] == {"host": "hv1"}


def test_hosts_that_fail_together_make_one_event(etcd, cluster, start):
    with etcd.client() as client:
        rack = client.grant_lease(60).id
        for host in ("hv1", "hv2"):
            client.put_json(etcd_keys.alive_key(host, cluster=cluster), {}, lease=rack)
        register(client, cluster, "hv3")
        source = start()
        wait_until_leading(source)
        client.revoke_lease(rack)
        event = source.next()
        assert (event["type"], event["hosts"], event["down"]) == (
            "host_down", ["hv1", "hv2"], ["hv1", "hv2"])


def beating(client, cluster: str, host: str, ttl: float, lease: int | None = None) -> int:
    """`host` alive, with the TTL its agent registers; returns the lease."""
    lease = lease or client.grant_lease(60).id
    client.put_json(etcd_keys.alive_key(host, cluster=cluster), {"ttl": ttl}, lease=lease)
    return lease


def test_a_failure_is_reported_without_the_settle_wait_while_the_others_beat(
        etcd, cluster, start):
    with etcd.client() as client:
        lease = beating(client, cluster, "hv1", ttl=60)
        beating(client, cluster, "hv2", ttl=60)  # rewritten within ttl / 3: beating
        source = start(settle=3 * WAIT)
        wait_until_leading(source)
        client.revoke_lease(lease)
        event = source.next()  # within WAIT: the settle time was not waited out
        assert (event["type"], event["hosts"]) == ("host_down", ["hv1"])


def test_a_host_that_went_quiet_with_a_failed_one_is_reported_with_it(etcd, cluster, start):
    with etcd.client() as client:
        # Quiet once not rewritten for ttl / 3 = 0.5 s; the leader itself ends such a
        # lease 2 s after the last rewrite, which reports it too.
        first, second = (beating(client, cluster, host, ttl=1.5) for host in ("hv1", "hv2"))
        beating(client, cluster, "hv3", ttl=60)
        source = start(settle=3 * WAIT)
        wait_until_leading(source)
        assert wait_for(lambda: set(source.watcher.states.quiet(source.watcher.loop.time())) == {"hv1", "hv2"}, WAIT)
        client.revoke_lease(first)
        time.sleep(0.3)  # apart, as a rack's leases expire: hv1 alone must not be reported
        client.revoke_lease(second)
        event = source.next()  # within WAIT: once none is quiet, no more waiting
        assert (event["type"], event["hosts"], event["down"]) == (
            "host_down", ["hv1", "hv2"], ["hv1", "hv2"])


def test_a_host_back_up_is_stable_after_the_hold_down_and_a_flapping_one_is_not(
        etcd, cluster, start):
    with etcd.client() as client:
        register(client, cluster, "hv1")
        register(client, cluster, "hv2")
        source = start(hold_down=2)
        wait_until_leading(source)
        flap = register(client, cluster, "hv1")  # back with a new lease
        assert (source.next()["type"]) == "host_up"
        client.revoke_lease(flap)  # and down again within the hold-down
        assert (source.next()["type"]) == "host_down"
        last = register(client, cluster, "hv1")
        assert (source.next()["type"]) == "host_up"
        # The hold-down counts from the last return, on its lease.
        assert source.watcher.states.returning["hv1"][0] == last
        event = source.next()
        assert (event["type"], event["hosts"]) == ("host_stable", ["hv1"])
        # Once: the next event is the one asked for below, not a second host_stable.
        client.put_json(etcd_keys.maintenance_key("hv2", cluster=cluster), {"by": "operator"})
        assert source.next()["type"] == "maintenance"


def test_a_host_whose_agent_stopped_beating_in_its_hold_down_is_not_stable_until_it_beats(
        etcd, cluster, start):
    """Crashed again a moment after it came back: its lease outlives the hold-down,
    but its agent no longer rewrites its key, so it gets nothing back."""
    # A TTL long enough that the leader does not end the lease while the test waits
    # out the hold-down, even on a loaded machine; a hold-down longer than a beat.
    with etcd.client() as client:
        register(client, cluster, "hv2")
        source = start(hold_down=5, leader_ttl=10)
        wait_until_leading(source)
        lease = client.grant_lease(60).id
        key = etcd_keys.alive_key("hv1", cluster=cluster)
        client.put_json(key, {"host": "hv1", "ttl": 12}, lease=lease)  # beats every 4 s
        assert source.next()["type"] == "host_up"
        with pytest.raises(queue.Empty):  # the hold-down passes, with no beat after it
            source.events.get(timeout=6)
        assert "hv1" in source.watcher.states.returning
        client.put_json(key, {"host": "hv1", "ttl": 12}, lease=lease)  # it beats again
        event = source.next()
        assert (event["type"], event["hosts"]) == ("host_stable", ["hv1"])


def test_a_new_leader_counts_the_hold_down_of_a_host_up_while_still_fenced(
        etcd, cluster, start):
    with etcd.client() as client:
        register(client, cluster, "hv1")
        register(client, cluster, "hv2")
        client.put_json(etcd_keys.fence_key("hv1", cluster=cluster), {"by": "evacuate"})
        source = start(hold_down=0.5)
        event = source.next()
        assert (event["type"], event["hosts"]) == ("host_stable", ["hv1"])


def test_a_disarmed_cluster_reports_no_failure_until_it_is_armed_again(etcd, cluster, start):
    with etcd.client() as client:
        lease = web_on_hv1(client, cluster)
        flag = etcd_keys.disarmed_key(cluster=cluster)
        client.put_json(flag, {"by": "operator", "reason": "switch upgrade"})
        source = start()
        wait_until_leading(source)
        assert wait_for(lambda: source.watcher.disarmed is not None, WAIT)
        client.revoke_lease(lease)
        client.put_json(etcd_keys.maintenance_key("hv2", cluster=cluster), {"by": "operator"})
        assert source.next()["type"] == "maintenance"  # and no host_down before it
        client.delete(flag)
        event = source.next()  # armed again: the failure is reported by a resync
        assert (event["type"], event["hosts"], event["resync"]) == ("host_down", ["hv1"], True)


def test_a_planned_stop_is_no_failure_and_an_operators_marker_asks_for_maintenance(
        etcd, cluster, start):
    with etcd.client() as client:
        lease = register(client, cluster, "hv1")
        register(client, cluster, "hv2")
        source = start()
        wait_until_leading(source)
        # The agent's graceful stop: its marker, then the end of its lease.
        client.put_json(etcd_keys.maintenance_key("hv1", cluster=cluster), {"by": "agent"})
        client.revoke_lease(lease)
        # The drain's and the emergency shutdown's own markers ask for nothing either.
        client.put_json(etcd_keys.maintenance_key("hv3", cluster=cluster), {"by": "drain"})
        client.put_json(etcd_keys.maintenance_key("hv4", cluster=cluster),
                        {"by": "emergency_shutdown"})
        client.put_json(etcd_keys.maintenance_key("hv2", cluster=cluster),
                        {"by": "operator", "reason": "firmware"})
        event = source.next()  # the first is hv2's request: hv1, hv3, hv4 emitted nothing
        assert (event["type"], event["hosts"]) == ("maintenance", ["hv2"])
        assert event["marker"] == {"by": "operator", "reason": "firmware"}
        assert event["down"] == []  # hv1 is in maintenance, not down


def test_a_new_leader_reports_down_hosts_whose_vms_etcd_still_records_running(
        etcd, cluster, start):
    with etcd.client() as client:
        register(client, cluster, "hv1")
        client.put_json(etcd_keys.registered_key("hv2", cluster=cluster), {"address": "hv2"})
        client.put_json(etcd_keys.registered_key("hv3", cluster=cluster), {"address": "hv3"})
        client.put(etcd_keys.vm_key("web", cluster=cluster),
                   to_json({"host": "hv2", "state": "running"}))
        client.put(etcd_keys.vm_key("db", cluster=cluster),
                   to_json({"host": "hv3", "state": "down"}))
        source = start()
        event = source.next()
        # hv3 is down too, but nothing of it waits to be evacuated.
        assert (event["type"], event["hosts"], event["down"], event["resync"]) == (
            "host_down", ["hv2"], ["hv2", "hv3"], True)


def test_only_the_leader_emits_and_a_standby_takes_over_when_it_dies(etcd, cluster, start):
    with etcd.client() as client:
        lease = web_on_hv1(client, cluster)
        leader = start(name="first")
        wait_until_leading(leader)
        standby = start(name="second")
        client.revoke_lease(lease)
        assert leader.next()["hosts"] == ["hv1"]
        marker = client.put_json(etcd_keys.maintenance_key("hv2", cluster=cluster),
                                 {"by": "operator"})
        assert leader.next()["type"] == "maintenance"
        assert wait_for(lambda: standby.watcher.states.applied >= marker, WAIT), \
            "the standby did not see the changes"
        assert standby.events.empty(), standby.events.get()
        leader.stop()  # its leader key lives on until its lease expires
        event = standby.next()
        assert (event["type"], event["hosts"], event["resync"], event["watcher"]) == (
            "host_down", ["hv1"], True, "second")


def test_the_leader_copies_each_agents_event_into_the_history_once_checked(
        etcd, cluster, start):
    """An agent may not write the history (docs/security.md): its events wait under
    its host, even from before any watcher ran, until the leading watcher copies them
    in, with their host forced, and deletes them there; the standby copies nothing,
    and an event naming another host is dropped."""
    def agent_event(kind: str, host: str, **fields: Any) -> str:
        key = etcd_keys.host_event_key("hv1", time.time_ns(), cluster=cluster)
        client.put(key, to_json(cluster_events.event(kind, host=host, by="agent",
                                                     **fields)))
        return key

    with etcd.client() as client:
        register(client, cluster, "hv1")
        before = agent_event("self-fenced", "hv1", details={"destroyed": ["web"]})
        leader = start(name="first")
        wait_until_leading(leader)
        start(name="second")
        keys = [before, agent_event("crashed", "hv1", vm="web"),
                agent_event("self-fenced", "hv2")]
        assert wait_for(lambda: all(client.get(key) is None for key in keys), WAIT), \
            "the agents' events were not taken"
        history = [json.loads(kv.value) for kv in client.get_prefix(
            etcd_keys.history_prefix(cluster=cluster))]
    assert [(e["kind"], e["host"], e["source"]["key"]) for e in history] == [
        ("self-fenced", "hv1", keys[0]), ("crashed", "hv1", keys[1])]


def test_a_key_not_rewritten_for_its_ttl_ends_its_lease_though_etcd_renewed_it(
        etcd, cluster, start):
    """A new etcd leader renews every lease: the watcher ends the lease of an agent
    that stopped rewriting its key, one that keeps rewriting it stays."""
    with etcd.client() as client:
        renewed = client.grant_lease(600).id  # as etcd's new leader would have it
        alive = etcd_keys.alive_key("hv1", cluster=cluster)
        client.put_json(alive, {"ttl": 1}, lease=renewed)
        beating_lease = client.grant_lease(600).id
        beating = etcd_keys.alive_key("hv2", cluster=cluster)
        client.put_json(beating, {"ttl": 1}, lease=beating_lease)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(0.2):
                client.put_json(beating, {"ttl": 1}, lease=beating_lease)

        beater = threading.Thread(target=beat, daemon=True)
        beater.start()
        try:
            source = start()
            wait_until_leading(source)
            down = source.next()
            assert (down["type"], down["hosts"], down["down"]) == ("host_down", ["hv1"], ["hv1"])
            assert client.lease_info(renewed) is None, "the stale lease is still there"
            assert client.get(beating) is not None and client.lease_info(beating_lease)
        finally:
            stop.set()
            beater.join()


def test_tls_files_left_empty_in_the_rulebook_come_from_the_environment(
        etcd_tls, cluster, monkeypatch):
    """EDA controller injects a credential's files as environment variables only; the
    rulebook's arguments for them template to ''."""
    for name, variable in (("ca_cert", "YASCO_ETCD_CA_CERT"),
                           ("client_cert", "YASCO_ETCD_CLIENT_CERT"),
                           ("client_key", "YASCO_ETCD_CLIENT_KEY")):
        monkeypatch.setenv(variable, getattr(etcd_tls, name))
    with etcd_tls.client() as client:
        lease = register(client, cluster, "hv1", ttl=1)
        register(client, cluster, "hv2")
        source = RunningSource({"endpoints": [etcd_tls.url], "cluster": cluster,
                                "leader_ttl": LEADER_TTL, "settle": 0.3, "ca_cert": "",
                                "client_cert": "", "client_key": ""})
        try:
            wait_until_leading(source, renewing=(client, lease))
            del lease  # not renewed from now on: it expires
            down = source.next()
            assert (down["type"], down["hosts"]) == ("host_down", ["hv1"])
        finally:
            source.stop()


def test_a_host_back_from_its_agents_own_stop_gets_its_vms_back_after_the_hold_down(
        etcd, cluster, start):
    """A clean reboot: the agent registers, then clears the marker of its own stop."""
    with etcd.client() as client:
        register(client, cluster, "hv2")
        client.put_json(etcd_keys.maintenance_key("hv1", cluster=cluster),
                        {"by": "agent", "reason": "host rebooting"})
        source = start(hold_down=1)
        wait_until_leading(source)
        register(client, cluster, "hv1")
        assert source.next()["type"] == "host_up"
        client.delete(etcd_keys.maintenance_key("hv1", cluster=cluster))
        event = source.next()
        assert (event["type"], event["hosts"]) == ("host_stable", ["hv1"])


def test_the_leader_emits_the_reconcilers_steps_for_an_ha_vm_down_on_a_live_host(
        etcd, cluster, start):
    """An HA VM recorded running on hv1, alive, that hv1's agent does not publish: a
    restart in place, once for the record as read; none while disarmed."""
    vdm = {"version": 1, "hosts": {"hv1": {"memory_mb": 4096}, "hv2": {"memory_mb": 4096}},
           "vms": {"web": {"kind": "ha", "priority": 0, "memory_mb": 512}},
           "home": {"web": "hv1"}, "failover": {"hv1": {"web": "hv2"}}}
    with etcd.client() as client:
        web_on_hv1(client, cluster)
        client.put(etcd_keys.vdm_ha_key(cluster=cluster), to_json(ha_view(vdm)))
        source = start(reconcile_interval=0.2, recovery={"grace": 0.5})
        wait_until_leading(source)
        event = source.next()
        assert (event["type"], event["hosts"]) == ("vm_recover", ["hv1"])
        (step,) = event["steps"]
        assert (step["action"], step["vm"], step["from"], step["to"]) == (
            "restart", "web", "hv1", "hv1")
        assert step["record"] == {"host": "hv1", "state": "running"}
        # The record changed (a claim), then the VM is down again: decided afresh;
        # while disarmed, not at all, until re-armed.
        client.put_json(etcd_keys.disarmed_key(cluster=cluster), {"by": "test"})
        time.sleep(1.5)  # the flag is read every second
        client.put(etcd_keys.vm_key("web", cluster=cluster),
                   to_json({"host": "hv1", "state": "down", "reason": "start failed"}))
        time.sleep(1.5)
        assert source.events.empty(), "nothing is decided while disarmed"
        client.delete(etcd_keys.disarmed_key(cluster=cluster))
        event = source.next()
        assert event["type"] == "vm_recover", event
        (step,) = event["steps"]
        assert (step["action"], step["to"]) == ("relocate", "hv2")
        assert "start failed" in step["reason"]


def test_the_leader_reports_standing_fences_to_be_checked_every_interval(
        etcd, cluster, start):
    """A blocklist entry lifted by hand or expired leaves etcd saying fenced: the
    leader reports the fenced hosts every fence_check_interval, the first time one
    interval after it starts, and nothing once no fence stands."""
    with etcd.client() as client:
        register(client, cluster, "hv2")
        for host in ("hv1", "hv3"):
            client.put_json(etcd_keys.fence_key(host, cluster=cluster),
                            {"by": "evacuate", "ceph_addrs": [f"10.0.0.{host[-1]}"]})
        source = start(fence_check_interval=2)
        wait_until_leading(source)
        started = time.monotonic()
        first, second = source.next(), source.next()
        assert (first["type"], first["hosts"]) == ("fences_standing", ["hv1", "hv3"])
        assert second == {**second, "type": "fences_standing", "hosts": ["hv1", "hv3"]}
        assert time.monotonic() - started >= 2
        for host in ("hv1", "hv3"):
            client.delete(etcd_keys.fence_key(host, cluster=cluster))
        time.sleep(2.5)  # an event read before the deletes may still come
        while not source.events.empty():
            source.events.get()
        time.sleep(4.5)
        assert source.events.empty(), source.events.get()


def families_of(source: RunningSource) -> dict[str, Any]:
    return {family.name: family for family in source.watcher.metric_families()}


def test_the_leader_times_an_evacuation_until_the_ha_vms_run_elsewhere(etcd, cluster, start):
    """From the host_down event to web running on a live host other than hv1, as the
    reconciler reads it; a step the reconciler takes is counted by action."""
    vdm = {"version": 1, "hosts": {"hv1": {"memory_mb": 4096}, "hv2": {"memory_mb": 4096}},
           "vms": {"web": {"kind": "ha", "priority": 0, "memory_mb": 512}},
           "home": {"web": "hv1"}, "failover": {"hv1": {"web": "hv2"}}}
    with etcd.client() as client:
        lease = web_on_hv1(client, cluster)
        client.put_json(etcd_keys.domain_key("hv1", "web", cluster=cluster),
                        {"state": "running"}, lease=lease)
        client.put(etcd_keys.vdm_ha_key(cluster=cluster), to_json(ha_view(vdm)))
        source = start(reconcile_interval=0.2)
        wait_until_leading(source)
        assert wait_for(lambda: source.watcher.view.observed is not None
                        and "web" in source.watcher.view.observed["records"], WAIT)
        client.revoke_lease(lease)
        assert source.next()["type"] == "host_down"
        emitted = time.monotonic()
        time.sleep(1)  # the reconciler looks five times: still down, still timed
        (durations,) = families_of(source)["evacuation_seconds"].samples
        assert durations[1].count == 0 and len(source.watcher.view.evacuating) == 1
        # The evacuation's work, as the playbook and hv2's agent leave it in etcd.
        client.put(etcd_keys.vm_key("web", cluster=cluster),
                   to_json({"host": "hv2", "state": "running"}))
        client.put_json(etcd_keys.domain_key("hv2", "web", cluster=cluster),
                        {"state": "running"})
        assert wait_for(lambda: durations[1].count == 1, WAIT)
        buckets, seconds = durations[1].buckets()
        assert 1 <= seconds <= time.monotonic() - emitted + 0.5, seconds
        assert buckets[-1] == ("+Inf", 1) and source.watcher.view.evacuating == []
        # A VM that dies on a live host: the reconciler's restart is counted.
        client.delete(etcd_keys.domain_key("hv2", "web", cluster=cluster))
        event = source.next()
        assert event["type"] == "vm_recover" and event["steps"][0]["action"] == "restart"
        steps = {labels["action"]: value
                 for labels, value in families_of(source)["reconciler_steps"].samples}
        assert steps["restart"] == 1 and steps["relocate"] == 0


# What root on a hypervisor writes with its agent's etcd user, which may write all of
# its host's keys: a template where the playbooks would render it, and a forged line.
ATTACK = "{{ lookup('pipe', 'touch /tmp/yasco-pwned') }}\nWARNING forged"


def test_nothing_a_hypervisor_writes_leaves_the_watcher_as_a_template(etcd, cluster, start):
    """Its maintenance marker, the VMs it says it restarted and why, and its
    registration reach the playbooks as extra variables, which ansible-core renders:
    each leaves the watcher inert (module_utils/cluster/untrusted.py)."""
    with etcd.client() as client:
        register(client, cluster, "hv1")
        source = start()
        wait_until_leading(source)
        client.put_json(etcd_keys.maintenance_key("hv1", cluster=cluster),
                        {"by": ATTACK, "reason": ATTACK})
        event = source.next()
        assert event["type"] == "maintenance"
        assert event["marker"]["reason"] == (
            "{ { lookup('pipe', 'touch /tmp/yasco-pwned') }}\\nWARNING forged")
        client.put_json(etcd_keys.restart_key("hv1", "{{ 7 * 7 }}", cluster=cluster),
                        {"state": "restarted", "reason": ATTACK, "count": 1})
        event = source.next()
        assert event["type"] == "vm_restarted" and event["vm"] == "{ { 7 * 7 }}"
        assert "{{" not in event["reason"] and "\n" not in event["reason"]
        lease = client.grant_lease(60).id
        client.put_json(etcd_keys.alive_key("hv1", cluster=cluster), {"host": ATTACK},
                        lease=lease)
        event = source.next()
        assert event["type"] == "host_up" and "{{" not in str(event["registration"])
