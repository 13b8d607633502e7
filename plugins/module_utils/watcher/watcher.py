# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HA watcher: what the yasco.cluster.etcd_hosts event source runs.

Threads talk to etcd, each on its own client: one per endpoint watches the cluster's
hosts/ prefix through that endpoint and hands every change to the event loop; one
holds (or waits for) the watchers' leader lease. The event loop keeps the hosts'
records current (cluster/host_states.py decides what they mean) and turns changes
into events, and only the leader (cluster/leadership.py says when it leads) emits
them, so several watchers can run for redundancy and a host's failure is evacuated
once. A new leader first resyncs: every hypervisor that is down while etcd still
records VMs running on it is reported, so a failure seen by no leader (the old one
died with it) is not lost. The leader also copies the agents' events from under
their hosts into the history. Its other looks at etcd are in leader_looks.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import (
    etcd_keys, metrics)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import (
    WatchEvent)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    Compacted, EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none, to_json)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_events import (
    timestamp)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.host_states import (
    HostStates)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.leadership import (
    Leadership)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_pacing import (
    Memory, Policy)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.untrusted import inert
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.watcher_view import (
    WatcherView, disarm_text)
from ansible_collections.yasco.cluster.plugins.module_utils.watcher.leader_looks import (
    LeaderLooks)
from ansible_collections.yasco.cluster.plugins.module_utils.watcher.watcher_io import (
    RETRY, client, until_answered)

LOG = logging.getLogger("yasco.cluster.etcd_hosts")


class Watcher(LeaderLooks):
    """One watcher; `run(queue)` forever.

    It keeps the hosts/ records (liveness, registration, maintenance) in memory: read
    once, then kept current by the watch, so that nothing on the way from a lease's
    expiry to the event waits on etcd. Every endpoint is watched at once, each by a
    thread of its own, and a change counts when its revision first arrives: a member
    that dies with a hypervisor (etcd often runs on them) delays nothing.
    """

    def __init__(self, args: dict[str, Any]) -> None:
        if not args.get("endpoints"):
            raise ValueError("yasco.cluster.etcd_hosts: endpoints is required")
        self.args = args
        self.endpoints = (args["endpoints"].split(",") if isinstance(args["endpoints"], str)
                          else list(args["endpoints"]))
        self.cluster = args.get("cluster") or etcd_keys.DEFAULT_CLUSTER
        # The hosts' records and what is owed to them (module_utils/cluster/host_states.py).
        self.states = HostStates(self.cluster, args.get("hosts") or (),
                                 settle=float(args.get("settle", 1.0)),
                                 hold_down=float(args.get("hold_down", 60)))
        self.ttl = int(args.get("leader_ttl", 5))
        self.leadership = Leadership(self.ttl)
        self.name = args.get("name") or f"{socket.gethostname()}-{os.getpid()}"
        self.prefix = etcd_keys.hosts_prefix(cluster=self.cluster)
        self.leader_key = etcd_keys.watchers_leader_key(cluster=self.cluster)
        self.stop = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.inbox: asyncio.Queue | None = None
        # The cluster's disarm flag while it is set (playbooks/disarm.yml), else None.
        self.disarmed: dict[str, Any] | None = None
        # etcd's alarms as last read, and when (event loop time) one was last seen:
        # no key counts as stale for what it missed until then.
        self.alarms: list[dict[str, str]] = []
        self.alarm_seen = float("-inf")
        # The members' databases against their quota: the endpoints over the warning,
        # as last reported, and a client per endpoint to read each member's size.
        self.quota_bytes = int(args.get("etcd_quota_bytes") or 2147483648)
        self.space_warning = float(args.get("etcd_space_warning", 80) or 0)
        self.space_over: list[str] = []
        self.members: dict[str, EtcdClient] = {}
        # How often the fences etcd records are reported, to be checked, in seconds.
        self.fence_check_every = float(args.get("fence_check_interval", 86400) or 0)
        self.ready = threading.Event()
        # The HA reconciler: how hard it tries, and what it remembers while leading.
        self.reconcile_every = float(args.get("reconcile_interval", 2.0))
        self.policy = Policy.from_mapping(args.get("recovery") or {},
                                          "yasco.cluster.etcd_hosts: recovery")
        self.memory = Memory()
        self.nudge: asyncio.Event | None = None
        # Set when an agent writes an event, for the leader to copy it into the history.
        self.events_due: asyncio.Event | None = None
        # What the metrics show beyond the state above: events and steps counted,
        # evacuations and migrations timed, the reconciler's last look, the members'
        # sizes (module_utils/cluster/watcher_view.py).
        self.view = WatcherView(self.name)
        self.metrics_listen = args.get("metrics_listen") or ""

    def _post(self, item: tuple) -> None:
        self.loop.call_soon_threadsafe(self.inbox.put_nowait, item)

    # -- threads --------------------------------------------------------------------

    def stream_thread(self, endpoint: str) -> None:
        """Hand every change under hosts/ seen through `endpoint` to the event loop,
        resuming after breaks from what the loop has applied."""
        etcd = client({**self.args, "endpoints": [endpoint]}, timeout=max(1.0, self.ttl / 4))
        failing = False
        self.ready.wait()
        while not self.stop.is_set():
            try:
                for dummy, events in etcd.watch_prefix(self.prefix, self.states.applied + 1,
                                                       idle=self.ttl):
                    if events:
                        self._post(("changes", events))
                etcd.revision()  # quiet for a while: make sure this member still leads
                if failing:
                    LOG.info("watching through %s again", endpoint)
                    failing = False
            except Compacted as err:
                LOG.warning("%s; reading the hosts again", err)
                self._post(("compacted",))
                self.stop.wait(RETRY)
            except EtcdError as err:
                # Another member's stream carries on: say it once, then retry quietly.
                (LOG.debug if failing else LOG.warning)("watching through %s: %s", endpoint,
                                                        err)
                failing = True
                self.stop.wait(RETRY)
            except Exception:  # pylint: disable=broad-except  # a watcher must not stop
                LOG.exception("watching through %s failed unexpectedly", endpoint)
                self.stop.wait(RETRY)

    @property
    def leader(self) -> bool:
        """Whether this watcher leads now (cluster/leadership.py): asked of the clock,
        so a leader thread stuck in a request does not keep it leading."""
        return self.leadership.leads(time.monotonic())

    def leader_thread(self) -> None:
        """Hold the watchers' leader lease, or wait for it to be free."""
        leadership = self.leadership
        etcd = client(self.args, timeout=leadership.request_timeout)
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                if not leadership.holding:
                    granted = etcd.grant_lease(self.ttl)
                    swap = etcd.put_if(self.leader_key, to_json(
                        {"watcher": self.name, "since": timestamp()}),
                        mod_revision=0, lease=granted.id)
                    if swap.succeeded:
                        leadership.won(granted.id, sent)
                        LOG.info("%s leads the watchers", self.name)
                        self._post(("leader",))
                    else:
                        etcd.revoke_lease(granted.id)
                elif etcd.keepalive_once(leadership.lease) is not None:
                    if leadership.renewed(sent, time.monotonic()):
                        LOG.info("%s leads the watchers again", self.name)
                        self._post(("leader",))
                else:
                    LOG.warning("%s steps down: the leader lease expired", self.name)
                    leadership.expired()
            except EtcdError as err:
                LOG.warning("leader lease: %s", err)
            except Exception:  # pylint: disable=broad-except  # a watcher must not stop
                LOG.exception("leader lease: unexpected failure")
            if leadership.due_to_step_down(time.monotonic()):
                LOG.warning("%s steps down: no keepalive answered for %.1f s", self.name,
                            leadership.silent_for(time.monotonic()))
                leadership.step_down()
            self.stop.wait(leadership.every)

    # -- the event loop ---------------------------------------------------------------

    async def run(self, queue: asyncio.Queue) -> None:
        self.loop, self.inbox = asyncio.get_running_loop(), asyncio.Queue()
        reader = client(self.args, timeout=max(1.0, self.ttl / 4))
        threads = [threading.Thread(target=self.stream_thread, args=(endpoint,),
                                    name=f"etcd-watch-{index}", daemon=True)
                   for index, endpoint in enumerate(self.endpoints)]
        threads.append(threading.Thread(target=self.leader_thread, name="etcd-leader",
                                        daemon=True))
        for thread in threads:
            thread.start()
        states = self.states
        stale = armed = alarmed = reconciling = copying = server = None
        self.nudge, self.events_due = asyncio.Event(), asyncio.Event()
        try:
            server = self._serve_metrics()
            await self._read_hosts(queue, reader)
            stale = asyncio.create_task(self._end_stale_leases(reader))
            armed = asyncio.create_task(self._follow_disarm(queue, reader))
            alarmed = asyncio.create_task(self._follow_alarms(queue, reader))
            copying = asyncio.create_task(self._copy_agent_events(reader))
            if self.reconcile_every > 0:
                reconciling = asyncio.create_task(self._reconcile(queue, reader))
            while True:
                # Counted from the first failure: the agents' rewrites keep changes
                # coming, and must not put the report off.
                if states.pending and self.disarmed is not None:
                    LOG.warning("HA DISARMED (%s): not reporting host_down for %s; re-arming "
                                "reports it", disarm_text(self.disarmed),
                                ", ".join(states.drop_pending()))
                await self._report(queue, [states.failures(self.loop.time())])
                for host in states.stable(self.loop.time(), armed=self.disarmed is None):
                    await self._emit(queue, "host_stable", [host])
                deadline = states.deadline()
                try:
                    item = await asyncio.wait_for(
                        self.inbox.get(),
                        None if deadline is None else max(0.0, deadline - self.loop.time()))
                except asyncio.TimeoutError:
                    continue
                if item[0] == "leader":
                    self.memory = Memory()  # what an earlier leadership saw may be stale
                    self.alarms = []  # a standing alarm is reported again, by the leader
                    self.space_over = []  # and a database nearly full
                    self.events_due.set()  # the agents' events left by the last leader
                    await self._resync(queue, reader)
                elif item[0] == "compacted":
                    await self._read_hosts(queue, reader)
                else:
                    # Each stream delivers its member's changes in order; another stream
                    # may have delivered them already. A revision's changes come whole.
                    fresh = states.fresh(item[1])
                    if any(self._domain_change(e) for e in fresh):
                        self.nudge.set()  # a domain came or went: the reconciler looks
                    if any(states.agent_event(e.kv.key) and e.kind != "DELETE"
                           for e in fresh):
                        self.events_due.set()  # an agent wrote an event: copy it
                    await self._report(queue, states.apply(item[1], self.loop.time()))
        finally:
            tasks = [task for task in (stale, armed, alarmed, reconciling, copying)
                     if task is not None]
            for task in tasks:
                task.cancel()
            # Let them end before the loop does (a wait_for takes two turns to cancel).
            await asyncio.gather(*tasks, return_exceptions=True)
            self.stop.set()
            self.ready.set()
            reader.close()
            for member in self.members.values():
                member.close()
            self.members.clear()
            if server is not None:
                server.shutdown()
                server.server_close()

    def _domain_change(self, event: WatchEvent) -> bool:
        parsed = etcd_keys.parse_key(event.kv.key, cluster=self.cluster)
        return parsed is not None and parsed.kind == "domain"

    async def _read_hosts(self, queue, reader: EtcdClient) -> None:
        """Read every hosts/ record (again), until etcd answers; then resync."""
        revision, kvs = await until_answered(f"reading {self.prefix}", reader.read_prefix,
                                             self.prefix)
        if not self.states.load(kvs, revision, self.loop.time()):
            return  # a lagging member answered; the watch is ahead of it
        self.ready.set()
        await self._resync(queue, reader)

    async def _report(self, queue, reports) -> None:
        """Emit what the hosts' states say is due (None: nothing)."""
        for report in reports:
            if report is not None:
                await self._emit(queue, report.kind, report.hosts, details=report.details)

    async def _resync(self, queue, reader: EtcdClient) -> None:
        """As the leader, report every hypervisor down while etcd records VMs on it,
        and count the hold-down of every host up while its fence is recorded."""
        if not self.leader or not self.ready.is_set() or self.disarmed is not None:
            return
        vms, fences = etcd_keys.vms_prefix(cluster=self.cluster), etcd_keys.fences_prefix(
            cluster=self.cluster)
        read = await until_answered("resync", reader.get_prefixes, [vms, fences])
        down = self.states.resync([kv.key.rsplit("/", 1)[-1] for kv in read[fences]],
                                  [json_or_none(kv.value) for kv in read[vms]],
                                  self.loop.time())
        await self._emit(queue, "host_down", down, resync=True)

    async def _emit(self, queue, kind: str, hosts: list[str], resync: bool = False,
                    details: dict[str, Any] | None = None, always: bool = False) -> None:
        if not hosts and not always:
            return
        if not self.leader:
            LOG.info("not the leader: %s %s left to the leader", kind, ", ".join(hosts))
            return
        # What the hypervisors wrote is in it (markers, restarts, registrations): it
        # reaches the playbooks as extra variables, which ansible-core would render.
        payload = inert({"type": kind, "hosts": hosts, "down": self.states.down(),
                         "cluster": self.cluster, "revision": self.states.applied,
                         "at": timestamp(), "resync": resync, "watcher": self.name,
                         **(details or {})})
        LOG.warning("%s: %s", kind, ", ".join(payload["hosts"]))
        if kind == "host_down":
            self.view.start_timing(hosts, self.loop.time())
        await queue.put({"yasco": payload})
        self.view.emitted_one(kind)

    # -- metrics --------------------------------------------------------------------

    def _serve_metrics(self):
        if not self.metrics_listen:
            return None
        try:
            server = metrics.serve(self.metrics_listen, self.metric_families,
                                   "yasco.cluster.etcd_hosts: metrics_listen")
        except metrics.MetricsError as err:
            LOG.error("NO METRICS: %s", err)
            return None
        LOG.info("metrics at http://%s/metrics", self.metrics_listen)
        return server

    def metric_families(self) -> list[metrics.Family]:
        """What this watcher knows now, as Prometheus metric families."""
        return self.view.families(self.leader, self.states, self.disarmed is not None,
                                  self.quota_bytes, self.alarms)
