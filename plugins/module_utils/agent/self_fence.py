# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host agent's self-fence (docs/agent.md): the fencer thread watches the
deadline on the monotonic clock, talks to libvirt only, and once no keepalive has
succeeded for ttl - margin destroys every HA domain here, before the lease can have
expired anywhere.

Why the self-fence is safe: let t be the time a keepalive that then succeeded was
sent. etcd's leader received it at or after t, so the lease cannot expire before
t + TTL (a new leader only ever extends leases). The fencer destroys every HA domain
at t + TTL - margin unless a later keepalive succeeded, so once the HA watcher can
see the lease gone, the HA domains here are already dead: no VM runs twice.
An agent that starts (or restarts) counts from its start until it registers: its
earlier run's lease, renewed at the latest just before, may still stand, with HA
domains running under it.
A keepalive counts only once its rewrite of the liveness key succeeded too, or etcd
is full (liveness.py says why).
Under the self-fence, an optional hardware watchdog (hw_watchdog) resets the host when
the agent itself hangs: the fencer pets it only while a reset would still come before
the lease's earliest expiry (`watchdog_may_pet`), and again once nothing here can be
started elsewhere under a lease it holds (self-fenced, frozen, stopping).
The fencer also pets systemd's watchdog (WatchdogSec=): an agent whose fencer hangs,
in a libvirt call say, is restarted.

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_state import AgentState

LOG = logging.getLogger("yasco-agent")

# How often the fencer pets systemd's watchdog, in seconds: well within the unit's
# WatchdogSec (agent_watchdog_sec, 10 s by default).
WATCHDOG_EVERY = 1.0


def watchdog_may_pet(now: float, last_ok: float, ttl: float, margin: float, timeout: float,
                     holding: bool) -> bool:
    """Whether the agent may pet the watchdog at `now`: always when it holds no lease
    its HA VMs could be started elsewhere on (self-fenced, frozen, stopping); otherwise
    only if a reset `timeout` from now still comes `margin / 2` before the lease's
    earliest expiry, `last_ok + ttl`. The self-fence, at `ttl - margin`, comes first
    and then lets petting resume: the watchdog resets the host only when the agent
    hangs."""
    return not holding or now + timeout <= last_ok + ttl - margin / 2


class SelfFence(AgentState):
    """The fencer thread and what it destroys."""

    def fencer(self) -> None:
        conn = None
        petted = float("-inf")
        while not self.stopping.is_set():
            # systemd's watchdog (WatchdogSec=) restarts an agent whose fencer is stuck,
            # in a libvirt call say: the fencer is the thread that must never hang.
            if self.clock() >= petted + WATCHDOG_EVERY:
                notify_systemd("WATCHDOG=1")
                petted = self.clock()
            with self.lock:
                due = (self.lease or self.unregistered) and self.clock() >= \
                    self.last_ok + self.config.ttl - self.config.margin
                enforce = self.disconnected
                if self.storage_fence and self.frozen:
                    self.storage_fence = False  # frozen since: nothing starts them elsewhere
                storage = bool(self.lease) and self.storage_fence and not due
                if due and self.frozen and not enforce:
                    # Frozen: nothing starts these VMs elsewhere, so they keep running;
                    # the lease is given up, and the host registers anew once etcd
                    # answers.
                    LOG.critical("HA FROZEN: no etcd keepalive succeeded for %.1f s; NOT "
                                 "self-fencing (the cluster is disarmed in freeze mode); "
                                 "registering again once etcd answers",
                                 self.config.ttl - self.config.margin)
                    self.lease, due = 0, False
                due = due or storage
            fenced = True
            if due or enforce:
                try:
                    conn = conn or lv.connect(self.config.libvirt_uri)
                    self.self_fence(conn, first=bool(due), storage=storage)
                except (lv.LibvirtAdapterError, lv.libvirt.libvirtError) as err:
                    LOG.critical("SELF-FENCE FAILED, retrying: %s", err)
                    conn, fenced = None, False
            if fenced:
                self.pet_watchdog()
            self.stopping.wait(0.05)

    def pet_watchdog(self) -> None:
        if self.watchdog is None:
            return
        with self.lock:
            may = watchdog_may_pet(self.clock(), self.last_ok, self.config.ttl,
                                   self.config.margin, self.watchdog.timeout,
                                   bool(self.lease or self.unregistered))
        if may:
            try:
                self.watchdog.pet()
            except OSError as err:
                LOG.critical("cannot pet the watchdog %s: %s", self.watchdog.path, err)

    def self_fence(self, conn, first: bool, storage: bool = False) -> None:
        """Destroy every running HA domain; `first` when the deadline just passed, or
        `storage` when this host alone is cut off from Ceph (later calls catch HA
        domains started while still cut off)."""
        destroyed = []
        for dom in conn.listAllDomains(lv.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            if lv.domain_kind(dom) == "ha":
                lv.kill_now(dom)
                destroyed.append(dom.name())
        done = time.time()
        if storage:
            LOG.critical("SELF-FENCE: Ceph out of reach here for %.0f s or more while other "
                         "hosts reach it; destroyed HA domains: %s; at %.3f; registering "
                         "again once Ceph answers", self.config.storage_grace,
                         ", ".join(destroyed) or "none", done)
        elif first or destroyed:
            LOG.critical("SELF-FENCE: no etcd keepalive succeeded for %.1f s (ttl %s - "
                         "margin %s); destroyed HA domains: %s; at %.3f",
                         self.config.ttl - self.config.margin, self.config.ttl,
                         self.config.margin, ", ".join(destroyed) or "none", done)
        with self.lock:
            if storage:
                self.storage_fence, self.storage_fenced_at = False, self.clock()
            if first or destroyed:
                self.fences.append({"at": done, "destroyed": destroyed,
                                    "reason": "storage" if storage else "etcd"})
                self.fence_count += int(first)
                self.fenced_domains += len(destroyed)
                self.domains = {n: d for n, d in self.domains.items() if n not in destroyed}
            if first:
                self.given_up, self.lease, self.disconnected = self.lease, 0, True
                self.unregistered = False


def notify_systemd(state: str) -> bool:
    """Tell systemd `state` (READY=1, WATCHDOG=1) on the socket it gave the service
    (Type=notify); False when it gave none, as outside systemd. Never raises: the
    fencer calls it."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(state.encode(), address)
    except OSError as err:
        LOG.warning("telling systemd %s: %s", state, err)
        return False
    return True
