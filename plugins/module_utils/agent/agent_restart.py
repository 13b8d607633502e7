# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host agent's restart in place of an HA VM that died on its live host: the
fast path beside the HA watcher's reconciler, as a local resource manager is.

The reconciler restarts such a VM too, through playbooks/recover_vm.yml, in about
13 s of playbook. The agent sees the domain stop at once (libvirt's lifecycle event)
and restarts it in one or two seconds. The reconciler stays the owner of every VM's
fate: it waits while the agent says it restarts one, counts the agent's restarts
against its `max_restart`, and takes over whenever the agent declines or does not
finish.

The agent restarts a VM only when all of this holds:
- the domain is an HA one, and stopped for a failure (QEMU killed or died, the guest
  crashed or powered off, a destroy), not for a migration or a save;
- the agent holds its lease, is neither self-fenced nor stopping, its host is not
  in maintenance nor cut off from Ceph, nor fenced (a fence record in etcd: its
  clients are blocklisted until the host's return lifts it, so a copy started now
  could never write), and HA is not disarmed;
- the VM's record says it runs on this host, its requested state is `started`, and
  the agent has restarted it here fewer than `max_restart` times within `window`;
- libvirt says the domain is defined and not running;
- no client on another host holds one of its disks (that is a live copy elsewhere).

A QEMU that died keeps its disks' exclusive locks, and the hypervisors' cephx user
may not break them. The agent's own cephx user (`ceph_caps`) may blocklist client
instances on its own host's addresses, one at a time, and nothing else: it
blocklists the dead QEMU's instance (ip:port/nonce), waits until its client has the
OSD map that carries the entry, breaks the locks, and starts the domain.

What it does is in `hosts/<host>/restarts/<vm>` (under its lease: `restarting`,
`restarted` or `declined`, with the count of its restarts of the VM within the
window) for the reconciler, and in the history (`restarted`, by the agent, written
under its host for the HA watcher to copy in: cluster_events.append_for_agent).
This module's pure parts (the conditions, the budget, the disks and their holders,
the caps) have no I/O; `InPlace.restart` does the I/O.
"""

from __future__ import annotations

import logging
import re
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none, to_json)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

LOG = logging.getLogger("yasco-agent")
# libvirt's VIR_DOMAIN_EVENT_STOPPED details that are a failure of the VM's, and how
# the history says them. Not MIGRATED (3), SAVED (4) nor FROM_SNAPSHOT (6).
STOP_REASONS = {0: "the guest powered off", 1: "its domain was destroyed",
                2: "the guest crashed", 5: "its QEMU died (killed, or failed)"}
VIR_DOMAIN_EVENT_STOPPED = 5
# What hosts/<host>/restarts/<vm> says.
RESTARTING, RESTARTED, DECLINED = "restarting", "restarted", "declined"
# A dead QEMU's client instance is blocklisted for a day: it never comes back.
DEAD_CLIENT_EXPIRE = 86400
# How long the agent lets a stop settle before it looks: a removal undefines the
# domain right after destroying it.
SETTLE = 0.3


def ceph_user(host: str) -> str:
    """The agent's cephx user on `host` (without `client.`)."""
    return f"yasco-agent-{host}"


def ceph_caps(addresses: list[str], pool: str) -> tuple[str, str, str, str]:
    """The caps of a host's agent user, as `ceph auth get-or-create` takes them: read
    the maps, use the VM pool (the storage probe, the lock breaks), and blocklist one
    client instance at a time (ip:port/nonce, never a whole IP: the nonce is not 0)
    on the host's own `addresses` alone. A compromised host can fence nothing but its
    own clients."""
    if not addresses:
        raise ValueError("a host's agent user needs the host's Ceph addresses")
    hosts = "|".join(re.escape(a) for a in addresses)
    regex = f"^({hosts}):[0-9]+/[1-9][0-9]*$" if len(addresses) > 1 \
        else f"^{hosts}:[0-9]+/[1-9][0-9]*$"
    return ("mon", f'allow r, allow command "osd blocklist" with blocklistop=add '
                   f'addr regex "{regex}"',
            "osd", f"profile rbd pool={pool}")


def refusal(host: str, record: dict[str, Any] | None, requested: Any,
            maintenance: bool, disarmed: bool, fenced: bool = False) -> str | None:
    """Why the agent of `host` must not restart a VM, from what etcd says of it (its
    record and requested state, the host's maintenance marker and fence record, the
    disarm flag); None when it may."""
    if disarmed:
        return "HA is disarmed"
    if maintenance:
        return f"{host} is in maintenance"
    if fenced:
        return (f"{host} is fenced: its Ceph clients are blocklisted until its return "
                "lifts the fence")
    if not isinstance(record, dict):
        return "it has no record"
    if record.get("host") != host or record.get("state") != "running":
        return (f"its record says {record.get('state') or 'no state'} on "
                f"{record.get('host') or 'no host'}")
    state = requested.get("state") if isinstance(requested, dict) else requested
    if state not in (None, "started"):
        return f"it is requested {state}"
    return None


class Budget:
    """How often the agent has restarted each VM within the last `window` seconds,
    on the agent's clock; at most `most` within any window."""

    def __init__(self, most: int, window: float) -> None:
        self.most, self.window = most, window
        self.done: dict[str, list[float]] = {}

    def count(self, vm: str, now: float) -> int:
        self.done[vm] = [t for t in self.done.get(vm, []) if t > now - self.window]
        return len(self.done[vm])

    def left(self, vm: str, now: float) -> bool:
        return self.count(vm, now) < self.most

    def spend(self, vm: str, now: float) -> int:
        """Note a restart; how many there are in the window now."""
        self.done.setdefault(vm, []).append(now)
        return self.count(vm, now)

    def expired(self, now: float) -> list[str]:
        """The VMs with no restart left in the window, forgotten."""
        gone = [vm for vm in self.done if not self.count(vm, now)]
        for vm in gone:
            del self.done[vm]
        return gone


def rbd_disks(xml: str) -> list[tuple[str, str]]:
    """(pool, image) of each RBD disk of a domain's XML."""
    root = ET.fromstring(xml)
    disks = []
    for source in root.findall("./devices/disk/source[@protocol='rbd']"):
        name = source.get("name") or ""
        if "/" in name:
            pool, image = name.split("/", 1)
            disks.append((pool, image.split("@", 1)[0]))
    return disks


def holders_split(holders: dict[str, str], own: list[str]) -> tuple[list[str], dict[str, str]]:
    """From the clients that hold the disks (image -> ip:port/nonce): those on this
    host's `own` addresses (the dead QEMU's, once libvirt says the domain is not
    running), and those elsewhere (image -> address: a live copy)."""
    dead, foreign = [], {}
    for image, address in holders.items():
        if address.rsplit(":", 1)[0].strip("[]") in own:
            if address not in dead:
                dead.append(address)
        else:
            foreign[image] = address
    return dead, foreign


class Declined(Exception):
    """The agent does not restart the VM; the message says why."""


class InPlace:
    """Restarts in place for one host's agent: `restart()` runs on its own thread,
    with its own etcd client and libvirt connection."""

    def __init__(self, host: str, cluster: str, addresses: list[str], ceph_params: dict,
                 budget: Budget, clock: Callable[[], float] = time.monotonic) -> None:
        self.host, self.cluster, self.addresses = host, cluster, addresses
        self.ceph_params = ceph_params
        self.budget = budget
        self.clock = clock

    def key(self, vm: str) -> str:
        return etcd_keys.restart_key(self.host, vm, cluster=self.cluster)

    def _said(self, vm: str, state: str, reason: str) -> str:
        return to_json({"state": state, "count": self.budget.count(vm, self.clock()),
                        "reason": reason, "at": cluster_events.timestamp()})

    def say(self, etcd: EtcdClient, vm: str, state: str, lease: int, reason: str) -> None:
        etcd.put(self.key(vm), self._said(vm, state, reason), lease=lease)

    def say_restarting(self, etcd: EtcdClient, vm: str, lease: int, reason: str,
                       revisions: tuple[int, int]) -> tuple[int, int]:
        """Say the agent restarts `vm`, only while its record and its restarts/ key
        are at `revisions` (record, key; 0: absent): in one transaction, as the
        reconciler's claim of a start elsewhere holds only while that key is as it
        read it. One of the two writes wins, never both. The revisions after."""
        record, said = revisions
        swap = etcd.put_if(self.key(vm), self._said(vm, RESTARTING, reason),
                           mod_revision=said, lease=lease,
                           unchanged={etcd_keys.vm_key(vm, cluster=self.cluster): record})
        if not swap.succeeded:
            raise Declined("its record or its restarts/ key changed meanwhile: the "
                           "reconciler acts on it")
        return record, swap.revision

    def check(self, etcd: EtcdClient, vm: str) -> tuple[int, int]:
        """The revisions of the VM's record and of this agent's restarts/ key of it
        (0: none), if the agent may restart it (`refusal`)."""
        found = etcd.get(etcd_keys.vm_key(vm, cluster=self.cluster))
        requested = etcd.get(etcd_keys.requested_key(vm, cluster=self.cluster))
        marker = etcd.get(etcd_keys.maintenance_key(self.host, cluster=self.cluster))
        disarmed = etcd.get(etcd_keys.disarmed_key(cluster=self.cluster))
        fence = etcd.get(etcd_keys.fence_key(self.host, cluster=self.cluster))
        why = refusal(self.host, json_or_none(found.value) if found else None,
                      json_or_none(requested.value) if requested else None,
                      marker is not None, disarmed is not None, fence is not None)
        if why:
            raise Declined(why)
        if not self.budget.left(vm, self.clock()):
            raise Declined(f"restarted here {self.budget.most} time(s) within "
                           f"{self.budget.window:g} s already: the reconciler relocates it")
        said = etcd.get(self.key(vm))
        return found.mod_revision, said.mod_revision if said is not None else 0

    def restart(self, etcd: EtcdClient, conn, vm: str, why: str, lease: int) -> bool:
        """Restart `vm`, which stopped for `why`, if it may be; whether it was. Any
        failure leaves it to the reconciler, and says why in its restarts/ key."""
        dom = lv.find_domain(conn, vm)
        if dom is None or lv.domain_kind(dom) != "ha":
            return False  # undefined (removed), or not an HA VM: not the agent's
        try:
            revisions = self.say_restarting(etcd, vm, lease, why, self.check(etcd, vm))
        except Declined as err:
            LOG.info("%s stopped (%s): not restarted here: %s", vm, why, err)
            return False
        try:
            dead = self._start(etcd, dom, revisions, lease, why)
        except (Declined, ceph.CephError, EtcdError, lv.LibvirtAdapterError,
                lv.libvirt.libvirtError) as err:
            LOG.error("%s stopped (%s): not restarted here: %s", vm, why, err)
            try:
                self.say(etcd, vm, DECLINED, lease, f"{why}; not restarted: {err}")
            except EtcdError as said:
                LOG.warning("%s: cannot say it was not restarted: %s", vm, said)
            return False
        count = self.budget.spend(vm, self.clock())
        LOG.warning("%s stopped (%s): restarted in place (%d of %d within %g s)%s", vm, why,
                    count, self.budget.most, self.budget.window,
                    f"; dead client fenced: {', '.join(dead)}" if dead else "")
        try:
            self.say(etcd, vm, RESTARTED, lease, why)
            cluster_events.append_for_agent(etcd, cluster_events.event(
                "restarted", host=self.host, vm=vm, by="agent", details={
                    "reason": f"{why}: restarted in place by its agent ({count} of "
                              f"{self.budget.most} within {self.budget.window:g} s)",
                    "dead_clients": dead}), host=self.host, cluster=self.cluster)
        except EtcdError as err:
            LOG.warning("%s: restarted, but etcd was not told: %s", vm, err)
        return True

    def _start(self, etcd: EtcdClient, dom, revisions: tuple[int, int], lease: int,
               why: str) -> list[str]:
        """Fence the dead QEMU's client, break its locks, start the domain; the dead
        clients fenced. `revisions` are the record's and the restarts/ key's, as the
        agent's word that it restarts the VM left them."""
        vm, revision = dom.name(), revisions[0]
        if dom.isActive():
            raise Declined("it runs again already")
        disks = rbd_disks(lv.xml_of(dom, inactive=True))

        def unchanged() -> None:
            # Anything else that starts the VM here (a return home, a migration)
            # changes its record first: a lock holder on this host is then alive.
            found = etcd.get(etcd_keys.vm_key(vm, cluster=self.cluster))
            if found is None or found.mod_revision != revision:
                raise Declined("its record changed meanwhile")
            if dom.isActive():
                raise Declined("it runs again already")

        dead: list[str] = []
        if disks:
            with ceph.connect(self.ceph_params) as cluster:
                cluster.fencing()
                dead = self._free(cluster, disks, unchanged)
        unchanged()
        # The last word before the start, in one transaction with the record: a
        # relocation decided on the agent's earlier word (it took too long) can no
        # longer be claimed, and one claimed since stops this start.
        self.say_restarting(etcd, vm, lease, why, revisions)
        lv.start(dom)
        return dead

    def _free(self, cluster: ceph.Cluster, disks: list[tuple[str, str]],
              unchanged: Callable[[], None]) -> list[str]:
        """Blocklist the dead clients on this host that hold the disks, then break
        their locks; refuse when a client elsewhere holds one, or when `unchanged`
        finds, once the holders are read, that the VM may have started meanwhile."""
        holders: dict[str, str] = {}
        for pool, name in disks:
            with cluster.opened(pool, name, "disk") as (dummy, image):
                for lock in ceph.image_locks(image) if image is not None else []:
                    holders[f"{pool}/{name}"] = ceph.lock_address(lock)
        dead, foreign = holders_split(holders, self.addresses)
        if foreign:
            raise Declined("a client on another host holds " + ", ".join(
                f"{image} ({address})" for image, address in sorted(foreign.items())))
        if not dead:
            return []
        unchanged()
        try:
            cluster.blocklist_add_all(dead, DEAD_CLIENT_EXPIRE)
        except ceph.CephError as err:
            raise Declined(f"{err}; the agent's own cephx user needs the caps that let it "
                           "blocklist its host's clients (docs/security.md, Ceph)") from err
        cluster.wait_for_latest_map()
        for pool, name in disks:
            with cluster.opened(pool, name, "disk") as (dummy, image):
                if image is not None:
                    ceph.break_locks(image, [lock for lock in ceph.image_locks(image)
                                             if ceph.lock_address(lock) in dead])
        return dead
