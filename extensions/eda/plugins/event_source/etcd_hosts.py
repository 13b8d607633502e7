# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""yasco.cluster.etcd_hosts: hypervisor failures and returns, from etcd, for
ansible-rulebook.

This file is the source's documentation and its entry point. The HA watcher it runs
is plugins/module_utils/watcher/ (its threads, its event loop and the leader's looks
at etcd), over the pure state machines of plugins/module_utils/cluster/ (the hosts'
states, the leadership, the reconciler), which are tested on a fake clock.
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
    As the leader, it also copies each event an agent wrote under its host
    (C(hosts/<host>/events/)) into the cluster's history (C(history/)), which agents
    may not write: checked (a kind an agent writes, its host and writer forced,
    bounded), once however many watchers try, then deletes it there. An event that
    fails the check is dropped with a warning in the log.
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
        The etcd user, which needs to read the cluster's keys and write C(watchers/),
        C(hosts/) and C(history/) (role C(yasco-watcher)).
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
import sys
from pathlib import Path
from typing import Any

try:
    from ansible_collections.yasco.cluster.plugins.module_utils.watcher.watcher import Watcher
except ImportError:  # ansible-rulebook runs this file by path, outside any package
    for parent in Path(__file__).absolute().parents:
        if parent.name == "ansible_collections":
            sys.path.insert(0, str(parent.parent))
            break
    from ansible_collections.yasco.cluster.plugins.module_utils.watcher.watcher import Watcher


async def main(queue: asyncio.Queue, args: dict[str, Any]) -> None:
    """ansible-rulebook's entry point."""
    await Watcher(args).run(queue)


if __name__ == "__main__":
    # Try it by hand, as the watcher's etcd user (YASCO_ETCD_CA_CERT,
    # YASCO_ETCD_CLIENT_CERT, YASCO_ETCD_CLIENT_KEY, YASCO_ETCD_USERNAME and
    # YASCO_ETCD_PASSWORD in the environment): python etcd_hosts.py https://10.213.0.11:2379 lab
    class PrintQueue:
        async def put(self, event: dict[str, Any]) -> None:
            print(event, flush=True)

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(PrintQueue(), {"endpoints": sys.argv[1].split(","),
                                    "cluster": sys.argv[2] if len(sys.argv) > 2 else "yasco"}))
