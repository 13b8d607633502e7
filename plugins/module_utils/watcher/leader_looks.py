# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The looks the leading HA watcher takes at etcd besides its watch of the hosts, each
a coroutine of the Watcher (watcher.py), which starts them: the HA reconciler's look at
the whole cluster, the stale liveness keys whose leases it ends, the agents' events it
copies into the history, the cluster's disarm flag, etcd's alarms and its members'
database sizes, and the fences etcd records."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    NO_SPACE_ADVICE, EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.host_states import (
    agent_ttl)
# The reconciler imports nothing but the standard library: the decision environment
# needs neither the planner nor its solver.
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler import decide
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_observed import (
    observe)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.untrusted import inert
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.watcher_view import (
    alarm_text, disarm_text, member_size, members_over)
from ansible_collections.yasco.cluster.plugins.module_utils.watcher.watcher_io import (
    RETRY, client)

LOG = logging.getLogger("yasco.cluster.etcd_hosts")
# How often the leader looks for liveness keys older than their TTL.
STALE_CHECK = 0.25
# How often the disarm flag is read.
DISARM_CHECK = 1.0
# How often etcd's alarms are read: well within an agent's TTL, so that a lease is
# never ended for a key that a full etcd (alarm NOSPACE) kept its agent from writing.
ALARM_CHECK = 1.0
# How often each member's database size is read, against its quota.
SPACE_CHECK = 10.0
# The history events each look reads at most: more written between two looks (a few
# seconds apart) go uncounted.
HISTORY_READ = 200
# How often the leader looks again at the agents' events it has not copied yet (one
# dated a little ahead of its clock, one whose copy failed), besides when one comes.
EVENTS_CHECK = 1.0


class LeaderLooks:
    """The Watcher's looks at etcd; the Watcher holds the state they read and write."""

    async def _reconcile(self, queue, reader: EtcdClient) -> None:
        """As the leader, bring every HA VM to its requested state (reconciler.py):
        every `reconcile_interval` seconds, at once when a domain comes or goes, and
        when a VM's grace or timeout is up. Each look is one read of the cluster, as
        of one revision; the steps go out as one vm_recover event."""
        keys = [etcd_keys.hosts_prefix(cluster=self.cluster),
                etcd_keys.vms_prefix(cluster=self.cluster),
                etcd_keys.requested_prefix(cluster=self.cluster),
                etcd_keys.fences_prefix(cluster=self.cluster),
                etcd_keys.vdm_ha_key(cluster=self.cluster),
                etcd_keys.disarmed_key(cluster=self.cluster)]
        wake: float | None = None
        while True:
            timeout = self.reconcile_every if wake is None else max(
                0.0, min(self.reconcile_every, wake - self.loop.time()))
            try:
                await asyncio.wait_for(self.nudge.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            self.nudge.clear()
            wake = None
            if not self.leader:
                # Led again later, it counts only what is written from then on.
                self.view.history_seen = None
                continue
            try:
                read = await asyncio.to_thread(reader.get_prefixes, keys)
            except EtcdError as err:
                LOG.warning("reconciler: reading the cluster: %s; retrying", err)
                continue
            observed = observe([kv for kvs in read.values() for kv in kvs],
                               lambda key: etcd_keys.parse_key(key, cluster=self.cluster))
            self.view.saw(observed, time.time(), self.loop.time())
            try:
                events = await asyncio.to_thread(
                    reader.last_under, etcd_keys.history_prefix(cluster=self.cluster),
                    HISTORY_READ)
            except EtcdError as err:
                LOG.warning("reconciler: reading the history: %s", err)
            else:
                self.view.time_migrations(events)
            if self.disarmed is not None:
                continue  # looked at for the metrics only
            decision = decide(observed, self.memory, self.policy, self.loop.time())
            wake = decision["wake"]
            for step in inert(decision["steps"]):
                LOG.warning("reconciler: %s %s: %s", step["action"], step["vm"],
                            step["reason"])
                self.view.stepped(step["action"])
            if decision["steps"]:
                hosts = sorted({s["to"] or s["from"] for s in decision["steps"]
                                if s["to"] or s["from"]})
                await self._emit(queue, "vm_recover", hosts or ["-"],
                                 details={"steps": decision["steps"]})
            if decision["evacuate"]:
                # HA VMs still recorded on a failed host long after its failure: the
                # evacuation did not finish; a rerun finishes it, starting nothing twice.
                LOG.warning("reconciler: the evacuation of %s is overdue: asking again",
                            ", ".join(decision["evacuate"]))
                await self._emit(queue, "host_down", decision["evacuate"], resync=True)

    async def _end_stale_leases(self, reader: EtcdClient) -> None:
        """As the leader, end the lease of every host whose liveness key has not been
        rewritten for longer than the TTL its agent registered with. Its agent has
        self-fenced by then, or is gone: etcd holds the lease only because a new etcd
        leader renewed it. The watch then sees the key go, as for any expiry. A read
        first confirms that the key is still the one seen: a watch that lags says
        nothing about the agent."""
        while True:
            await asyncio.sleep(STALE_CHECK)
            if not self.leader:
                continue
            for host, kv, age in self.states.stale(self.loop.time(), self.alarm_seen):
                try:
                    current = await asyncio.to_thread(reader.get, kv.key)
                    if current is None or current.mod_revision != kv.mod_revision:
                        continue
                    if await asyncio.to_thread(reader.alarms):
                        # A full etcd refuses the rewrite, not the keepalive.
                        self.alarm_seen = self.loop.time()
                        continue
                    LOG.warning("%s: liveness key not rewritten for %.1f s (ttl %s): ending "
                                "lease %x, which etcd renewed on a leader election",
                                host, age, agent_ttl(kv), kv.lease)
                    await asyncio.to_thread(reader.revoke_lease, kv.lease)
                    self.states.seen[kv.key] = self.loop.time()  # once; the watch brings the rest
                except EtcdError as err:
                    LOG.warning("ending the stale lease of %s: %s; retrying", host, err)

    async def _copy_agent_events(self, reader: EtcdClient) -> None:
        """As the leader, copy each event an agent wrote under its host into the
        history, checked, then delete it there (cluster_events.copy_from_agent): an
        agent may not write the history itself. Each copy is made once, by whichever
        watcher and however often it is tried, so a leader that dies halfway leaves
        the next to finish it. An event dated ahead of this clock waits for its time."""
        told: set[str] = set()  # the events said to wait, said once
        while True:
            try:
                await asyncio.wait_for(self.events_due.wait(), EVENTS_CHECK)
            except asyncio.TimeoutError:
                pass
            self.events_due.clear()
            if not self.leader:
                continue
            for kv in list(self.states.events.values()):
                try:
                    copy = await asyncio.to_thread(cluster_events.copy_from_agent, reader,
                                                   kv, cluster=self.cluster)
                except EtcdError as err:
                    LOG.warning("copying %s into the history: %s; retrying", kv.key, err)
                    break
                if copy.done == "waiting":
                    if kv.key not in told:
                        told.add(kv.key)
                        LOG.info("%s is dated ahead of this clock: copied into the "
                                 "history when its time comes", kv.key)
                    continue
                told.discard(kv.key)
                if copy.done == "dropped":
                    LOG.warning("%s: dropped, not copied into the history: %s", kv.key,
                                copy.why)
                elif copy.done == "copied":
                    LOG.info("%s copied into the history as %s", kv.key, copy.key)
                if copy.done != "changed":  # changed: the watch brings it as it is now
                    self.states.event_copied(kv)

    async def _follow_disarm(self, queue, reader: EtcdClient) -> None:
        """Read the cluster's disarm flag every DISARM_CHECK seconds. While it is set,
        no host_down is emitted (nor host_stable: nothing moves by itself), and the
        log says so at every failure; once it is lifted, a resync reports every host
        down while etcd records VMs on it."""
        key = etcd_keys.disarmed_key(cluster=self.cluster)
        while True:
            try:
                found = await asyncio.to_thread(reader.get, key)
            except EtcdError as err:
                LOG.warning("reading %s: %s; retrying", key, err)
                await asyncio.sleep(RETRY)
                continue
            record = None if found is None else json_or_none(found.value)
            flag = None if found is None else (
                record if isinstance(record, dict) else {"reason": found.value})
            if flag is not None and self.disarmed is None:
                LOG.warning("HA DISARMED (%s): no automatic evacuation until %s is deleted "
                            "(playbooks/disarm.yml -e yasco_ha_disarmed=false)",
                            disarm_text(flag), key)
            elif flag is None and self.disarmed is not None:
                LOG.warning("HA re-armed: resyncing")
                self.disarmed = None
                await self._resync(queue, reader)
            self.disarmed = flag
            await asyncio.sleep(DISARM_CHECK)

    async def _follow_alarms(self, queue, reader: EtcdClient) -> None:
        """Read etcd's alarms every ALARM_CHECK seconds; report each change as an
        `etcd_alarm` event. While NOSPACE stands, etcd refuses every write: agents
        keep their leases (a keepalive is no write) but cannot rewrite their keys, and
        no VM can be started or moved. Every SPACE_CHECK seconds it also reads the
        members' database sizes (`_check_space`)."""
        space_checked, fences_reported = float("-inf"), self.loop.time()
        while True:
            if self.space_warning and self.loop.time() >= space_checked + SPACE_CHECK:
                space_checked = self.loop.time()
                await self._check_space(queue)
            if self.fence_check_every and \
                    self.loop.time() >= fences_reported + self.fence_check_every:
                fences_reported = self.loop.time()
                await self._report_fences(queue, reader)
            try:
                alarms = await asyncio.to_thread(reader.alarms)
            except EtcdError as err:
                LOG.warning("reading etcd's alarms: %s; retrying", err)
                await asyncio.sleep(RETRY)
                continue
            if alarms:
                self.alarm_seen = self.loop.time()
            if alarms != self.alarms:
                if alarms:
                    LOG.critical("etcd ALARM %s: etcd refuses writes, so nothing can be "
                                 "evacuated or moved; %s", alarm_text(alarms),
                                 NO_SPACE_ADVICE if any(a["alarm"] == "NOSPACE" for a in alarms)
                                 else "replace the corrupt member (etcd's recovery guide)")
                else:
                    LOG.warning("etcd's alarms are cleared: writes are accepted again")
                self.alarms = alarms
                await self._emit(queue, "etcd_alarm", [], always=True,
                                 details={"alarms": alarms, "raised": bool(alarms)})
            await asyncio.sleep(ALARM_CHECK)

    async def _check_space(self, queue) -> None:
        """Emit `etcd_space` when the members whose database is at or over
        `space_warning` percent of the quota change: at the quota etcd raises NOSPACE
        and refuses every write."""
        sizes = self.view.sizes = await asyncio.to_thread(self._member_sizes)
        over = members_over(sizes, self.space_warning)
        if over == self.space_over:
            return
        if over:
            LOG.critical("etcd NEARLY FULL: %s at %s %% or more of the %d-byte quota; at "
                         "the quota etcd refuses every write; compact and defragment "
                         "now: playbooks/etcd_maintenance.yml (docs/production.md, etcd "
                         "housekeeping)", ", ".join(over), f"{self.space_warning:g}",
                         self.quota_bytes)
        else:
            LOG.warning("etcd's members are below %s %% of their quota again",
                        f"{self.space_warning:g}")
        self.space_over = over
        await self._emit(queue, "etcd_space", [], always=True,
                         details={"members": sizes, "over": over, "raised": bool(over),
                                  "quota_bytes": self.quota_bytes})

    async def _report_fences(self, queue, reader: EtcdClient) -> None:
        """Emit `fences_standing` for the hosts whose storage fence etcd records:
        the rulebook checks that Ceph still blocklists them (playbooks/fence_check.yml)."""
        prefix = etcd_keys.fences_prefix(cluster=self.cluster)
        try:
            records = await asyncio.to_thread(reader.get_prefix, prefix)
        except EtcdError as err:
            LOG.warning("reading the fences: %s; again in %.0f s", err, self.fence_check_every)
            return
        hosts = sorted(kv.key[len(prefix):] for kv in records)
        if hosts:
            await self._emit(queue, "fences_standing", hosts)

    def _member_sizes(self) -> list[dict[str, Any]]:
        """Each member's database size, as its own status says; a member that does
        not answer is left out (it holds no quota it could exceed unseen for long:
        its alarm, once raised, is the cluster's)."""
        sizes = []
        for endpoint in self.endpoints:
            if endpoint not in self.members:
                self.members[endpoint] = client({**self.args, "endpoints": [endpoint]}, 1.0)
            try:
                status = self.members[endpoint].status()
            except EtcdError as err:
                LOG.info("reading the size of %s: %s", endpoint, err)
                continue
            sizes.append(member_size(endpoint, status, self.quota_bytes))
        return sizes
