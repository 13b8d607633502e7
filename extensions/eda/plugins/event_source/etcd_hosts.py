# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""yasco.cluster.etcd_hosts: hypervisor failures and returns, from etcd, for
ansible-rulebook.

Threads talk to etcd, each on its own client: one per endpoint watches the
cluster's hosts/ prefix through that endpoint and hands every change to the event
loop; one holds (or waits for) the watchers' leader lease. The event loop keeps the
hosts' records current and turns changes into events, and only the leader emits
them, so several watchers can run for redundancy and a host's failure is evacuated
once. A new leader first resyncs: every hypervisor that is down while
etcd still records VMs running on it is reported, so a failure seen by no leader (the
old one died with it) is not lost.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Hypervisor failures and returns, from the YASCO agents' etcd leases
description:
  - >-
    Watches C(/yasco/<cluster>/hosts/) in etcd and emits an event when a hypervisor's
    liveness key disappears because its lease expired (C(host_down)), when a host
    registers again (C(host_up)), and when an operator marks a host for maintenance
    (C(maintenance); a marker written by the agent, the drain or the emergency shutdown
    is none, unless it is the agent's asking for its VMs to be migrated away as its
    host goes down, with C(shutdown_policy) C(migrate)).
  - >-
    A liveness key removed by the agent's planned stop, which writes a maintenance
    marker first, is no failure and emits nothing.
  - >-
    A failure is reported at once when every other host is beating. When another
    host has gone quiet too (its liveness key not rewritten for a third of its TTL,
    as when a rack loses power), the report waits for it, up to O(settle) seconds,
    so that one C(host_down) event, and one evacuation, covers them all.
  - >-
    Never loses a change, and waits on no dead etcd member. It watches through every
    endpoint at once and takes each change from the stream that delivers it first; a
    stream resumes from the last revision applied after any break. The hosts' records
    are kept in memory, so a failure is reported without reading etcd. After a
    restart or a compaction, or when this watcher becomes the leader, it resyncs:
    every hypervisor that is down while etcd still records VMs running on it is
    reported again.
  - >-
    A host whose agent stopped beating is reported within its TTL even when etcd
    renewed its lease: a new etcd leader renews every lease on election, which would
    otherwise add seconds when the crashed hypervisor ran etcd's leader. The agent
    rewrites its liveness key at each keepalive, and self-fences one TTL after the
    last rewrite that succeeded; once a host's key is that old (confirmed by a read),
    the leading watcher ends its lease, as etcd would have.
  - >-
    A host that registered again (C(host_up)) and stays up for O(hold_down) seconds
    is reported as C(host_stable) once its agent is beating (a host that crashed
    again keeps its lease for up to a TTL, and must not get its VMs back meanwhile),
    unless it came back in maintenance or was put in maintenance meanwhile (drained:
    the undrain brings its VMs back).
    A new leader reports it too for a host that is up while etcd still records its
    fence.
  - >-
    While the cluster is disarmed (C(/yasco/<cluster>/ha/disarmed) exists, written by
    C(playbooks/disarm.yml)), no C(host_down) nor C(host_stable) is emitted and the
    log says so for every failure; once the flag is deleted, a resync reports every
    host down while etcd records VMs on it.
  - >-
    Several watchers may run at once. Only the holder of the watchers' leader lease
    emits events; another takes over within O(leader_ttl) seconds when it dies.
  - >-
    Transient errors (etcd unreachable, an election, a broken stream) are logged and
    retried; the source never exits because of them.
  - >-
    As the leader, it also runs the HA reconciler (C(module_utils/cluster/reconciler.py)):
    every O(reconcile_interval) seconds, and at once when a domain the agents publish
    comes or goes, it compares each HA VM's requested state (C(requested/<vm>), set by
    C(playbooks/vm_state.yml)) with its record and where it runs, and emits
    C(vm_recover) with the steps that make them agree (C(steps), each with C(action)
    C(restart), C(relocate), C(stop) or C(fail), C(vm), C(from), C(to) and C(reason)):
    a VM that died on a live host is restarted in place, then relocated; a start that
    failed or did not finish goes to the next host; VMs left down because more hosts
    failed than planned start when a host has room. A failed host stays the
    evacuation's (C(host_down)).
  - >-
    When etcd raises or clears an alarm (C(NOSPACE): its database reached its quota;
    C(CORRUPT)), it emits C(etcd_alarm) with C(alarms) (each C(member) and C(alarm))
    and C(raised). While an alarm stands etcd refuses every write but still renews
    leases; agents then keep their leases without rewriting their keys, and no lease
    is ended for a key that was not rewritten.
  - >-
    Before etcd is full, it warns: every 10 seconds it reads each member's database
    size, and emits C(etcd_space) when the members at or over O(etcd_space_warning)
    percent of O(etcd_quota_bytes) change, with C(members) (each C(endpoint),
    C(member), C(db_size) and C(percent)), C(over) (the endpoints over it) and
    C(raised). C(playbooks/etcd_maintenance.yml) frees the space.
  - >-
    Every O(fence_check_interval) seconds (a day) it emits C(fences_standing) for
    the hosts whose storage fence etcd records (C(fences/<host>)), if any, and the
    rulebook runs C(playbooks/fence_check.yml): a blocklist entry lifted by hand, or
    one that expires, would leave etcd saying fenced while Ceph lets the host write.
  - >-
    A host's agent that restarted an HA VM in place (its QEMU died there) says so
    in etcd; the source emits C(vm_restarted) for it, with C(vm), C(reason) and
    C(count) (its restarts there within the agent's window), and the rulebook tells
    the operators (C(playbooks/notify.yml)).
  - >-
    Each event is C({"yasco": {...}}) with C(type) (C(host_down), C(host_up),
    C(host_stable), C(maintenance), C(vm_recover), C(vm_restarted), C(etcd_alarm),
    C(etcd_space) or C(fences_standing)),
    C(hosts) (the hosts it is about, none for C(etcd_alarm) and C(etcd_space)),
    C(down) (every hypervisor down now), C(cluster), C(revision), C(at), C(resync) and
    C(watcher).
options:
  endpoints:
    description: etcd's client URLs.
    type: list
    elements: str
    required: true
  cluster:
    description: The cluster's name (C(yasco_cluster_name)).
    type: str
    default: yasco
  hosts:
    description: The hypervisors to watch; by default every host registered in etcd.
    type: list
    elements: str
  settle:
    description:
      - >-
        The longest wait, in seconds, after a failure for the hosts that went quiet
        with it. The leases of hosts that fail together expire within their renewal
        interval plus etcd's half-second expiry check of each other. A failure that
        comes later triggers another evacuation, of the whole failed set again.
      - >-
        No wait at all when every other host has rewritten its liveness key within a
        third of its TTL.
    type: float
    default: 1.0
  hold_down:
    description:
      - >-
        Seconds a host that registered again must stay up, on the same lease, before
        C(host_stable) is emitted for it (the rulebook then brings its VMs home). A host
        that fails again in that time starts over, so a flapping host gets nothing back.
    type: float
    default: 60
  reconcile_interval:
    description:
      - >-
        Seconds between two looks of the HA reconciler when nothing wakes it sooner;
        V(0) turns it off.
    type: float
    default: 2.0
  recovery:
    description:
      - >-
        How hard the reconciler tries, any of C(max_restart) (in-place restarts within
        C(window) before relocating, default 1), C(max_relocate) (relocations within
        C(window) before the VM is recorded failed, default 2), C(window) (600 s),
        C(grace) (seconds a VM recorded running on a live host may go unpublished
        before it counts as down, 2), C(start_timeout) (60), C(action_timeout) (90) and
        C(retry_after) (seconds before a failed VM is tried again, 300; at once when a
        host becomes usable) and C(evacuation_timeout) (seconds after which HA VMs still
        recorded on a failed host make it reported C(host_down) again, 90).
    type: dict
    default: {}
  etcd_quota_bytes:
    description: The members' C(--quota-backend-bytes) (etcd does not say it), as
      C(yasco_etcd_quota_bytes) for C(playbooks/etcd_maintenance.yml).
    type: int
    default: 2147483648
  etcd_space_warning:
    description: The share of O(etcd_quota_bytes), in percent, at which a member's
      database raises C(etcd_space); V(0) turns the warning off.
    type: float
    default: 80
  fence_check_interval:
    description:
      - >-
        Seconds between two C(fences_standing) events, the first one interval after
        the watcher starts; V(0) turns them off.
    type: float
    default: 86400
  metrics_listen:
    description:
      - >-
        Where this watcher serves Prometheus metrics, as V(address:port) (for example
        V(0.0.0.0:9732)); empty for none. Every watcher says whether it leads; the
        leader alone adds the cluster's hosts, HA VMs and etcd members
        (C(docs/observability.md) lists them). A port that cannot be bound is logged,
        and the watcher runs on without metrics.
    type: str
    default: ""
  leader_ttl:
    description: The watchers' leader lease, in seconds.
    type: int
    default: 5
  name:
    description: This watcher's name in the leader key; by default host name and pid.
    type: str
  ca_cert:
    description:
      - >-
        The CA of etcd's server certificates, for https endpoints. An empty string is
        the same as not set, so a rulebook can pass a variable that may be empty.
      - >-
        When not set, the environment variable C(YASCO_ETCD_CA_CERT) is used, as EDA
        controller's credential injectors set it.
    type: str
  client_cert:
    description:
      - >-
        A client certificate, when etcd requires one. It must have no common name
        when etcd has authentication on (see C(docs/security.md)).
      - >-
        When not set, the environment variable C(YASCO_ETCD_CLIENT_CERT) is used.
    type: str
  client_key:
    description:
      - >-
        The client certificate's key.
      - >-
        When not set, the environment variable C(YASCO_ETCD_CLIENT_KEY) is used.
    type: str
  username:
    description:
      - >-
        The etcd user, which needs to read the cluster's keys and write C(watchers/)
        and C(hosts/) (role C(yasco-watcher)).
      - >-
        When not set, the environment variable C(YASCO_ETCD_USERNAME) is used.
    type: str
  password:
    description:
      - >-
        Its password. Pass it from a vaulted variable or an EDA credential, never in
        the rulebook's text.
      - >-
        When not set, the environment variable C(YASCO_ETCD_PASSWORD) is used.
    type: str
"""

EXAMPLES = r"""
- name: YASCO HA watcher
  hosts: localhost
  sources:
    - yasco.cluster.etcd_hosts:
        endpoints: "{{ yasco_etcd_endpoints }}"
        cluster: "{{ yasco_cluster_name }}"
  rules:
    - name: Evacuate failed hypervisors
      condition: event.yasco.type == "host_down"
      action:
        run_playbook:
          name: yasco.cluster.evacuate
          extra_vars:
            yasco_failed_hosts: "{{ event.yasco.down }}"
"""

import asyncio
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

try:
    from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
except ImportError:  # ansible-rulebook runs this file by path, outside any package
    for parent in Path(__file__).absolute().parents:
        if parent.name == "ansible_collections":
            sys.path.insert(0, str(parent.parent))
            break
    from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import metrics
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import WatchEvent
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    NO_SPACE_ADVICE, Compacted, EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none, to_json)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_events import timestamp
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.host_states import (
    HostStates, agent_ttl)
# The reconciler imports nothing but the standard library: the decision environment
# needs neither the planner nor its solver.
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler import decide
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_observed import (
    observe)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_pacing import (
    Memory, Policy)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.watcher_view import (
    WatcherView, alarm_text, disarm_text, member_size, members_over)

LOG = logging.getLogger("yasco.cluster.etcd_hosts")
RETRY = 1.0
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


# Where an unset connection option comes from, as for the modules. EDA controller
# hands a credential's files to ansible-rulebook only through the environment.
_ENVIRONMENT = {"ca_cert": "YASCO_ETCD_CA_CERT", "client_cert": "YASCO_ETCD_CLIENT_CERT",
                "client_key": "YASCO_ETCD_CLIENT_KEY", "username": "YASCO_ETCD_USERNAME",
                "password": "YASCO_ETCD_PASSWORD"}


def _client(args: dict[str, Any], timeout: float) -> EtcdClient:
    # A rulebook templates every argument, an unset variable into ''.
    options = {name: args.get(name) or os.environ.get(variable) or None
               for name, variable in _ENVIRONMENT.items()}
    return EtcdClient(args["endpoints"], timeout=timeout, **options)


class Watcher:
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
        self.name = args.get("name") or f"{socket.gethostname()}-{os.getpid()}"
        self.prefix = etcd_keys.hosts_prefix(cluster=self.cluster)
        self.leader_key = etcd_keys.watchers_leader_key(cluster=self.cluster)
        self.stop = threading.Event()
        self.leader = False
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
        # What the metrics show beyond the state above: events and steps counted,
        # evacuations and migrations timed, the reconciler's last look, the members'
        # sizes (module_utils/cluster/watcher_view.py).
        self.view = WatcherView(self.name)
        self.metrics_listen = args.get("metrics_listen") or ""

    def _post(self, item: tuple) -> None:
        assert self.loop is not None and self.inbox is not None
        self.loop.call_soon_threadsafe(self.inbox.put_nowait, item)

    # -- threads --------------------------------------------------------------------

    def stream_thread(self, endpoint: str) -> None:
        """Hand every change under hosts/ seen through `endpoint` to the event loop,
        resuming after breaks from what the loop has applied."""
        etcd = _client({**self.args, "endpoints": [endpoint]}, timeout=max(1.0, self.ttl / 4))
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

    def leader_thread(self) -> None:
        """Hold the watchers' leader lease, or wait for it to be free."""
        # A third of the TTL per request: on a loaded machine etcd may take over half
        # a second to grant a lease, and a shorter timeout kept a watcher from ever
        # leading; the step-down below still comes before the lease can expire.
        etcd = _client(self.args, timeout=max(1.0, self.ttl / 3))
        lease, last_ok = 0, 0.0
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                if not lease:
                    granted = etcd.grant_lease(self.ttl)
                    swap = etcd.put_if(self.leader_key, to_json(
                        {"watcher": self.name, "since": timestamp()}),
                        mod_revision=0, lease=granted.id)
                    if swap.succeeded:
                        lease, last_ok = granted.id, sent
                        self.leader = True
                        LOG.info("%s leads the watchers", self.name)
                        self._post(("leader",))
                    else:
                        etcd.revoke_lease(granted.id)
                elif etcd.keepalive_once(lease) is not None:
                    last_ok = sent
                else:
                    raise EtcdError("the leader lease expired")
            except EtcdError as err:
                LOG.warning("leader lease: %s", err)
            except Exception:  # pylint: disable=broad-except  # a watcher must not stop
                LOG.exception("leader lease: unexpected failure")
            # Step down before the lease can have expired, as the host agents do.
            if lease and time.monotonic() > last_ok + self.ttl * 0.6:
                LOG.warning("%s steps down: no keepalive for %.1f s", self.name,
                            time.monotonic() - last_ok)
                self.leader, lease = False, 0
            self.stop.wait(self.ttl / 3)

    # -- the event loop ---------------------------------------------------------------

    async def run(self, queue: asyncio.Queue) -> None:
        self.loop, self.inbox = asyncio.get_running_loop(), asyncio.Queue()
        reader = _client(self.args, timeout=max(1.0, self.ttl / 4))
        threads = [threading.Thread(target=self.stream_thread, args=(endpoint,),
                                    name=f"etcd-watch-{index}", daemon=True)
                   for index, endpoint in enumerate(self.endpoints)]
        threads.append(threading.Thread(target=self.leader_thread, name="etcd-leader",
                                        daemon=True))
        for thread in threads:
            thread.start()
        states = self.states
        stale = armed = alarmed = reconciling = server = None
        self.nudge = asyncio.Event()
        try:
            server = self._serve_metrics()
            await self._read_hosts(queue, reader)
            stale = asyncio.create_task(self._end_stale_leases(reader))
            armed = asyncio.create_task(self._follow_disarm(queue, reader))
            alarmed = asyncio.create_task(self._follow_alarms(queue, reader))
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
                    await self._resync(queue, reader)
                elif item[0] == "compacted":
                    await self._read_hosts(queue, reader)
                else:
                    # Each stream delivers its member's changes in order; another stream
                    # may have delivered them already. A revision's changes come whole.
                    if any(self._domain_change(e) for e in states.fresh(item[1])):
                        self.nudge.set()  # a domain came or went: the reconciler looks
                    await self._report(queue, states.apply(item[1], self.loop.time()))
        finally:
            tasks = [task for task in (stale, armed, alarmed, reconciling)
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

    async def _reconcile(self, queue, reader: EtcdClient) -> None:
        """As the leader, bring every HA VM to its requested state (reconciler.py):
        every `reconcile_interval` seconds, at once when a domain comes or goes, and
        when a VM's grace or timeout is up. Each look is one read of the cluster, as
        of one revision; the steps go out as one vm_recover event."""
        assert self.nudge is not None
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
            for step in decision["steps"]:
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

    async def _read_hosts(self, queue, reader: EtcdClient) -> None:
        """Read every hosts/ record (again), until etcd answers; then resync."""
        revision, kvs = await _until_answered(f"reading {self.prefix}", reader.read_prefix,
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
                self.members[endpoint] = _client({**self.args, "endpoints": [endpoint]}, 1.0)
            try:
                status = self.members[endpoint].status()
            except EtcdError as err:
                LOG.info("reading the size of %s: %s", endpoint, err)
                continue
            sizes.append(member_size(endpoint, status, self.quota_bytes))
        return sizes

    async def _resync(self, queue, reader: EtcdClient) -> None:
        """As the leader, report every hypervisor down while etcd records VMs on it,
        and count the hold-down of every host up while its fence is recorded."""
        if not self.leader or not self.ready.is_set() or self.disarmed is not None:
            return
        vms, fences = etcd_keys.vms_prefix(cluster=self.cluster), etcd_keys.fences_prefix(
            cluster=self.cluster)
        read = await _until_answered("resync", reader.get_prefixes, [vms, fences])
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
        payload = {"type": kind, "hosts": hosts, "down": self.states.down(),
                   "cluster": self.cluster, "revision": self.states.applied, "at": timestamp(),
                   "resync": resync, "watcher": self.name, **(details or {})}
        LOG.warning("%s: %s", kind, ", ".join(hosts))
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


async def _until_answered(what: str, read, *args: Any) -> Any:
    """`read(*args)` in a thread, retried until etcd answers: a watcher outlives any
    outage."""
    while True:
        try:
            return await asyncio.to_thread(read, *args)
        except EtcdError as err:
            LOG.warning("%s: %s; retrying", what, err)
            await asyncio.sleep(RETRY)


async def main(queue: asyncio.Queue, args: dict[str, Any]) -> None:
    """ansible-rulebook's entry point."""
    await Watcher(args).run(queue)


if __name__ == "__main__":
    # Try it by hand: python etcd_hosts.py http://10.213.0.11:2379 lab
    class PrintQueue:
        async def put(self, event: dict[str, Any]) -> None:
            print(event, flush=True)

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(PrintQueue(), {"endpoints": sys.argv[1].split(","),
                                    "cluster": sys.argv[2] if len(sys.argv) > 2 else "yasco"}))
