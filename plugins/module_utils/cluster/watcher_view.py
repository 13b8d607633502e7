# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the HA watcher (the yasco.cluster.etcd_hosts event source) saw, beyond the
hosts' states it acts on (host_states.py): the events it emitted and the reconciler's
steps, counted; each evacuation, timed from its host_down event until its HA VMs run
elsewhere; the live migrations the history records, with their figures; the etcd
members' sizes; and all of it, with the state the watcher passes in, as Prometheus
metric families (docs/observability.md). Also the words its log gives the disarm flag
and etcd's alarms.

No I/O and no clock of its own: every method that depends on time takes `now` (the
event loop's clock, or a test's); the event source reads etcd and hands in what it
read. A history event is a key-value with `key` and `value`, as
module_utils/adapters/etcd_data.py has it.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import metrics
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import json_or_none
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.host_states import HostStates
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler import (
    STEP_ACTIONS)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_observed import (
    failures_tolerated, ha_vms)

LOG = logging.getLogger("yasco.cluster.etcd_hosts")
# Every event type the source emits: each counted from 0 in the metrics, so that the
# first of a kind shows as an increase.
EVENT_TYPES = ("host_down", "host_up", "host_stable", "maintenance", "vm_recover",
               "vm_restarted", "etcd_alarm", "etcd_space", "fences_standing")
# The bounds of the evacuation time histogram, in seconds; and how long an evacuation
# is waited for before it is no longer timed (its VMs are then left to the alerts).
EVACUATION_BUCKETS = (5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600)
EVACUATION_TIMED_FOR = 3600.0
# Live migrations (the history's `migrated` events): their total time, and the pause of
# the guest at the switch-over, in seconds.
MIGRATION_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
PAUSE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5)


def disarm_text(flag: dict[str, Any]) -> str:
    """The disarm flag (playbooks/disarm.yml) as the log names it."""
    return (f"by {flag.get('by', 'someone')} since {flag.get('since', '?')}: "
            f"{flag.get('reason', 'no reason given')}")


def alarm_text(alarms: list[dict[str, str]]) -> str:
    """etcd's alarms as the log names them."""
    return ", ".join(f"{alarm['alarm']} on member {alarm['member']}" for alarm in alarms)


def member_size(endpoint: str, status: dict[str, Any], quota_bytes: int) -> dict[str, Any]:
    """A member's database size, from its own status, against the quota."""
    return {"endpoint": endpoint, "member": status["member"], "db_size": status["db_size"],
            "percent": round(100 * status["db_size"] / quota_bytes, 1)}


def members_over(sizes: Iterable[dict[str, Any]], warning: float) -> list[str]:
    """The endpoints whose database is at or over `warning` percent of the quota."""
    return sorted(size["endpoint"] for size in sizes if size["percent"] >= warning)


class WatcherView:
    """What one watcher saw, counted and timed, for its metrics. The event loop writes
    it; `families` reads it from the metrics server's thread, on copies."""

    def __init__(self, name: str) -> None:
        self.name = name
        # Events emitted by type, the reconciler's last look at the cluster (and when:
        # Unix time), the members' sizes as last read.
        self.emitted = dict.fromkeys(EVENT_TYPES, 0)
        self.observed: dict[str, Any] | None = None
        self.observed_at = 0.0
        self.sizes: list[dict[str, Any]] = []
        # Each evacuation asked for and not yet seen done, as (when, its hosts, the HA
        # VMs they ran); how long the finished ones took; the reconciler's steps.
        self.evacuating: list[tuple[float, frozenset[str], set[str]]] = []
        self.evacuations = metrics.Durations(EVACUATION_BUCKETS)
        self.migrations = metrics.Durations(MIGRATION_BUCKETS)
        self.migration_pauses = metrics.Durations(PAUSE_BUCKETS)
        self.migrated: dict[str, int] = {}  # by the playbook that migrated
        self.history_seen: str | None = None  # the last history key looked at
        self.steps = dict.fromkeys(STEP_ACTIONS, 0)

    def emitted_one(self, kind: str) -> None:
        """Count an event emitted."""
        self.emitted[kind] = self.emitted.get(kind, 0) + 1

    def stepped(self, action: str) -> None:
        """Count a step the reconciler took."""
        self.steps[action] = self.steps.get(action, 0) + 1

    def saw(self, observed: dict[str, Any], at: float, now: float) -> None:
        """The reconciler's look at the cluster (reconciler_observed.observe), read at
        `at` (Unix time): keep it for the metrics, and time the evacuations by it."""
        self.observed, self.observed_at = observed, at
        self.time_evacuations(observed, now)

    def time_evacuations(self, observed: dict[str, Any], now: float) -> None:
        """Time each evacuation asked for, from its host_down event until every HA VM
        its hosts ran, and that is still meant to run, runs on a live host elsewhere."""
        view = ha_vms(observed)
        waiting = []
        for since, hosts, vms in self.evacuating:
            left = {vm for vm in vms if vm in view and view[vm]["requested"] == "started"
                    and (view[vm]["down"] or hosts & set(view[vm]["on"]))}
            if not left:
                self.evacuations.observe(now - since)
            elif now - since > EVACUATION_TIMED_FOR:
                LOG.warning("the evacuation of %s has not started %s within %.0f s: no "
                            "longer timed", ", ".join(sorted(hosts)), ", ".join(sorted(left)),
                            EVACUATION_TIMED_FOR)
            else:
                waiting.append((since, hosts, left))
        self.evacuating = waiting

    def start_timing(self, hosts: list[str], now: float) -> None:
        """Note an evacuation of `hosts` just asked for, with the HA VMs they ran as the
        reconciler's last look saw them; hosts already being timed are not again."""
        timed = {host for evacuation in self.evacuating for host in evacuation[1]}
        new = frozenset(hosts) - timed
        if not new or self.observed is None:
            return
        vms = {vm for vm, state in ha_vms(self.observed).items()
               if state["requested"] == "started" and state["host"] in new}
        if vms:
            self.evacuating.append((now, new, vms))

    def time_migrations(self, events: list[Any]) -> None:
        """Count the live migrations the history recorded since the last look, with
        their figures; those before this watcher's first look are not its news."""
        seen, self.history_seen = self.history_seen, max(
            [kv.key for kv in events] + [self.history_seen or ""])
        if seen is None:
            return
        for kv in events:
            if kv.key <= seen:
                continue
            event = json_or_none(kv.value)
            if not isinstance(event, dict) or event.get("kind") != "migrated":
                continue
            details = event.get("details") or {}
            by = str(event.get("by") or "-")
            self.migrated[by] = self.migrated.get(by, 0) + 1
            if isinstance(details.get("total_ms"), (int, float)):
                self.migrations.observe(details["total_ms"] / 1000)
            if isinstance(details.get("downtime_ms"), (int, float)):
                self.migration_pauses.observe(details["downtime_ms"] / 1000)

    def families(self, leader: bool, states: HostStates, disarmed: bool, quota_bytes: int,
                 alarms: list[dict[str, str]]) -> list[metrics.Family]:
        """What the watcher knows now, as Prometheus metric families: whether it leads
        and what it emitted, and, from the leader alone, the cluster as it sees it:
        its hosts' `states`, whether HA is `disarmed`, etcd's quota and `alarms`."""
        gauge, counter = metrics.gauge, metrics.counter
        families = [
            gauge("watcher_leader", "1 while this watcher leads (emits events).",
                  int(leader), watcher=self.name),
            counter("watcher_events", "Events this watcher emitted, by type.")]
        for kind, count in sorted(dict(self.emitted).items()):
            families[-1].add(count, watcher=self.name, type=kind)
        families.append(counter("reconciler_steps", "The reconciler's steps, by action "
                                "(restart, relocate, stop, fail, confirm)."))
        for action, count in sorted(dict(self.steps).items()):
            families[-1].add(count, watcher=self.name, action=action)
        families.append(metrics.histogram(
            "evacuation_seconds", "Seconds from a host_down event to every HA VM of its "
            "hosts running on a live host elsewhere, as the reconciler saw it.",
            self.evacuations))
        if not leader:
            return families
        families += [
            counter("migrations", "Live migrations the history recorded while this "
                    "watcher led, by the playbook that made them."),
            metrics.histogram("migration_seconds", "Each live migration's total time.",
                              self.migrations),
            metrics.histogram("migration_pause_seconds", "How long each live migration "
                              "paused its guest at the switch-over.", self.migration_pauses)]
        for by, count in sorted(self.migrated.items()):
            families[-3].add(count, watcher=self.name, by=by)
        up = gauge("host_up", "1 while the hypervisor's agent holds its lease.")
        maintenance = gauge("host_maintenance", "1 while the hypervisor is in maintenance.")
        for host, have in sorted(states.kinds().items()):
            up.add(int("alive" in have), host=host)
            maintenance.add(int("maintenance" in have), host=host)
        families += [up, maintenance,
                     gauge("ha_disarmed", "1 while HA is disarmed (playbooks/disarm.yml).",
                           int(disarmed)),
                     gauge("etcd_quota_bytes", "The etcd quota the watcher measures "
                           "members against.", quota_bytes),
                     gauge("etcd_db_size_bytes", "Each etcd member's database size, as "
                           "last read.")]
        for size in list(self.sizes):
            families[-1].add(size["db_size"], endpoint=size["endpoint"],
                             member=size["member"])
        families.append(gauge("etcd_alarm", "1 for each alarm an etcd member raises."))
        for alarm in list(alarms):
            families[-1].add(1, member=alarm["member"], alarm=alarm["alarm"])
        return families + self._cluster_families()

    def _cluster_families(self) -> list[metrics.Family]:
        """The HA VMs, the fences and the failures still tolerated, as the reconciler's
        last look saw them."""
        gauge = metrics.gauge
        down = gauge("ha_vm_down", "1 while the HA VM is meant to run and runs on no live "
                     "host.")
        copies = gauge("ha_vm_domains", "Live hosts with a domain of the HA VM (2 only "
                       "while it migrates).")
        record = gauge("ha_vm_record", "The state etcd records for the HA VM, as a label.")
        requested = gauge("ha_vm_requested", "The HA VM's requested state, as a label.")
        fenced = gauge("host_fenced", "1 while etcd records the hypervisor's storage fence.")
        read = gauge("reconciler_read_timestamp_seconds", "When the reconciler last read "
                     "the cluster (Unix time).")
        planned = gauge("ha_failures_planned", "Hypervisor failures the map plans for "
                        "(its failures_to_tolerate).")
        tolerated = gauge("ha_failures_tolerated", "Further hypervisor failures the map "
                          "still covers, given the hosts down, in maintenance or fenced "
                          "now; -1 beyond the plan.")
        families = [down, copies, record, requested, fenced, read, planned, tolerated]
        # None until the reconciler has read the cluster once.
        observed, observed_at = self.observed, self.observed_at
        if observed is None:
            return families
        read.add(observed_at)
        if (covered := failures_tolerated(observed)) is not None:
            planned.add(observed["vdm"]["failures_to_tolerate"])
            tolerated.add(covered)
        for vm, view in ha_vms(observed).items():
            down.add(int(view["down"]), vm=vm)
            copies.add(len(view["on"]), vm=vm)
            record.add(1, vm=vm, state=view["record"], host=view["host"])
            requested.add(1, vm=vm, state=view["requested"])
        for host, state in sorted(observed["hosts"].items()):
            fenced.add(int(bool(state.get("fenced"))), host=host)
        return families
