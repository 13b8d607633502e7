# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The whole cluster's power: what an emergency shutdown stops, in which order, and
what a cold start brings back. Pure Python, no I/O; playbooks/emergency_shutdown.yml
and playbooks/cold_start.yml carry it out.

Both go by tiers of equal rank, so that what matters most runs longest and comes back
first: preemptible VMs rank lowest, then every other VM by its priority, an HA VM
before a plain one of the same priority. A shutdown goes from the lowest tier up, a
cold start from the highest down.

A cold start starts a VM only where it is safe: at its VDM home, on a hypervisor that
is alive in etcd and answers over libvirt, when no reachable hypervisor runs it and
etcd does not record it on a hypervisor left out (that one might still run it).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import VdmView
from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import images_of
from ansible_collections.yasco.cluster.plugins.module_utils.stories.return_home import unfence

# Who wrote the maintenance markers and the disarm flag of an emergency shutdown: a
# cold start lifts these, and leaves an operator's own; the watcher drains nothing
# for them.
EMERGENCY = etcd_keys.EMERGENCY_SHUTDOWN


# A client instance, as Ceph names one: ip:port/nonce.
CLIENT_ADDRESS = re.compile(r"[^/\s]+:\d+/\d+")


class PowerError(Exception):
    """The inputs cannot be acted on as they are; the message says why."""


def rank(kind: str, priority: int) -> list[int]:
    """A VM's place in the order: higher runs longer and starts first."""
    return [0 if kind == "preemptible" else 1, int(priority or 0), 1 if kind == "ha" else 0]


def _tier_label(key: list[int]) -> str:
    if key[0] == 0:
        return f"preemptible, priority {key[1]}"
    return f"{'HA' if key[2] else 'plain'}, priority {key[1]}"


def _tiers(entries: list[dict[str, Any]], descending: bool) -> list[dict[str, Any]]:
    keys = sorted({tuple(e["rank"]) for e in entries}, reverse=descending)
    return [{"label": _tier_label(list(key)),
             "vms": sorted((e for e in entries if tuple(e["rank"]) == key),
                           key=lambda e: e["vm"])} for key in keys]


def _check_vdm(vdm: dict[str, Any]) -> None:
    if not VdmView(vdm).planned:
        raise PowerError("no VDM: plan one with playbooks/plan.yml")


def _priorities(vdm: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, int]:
    """Each VM's priority: the VDM's, else its provisioning item's."""
    out = {item["name"]: int(item.get("priority") or 0) for item in items}
    for name, entry in VdmView(vdm).vms.items():
        out[name] = int(entry.get("priority", out.get(name, 0)) or 0)
    return out


def shutdown_plan(status: dict[str, Any], vdm: dict[str, Any], items: list[dict[str, Any]],
                  cluster: str = etcd_keys.DEFAULT_CLUSTER, at: str = "") -> dict[str, Any]:
    """Every VM that runs, by tier from the lowest, with the host it runs on; and the
    hypervisors libvirt could not reach, whose VMs are not known."""
    _check_vdm(vdm)
    uris = ClusterView(status).uris
    priorities = _priorities(vdm, items)
    entries = []
    for vm in ClusterView(status).vms.values():
        for host in vm.get("running_on") or []:
            # A domain YASCO does not know still goes down, in the lowest plain tier.
            kind = vm.get("kind") or "plain"
            entries.append({"vm": vm["name"], "host": host, "uri": uris.get(host),
                            "domain": {"name": vm["name"], "uri": uris.get(host)},
                            "kind": kind, "rank": rank(kind, priorities.get(vm["name"], 0)),
                            "record": vm.get("record"),
                            "record_key": etcd_keys.vm_key(vm["name"], cluster=cluster)
                            if vm.get("record") is not None else None})
    return {
        "hosts": sorted(uris),
        "unreachable": sorted(h["name"] for h in ClusterView(status).hosts.values()
                              if h.get("libvirt") != "reachable"),
        "tiers": _tiers(entries, descending=False),
        # Created only where none is: a drain's or an operator's marker says more.
        "markers": [{"key": etcd_keys.maintenance_key(h["name"], cluster=cluster),
                     "value": {"by": EMERGENCY, "reason": "emergency shutdown", "since": at},
                     "if_revision": 0}
                    for h in ClusterView(status).hosts.values() if not h.get("maintenance")],
        "vms": len(entries),
    }


def tier_timeout(deadline_at: float, now: float, tiers_left: int, longest: float,
                 reserve: float) -> float:
    """Seconds the guests of the next tier get to shut down: at most `longest`, and
    an even share of what is left before the deadline, less `reserve` for what comes
    after the tiers (stopping the agents). Never below 1: a guest asked to shut down
    is destroyed after it, so the deadline holds."""
    left = deadline_at - now - reserve
    return round(max(1.0, min(float(longest), left / max(1, int(tiers_left)))), 1)


def shutdown_fates(plan: dict[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each VM's fate, from the registered results of the tiers' libvirt_domain batches
    (one per tier and host): shut down, destroyed after its timeout, or failed."""
    outcome: dict[str, dict[str, Any]] = {}
    for result in results:
        for item in result.get("results") or []:
            if not item:
                continue
            if item.get("failed"):
                fate = "FAILED: " + str(item.get("msg", "failed"))
            elif "destroy" in (item.get("actions") or []):
                fate = "destroyed (the guest ignored the shutdown request)"
            elif "shutdown" in (item.get("actions") or []):
                fate = "shut down"
            else:
                fate = "already off"
            outcome[item.get("name")] = {"fate": fate, "ok": not item.get("failed")}
    unreached = {"fate": "NOT REACHED (the deadline passed or its host failed)", "ok": False}
    fates = []
    for tier in plan["tiers"]:
        for vm in tier["vms"]:
            got = outcome.get(vm["vm"], unreached)
            fates.append({"vm": vm["vm"], "host": vm["host"], "tier": tier["label"], **got})
    return fates


def stopped_records(fates: list[dict[str, Any]], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of the VMs that are off now: stopped on their host by the emergency
    shutdown. A cold start starts them again."""
    by_vm = {(vm["vm"], vm["host"]): vm for tier in plan["tiers"] for vm in tier["vms"]}
    out = []
    for fate in fates:
        entry = by_vm[(fate["vm"], fate["host"])]
        if fate["ok"] and entry["record_key"]:
            out.append(vm_records.overwrite(entry["record_key"], vm_records.STOPPED,
                                            fate["host"], by=EMERGENCY))
    return out


def cold_start_plan(status: dict[str, Any], vdm: dict[str, Any], items: list[dict[str, Any]],
                    without: list[str] | None = None,
                    cluster: str = etcd_keys.DEFAULT_CLUSTER) -> dict[str, Any]:
    """What a cold start does: the hypervisors to wait for, the fences to lift, the VMs
    to start at home by tier from the highest, the markers to lift, and the VMs left
    down with why."""
    _check_vdm(vdm)
    without = sorted(set(without or []))
    hosts = ClusterView(status).hosts
    unknown = sorted(set(without) - set(hosts))
    if unknown:
        raise PowerError(f"yasco_cold_start_without: {', '.join(unknown)} is not a hypervisor "
                         f"of the inventory ({', '.join(sorted(hosts))})")
    missing = sorted(name for name, h in hosts.items() if name not in without and (
        not h.get("alive") or h.get("libvirt") != "reachable"))
    up = sorted(name for name in hosts if name not in without and name not in missing)
    fences, still_fenced = [], []
    for name in up:
        fence = hosts[name].get("fence")
        if not fence:
            continue
        if fence.get("boot_id") and fence.get("boot_id") == hosts[name].get("boot_id"):
            still_fenced.append(name)  # the same boot: it may still hold what it ran
        else:
            fences.append(name)
    # A host a drain or an operator put in maintenance takes no VM: the watcher would
    # not evacuate it from there.
    held = sorted(h for h in up if hosts[h].get("maintenance") and (
        hosts[h].get("maintenance_marker") or {}).get("by") not in (EMERGENCY, "agent"))
    usable = [h for h in up if h not in still_fenced and h not in held]
    by_name = {item["name"]: item for item in items}
    priorities = _priorities(vdm, items)
    view = VdmView(vdm)
    kinds = view.kinds("plain")
    start, running, left = [], [], []
    for vm in ClusterView(status).vms.values():
        name, record = vm["name"], vm.get("record") or {}
        home = view.home(name)
        if vm.get("running_on"):
            running.append({"vm": name, "host": vm["running_on"][0]})
            continue
        target, why = _where(name, home, record, by_name, usable, without, missing,
                             still_fenced, held)
        if why:
            left.append({"vm": name, "why": why})
            continue
        item = by_name[name]
        uri = hosts[target].get("uri") or item["uri"]
        claimed = vm_records.claim(vm, vm_records.STARTING, target, cluster, by="cold_start")
        start.append({
            "vm": name, "host": target, "rank": rank(kinds.get(name, item["kind"]),
                                                     priorities.get(name, 0)),
            "images": images_of(item), "domain": {**item["domain"], "uri": uri},
            "ref": {"name": name, "uri": uri},
            "claim": claimed,
            "record": vm_records.complete(claimed, vm_records.RUNNING, target),
            "event": {"kind": "started", "vm": name, "host": target}})
    return {
        "wait_for": sorted(set(hosts) - set(without)),
        "missing": missing,
        "up": up,
        "without": without,
        "unfence": [_unfence(hosts[name], cluster) for name in fences],
        "still_fenced": still_fenced,
        "in_maintenance": held,
        "tiers": _tiers(start, descending=True),
        "images": sorted({i for s in start for i in s["images"]}),
        "running": running,
        "left_down": left,
        # The emergency shutdown's markers on the hosts that are back; a drain's or an
        # operator's stays.
        "markers": [{"key": etcd_keys.maintenance_key(h, cluster=cluster), "state": "absent",
                     "if_value": hosts[h]["maintenance_marker"]} for h in usable
                    if (hosts[h].get("maintenance_marker") or {}).get("by") == EMERGENCY],
    }


def _where(name, home, record, by_name, usable, without, missing, still_fenced,
           held) -> tuple[str | None, str]:
    """Where a VM that runs nowhere starts: its home, or, when its home cannot take
    it, the host etcd records it on, where it ran last; or why it stays down."""
    if name not in by_name or home is None:
        return None, "not in yasco_vms and the VDM: plan again, or remove it (remove_vm.yml)"
    recorded = record.get("host")
    if recorded in without and recorded != home:
        return None, (f"etcd records it on {recorded}, which is left out and may still run "
                      f"it: start it once {recorded} is back or fenced")
    if home in usable:
        return home, ""
    if recorded in usable:
        return recorded, ""
    if home in without:
        return None, f"its home {home} is left out: run cold_start.yml again once it is back"
    if home in missing:
        return None, f"its home {home} is not up: run cold_start.yml again once it is back"
    if home in still_fenced:
        return None, (f"its home {home} is fenced and has not rebooted since: run "
                      f"return_home.yml -e yasco_host={home}")
    if home in held:
        return None, (f"its home {home} is in maintenance: undrain it (undrain.yml "
                      f"-e yasco_host={home}), then run this again")
    return None, f"its home {home} cannot take it"


def _unfence(host: dict[str, Any], cluster: str) -> dict[str, Any]:
    """Lifting a rebooted host's fence, as the return home lifts it."""
    if not host["fence"].get("ceph_addrs"):
        raise PowerError(f"{host['name']}: its fence record names no address to unfence: "
                         "lift the blocklist by hand (yasco.cluster.ceph_fence), then run "
                         "this again")
    return {"host": host["name"], **unfence(host["name"], host["fence"], cluster, [])}


def stale_locks(images: list[dict[str, Any]], dead_at: list[str] | None = None
                ) -> dict[str, list[str]]:
    """The disk locks nobody alive holds, from rbd_image_info results: a lock whose
    client has the image open no longer, or whose client is on one of the addresses
    `dead_at` (a host whose libvirt says the VM runs there no more: its QEMU is gone,
    though the OSDs keep its watch for up to 30 s). After a power loss the QEMUs that
    held them are gone; a hypervisor's cephx user may not blocklist, which librbd
    would do to take such a lock over, so the fencer blocklists those client
    instances (harmless, they are dead) and breaks their locks first."""
    addresses: list[str] = []
    names: list[str] = []
    for result in images:
        image = result.get("image") or {}
        if not result.get("exists"):
            continue
        open_by = {w["address"] for w in image.get("watchers") or []}
        # An exclusive lock may name its owner as a client id; the same lock is listed
        # again with the client's address among the lockers.
        held_by = [ceph.lock_address(lock) for lock in image.get("locks") or []]
        dead = [a for a in held_by if CLIENT_ADDRESS.fullmatch(a or "") and (
            a not in open_by or a.rsplit(":", 1)[0].strip("[]") in (dead_at or ()))]
        if dead:
            names.append(f"{image['pool']}/{image['name']}")
            addresses += [a for a in dead if a not in addresses]
    return {"addresses": addresses, "images": names}
