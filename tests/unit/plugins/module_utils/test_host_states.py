"""The HA watcher's state machine (module_utils/cluster/host_states.py) on a fake clock: when
a lost lease is reported, and together with which others; a planned stop that is no
failure; maintenance requests; the hold-down before a host gets its VMs back, and a
flapping or silent host that does not; stale keys; what a new leader owes. The event
source's tests (tests/etcd) drive the same through a real etcd."""

from __future__ import annotations

import json
from itertools import count

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import (
    KeyValue, WatchEvent)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.host_states import (
    STABLE_RECHECK, STALE_SLACK, HostStates, Report)

CLUSTER = "c"
TTL = 9  # what the agents register: a beat at least every TTL / 3 s
SETTLE, HOLD_DOWN = 2.0, 30.0


class Etcd:
    """Changes to hosts/ records as a watch delivers them, one revision each."""

    def __init__(self) -> None:
        self.revisions = count(1)
        self.kvs: dict[str, KeyValue] = {}
        self.leases = count(100)

    def put(self, kind: str, host: str, value: dict, lease: int = 0) -> WatchEvent:
        return self.put_key(getattr(etcd_keys, f"{kind}_key")(host, cluster=CLUSTER), value,
                            lease)

    def put_key(self, key: str, value: dict, lease: int = 0) -> WatchEvent:
        previous = self.kvs.get(key)
        revision = next(self.revisions)
        kv = KeyValue(key, json.dumps(value), revision,
                      previous.create_revision if previous else revision,
                      previous.version + 1 if previous else 1, lease)
        self.kvs[key] = kv
        return WatchEvent("PUT", kv, previous)

    def delete(self, kind: str, host: str) -> WatchEvent:
        key = getattr(etcd_keys, f"{kind}_key")(host, cluster=CLUSTER)
        previous = self.kvs.pop(key)
        gone = KeyValue(key, "", next(self.revisions), 0, 0, 0)
        return WatchEvent("DELETE", gone, previous)

    def register(self, host: str) -> WatchEvent:
        """The agent's liveness key on a new lease."""
        return self.put("alive", host, {"host": host, "ttl": TTL}, lease=next(self.leases))

    def beat(self, host: str) -> WatchEvent:
        """The agent rewrites its liveness key on the same lease."""
        lease = self.kvs[etcd_keys.alive_key(host, cluster=CLUSTER)].lease
        return self.put("alive", host, {"host": host, "ttl": TTL}, lease=lease)


@pytest.fixture(name="etcd")
def fixture_etcd() -> Etcd:
    return Etcd()


def up(etcd: Etcd, *hosts: str, now: float = 0.0) -> HostStates:
    """States loaded from a read that found `hosts` registered and alive."""
    for host in hosts:
        etcd.put("registered", host, {"address": host})
        etcd.register(host)
    states = HostStates(CLUSTER, settle=SETTLE, hold_down=HOLD_DOWN)
    assert states.load(list(etcd.kvs.values()), max(kv.mod_revision
                                                    for kv in etcd.kvs.values()), now)
    return states


def beat_all(states: HostStates, etcd: Etcd, now: float, *hosts: str) -> None:
    assert states.apply([etcd.beat(h) for h in hosts], now) == []  # a beat is no news


def test_a_lost_lease_is_reported_at_once_while_every_other_host_beats(etcd):
    states = up(etcd, "hv1", "hv2", "hv3")
    beat_all(states, etcd, 1.0, "hv2", "hv3")
    assert states.apply([etcd.delete("alive", "hv1")], 1.5) == []
    assert states.pending == {"hv1"}
    assert states.failures(1.5) == Report("host_down", ["hv1"],
                                          {"down": ["hv1"]})
    assert states.pending == set() and states.failures(1.6) is None


def test_hosts_that_went_quiet_together_wait_for_the_settle_and_make_one_report(etcd):
    states = up(etcd, "hv1", "hv2", "hv3")
    beat_all(states, etcd, 1.0, "hv3")
    # hv1 and hv2 last beat at 0 s: quiet after TTL / 3.
    states.apply([etcd.delete("alive", "hv1")], 4.0)
    assert states.quiet(4.0) == ["hv2"]
    assert states.failures(4.0) is None, "hv2 may be failing with hv1"
    assert states.deadline() == 4.0 + SETTLE
    states.apply([etcd.delete("alive", "hv2")], 5.0)
    assert states.failures(5.5) is None  # the settle counts from the first
    assert states.failures(4.0 + SETTLE) == Report("host_down", ["hv1", "hv2"],
                                                   {"down": ["hv1", "hv2"]})


def test_a_host_back_within_the_settle_is_not_reported(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 4.0)  # hv2 is quiet too: settle
    reports = states.apply([etcd.register("hv1")], 5.0)
    assert [r.kind for r in reports] == ["host_up"] and states.pending == set()
    assert states.failures(10.0) is None


def test_a_planned_stop_is_no_failure_and_its_return_counts_the_hold_down(etcd):
    states = up(etcd, "hv1", "hv2")
    marker = etcd.put("maintenance", "hv1", {"by": "agent"})
    assert states.apply([marker, etcd.delete("alive", "hv1")], 1.0) == []
    assert states.pending == set() and states.down() == []
    (back,) = states.apply([etcd.register("hv1")], 50.0)
    assert back.kind == "host_up" and back.details["registration"]["ttl"] == TTL
    assert states.returning["hv1"][1] == 50.0 + HOLD_DOWN  # the agent's marker: yes


def test_an_operators_marker_asks_for_maintenance_and_the_planned_ones_do_not(etcd):
    states = up(etcd, "hv1", "hv2", "hv3")
    asked = states.apply([etcd.put("maintenance", "hv1", {"by": "operator"})], 1.0)
    assert asked == [Report("maintenance", ["hv1"], {"marker": {"by": "operator"}})]
    for by in etcd_keys.PLANNED_MAINTENANCE:
        assert states.apply([etcd.put("maintenance", "hv2", {"by": by})], 1.0) == []
    # A host back in a drain's maintenance gets its VMs from the undrain.
    states.apply([etcd.put("maintenance", "hv3", {"by": "drain"}),
                  etcd.delete("alive", "hv3")], 2.0)
    states.apply([etcd.register("hv3")], 3.0)
    assert "hv3" not in states.returning


def test_an_agent_that_asks_for_its_vms_to_migrate_away_asks_once(etcd):
    """shutdown_policy migrate: the agent's new marker says so, and is a request; its
    later rewrite (the HA VMs it then had to shut down) is not a second one."""
    states = up(etcd, "hv1")
    marker = {"by": "agent", "reason": "host rebooting: its VMs migrate away",
              "migrate": True}
    asked = states.apply([etcd.put("maintenance", "hv1", marker)], 1.0)
    assert asked == [Report("maintenance", ["hv1"], {"marker": marker})]
    assert states.apply([etcd.put("maintenance", "hv1", {**marker, "off": ["a"]})], 2.0) == []
    # Its stop then ends the lease: planned, no failure.
    states.apply([etcd.delete("alive", "hv1")], 3.0)
    assert not states.pending


def test_a_host_put_in_maintenance_during_its_hold_down_is_not_stable(etcd):
    """Back, then drained (or going down with shutdown_policy migrate) before its
    hold-down ended: a return home now would fight the drain."""
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 1.0)
    states.apply([etcd.register("hv1")], 10.0)
    states.apply([etcd.put("maintenance", "hv1", {"by": "operator"})], 20.0)
    beat_all(states, etcd, 10.0 + HOLD_DOWN, "hv1", "hv2")
    assert states.stable(10.0 + HOLD_DOWN) == [] and "hv1" not in states.returning


def test_a_host_is_stable_after_its_hold_down_only_while_its_agent_beats(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 1.0)
    assert states.failures(1.0 + SETTLE).hosts == ["hv1"]
    states.apply([etcd.register("hv1")], 10.0)
    due = 10.0 + HOLD_DOWN
    assert states.deadline() == due
    beat_all(states, etcd, due - 1, "hv1")
    assert states.stable(due - 0.1) == []
    assert states.stable(due) == ["hv1"] and states.returning == {}


def test_a_host_silent_at_the_end_of_its_hold_down_waits_for_its_next_beat(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 1.0)
    states.apply([etcd.register("hv1")], 10.0)
    due = 10.0 + HOLD_DOWN  # no beat since it registered: it may have crashed again
    assert states.stable(due) == []
    assert states.returning["hv1"][1] == due + STABLE_RECHECK
    beat_all(states, etcd, due + 0.1, "hv1")
    assert states.stable(due + STABLE_RECHECK) == ["hv1"]


def test_a_host_that_fails_again_in_its_hold_down_is_forgotten_and_one_on_a_new_lease_starts_again(
        etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 1.0)
    states.apply([etcd.register("hv1")], 10.0)
    states.apply([etcd.delete("alive", "hv1")], 20.0)
    assert "hv1" not in states.returning and states.pending == {"hv1"}
    states.apply([etcd.register("hv1")], 25.0)
    assert states.returning["hv1"][1] == 25.0 + HOLD_DOWN
    # The agent restarted on a new lease inside its hold-down: counted afresh.
    states.apply([etcd.register("hv1")], 40.0)
    assert states.returning["hv1"][1] == 40.0 + HOLD_DOWN
    beat_all(states, etcd, 25.0 + HOLD_DOWN, "hv1")
    assert states.stable(25.0 + HOLD_DOWN) == []


def test_a_disarmed_cluster_forgets_the_hosts_returning(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 1.0)
    states.apply([etcd.register("hv1")], 10.0)
    beat_all(states, etcd, 10.0 + HOLD_DOWN, "hv1")
    assert states.stable(10.0 + HOLD_DOWN, armed=False) == []
    assert states.returning == {}


def test_a_key_not_rewritten_for_its_ttl_is_stale_counted_from_the_last_alarm(etcd):
    states = up(etcd, "hv1", "hv2")
    beat_all(states, etcd, 5.0, "hv2")
    assert states.stale(TTL + STALE_SLACK - 0.1) == []
    ((host, kv, age),) = states.stale(TTL + STALE_SLACK)
    assert (host, kv.lease, age) == ("hv1", etcd.kvs[kv.key].lease, TTL + STALE_SLACK)
    # etcd was full until 4 s: the agent could not rewrite its key until then.
    assert states.stale(TTL + STALE_SLACK, alarm_seen=4.0) == []


def test_a_new_leader_reports_hosts_down_with_vms_and_counts_the_fenced_ones_hold_down(etcd):
    states = up(etcd, "hv1", "hv2", "hv3", "hv4")
    states.apply([etcd.delete("alive", h) for h in ("hv1", "hv2", "hv3")], 1.0)
    records = [{"host": "hv1", "state": "running"}, {"host": "hv2", "state": "down"},
               {"host": "hv4", "state": "starting", "from": "hv3"}, "not a record"]
    assert states.resync(["hv4"], records, 2.0) == ["hv1", "hv3"]
    assert states.returning["hv4"][1] == 2.0 + HOLD_DOWN


def test_a_read_behind_what_was_applied_changes_nothing_and_changes_apply_once(etcd):
    states = up(etcd, "hv1", "hv2")
    old = list(etcd.kvs.values())
    change = etcd.delete("alive", "hv1")
    states.apply([change], 1.0)
    assert states.load(old, change.kv.mod_revision - 1, 2.0) is False
    assert states.down() == ["hv1"]
    states.pending.clear()
    assert states.fresh([change]) == [] and states.apply([change], 3.0) == []
    assert states.pending == set()


def test_only_the_hosts_named_are_looked_at_and_a_lost_one_is_down_without_records(etcd):
    etcd.put("registered", "other", {})
    states = HostStates(CLUSTER, only=["hv1", "hv2"], settle=SETTLE, hold_down=HOLD_DOWN)
    states.load(list(etcd.kvs.values()), 1, 0.0)
    assert states.down() == ["hv1", "hv2"]  # named, never seen alive
    assert states.apply([etcd.register("other")], 1.0) == []
    assert states.apply([etcd.register("hv1")], 1.0)[0].kind == "host_up"
    states.apply([etcd.delete("alive", "hv1")], 2.0)
    assert "hv1" in states.lost and states.down() == ["hv1", "hv2"]


def test_a_pending_host_put_in_maintenance_before_the_settle_is_not_reported(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 4.0)  # hv2 quiet: the settle runs
    states.apply([etcd.put("maintenance", "hv1", {"by": "drain"})], 5.0)
    assert states.failures(4.0 + SETTLE) is None and states.pending == set()


def test_a_host_whose_agent_names_no_ttl_counts_as_quiet(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.put("alive", "hv2", {"host": "hv2"}, lease=7)], 1.0)  # no ttl
    assert states.missed_beat(etcd_keys.alive_key("hv2", cluster=CLUSTER), 1.0) is None
    assert states.quiet(1.0) == ["hv2"]
    states.apply([etcd.delete("alive", "hv1")], 1.5)
    assert states.failures(1.5) is None, "reported before the settle while hv2 is quiet"


def test_a_new_leader_keeps_a_hold_down_already_counting(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 1.0)
    states.apply([etcd.register("hv1")], 10.0)
    assert states.resync(["hv1"], [], 20.0) == []
    assert states.returning["hv1"][1] == 10.0 + HOLD_DOWN


def test_a_host_back_on_a_new_lease_under_an_operators_marker_is_not_stable(etcd):
    states = up(etcd, "hv1", "hv2")
    states.apply([etcd.delete("alive", "hv1")], 1.0)
    states.apply([etcd.register("hv1")], 10.0)
    states.apply([etcd.put("maintenance", "hv1", {"by": "operator"})], 11.0)
    states.apply([etcd.register("hv1")], 12.0)  # the agent restarted: a new lease
    beat_all(states, etcd, 10.0 + HOLD_DOWN, "hv1")
    assert states.stable(10.0 + HOLD_DOWN) == [] and states.returning == {}


def test_a_batch_of_several_revisions_is_applied_up_to_its_last(etcd):
    states = up(etcd, "hv1", "hv2")
    batch = [etcd.beat("hv1"), etcd.beat("hv2"), etcd.put("maintenance", "hv2", {"by": "x"})]
    assert [r.kind for r in states.apply(batch, 1.0)] == ["maintenance"]
    assert states.applied == batch[-1].kv.mod_revision


def test_an_agents_restart_in_place_is_reported_once_per_restart(etcd):
    states = up(etcd, "hv1")
    key = etcd_keys.restart_key("hv1", "web", cluster=CLUSTER)

    def says(state: str, count_: int) -> list[Report]:
        return states.apply([etcd.put_key(key, {"state": state, "count": count_,
                                                "reason": "its QEMU died"}, lease=7)], 1.0)

    assert says("restarting", 0) == []
    assert says("restarted", 1) == [Report("vm_restarted", ["hv1"], {
        "vm": "web", "reason": "its QEMU died", "count": 1})]
    assert says("restarted", 1) == []  # written again, no new restart
    assert says("declined", 1) == []
    assert says("restarting", 1) == []
    assert says("restarted", 2)[0].details["count"] == 2
    assert states.pending == set()  # nothing of it is a host's failure


def test_the_agents_events_are_kept_for_the_leader_to_copy_whichever_hosts_are_looked_at(
        etcd):
    first = etcd.put_key(etcd_keys.host_event_key("hv9", 1, cluster=CLUSTER),
                         {"kind": "self-fenced"})
    states = HostStates(CLUSTER, only=["hv1"], settle=SETTLE, hold_down=HOLD_DOWN)
    assert states.load(list(etcd.kvs.values()), first.kv.mod_revision, 0.0)
    assert list(states.events) == [first.kv.key]
    key = etcd_keys.host_event_key("hv1", 2, cluster=CLUSTER)
    assert states.apply([etcd.put_key(key, {"kind": "crashed"})], 1.0) == []
    written = states.events[key]
    # Copied, then written again before the watch brought the deletion: kept.
    again = etcd.put_key(key, {"kind": "crashed", "vm": "web"})
    states.apply([again], 1.0)
    states.event_copied(written)
    assert states.events[key] == again.kv
    states.event_copied(again.kv)
    assert key not in states.events
    previous = etcd.kvs.pop(first.kv.key)
    states.apply([WatchEvent("DELETE", KeyValue(first.kv.key, "", next(etcd.revisions), 0, 0, 0),
                             previous)], 2.0)
    assert states.events == {} and states.records == {} and states.pending == set()
