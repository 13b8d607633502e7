# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the HA watcher (the yasco.cluster.etcd_hosts event source) knows of the
hypervisors, and when it reports them: a state machine with no I/O and no clock of
its own. Every method that depends on time takes `now` (the event loop's clock, or a
test's); the event source reads etcd, feeds what it read and saw change here, and
emits what comes back.

- A liveness key that goes, unless the host's maintenance marker was written first
  (the agent's planned stop), is a failure; failures wait in `pending` until `settle`
  seconds after the first, or less when no other host has gone quiet, so that hosts
  that fail together make one `host_down`.
- A new lease on a liveness key is `host_up`; unless the host came back in
  maintenance (not the agent's own), it is `host_stable` once it has kept that lease
  for `hold_down` seconds and its agent is beating.
- A liveness key that its agent has not rewritten for longer than the TTL it
  registered is stale: its lease is to be ended (etcd renewed it on an election).
- The agents' events (hosts/<host>/events/) are kept as they come and go, for the
  leader to copy into the history (cluster_events.copy_from_agent).

It imports nothing but the standard library, the key layout (etcd_keys), etcd's
JSON decoding and the reconciler's record states, as the decision environment needs. A key-value needs
`key`, `value`, `lease` and `mod_revision`, a change `kind`, `kv` and `previous`, as
module_utils/adapters/etcd_data.py has them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import json_or_none
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.vm_records import ACTIVE

LOG = logging.getLogger("yasco.cluster.etcd_hosts")
# How soon a host up for its hold-down whose agent missed a beat is looked at again.
STABLE_RECHECK = 0.25
# How much older than its agent's TTL a liveness key must be to count as stale: the
# agent self-fences a margin before its TTL.
STALE_SLACK = 0.5


@dataclass(frozen=True)
class Report:
    """An event to emit: `kind` about `hosts`, with `details` for its payload."""

    kind: str
    hosts: list[str]
    details: dict[str, Any] = field(default_factory=dict)


def by_agent(marker: Any) -> bool:
    """Whether a maintenance marker (a key-value) is the agent's own (a planned stop)."""
    record = json_or_none(marker.value)
    return isinstance(record, dict) and record.get("by") == "agent"


def agent_ttl(alive: Any) -> float | None:
    """The TTL an agent registered in its liveness key (a key-value), if it did."""
    record = json_or_none(alive.value) if alive is not None else None
    ttl = record.get("ttl") if isinstance(record, dict) else None
    return ttl if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) else None


class HostStates:
    """The hosts/ records of one cluster as of revision `applied`, and what is owed
    to them: the failures `pending` since `settled - settle`, the hosts `returning`
    (host -> (its lease, when it is stable)), the hosts `lost` while watched."""

    def __init__(self, cluster: str, only: Iterable[str] = (), settle: float = 1.0,
                 hold_down: float = 60.0) -> None:
        self.cluster = cluster
        self.only = set(only)  # the hosts looked at; all when empty
        self.settle, self.hold_down = settle, hold_down
        self.records: dict[str, Any] = {}
        self.applied = 0  # 0 until the first read
        # Liveness key -> when its current revision was seen.
        self.seen: dict[str, float] = {}
        # Hosts whose liveness key went while watched, even with no record left;
        # forgotten when they register again or are taken out.
        self.lost: set[str] = set()
        self.returning: dict[str, tuple[int, float]] = {}
        self.pending: set[str] = set()
        self.settled = 0.0  # when the pending failures are reported
        # The agents' events not yet copied into the history, of every host: key ->
        # key-value.
        self.events: dict[str, Any] = {}

    def parse(self, key: str) -> etcd_keys.ParsedKey | None:
        """What `key` says of a host looked at, or None when it is no host record."""
        parsed = etcd_keys.parse_key(key, cluster=self.cluster)
        if (parsed is None or parsed.kind not in etcd_keys.HOST_RECORDS
                or (self.only and parsed.host not in self.only)):
            return None
        return parsed

    def _key(self, kind: str, host: str) -> str:
        return getattr(etcd_keys, f"{kind}_key")(host, cluster=self.cluster)

    # -- what etcd says -------------------------------------------------------------

    def load(self, kvs: Iterable[Any], revision: int, now: float) -> bool:
        """Every hosts/ record as read at `revision`; False when that is behind what
        was applied already (a lagging member answered), and nothing changes.
        Counted as seen now: a reread delays a stale key's end by one TTL at most,
        and never ends a live one."""
        if revision < self.applied:
            return False
        kvs = list(kvs)
        self.records = {kv.key: kv for kv in kvs if self.parse(kv.key)}
        self.events = {kv.key: kv for kv in kvs if self.agent_event(kv.key)}
        self.seen = {key: now for key in self.records}
        self.applied = revision
        return True

    def fresh(self, changes: Iterable[Any]) -> list[Any]:
        """The changes not applied yet (another stream may have delivered them)."""
        return [c for c in changes if c.kv.mod_revision > self.applied]

    def apply(self, changes: Iterable[Any], now: float) -> list[Report]:
        """Apply a revision's changes, in order; what to report at once (host_up,
        maintenance). Failures go to `pending`."""
        reports: list[Report] = []
        for change in self.fresh(changes):
            if not self.pending:
                self.settled = now + self.settle
            reports += self._change(change, now)
            self.applied = max(self.applied, change.kv.mod_revision)
        return reports

    def agent_event(self, key: str) -> bool:
        """Whether `key` is an event an agent wrote under its host, of any host: each is
        copied into the cluster's history, whichever hosts are looked at."""
        parsed = etcd_keys.parse_key(key, cluster=self.cluster)
        return parsed is not None and parsed.kind == "host_event"

    def event_copied(self, kv: Any) -> None:
        """Forget an agent's event once copied (or dropped), unless written again since:
        the watch brings its deletion in any case."""
        if getattr(self.events.get(kv.key), "mod_revision", None) == kv.mod_revision:
            del self.events[kv.key]

    def _change(self, change: Any, now: float) -> list[Report]:
        kv = change.kv
        if self.agent_event(kv.key):
            if change.kind == "DELETE":
                self.events.pop(kv.key, None)
            else:
                self.events[kv.key] = kv
            return []
        restart = etcd_keys.parse_key(kv.key, cluster=self.cluster)
        if restart is not None and restart.kind == "restart":
            return self._restarted(restart, change)
        parsed = self.parse(kv.key)
        if parsed is None:
            return []
        host, deleted = parsed.host, change.kind == "DELETE"
        if deleted:
            self.records.pop(kv.key, None)
            self.seen.pop(kv.key, None)
        else:
            self.records[kv.key] = kv
            self.seen[kv.key] = now
        if parsed.kind == "alive" or (parsed.kind == "registered" and deleted):
            self.lost.discard(host)
        if parsed.kind == "alive" and deleted:
            # A planned stop writes its marker before it ends the lease.
            self.returning.pop(host, None)
            if self._key("maintenance", host) in self.records:
                LOG.info("%s: stopped in maintenance, no failure", host)
            else:
                LOG.warning("%s: liveness key gone (lease expired)", host)
                self.pending.add(host)
                self.lost.add(host)
            return []
        if parsed.kind == "alive" and (change.previous is None
                                       or change.previous.lease != kv.lease):
            self.pending.discard(host)
            # A host back from maintenance gets its VMs from the undrain, not from here;
            # one back from its agent's own stop (a reboot) clears that marker itself
            # right after registering, and gets its VMs back like any other.
            marker = self.records.get(self._key("maintenance", host))
            if marker is None or by_agent(marker):
                self.returning[host] = (kv.lease, now + self.hold_down)
            return [Report("host_up", [host], {"registration": json_or_none(kv.value)})]
        if parsed.kind == "maintenance" and not deleted:
            record = json_or_none(kv.value)
            # The agent's planned stop, the drain and the emergency shutdown write their
            # own markers: a request is anyone else's, or the agent's new one asking
            # for its VMs to be migrated away (shutdown_policy migrate).
            if not (isinstance(record, dict)
                    and record.get("by") in etcd_keys.PLANNED_MAINTENANCE) or (
                        change.previous is None and etcd_keys.asks_migration(record)):
                return [Report("maintenance", [host], {"marker": record})]
        return []

    def _restarted(self, parsed: etcd_keys.ParsedKey, change: Any) -> list[Report]:
        """A host's agent restarted a VM in place (agent_restart.py): news for the
        operators, once per restart (it writes restarting, then restarted)."""
        if change.kind == "DELETE" or (self.only and parsed.host not in self.only):
            return []
        record = json_or_none(change.kv.value)
        before = json_or_none(change.previous.value) if change.previous is not None else None
        if not isinstance(record, dict) or record.get("state") != "restarted" or (
                isinstance(before, dict) and before.get("state") == "restarted"
                and before.get("count") == record.get("count")):
            return []
        return [Report("vm_restarted", [parsed.host], {
            "vm": parsed.vm, "reason": record.get("reason", ""), "count": record.get("count")})]

    # -- what is due ----------------------------------------------------------------

    def drop_pending(self) -> list[str]:
        """Forget the pending failures (HA is disarmed); the hosts they were."""
        dropped, self.pending = sorted(self.pending), set()
        return dropped

    def failures(self, now: float) -> Report | None:
        """host_down for the pending failures once they settled, or at once when no
        other host has gone quiet; not for those back meanwhile."""
        if not self.pending or (now < self.settled and self.quiet(now)):
            return None
        down = self.down()
        hosts, self.pending = sorted(self.pending & set(down)), set()
        return Report("host_down", hosts, {"down": down}) if hosts else None

    def stable(self, now: float, armed: bool = True) -> list[str]:
        """The hosts up on the same lease for hold_down seconds, once their agent is
        beating: a host that fails again keeps its lease for up to a TTL, and must not
        get its VMs back meanwhile. One that missed a beat is looked at again soon;
        one whose key went, one put in maintenance meanwhile (a drain under way: the
        undrain, or its next return, brings its VMs back), or any while disarmed, is
        forgotten (re-arming resyncs, which counts it afresh)."""
        stable = []
        for host, (lease, due) in list(self.returning.items()):
            if due > now:
                continue
            key = self._key("alive", host)
            alive = self.records.get(key)
            up = (armed and alive is not None and alive.lease == lease
                  and self._key("maintenance", host) not in self.records)
            if up and self.missed_beat(key, now):
                self.returning[host] = (lease, now + STABLE_RECHECK)
                continue
            del self.returning[host]
            if up:
                stable.append(host)
        return stable

    def deadline(self) -> float | None:
        """When something is next due (pending failures settle, a hold-down ends)."""
        deadlines = ([self.settled] if self.pending else []) + [
            due for dummy, due in self.returning.values()]
        return min(deadlines) if deadlines else None

    def stale(self, now: float,
              alarm_seen: float = float("-inf")) -> list[tuple[str, Any, float]]:
        """(host, liveness key-value, age) for each key not rewritten for longer than
        its agent's TTL, counted from `alarm_seen` at the earliest (a full etcd
        refuses the rewrite, not the keepalive)."""
        found = []
        for key, kv in list(self.records.items()):
            parsed = self.parse(key)
            ttl = agent_ttl(kv)
            age = now - max(self.seen.get(key, now), alarm_seen)
            if (parsed is not None and parsed.kind == "alive" and kv.lease
                    and ttl is not None and age >= ttl + STALE_SLACK):
                found.append((parsed.host, kv, age))
        return found

    # -- a new leader -----------------------------------------------------------------

    def resync(self, fenced: Iterable[str], vm_records: Iterable[Any],
               now: float) -> list[str]:
        """What a new leader owes: the hold-down of every host up while its fence is
        recorded (`fenced`) is counted; returned are the hosts down while a VM record
        (a decoded value) holds them busy."""
        for host in fenced:
            alive = self.records.get(self._key("alive", host))
            if alive is not None and host not in self.returning:
                self.returning[host] = (alive.lease, now + self.hold_down)
        busy: set[str] = set()
        for record in vm_records:
            if isinstance(record, dict) and record.get("state") in ACTIVE:
                busy.add(record.get("host"))
                # Claimed by an evacuation that did not finish starting it.
                if record.get("state") == "starting":
                    busy.add(record.get("from"))
        return sorted(set(self.down()) & busy)

    # -- views ------------------------------------------------------------------------

    def quiet(self, now: float) -> list[str]:
        """The hosts still alive whose agent missed a beat (or that registered no TTL):
        these may be failing with the ones pending."""
        quiet = []
        for key in list(self.seen):
            parsed = self.parse(key)
            if parsed is not None and parsed.kind == "alive" and (
                    self.missed_beat(key, now) is not False):
                quiet.append(parsed.host)
        return quiet

    def missed_beat(self, key: str, now: float) -> bool | None:
        """Whether the liveness key `key` has not been rewritten for a third of the TTL
        its agent registered with (an agent beats at least that often); None when it
        names no TTL."""
        ttl = agent_ttl(self.records.get(key))
        if ttl is None:
            return None
        return now - self.seen.get(key, now) > ttl / 3

    def down(self) -> list[str]:
        """The hypervisors with neither a liveness key nor a maintenance marker."""
        return sorted(host for host, kinds in self.kinds().items()
                      if "alive" not in kinds and "maintenance" not in kinds)

    def kinds(self) -> dict[str, set[str]]:
        """Each hypervisor known (looked at, lost or recorded) -> the kinds of record it
        has (alive, registered, maintenance)."""
        hosts: dict[str, set[str]] = {host: set() for host in self.only | self.lost}
        for key in list(self.records):  # the metrics read it from another thread
            parsed = self.parse(key)
            if parsed is not None:
                hosts.setdefault(parsed.host, set()).add(parsed.kind)
        return hosts
