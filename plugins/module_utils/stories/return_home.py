# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a return home does once a failed hypervisor is back, worked out from the
cluster as it is now (cluster_status, with libvirt asked), the VDM and each VM's
provisioning item. Pure Python, no I/O; playbooks/return_home.yml carries it out.

In order: destroy the stale copies the host still runs of VMs that run elsewhere now
(it was fenced: they can never be resumed), break the disk locks its fenced clients
still hold (the hypervisors may not, see docs/security.md), lift its fence, start its
plain VMs that
start at home, live-migrate its VMs back (HA VMs from their spare slots, any VM a
drain moved) in waves that never overload a host,
then restart the preemptible VMs that were stopped to make room, and those that
went down with the host, where there is room again. Every record changes by
compare-and-swap on the record as read, so a rerun or a concurrent evacuation can
never make a VM run twice.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.vm_records import ACTIVE
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import VdmView
from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import (
    ceph_addrs, images_of)
from ansible_collections.yasco.cluster.plugins.module_utils.stories.rebalance import (
    RebalanceError, fits, hypervisors_of, loads, plan_moves, wave_steps, waves)


class ReturnHomeError(Exception):
    """The host cannot take its VMs back as things are; the message says why and
    what to do."""


def plan(status: dict[str, Any], vdm: dict[str, Any], items: list[dict[str, Any]],
         host: str, cluster: str = etcd_keys.DEFAULT_CLUSTER,
         concurrency: int = 2, per_host: int = 0) -> dict[str, Any]:
    """The return home of `host`, in waves of at most `concurrency` migrations and
    `per_host` on any one host; ReturnHomeError before anything changes when the host
    is not ready for it."""
    hosts = hypervisors_of(status, vdm, host, ReturnHomeError)
    view = VdmView(vdm)
    here = hosts[host]
    _check_ready(here)
    fence = here.get("fence")
    vms = ClusterView(status).vms
    by_name = {item["name"]: item for item in items}

    # A copy the host runs of a VM that etcd does not record running there: the
    # host was fenced, so that copy cannot write (a plain VM's disk went read-only
    # with the fence too), and it must never be resumed.
    stale, unexplained = [], []
    for name, vm in sorted(vms.items()):
        record = vm.get("record") or {}
        if host not in (vm.get("running_on") or []) or (
                record.get("host") == host and record.get("state") in ACTIVE):
            continue
        recorded = (f"{record.get('state')} on {record.get('host')}" if record
                    else "no record")
        if not fence:
            unexplained.append(f"{name} (etcd: {recorded})")
        stale.append({"vm": name, "recorded": recorded,
                      "domain": {"name": name, "uri": here["uri"], "state": "destroyed"},
                      "event": {"kind": "stale-destroyed", "vm": name, "host": host,
                                "details": {"recorded": recorded}}})
    if unexplained:
        raise ReturnHomeError(
            f"{host} runs {', '.join(unexplained)} and was never fenced: find out which "
            "copy writes each disk, destroy the other by hand, then run this again")
    stale_names = {s["vm"] for s in stale}

    # Where each VM runs once the stale copies are gone and the plain VMs started.
    current = {}
    for name, vm in vms.items():
        running = [h for h in vm.get("running_on") or []
                   if h != host or name not in stale_names]
        if len(running) == 1:
            current[name] = running[0]
    # The plain VMs to start at home: those that went down with it.
    autostart = []
    for name, vm in sorted(vms.items()):
        item = by_name.get(name)
        if (item and item.get("autostart_on_home") and view.home(name) == host
                and name not in current and _went_down_at(vm, host)):
            autostart.append(_start(vm, item["domain"], here["uri"], host, cluster))
            current[name] = host

    # Its HA VMs from their spare slots, and any VM a drain moved off it.
    homecoming = {name for name, where in current.items()
                  if view.home(name) == host and where != host
                  and _recorded(vms[name], where)}
    try:
        moves = plan_moves(current, vdm, only=homecoming)
        grouped = waves(moves, current, vdm, max(1, int(concurrency)), int(per_host))
    except RebalanceError as err:
        raise ReturnHomeError(f"cannot bring {host}'s HA VMs back: {err}") from err
    after = dict(current)
    for move in moves:
        after[move["vm"]] = move["to"]

    restart, waiting = _preempted_restarts(vms, vdm, by_name, hosts, after, host, cluster,
                                           stale_names)
    # The disks whose locks the host's fenced clients may still hold.
    ran_here = (stale_names | {a["vm"] for a in autostart}
                | view.homed_on(host))
    images = sorted({image for name in ran_here if name in by_name
                     for image in images_of(by_name[name])})
    return {
        "host": host,
        "came_back": _came_back(here, fence),
        # Read before each wave: a host that fails again stops its return.
        "alive_key": etcd_keys.alive_key(host, cluster=cluster),
        "stale": stale,
        "unfence": unfence(host, fence, cluster, images),
        "autostart": autostart,
        "waves": wave_steps(grouped, vms, cluster),
        "restart": restart,
        "waiting": waiting,
        # What the VMs it starts need first: the locks their dead QEMUs of this host
        # still hold broken (it ran them; libvirt there says they run no more).
        "start_images": sorted({image for s in autostart + restart if s["vm"] in by_name
                                for image in images_of(by_name[s["vm"]])}),
        "addresses": ceph_addrs(here),
        "away": sorted(name for name, where in after.items()
                       if view.home(name) == host and where != host),
    }


def _check_ready(here: dict[str, Any]) -> None:
    name = here["name"]
    if not here.get("alive"):
        raise ReturnHomeError(f"{name}: not alive (no liveness key in etcd): boot it, "
                              "wait for its agent to register, then run this again")
    if here.get("maintenance"):
        raise ReturnHomeError(f"{name}: in maintenance: bring it back with "
                              "playbooks/undrain.yml")
    if here.get("libvirt") != "reachable":
        raise ReturnHomeError(f"{name}: libvirt cannot be reached at {here.get('uri')}: "
                              "check the host, then run this again")
    fence = here.get("fence")
    if fence is not None and not fence.get("ceph_addrs"):
        raise ReturnHomeError(f"{name}: its fence record names no address to unfence: "
                              "lift the blocklist by hand (yasco.cluster.ceph_fence)")


def _came_back(here: dict[str, Any], fence: dict[str, Any] | None) -> str:
    """How the host came back, for the report: a reboot, or the same boot cut off
    from the cluster for a while (its agent self-fenced and registered again)."""
    if not fence:
        return "was not fenced"
    if not fence.get("boot_id") or not here.get("boot_id"):
        return "registered again (boot not known)"
    if fence["boot_id"] != here["boot_id"]:
        return "rebooted (a new boot since it was fenced)"
    return ("reconnected without a reboot (it was cut off from the cluster; "
            "what it kept running is destroyed)")


def _recorded(vm: dict[str, Any], where: str) -> bool:
    record = vm.get("record") or {}
    return record.get("host") == where and record.get("state") == "running"


def _start(vm: dict[str, Any], domain: dict[str, Any], uri: str, host: str,
           cluster: str) -> dict[str, Any]:
    """Starting VM `vm` (its cluster_status entry) at home on `host`, and its record."""
    return {"vm": vm["name"], "host": host, "domain": {**domain, "uri": uri},
            "record": vm_records.change(vm, vm_records.RUNNING, host, cluster),
            "event": {"vm": vm["name"], "host": host}}


def unfence(host: str, fence: dict[str, Any] | None, cluster: str,
            images: list[str]) -> dict[str, Any] | None:
    """Lifting the host's fence. First, the locks its fenced clients still hold on
    `images` are broken: a QEMU killed while fenced could not release its lock, and a
    hypervisor's cephx user may not blocklist, which librbd would do to take it over."""
    if not fence:
        return None
    return {"addresses": list(fence.get("ceph_addrs") or []), "images": images,
            # As read: host_fence lifts it only if it still says so, and only while the
            # host is alive.
            "record": {"key": etcd_keys.fence_key(host, cluster=cluster), "value": fence,
                       "alive": etcd_keys.alive_key(host, cluster=cluster)},
            "event": {"kind": "unfenced", "host": host,
                      "details": {"ceph_addrs": list(fence.get("ceph_addrs") or [])}}}


def _went_down_at(vm: dict[str, Any], host: str | None) -> bool:
    """Whether VM `vm`, which runs nowhere, went down with `host`: recorded down there,
    or still recorded running there (shut down with it by a clean stop, or the host
    was back before its failure was acted on); and is not requested stopped."""
    record = vm.get("record") or {}
    return (record.get("host") == host
            and record.get("state") in (vm_records.DOWN, vm_records.RUNNING)
            and vm.get("requested") in (None, "started"))


def _preempted_restarts(vms, vdm, by_name, hosts, after, returning, cluster, stale=()):
    """The preemptible VMs to start at home, highest priority first, where their home
    is up and has room with every VM where it will be; and those that must wait. They
    are those stopped to make room, and those that went down with their home:
    recorded down there, or still recorded running there though they run nowhere (the
    host was back before its failure was acted on, as after a loss of etcd's quorum),
    once their home is this host or one no longer fenced. A copy the returning host
    kept running while it was cut off is `stale`, destroyed first: it runs nowhere.
    Spare room they may use again, once the HA VMs are back; never one requested
    stopped."""
    view = VdmView(vdm)
    sizes, capacity = view.sizes(), view.hosts
    load = loads(after, sizes, capacity)
    restart, waiting = [], []

    def went_down_at_home(vm) -> bool:
        home = view.home(vm["name"])
        return (_went_down_at(vm, home)
                and (home == returning or not (hosts.get(home) or {}).get("fence"))
                and view.kind(vm["name"]) == "preemptible")

    def runs_nowhere(vm) -> bool:
        return not [h for h in vm.get("running_on") or []
                    if h != returning or vm["name"] not in stale]

    preempted = [vm for vm in vms.values()
                 if runs_nowhere(vm) and vm.get("requested") in (None, "started")
                 and ((vm.get("record") or {}).get("state") == vm_records.PREEMPTED
                      or went_down_at_home(vm))]

    def order(vm):
        return (-by_name.get(vm["name"], {}).get("priority", 0), vm["name"])

    for vm in sorted(preempted, key=order):
        name = vm["name"]
        home = view.home(name)
        target = hosts.get(home) or {}
        if name not in by_name or not target.get("alive") or target.get("maintenance"):
            waiting.append({"vm": name, "why": f"its home {home} is not up"})
        elif not fits(load[home], sizes.get(name, {}), capacity[home]):
            waiting.append({"vm": name, "why": f"no room on {home} yet"})
        else:
            for r, amount in sizes.get(name, {}).items():
                load[home][r] += amount
            restart.append(_start(vm, by_name[name]["domain"], target["uri"], home,
                                  cluster))
    return restart, waiting
