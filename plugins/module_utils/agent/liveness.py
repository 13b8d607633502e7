# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host agent's liveness (docs/agent.md): the heartbeat thread grants a lease,
registers the liveness key under it, renews it every `keepalive` seconds, and
registers again (a new lease) once etcd answers after a loss; it never starts VMs.
With each keepalive it reads the cluster's disarm flag (HA frozen in freeze mode:
losing etcd then destroys no HA VM here) and acts on the storage probe's findings
(storage_watch.py); after a self-fence, it waits for the evacuation's fence before
registering again.

Each keepalive, sent at t, also rewrites the liveness key, and counts only once that
succeeded too: the watcher, which sees each rewrite at or after t, may then end a
lease whose key is older than TTL (a new etcd leader renews every lease on election,
which would hide a dead host for seconds), the HA domains here being dead by then too
(self_fence.py says why).
The one exception is a full etcd (alarm NOSPACE), which refuses the rewrite but
renews leases: the keepalive counts alone, and the watcher ends no lease while the
alarm stands, so a full database stops changes but destroys no VM.

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import EtcdError, NoSpace
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none, to_json)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_state import VERSION
from ansible_collections.yasco.cluster.plugins.module_utils.agent.planned_stop import by_agent
from ansible_collections.yasco.cluster.plugins.module_utils.agent.storage_probe import PROBE_EVERY
from ansible_collections.yasco.cluster.plugins.module_utils.agent.storage_watch import StorageWatch
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

LOG = logging.getLogger("yasco-agent")

# How often the agent reads the cluster's disarm flag, in seconds.
FLAG_EVERY = 1.0


class Liveness(StorageWatch):
    """The heartbeat thread: the lease, the liveness key, the disarm flag."""

    def _alive_value(self) -> dict[str, Any]:
        c = self.config
        return {"address": c.address, "boot_id": _boot_id(), "agent_version": VERSION,
                "started": cluster_events.timestamp(self.started), "pid": os.getpid(),
                "ceph_addrs": c.ceph_addrs or ([c.address] if c.address else []),
                "ttl": c.ttl, "watchdog": self.watchdog.timeout if self.watchdog else None,
                "storage": self.storage_state()}

    def register(self, etcd: EtcdClient) -> None:
        """A new lease and the liveness key under it."""
        sent = self.clock()
        # etcd's TTLs are whole seconds. Rounded, a ttl of 4.4 (or 2.5: round half to
        # even) would be granted 4 (2): the lease could expire before the self-fence
        # deadline, which counts from `ttl`. Rounded up, it never can; etcd only ever
        # raises a TTL (to its minimum), which is just as safe.
        lease = etcd.grant_lease(lease_seconds(self.config.ttl))
        # What fencing needs once the liveness key is gone: kept, not lease-bound.
        # Written first, without the last clean stop's `stopped`: a registration that
        # fails here is tried again, and a host alive never keeps that word.
        facts = {k: v for k, v in self._alive_value().items()
                 if k in ("address", "ceph_addrs", "boot_id", "agent_version")}
        known = etcd.get(self.keys["registered"])
        if known is None or json_or_none(known.value) != facts:
            etcd.put(self.keys["registered"], to_json(facts))
        etcd.put(self.keys["alive"], to_json(self._alive_value()), lease=lease.id)
        with self.lock:
            self.lease, self.last_ok, self.disconnected = lease.id, sent, False
            self.unregistered, self.storage_fenced_at = False, 0.0
            self.registered_at = self.clock()
        LOG.info("registered %s under lease %x", self.keys["alive"], lease.id)
        marker = etcd.get(self.keys["maintenance"])
        if marker is not None and by_agent(marker.value):
            # Written by this agent's own graceful stop; an operator's marker stays.
            etcd.delete_if(self.keys["maintenance"], mod_revision=marker.mod_revision)
            LOG.info("cleared the maintenance marker of the last graceful stop")
        with self.lock:
            pending, self.fences = self.fences, []
        for fence in pending:
            cluster_events.append_for_agent(etcd, cluster_events.event(
                "self-fenced", host=self.config.host, by="agent", details=fence,
                at=fence["at"]), host=self.config.host, cluster=self.config.cluster)
        self.wake_publisher.set()

    def heartbeat(self) -> None:
        interval = self.config.keepalive
        backoff = self.config.ttl / 3
        etcd = self._client()
        while not self.leaving.is_set():
            with self.lock:
                lease = self.lease
            sent = self.clock()
            try:
                if not lease and self.given_up:
                    self.after_self_fence(etcd)
                if not lease and self.storage_awaited():
                    self.stopping.wait(PROBE_EVERY)
                    continue
                if not lease:
                    self.register(etcd)
                    backoff = self.config.ttl / 3
                elif etcd.keepalive_once(lease) is None:
                    LOG.error("lease %x is gone from etcd: self-fencing now", lease)
                    with self.lock:
                        if self.lease == lease:
                            self.last_ok = self.clock() - self.config.ttl
                    self.stopping.wait(0.1)
                    continue
                else:
                    # The rewrite the watcher times (see the module's docstring): the
                    # deadline moves only once it has succeeded, or etcd is full.
                    self._rewrite_alive(etcd, lease)
                    with self.lock:
                        if self.lease == lease:
                            self.last_ok = max(self.last_ok, sent)
                    if self.clock() >= self.flag_read + FLAG_EVERY:
                        self.read_disarm_flag(etcd, lease)
                    self.check_storage(etcd)
            except EtcdError as err:
                if lease:
                    # Try again soon: the fencer's deadline is ttl - margin away from
                    # the last success, and an election takes about a second.
                    LOG.warning("keepalive failed: %s", err)
                    self.stopping.wait(0.1)
                else:
                    LOG.warning("cannot register (again in %.0f s): %s", backoff, err)
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                continue
            self.stopping.wait(max(0.0, sent + interval - self.clock()))
        etcd.close()

    def _rewrite_alive(self, etcd: EtcdClient, lease: int) -> None:
        """Rewrite the liveness key after a keepalive that succeeded. A database at its
        quota (NOSPACE) refuses the write but renewed the lease all the same, which is
        what the self-fence's safety rests on; the watcher ends no lease for a key it
        sees unwritten while the alarm stands. A full etcd then leaves every VM
        running, instead of every agent destroying its HA VMs at once."""
        try:
            etcd.put(self.keys["alive"], to_json(self._alive_value()), lease=lease)
        except NoSpace as err:
            if not self.no_space:
                LOG.critical("etcd is FULL: %s; the lease is still renewed, so this host's "
                             "HA VMs keep running, but no VM can be started or moved "
                             "until it is fixed", err)
            self.no_space = True
            return
        if self.no_space:
            LOG.warning("etcd accepts writes again: liveness key rewritten")
        self.no_space = False

    def read_disarm_flag(self, etcd: EtcdClient, lease: int) -> None:
        """Whether HA is disarmed in freeze mode, as etcd says now; said back under
        `lease` (hosts/<host>/frozen), for disarm.yml to wait for: until the agent has
        read the flag, losing etcd still self-fences here."""
        found = etcd.get(self.keys["disarmed"])
        flag = json_or_none(found.value) if found is not None else None
        frozen = isinstance(flag, dict) and flag.get("mode") == "freeze"
        if frozen != self.frozen:
            LOG.warning("HA %s: %s", "FROZEN" if frozen else "no longer frozen",
                        "losing etcd destroys no HA VM here" if frozen
                        else "the self-fence is armed again")
        with self.lock:
            self.frozen, self.flag_read = frozen, self.clock()
        if frozen and self.said_frozen != lease:
            etcd.put(self.keys["frozen"], to_json({"since": cluster_events.timestamp()}),
                     lease=lease)
            self.said_frozen = lease
        elif not frozen and self.said_frozen:
            etcd.delete(self.keys["frozen"])
            self.said_frozen = 0

    def after_self_fence(self, etcd: EtcdClient) -> None:
        """Look failed until the orchestrator has dealt with the HA VMs this host
        destroyed: end the lease given up (if etcd still holds it, the self-fence was
        a false alarm, but the VMs are down all the same), so that the watcher sees
        the host go and evacuates it; register again once the evacuation has fenced
        the host, or after `fence_wait`. With nothing destroyed there is nothing to
        evacuate: it registers again at once."""
        with self.lock:
            destroyed = any(fence["destroyed"] for fence in self.fences)
        if not destroyed:
            self.given_up = 0
            return
        if etcd.revoke_lease(self.given_up):
            LOG.warning("revoked lease %x, which outlived the self-fence, so that the HA "
                        "watcher evacuates this host's HA VMs", self.given_up)
        fence = etcd_keys.fence_key(self.config.host, cluster=self.config.cluster)
        deadline = self.clock() + self.config.fence_wait
        LOG.warning("waiting up to %.0f s for the evacuation to fence this host before "
                    "registering again", self.config.fence_wait)
        while not _fence_stands(etcd.get(fence)) and self.clock() < deadline:
            if self.leaving.wait(1.0):
                return
        self.given_up = 0


def lease_seconds(ttl: float) -> int:
    """The whole seconds of the lease to grant for `ttl`: never fewer than `ttl`, which
    the self-fence deadline (`ttl - margin` after a keepalive) and the watchdog assume
    the lease lasts at least."""
    return math.ceil(ttl)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _fence_stands(found) -> bool:
    """Whether a fence record `found` says the host is fenced: one being lifted (a
    return home of an earlier failure under way) is not this failure's fence."""
    return found is not None and etcd_keys.fence_stands(json_or_none(found.value))
