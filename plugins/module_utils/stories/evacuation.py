# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an evacuation does, worked out from the cluster as it is now (cluster_status),
the VDM and each VM's provisioning item. Pure Python, no I/O; playbooks/evacuate.yml
carries it out step by step.

etcd is the truth about which hosts failed: a hypervisor whose liveness key is gone
and that is not in maintenance. Every step is stated so that a rerun, after a crash
halfway or alongside a concurrent run, does what is left and nothing twice:
- a VM's claim compares its record's revision as it was read, so only one run claims
  it (module_utils/cluster/vm_records.py);
- a VM whose record already names its target (claimed by an earlier run) is started
  there again, which libvirt makes a no-op if it runs;
- a VM whose record names a host that is alive is left alone.

A failed host is fenced at the Ceph addresses the inventory declares for it
(yasco_ceph_addrs), never at those its agent registered: root on a hypervisor writes
that registration, and could name another host's address or a whole range there, then
stop its heartbeat for the evacuation to fence its victims. A registration that names
an address not declared for its host is refused and reported.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.vm_records import ACTIVE
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_placement import (
    first_room, host_loads, take)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import (
    VdmView, ha_view)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (
    problems_text)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    failure_set_key)


class EvacuationError(Exception):
    """The inputs cannot be evacuated as they are; the message says why."""


def failed_hosts(status: dict[str, Any]) -> list[str]:
    """Hypervisors etcd sees as failed: no liveness key, and not in maintenance; or
    in maintenance, gone down without their agent's clean stop while VMs are still
    recorded running there (etcd_keys.died_in_maintenance: a crash during a drain)."""
    busy = {(vm.get("record") or {}).get("host") for vm in ClusterView(status).vms.values()
            if (vm.get("record") or {}).get("state") in ACTIVE}
    return sorted(h["name"] for h in ClusterView(status).hosts.values()
                  if not h.get("alive") and (not h.get("maintenance") or (
                      etcd_keys.died_in_maintenance(h) and h["name"] in busy)))


def plan(status: dict[str, Any], vdm: dict[str, Any], items: list[dict[str, Any]],
         cluster: str = etcd_keys.DEFAULT_CLUSTER) -> dict[str, Any]:
    """The evacuation of every failed hypervisor, as one failure set."""
    view = VdmView(vdm)
    if not view.planned:
        raise EvacuationError("no VDM: plan one with playbooks/plan.yml")
    failed = failed_hosts(status)
    observed = ClusterView(status)
    hosts = observed.hosts
    # No VM is started on a host in maintenance (drained or draining), still fenced
    # from an earlier failure, or cut off from Ceph: the plan for the larger set
    # avoids them.
    unusable = sorted(h for h, host in hosts.items()
                      if h not in failed and not etcd_keys.takes_vms({**host, "alive": True}))
    unknown = sorted(set(failed) - set(view.hosts))
    if unknown:
        raise EvacuationError(f"{', '.join(unknown)}: not in the VDM; re-plan with the "
                              "current hypervisors")
    by_name = {item["name"]: item for item in items}
    vms = observed.vms
    kinds = view.kinds()
    failover = view.failover_for(failed + unusable) if failed else {
        "targets": {}, "preempt": [], "down": [], "planned": True}
    requested = observed.requested
    if not failover.get("planned", True):
        failover = _best_effort_now(observed, vdm, failed, unusable)
    start: list[dict[str, Any]] = []
    down: list[dict[str, Any]] = []
    settled: list[str] = []
    for name in sorted(vms):
        record = vms[name].get("record") or {}
        where = _lives_on(record, vms[name], failed)
        kind = kinds.get(name)
        wanted = requested.get(name, "started")
        if wanted in ("disabled", "ignored") and kind == "ha":
            continue  # HA leaves it alone: its record stays as it is
        # A copy on a live host (a move that landed before its source failed) is no
        # VM down: whatever moved it records it there.
        elsewhere = [h for h in vms[name].get("running_on") or [] if h not in failed]
        if kind != "ha" or name not in by_name or wanted == "stopped":
            if where in failed and record.get("state") in ACTIVE and not elsewhere:
                down.append(_marked_down(vms[name], cluster,
                                         "stopped" if wanted == "stopped" else "down"))
            continue
        if where in failed and record.get("state") in ACTIVE and elsewhere:
            # An HA VM a live host runs (a move that landed there before its source
            # failed, the record still saying migrating): started elsewhere it would
            # run twice. Whatever moved it records it there, or the reconciler does.
            settled.append(name)
        elif where in failed and record.get("state") in ACTIVE:
            target = failover["targets"].get(name)
            home = view.home(name)
            if (target is None and failover["planned"] and home not in failed
                    and home not in unusable):
                # It was away from home, and home is up (beyond the plan, the best
                # effort tried home first, and found no room there).
                target = home
            if target is None:
                down.append(_marked_down(vms[name], cluster))
                continue
            start.append(_start(by_name[name], vms[name], target, hosts, cluster, claim=True))
        elif record.get("from") in failed and record.get("state") == "starting":
            # Claimed by an earlier run that stopped before starting it.
            start.append(_start(by_name[name], vms[name], where, hosts, cluster, claim=False))
        elif (record.get("state") == "running" and view.home(name) in failed
              and where not in failed):
            settled.append(name)  # evacuated already (or never at home)
    preempt = [preempt_step(name, vms.get(name, {}), hosts, cluster)
               for name in failover["preempt"]
               if vms.get(name, {}).get("running_on")]
    start.sort(key=lambda s: (-s["priority"], s["vm"]))
    fence = [{"host": h, "addresses": ceph_addrs(hosts.get(h, {}))} for h in failed]
    # As a message may show them: a hypervisor wrote them.
    undeclared = {h: _shown(undeclared_addrs(hosts.get(h, {}))) for h in failed}
    return {
        "failed": failed,
        "planned": failover.get("planned", True),
        "avoided": unusable,
        "fence": fence,
        # Registrations that name addresses not declared for their host: refused (the
        # fence is the declared addresses all the same), and reported.
        "undeclared": [{"host": h, "addresses": a} for h, a in undeclared.items() if a],
        "warnings": [undeclared_warning(f["host"], undeclared[f["host"]], f["addresses"])
                     for f in fence if undeclared[f["host"]]],
        # Those with no fence recorded yet: the ones a power fence is for (a host
        # evacuated earlier and still down may be off for repair, its BMC with it).
        # A fence being lifted (its lift may have stopped half-way) is no fence.
        "unfenced": [h for h in failed
                     if not etcd_keys.fence_stands((hosts.get(h) or {}).get("fence"))],
        "fence_records": [{"key": etcd_keys.fence_key(f["host"], cluster=cluster),
                           "value": {"by": "evacuate", "method": "ceph-blocklist",
                                     "ceph_addrs": f["addresses"],
                                     "boot_id": (hosts.get(f["host"], {}).get("registered")
                                                 or {}).get("boot_id")}} for f in fence],
        "images": sorted({image for s in start for image in s["images"]}),
        "preempt": preempt,
        "start": start,
        "targets": sorted({s["to"] for s in start}),
        "down": down,
        "left_down": list(failover.get("down", [])),
        "settled": settled,
        "events": [{"kind": "fenced", "host": f["host"],
                    "details": {"ceph_addrs": f["addresses"], **(
                        {"undeclared_ceph_addrs": undeclared[f["host"]]}
                        if undeclared[f["host"]] else {})}} for f in fence]
        + [{"kind": "preempted", "vm": p["vm"], "host": p["host"]} for p in preempt],
    }


def _best_effort_now(cluster_view: ClusterView, vdm: dict[str, Any], failed: list[str],
                     unusable: list[str]) -> dict[str, Any]:
    """More hosts out than the map plans for: the failed hosts' HA VMs, highest
    priority first, each on the first host with room in the reconciler's order (home,
    its planned chain, then the roomiest), stopping preemptible VMs where that makes
    room; those that find none stay down. Room is counted from what runs on each host
    and what etcd records there now, as the reconciler counts it: the VDM's homes no
    longer say it once VMs of an earlier failure run on their targets."""
    vms, requested = cluster_view.vms, cluster_view.requested
    sizes = ha_view(vdm)
    entries = sizes["vms"]
    observed = {"vdm": sizes, "records": {n: (vm.get("record") or {}, 0)
                                          for n, vm in vms.items()}}
    free, preemptible, labels = host_loads(observed, {
        n: [h for h in vm.get("running_on") or [] if h not in failed]
        for n, vm in vms.items()})
    usable = {h for h in cluster_view.hosts
              if h in sizes["hosts"] and h not in failed and h not in unusable}
    displaced = sorted(
        (n for n, vm in vms.items()
         if entries.get(n, {}).get("kind") == "ha"
         and requested.get(n, "started") == "started"
         and _lives_on(vm.get("record") or {}, vm, failed) in failed
         and (vm.get("record") or {}).get("state") in ACTIVE),
        key=lambda n: (-int(entries[n].get("priority", 0)), n))
    targets: dict[str, str] = {}
    preempt: list[str] = []
    down: list[str] = []
    for name in displaced:
        room = first_room(name, entries[name], usable, free, preemptible, labels, entries)
        if room is None:
            down.append(name)
            continue
        host, stop = room
        take(name, host, free, preemptible, entries, stop)
        targets[name], preempt = host, preempt + stop
        labels[host] = labels.get(host, set()) | set(entries[name].get("anti_affinity", []))
    return {"failed": failure_set_key(set(failed + unusable)), "planned": False,
            "targets": targets, "preempt": preempt, "down": down}


def _lives_on(record: dict[str, Any], vm: dict[str, Any], failed: list[str]) -> str | None:
    """The host whose failure the VM shares: the recorded one; but for a live
    migration to a host that failed meanwhile (a return home cut short, say), that
    host, once the VM runs on no live host: the failed host ran its only copy. Should
    the source still run it after all, its disk lock, held by a live client, keeps it
    from starting (after_fence), and the migration's own ending records it."""
    if (record.get("state") == "migrating" and record.get("to") in failed
            and record.get("host") not in failed
            and not [h for h in vm.get("running_on") or [] if h not in failed]):
        return record["to"]
    return record.get("host")


def after_fence(evacuation: dict[str, Any], fence: dict[str, Any]) -> dict[str, Any]:
    """The evacuation less the VMs the fence (ceph_fence's result) says must not
    start: those whose disk a live client elsewhere still holds (`locks_kept`: a
    concurrent run started them, or something runs them that etcd does not know),
    reported in `held`; and those with a disk that does not exist
    (`images_missing`), reported in `missing`. The others start all the same."""
    holders: dict[str, str] = {}
    for lock in fence.get("locks_kept") or []:
        holders.setdefault(lock["image"], lock["owner"])
    absent = set(fence.get("images_missing") or [])
    held = [{"vm": s["vm"], "images": {i: holders[i] for i in s["images"] if i in holders}}
            for s in evacuation["start"] if any(i in holders for i in s["images"])]
    missing = [{"vm": s["vm"], "images": sorted(absent.intersection(s["images"]))}
               for s in evacuation["start"] if absent.intersection(s["images"])]
    names = {h["vm"] for h in held + missing}
    start = [s for s in evacuation["start"] if s["vm"] not in names]
    return {**evacuation, "start": start, "held": held, "missing": missing,
            "targets": sorted({s["to"] for s in start}), "writes": writes(start, evacuation)}


def writes(start: list[dict[str, Any]], evacuation: dict[str, Any]) -> list[dict[str, Any]]:
    """The etcd writes of the fence play, in the order made: the claims of the VMs to
    start first, then the records of the VMs stopped or left down. The other way
    round, a reconciler reading between the two would see a VM left down and a
    target's room not yet claimed, and send the VM there too."""
    return ([s["claim"] for s in start if s.get("claim")]
            + [step["record"] for step in evacuation["preempt"] + evacuation["down"]])


def ceph_addrs(host: dict[str, Any]) -> list[str]:
    """The host's Ceph client addresses (cluster_status' entry), as the inventory
    declares them: what a fence of it blocklists, and where the clients whose locks
    are the host's are. Never what its agent registered (see the docstring above)."""
    return list(host.get("ceph_addrs") or [])


def registered_addrs(host: dict[str, Any]) -> list[str]:
    """The Ceph addresses the host's agent registered (its `ceph_addrs`, else its
    `address`), as text: data to check against the declared ones, never a target."""
    registered = host.get("registered")
    if not isinstance(registered, dict):
        return []
    given = registered.get("ceph_addrs") or registered.get("address") or []
    return [str(a) for a in (given if isinstance(given, list) else [given])]


def undeclared_addrs(host: dict[str, Any]) -> list[str]:
    """The addresses the host's agent registered that the inventory does not declare
    for it: a range, another host's address, or an inventory that is wrong."""
    declared = {_same(a) for a in ceph_addrs(host)}
    return list(dict.fromkeys(a for a in registered_addrs(host) if _same(a) not in declared))


def _same(address: str) -> str:
    """An address as Python writes it, so that fd00::1 and fd00:0::0001 compare equal;
    anything else (a range, a name) as it is."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


# The most of a registration's addresses a warning or an event lists: a hypervisor
# wrote them, and could write thousands.
SHOWN = 16


def _shown(addresses: list[str]) -> list[str]:
    """Registered addresses for a message or an event: each as it is when it looks like
    one, else quoted on one line; the first SHOWN of them, and how many more."""
    shown = [a if re.fullmatch(r"[\w.:/\[\]%-]{1,64}", a, re.ASCII) else repr(a[:64])
             for a in addresses[:SHOWN]]
    return shown + ([f"... {len(addresses) - SHOWN} more"] if len(addresses) > SHOWN else [])


def undeclared_warning(host: str, undeclared: list[str], declared: list[str]) -> str:
    """What the evacuation says of a failed host whose registration named addresses
    the inventory does not declare for it (`undeclared`, as _shown)."""
    return (f"{host}'s agent registered Ceph addresses the inventory does not declare for "
            f"it ({', '.join(undeclared)}): refused, not fenced; its "
            f"fence blocklists its declared ones only ({', '.join(declared) or 'none'}). "
            "An agent registers its own host's addresses: check the host for tampering; "
            f"or, if its yasco_ceph_addrs is what is wrong, correct it and fence the "
            f"addresses it missed by hand (yasco.cluster.ceph_fence).")


def declared_ceph_addrs(hypervisors: list[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Each hypervisor's Ceph addresses, from its inventory variables (hostvars, each
    with its `inventory_hostname`): `yasco_ceph_addrs`; by default `agent_ceph_addrs`
    where the inventory sets it (what the agent role configures), else its
    `ansible_host` when that is an IP address, else none (its fence is refused).
    A ValueError names every host and field that is not a list of plain IP addresses."""
    declared: dict[str, list[str]] = {}
    problems: list[str] = []
    for hostvars in hypervisors:
        name = str(hostvars.get("inventory_hostname"))
        where = f"host {name}: yasco_ceph_addrs"
        given = hostvars.get("yasco_ceph_addrs")
        if given is None and hostvars.get("agent_ceph_addrs") is not None:
            where = f"host {name}: agent_ceph_addrs (yasco_ceph_addrs' default)"
            given = hostvars.get("agent_ceph_addrs")
        if given is None:
            default = str(hostvars.get("ansible_host") or "")
            declared[name] = [_same(default)] if _is_address(default) else []
            continue
        try:
            declared[name] = ceph.host_addresses(given, where)
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ValueError(problems_text("invalid yasco_ceph_addrs", problems))
    return declared


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def images_of(item: dict[str, Any]) -> list[str]:
    """The RBD images (pool/name) of a VM's provisioning item, in its disks' order."""
    return [d["rbd"] for d in item["domain"]["spec"].get("disks", []) if d.get("rbd")]


def _start(item: dict[str, Any], vm: dict[str, Any], target: str,
           hosts: dict[str, Any], cluster: str, claim: bool) -> dict[str, Any]:
    """Starting VM `item` on `target`: its claim, unless an earlier run's stands (the
    record then says starting there), and its record once it runs."""
    record = vm.get("record") or {}
    source = record.get("host") if claim else record.get("from")
    claimed = (vm_records.claim(vm, vm_records.STARTING, target, cluster, **{"from": source})
               if claim else None)
    uri = hosts.get(target, {}).get("uri") or item["uri"]
    return {
        "vm": item["name"], "from": source, "to": target, "uri": uri,
        "priority": item.get("priority", 0), "images": images_of(item),
        # libvirt_domain's options: defined and started on the target.
        "domain": {**item["domain"], "uri": uri},
        "claim": claimed,
        # The same shape as provisioning's, which rebalance and return home compare.
        "record": (vm_records.complete(claimed, vm_records.RUNNING, target) if claimed
                   else vm_records.change(vm, vm_records.RUNNING, target, cluster)),
        "event": {"vm": item["name"], "host": target, "details": {"from": source}},
    }


def _marked_down(vm: dict[str, Any], cluster: str, state: str = vm_records.DOWN
                 ) -> dict[str, Any]:
    host = (vm.get("record") or {}).get("host")
    return {"vm": vm["name"], "host": host,
            "record": vm_records.change(vm, state, host, cluster)}


def preempt_step(name: str, vm: dict[str, Any], hosts: dict[str, Any],
                 cluster: str) -> dict[str, Any]:
    """Stopping a preemptible VM where it runs (cluster_status' entry `vm`): its
    domain (an element of libvirt_domain's batch) and its record, preempted."""
    host = vm["running_on"][0]
    return {"vm": name, "host": host,
            "domain": {"name": name, "uri": hosts.get(host, {}).get("uri")},
            "record": vm_records.change(vm, vm_records.PREEMPTED, host, cluster)}


def refusals(evacuation: dict[str, Any], status: dict[str, Any],
             while_disarmed: bool = False) -> list[str]:
    """Why the evacuation must not go on, before it changes anything, each reason
    saying what to do: HA disarmed (unless `while_disarmed`), or a failed host with no
    Ceph address declared in the inventory, where its fence would blocklist."""
    reasons = []
    disarmed = ClusterView(status).ha_disarmed
    if disarmed is not None and not while_disarmed:
        reasons.append(
            f"HA is disarmed by {disarmed.get('by') or '?'} since "
            f"{disarmed.get('since') or '?'} ({disarmed.get('reason') or '-'}): not "
            "evacuating. Re-arm with playbooks/disarm.yml -e yasco_ha_disarmed=false, and "
            "the watcher evacuates what failed; or run this with "
            "-e yasco_evacuate_while_disarmed=true.")
    silent = [f["host"] for f in evacuation.get("fence") or [] if not f["addresses"]]
    if silent:
        reasons.append(
            f"{', '.join(silent)}: no Ceph address declared in the inventory "
            "(yasco_ceph_addrs, by default the host's ansible_host when that is an IP "
            "address), and a host is fenced at its declared addresses only, never at "
            "those its agent registered: declare them, or fence the host by hand "
            "(yasco.cluster.ceph_fence), then run this again.")
    return reasons


def outcome(evacuation: dict[str, Any], started: list[str], fence: dict[str, Any],
            powered: dict[str, Any], triggered: list[str] | None,
            times: dict[str, float]) -> dict[str, Any]:
    """What the evacuation came to, from its plan after the fence (after_fence), the
    VMs that started, the fence's result (host_fence), the power fencing's
    (power_fence.outcome; empty without one), the hosts the run was triggered for
    and its times (`started`, `fenced`, `done`, seconds since the epoch): the VMs
    started and not, the history's events, the summary's lines (with a warning for each
    registration not declared) and the notification's severity and details."""
    done = [s for s in evacuation.get("start") or [] if s["vm"] in started]
    not_started = [s["vm"] for s in evacuation.get("start") or [] if s["vm"] not in started]
    failed = evacuation.get("failed") or []
    held = [h["vm"] for h in evacuation.get("held") or []]
    missing = [m["vm"] for m in evacuation.get("missing") or []]
    preempted = [p["vm"] for p in evacuation.get("preempt") or []]
    down = [d["vm"] for d in evacuation.get("down") or []]
    addresses = [a for f in evacuation.get("fence") or [] for a in f["addresses"]]
    fenced = bool(fence.get("changed"))
    # A fence that an earlier run already put up is no news in the history.
    events = ([e for e in evacuation.get("events") or [] if e["kind"] != "fenced" or fenced]
              + [{**s["event"], "kind": "evacuated"} for s in done])

    def listed(names: list[str]) -> str:
        return ", ".join(names) or "-"

    power = f"powered off by their BMCs: {listed(powered.get('powered_off') or [])}"
    if powered.get("confirmed"):
        power += f"; confirmed off by the operator: {', '.join(powered['confirmed'])}"
    if powered.get("errors"):
        power += (f"; not: {'; '.join(powered['errors'])} (relying on the Ceph fence and "
                  "the watchdog)")
    moved = [f"{s['vm']} on {s['to']}" for s in done]
    seconds = {k: float(times[k]) - float(times["started"])
               for k in ("fenced", "done") if k in times and "started" in times}
    lines = [
        f"failed: {', '.join(failed) or 'none'} "
        f"({'planned' if evacuation.get('planned', True) else 'beyond the plan: best effort'})",
        f"fenced: {listed(addresses)}; "
        f"{len(fence.get('locks_broken') or [])} disk locks broken",
        *(f"WARNING: {w}" for w in evacuation.get("warnings") or []),
        power,
        f"started: {listed(moved)}",
        f"did not start: {listed(not_started)}",
        f"already evacuated: {listed(evacuation.get('settled') or [])}",
        f"held by a live client elsewhere, not started: {listed(held)}",
        f"disk missing, not started: {listed(missing)}",
        f"preempted: {listed(preempted)}",
        f"left down: {listed(down)}",
        "seconds: " + (", ".join(f"{what} {value:.1f}" for what, value in (
            ("fenced", seconds.get("fenced")), ("all started", seconds.get("done")))
            if value is not None) or "-"),
    ]
    if triggered is not None and sorted(triggered) != failed:
        lines.insert(0, f"triggered for {', '.join(triggered) or 'nothing'}, but etcd sees "
                        f"{', '.join(failed) or 'no failed hypervisor'}: went by etcd")
    left_down = list(evacuation.get("left_down") or [])
    # A registration not declared: a host tampered with, or an inventory whose fence
    # may have missed the host's real addresses.
    undeclared = {u["host"]: u["addresses"] for u in evacuation.get("undeclared") or []}
    return {
        "done": done, "not_started": not_started, "events": events, "lines": lines,
        "severity": ("critical" if not_started or left_down or missing or undeclared
                     else "warning"),
        "details": {"failed": failed, "started": {s["vm"]: s["to"] for s in done},
                    "not_started": not_started, "preempted": preempted,
                    "powered_off": powered.get("powered_off") or [],
                    "power_errors": powered.get("errors") or [],
                    # HA VMs no spare slot was left for, and the others recorded down.
                    "left_down": left_down, "down": down,
                    # Failed host -> the addresses it registered, not declared for it.
                    "undeclared_ceph_addrs": undeclared,
                    "seconds": seconds.get("done")},
    }
