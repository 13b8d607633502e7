# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host agent's domains (docs/agent.md): the publisher thread keeps
hosts/<host>/domains/ equal to what libvirt runs, woken by libvirt's domain events and
every `reconcile` seconds, and writes the guests' crashes (a kernel panic, an expired
guest watchdog) for the history (under its host, where the HA watcher takes them); the
restarter thread restarts in place an HA VM whose domain stopped for a failure, when
its record and requested state say it must run here (agent_restart.py).

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import EtcdError
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json
from ansible_collections.yasco.cluster.plugins.module_utils.agent import (
    agent_restart, storage_probe)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.storage_watch import StorageWatch
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

LOG = logging.getLogger("yasco-agent")

# libvirt's details of a VIR_DOMAIN_EVENT_CRASHED lifecycle event.
CRASH_DETAILS = {0: "the guest's kernel panicked (reported through pvpanic)",
                 1: "the guest's kernel panicked and loaded its crash kernel"}
# Guest crashes kept for the history while etcd is out of reach.
CRASHES_KEPT = 100
# And of a VIR_DOMAIN_EVENT_ID_WATCHDOG event: what QEMU did.
WATCHDOG_ACTIONS = {1: "the guest hung: its watchdog expired and it was paused",
                    2: "the guest hung: its watchdog expired and it was reset",
                    3: "the guest hung: its watchdog expired and it was powered off",
                    4: "the guest hung: its watchdog expired and it was shut down",
                    5: "the guest hung: its watchdog expired (debug only)",
                    6: "the guest hung: its watchdog expired and an NMI was injected"}
# How often the restarter forgets restarts older than restart_window, in seconds.
FORGET_EVERY = 5.0


class DomainWatch(StorageWatch):
    """The publisher and restarter threads, and libvirt's domain events for them."""

    def publisher(self) -> None:
        etcd, conn = self._client(), None
        published: dict[str, str] = {}
        lease = 0
        while not self.stopping.is_set():
            self.wake_publisher.wait(self.config.reconcile)
            self.wake_publisher.clear()
            with self.lock:
                current = self.lease
            if not current:
                continue
            try:
                if conn is None:
                    conn = self._watch_domains()
                active = conn.listAllDomains(lv.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
                running = {d.name(): lv.domain_state(d) for d in active}
                self.domains = {d.name(): (lv.domain_kind(d) or "unmanaged", running[d.name()])
                                for d in active}
                if current != lease:  # keys of an older lease: stale, or gone with it
                    published, lease = {}, current
                    for kv in etcd.get_prefix(self.keys["domains"]):
                        if kv.lease != lease:
                            etcd.delete(kv.key)
                for name, state in running.items():
                    if published.get(name) != state:
                        etcd.put(self.keys["domains"] + name, to_json({"state": state}),
                                 lease=lease)
                        published[name] = state
                for name in set(published) - set(running):
                    etcd.delete(self.keys["domains"] + name)
                    del published[name]
                self.record_crashes(etcd)
            except EtcdError as err:
                LOG.warning("publishing domains: %s", err)
                published, lease = {}, 0
            except (lv.LibvirtAdapterError, lv.libvirt.libvirtError) as err:
                LOG.warning("reading domains: %s", err)
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()
        etcd.close()

    def _watch_domains(self) -> WatchedConnection:
        """A libvirt connection whose domain events call back here."""
        watched = WatchedConnection(lv.connect(self.config.libvirt_uri))
        try:
            watched.register(lv.libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self.domain_event)
            watched.register(lv.libvirt.VIR_DOMAIN_EVENT_ID_WATCHDOG, self.watchdog_event)
        except lv.libvirt.libvirtError:
            watched.close()
            raise
        return watched

    def domain_event(self, dummy_conn, dom, event: int, detail: int, dummy_opaque) -> None:
        """libvirt's lifecycle callback: the publisher looks again at once, and a guest
        crash (a panic its kernel reported through the pvpanic device) is noted for
        the history. libvirt resets such a guest in place (on_crash restart) or powers
        it off (on_crash destroy): either way this is the one trace it leaves."""
        if event == lv.libvirt.VIR_DOMAIN_EVENT_CRASHED:
            self._note_crash(dom.name(), CRASH_DETAILS.get(
                detail, f"crashed (libvirt detail {detail})"))
        elif (event == agent_restart.VIR_DOMAIN_EVENT_STOPPED and self.in_place is not None
              and detail in agent_restart.STOP_REASONS):
            self.stopped.put((dom.name(), agent_restart.STOP_REASONS[detail]))
        self.wake_publisher.set()

    def watchdog_event(self, dummy_conn, dom, action: int, dummy_opaque) -> None:
        """libvirt's watchdog callback: the guest's watchdog device expired (a hung
        guest whose watchdog daemon stopped), and QEMU took its action (reset)."""
        self._note_crash(dom.name(), WATCHDOG_ACTIONS.get(
            action, f"the guest's watchdog expired (libvirt action {action})"))
        self.wake_publisher.set()

    def _note_crash(self, vm: str, reason: str) -> None:
        LOG.warning("%s: %s", vm, reason)
        with self.lock:
            # A guest that crashes at every boot, while etcd is out of reach, must not
            # fill the agent's memory: the newest are kept.
            self.crashes = [*self.crashes, {"vm": vm, "at": time.time(),
                                            "reason": reason}][-CRASHES_KEPT:]

    def record_crashes(self, etcd: EtcdClient) -> None:
        """Write the guest crashes noted since the last time for the history."""
        with self.lock:
            pending, self.crashes = self.crashes, []
        try:
            while pending:
                crash = pending[0]
                cluster_events.append_for_agent(etcd, cluster_events.event(
                    "crashed", host=self.config.host, vm=crash["vm"], by="agent",
                    details={"reason": crash["reason"]}, at=crash["at"]),
                    host=self.config.host, cluster=self.config.cluster)
                pending.pop(0)
        finally:
            with self.lock:
                self.crashes[:0] = pending  # kept for the next time etcd answers

    def restarter(self) -> None:
        """Restart in place the HA domains that stopped for a failure, while this host
        is fit to run them (agent_restart.py); forget restarts older than the window."""
        etcd = self._client()
        while not self.stopping.is_set():
            try:
                vm, why = self.stopped.get(timeout=FORGET_EVERY)
            except queue.Empty:
                self._forget_restarts(etcd)
                continue
            self.stopping.wait(agent_restart.SETTLE)
            unfit = self.unfit()
            if unfit:
                LOG.info("%s stopped (%s): not restarted here: %s", vm, why, unfit)
                continue
            with self.lock:
                lease = self.lease
            try:
                # A connection per restart: they are rare, and none outlives a failure.
                with contextlib.closing(lv.connect(self.config.libvirt_uri)) as conn:
                    restarted = self.in_place.restart(etcd, conn, vm, why, lease)
            except (EtcdError, lv.LibvirtAdapterError, lv.libvirt.libvirtError) as err:
                LOG.warning("%s stopped (%s): not restarted here: %s", vm, why, err)
                continue
            if restarted:
                with self.lock:
                    self.restarted += 1
                self.wake_publisher.set()
        etcd.close()

    def unfit(self) -> str | None:
        """Why this host may start no VM now (its lease, a self-fence, a stop, Ceph out
        of reach), or None. What etcd says (HA disarmed, the VM's record) is read at
        the restart itself (agent_restart.InPlace.check)."""
        with self.lock:
            if not self.lease or self.disconnected:
                return "no lease held (self-fenced, or not registered)"
            if self.clock() >= self.last_ok + self.config.ttl - self.config.margin:
                return "its lease is about to be given up"
            if self.storage_fence:
                return "cut off from Ceph"
        if self.leaving.is_set():
            return "the agent is stopping"
        if self.storage_state() == storage_probe.LOST:
            return "cut off from Ceph"
        return None

    def _forget_restarts(self, etcd: EtcdClient) -> None:
        for vm in self.in_place.budget.expired(self.clock()):
            try:
                etcd.delete(self.in_place.key(vm))
            except EtcdError as err:  # bound to the lease: gone with it at worst
                LOG.warning("%s: cannot forget its restarts: %s", vm, err)


class WatchedConnection:
    """A libvirt connection with domain event callbacks, which `close` deregisters
    first: libvirt-python's callback data holds the connection, which would otherwise
    live on, unseen, and call back for every event after."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.callbacks: list[int] = []

    def __getattr__(self, name: str):
        return getattr(self.conn, name)

    def register(self, event_id: int, callback) -> None:
        self.callbacks.append(self.conn.domainEventRegisterAny(None, event_id, callback, None))

    def close(self) -> None:
        for callback in self.callbacks:
            try:
                self.conn.domainEventDeregisterAny(callback)
            except lv.libvirt.libvirtError:
                pass  # a broken connection: closing it ends its callbacks too
        self.callbacks = []
        try:
            self.conn.close()
        except lv.libvirt.libvirtError:
            pass


@functools.cache
def start_libvirt_event_loop() -> None:
    """libvirt's default event loop, which the publisher's domain events need; once
    per process."""
    lv.libvirt.virEventRegisterDefaultImpl()

    def loop() -> None:
        while True:
            lv.libvirt.virEventRunDefaultImpl()

    threading.Thread(target=loop, name="libvirt-events", daemon=True).start()
