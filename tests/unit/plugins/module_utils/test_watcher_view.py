"""What the HA watcher saw, counted and timed (module_utils/cluster/watcher_view.py), on
a fake clock and plain data: an evacuation timed from its host_down event until its HA
VMs run elsewhere, or given up; the live migrations the history records; the metric
families, from a follower and from the leader; the members' sizes and the log's words.
The event source's tests (tests/etcd) drive the same through a real etcd."""

from __future__ import annotations

import json
import logging

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import KeyValue
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.host_states import HostStates
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.watcher_view import (
    EVACUATION_TIMED_FOR, EVENT_TYPES, WatcherView, alarm_text, disarm_text, member_size,
    members_over)

HOSTS = ("hv1", "hv2")


def cluster(**records: str) -> dict:
    """What the reconciler observes: hv1 and hv2 alive, each HA VM of `records` (VM ->
    host) recorded and running there."""
    view = {"hosts": {h: {"memory_mb": 4096} for h in HOSTS}, "failures_to_tolerate": 1,
            "vms": {vm: {"kind": "ha", "memory_mb": 512} for vm in records}}
    observed = {"hosts": {h: {"alive": True} for h in HOSTS}, "domains": {h: {} for h in HOSTS},
                "records": {}, "requested": {}, "vdm": view, "disarmed": False}
    for vm, host in records.items():
        runs_on(observed, vm, host)
    return observed


def runs_on(observed: dict, vm: str, host: str) -> None:
    for domains in observed["domains"].values():
        domains.pop(vm, None)
    observed["records"][vm] = ({"host": host, "state": "running"}, 10)
    observed["domains"][host][vm] = "running"


def fails(observed: dict, host: str) -> None:
    observed["hosts"][host] = {}
    observed["domains"][host] = {}


def history(*events: tuple[int, dict]) -> list[KeyValue]:
    return [KeyValue(etcd_keys.history_key(number), json.dumps(event), number, number, 1, 0)
            for number, event in events]


def migrated(by: str, total_ms: float, downtime_ms: float) -> dict:
    return {"kind": "migrated", "by": by,
            "details": {"total_ms": total_ms, "downtime_ms": downtime_ms}}


def test_an_evacuation_is_timed_until_its_ha_vms_run_on_a_live_host_elsewhere():
    view = WatcherView("w1")
    observed = cluster(web=HOSTS[0], db=HOSTS[0], other=HOSTS[1])
    view.saw(observed, at=1000.0, now=0.0)
    fails(observed, "hv1")
    view.start_timing(["hv1"], now=2.0)
    assert view.evacuating == [(2.0, frozenset({"hv1"}), {"web", "db"})]
    view.start_timing(["hv1"], now=3.0)  # the overdue evacuation asked again
    assert len(view.evacuating) == 1
    view.saw(observed, at=1001.0, now=5.0)
    runs_on(observed, "web", "hv2")
    view.saw(observed, at=1002.0, now=8.0)
    assert view.evacuating == [(2.0, frozenset({"hv1"}), {"db"})]
    assert view.evacuations.buckets()[1] == 0.0
    runs_on(observed, "db", "hv2")
    view.saw(observed, at=1003.0, now=14.0)
    buckets, seconds = view.evacuations.buckets()
    assert seconds == 12.0 and ("15", 1) in buckets and ("10", 0) in buckets
    assert view.evacuating == [] and view.observed_at == 1003.0


def test_a_vm_no_longer_meant_to_run_ends_its_evacuation():
    view = WatcherView("w1")
    observed = cluster(web="hv1")
    view.saw(observed, at=0.0, now=0.0)
    fails(observed, "hv1")
    view.start_timing(["hv1"], now=1.0)
    observed["requested"]["web"] = "stopped"
    view.saw(observed, at=0.0, now=4.0)
    assert view.evacuating == [] and view.evacuations.buckets()[1] == 3.0


def test_nothing_is_timed_before_the_reconciler_looked_nor_for_hosts_without_ha_vms():
    view = WatcherView("w1")
    view.start_timing(["hv1"], now=0.0)
    assert view.evacuating == []
    view.saw(cluster(web="hv2"), at=0.0, now=0.0)
    view.start_timing(["hv1"], now=1.0)
    assert view.evacuating == []


def test_an_evacuation_not_done_within_the_hour_is_no_longer_timed(caplog):
    view = WatcherView("w1")
    observed = cluster(web="hv1")
    view.saw(observed, at=0.0, now=0.0)
    fails(observed, "hv1")
    view.start_timing(["hv1"], now=10.0)
    view.saw(observed, at=0.0, now=10.0 + EVACUATION_TIMED_FOR)
    assert len(view.evacuating) == 1
    with caplog.at_level(logging.WARNING, logger="yasco.cluster.etcd_hosts"):
        view.saw(observed, at=0.0, now=11.0 + EVACUATION_TIMED_FOR)
    assert view.evacuating == [] and view.evacuations.buckets()[1] == 0.0
    assert "the evacuation of hv1 has not started web within 3600 s" in caplog.text


def test_migrations_are_counted_from_the_first_look_on_with_their_figures():
    view = WatcherView("w1")
    view.time_migrations(history((1, migrated("drain", 4000, 30))))  # before: not news
    assert view.migrated == {} and view.history_seen == etcd_keys.history_key(1)
    view.time_migrations(history((1, migrated("drain", 4000, 30)),
                                 (2, migrated("return_home", 3200, 40)),
                                 (3, {"kind": "evacuated", "by": "evacuate"}),
                                 (4, {"kind": "migrated"})))
    assert view.migrated == {"return_home": 1, "-": 1}
    assert view.migrations.buckets()[1] == 3.2
    assert view.migration_pauses.buckets() == (
        [("0.01", 0), ("0.025", 0), ("0.05", 1), ("0.1", 1), ("0.25", 1), ("0.5", 1),
         ("1", 1), ("2", 1), ("5", 1), ("+Inf", 1)], 0.04)
    view.time_migrations([])  # nothing new: nothing counted twice
    view.time_migrations(history((4, {"kind": "migrated"})))
    assert view.migrated == {"return_home": 1, "-": 1}
    view.history_seen = None  # led again later: only what is written from then on
    view.time_migrations(history((5, migrated("drain", 1000, 10))))
    assert view.migrated == {"return_home": 1, "-": 1}


def samples(families) -> dict:
    return {family.name: family.samples for family in families}


def test_a_follower_shows_what_it_emitted_and_nothing_of_the_cluster():
    view = WatcherView("w2")
    view.emitted_one("host_up")
    view.stepped("restart")
    found = samples(view.families(False, HostStates("yasco", ["hv1"]), False, 100, []))
    assert list(found) == ["watcher_leader", "watcher_events", "reconciler_steps",
                           "evacuation_seconds"]
    assert found["watcher_leader"] == [({"watcher": "w2"}, 0.0)]
    assert {labels["type"]: value for labels, value in found["watcher_events"]} == {
        **dict.fromkeys(EVENT_TYPES, 0.0), "host_up": 1.0}
    assert ({"watcher": "w2", "action": "restart"}, 1.0) in found["reconciler_steps"]


def test_the_leader_shows_the_cluster_as_it_sees_it():
    view = WatcherView("w1")
    view.sizes = [member_size("http://e1:2379", {"member": "m1", "db_size": 50}, 100)]
    alarms = [{"member": "m1", "alarm": "NOSPACE"}]
    families = view.families(True, HostStates("yasco", ["hv1"]), True, 100, alarms)
    found = samples(families)
    assert found["host_up"] == [({"host": "hv1"}, 0.0)]
    assert found["ha_disarmed"] == [({}, 1.0)] and found["etcd_quota_bytes"] == [({}, 100.0)]
    assert found["etcd_db_size_bytes"] == [
        ({"endpoint": "http://e1:2379", "member": "m1"}, 50.0)]
    assert found["etcd_alarm"] == [({"member": "m1", "alarm": "NOSPACE"}, 1.0)]
    assert found["ha_vm_down"] == [] and found["reconciler_read_timestamp_seconds"] == []
    observed = cluster(web="hv1", db="hv2")
    fails(observed, "hv1")
    observed["hosts"]["hv1"]["fenced"] = True
    view.saw(observed, at=1234.5, now=0.0)
    found = samples(view.families(True, HostStates("yasco"), False, 100, []))
    assert found["reconciler_read_timestamp_seconds"] == [({}, 1234.5)]
    assert found["ha_vm_down"] == [({"vm": "db"}, 0.0), ({"vm": "web"}, 1.0)]
    assert found["ha_vm_domains"] == [({"vm": "db"}, 1.0), ({"vm": "web"}, 0.0)]
    assert ({"vm": "web", "state": "running", "host": "hv1"}, 1.0) in found["ha_vm_record"]
    assert found["ha_vm_requested"] == [({"vm": "db", "state": "started"}, 1.0),
                                        ({"vm": "web", "state": "started"}, 1.0)]
    assert found["host_fenced"] == [({"host": "hv1"}, 1.0), ({"host": "hv2"}, 0.0)]
    assert found["ha_failures_planned"] == [({}, 1.0)]
    assert found["ha_failures_tolerated"] == [({}, 0.0)]


def test_members_at_or_over_the_warning_and_the_logs_words():
    sizes = [member_size("http://e2:2379", {"member": "m2", "db_size": 80}, 100),
             member_size("http://e1:2379", {"member": "m1", "db_size": 333}, 1000)]
    assert sizes[1] == {"endpoint": "http://e1:2379", "member": "m1", "db_size": 333,
                        "percent": 33.3}
    assert members_over(sizes, 80) == ["http://e2:2379"]
    assert members_over(sizes, 30) == ["http://e1:2379", "http://e2:2379"]
    assert disarm_text({"by": "ops", "since": "noon", "reason": "ceph upgrade"}) == (
        "by ops since noon: ceph upgrade")
    assert disarm_text({}) == "by someone since ?: no reason given"
    assert alarm_text([{"alarm": "NOSPACE", "member": "m1"},
                       {"alarm": "CORRUPT", "member": "m2"}]) == (
        "NOSPACE on member m1, CORRUPT on member m2")
