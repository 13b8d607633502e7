# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the HA reconciler may start a VM: each host's free room, preemptible VMs and
anti-affinity labels, from what runs there and what etcd records as meant to run
there; the preemptible VMs to stop to make room; the hosts to try, best first. Pure
Python, no I/O.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.cluster.vm_records import (
    ACTIVE, MIGRATING)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import (
    capacity, size)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import RESOURCES


def host_loads(observed: dict[str, Any], on: dict[str, list[str]]) -> tuple[
        dict[str, dict[str, float]], dict[str, list[str]], dict[str, set[str]]]:
    """Each host's free room, its preemptible VMs and its anti-affinity labels, from
    what runs there and what etcd records as meant to run there: a live migration's
    VM on its source and on its destination alike."""
    view = observed["vdm"]
    vms = view.get("vms", {})
    free = {h: capacity(c) for h, c in view.get("hosts", {}).items()}
    residents: dict[str, set[str]] = {h: set() for h in free}
    for vm, hosts in on.items():
        for host in hosts:
            residents.setdefault(host, set()).add(vm)
    for vm, (record, dummy) in observed["records"].items():
        if record.get("state") in ACTIVE and record.get("host") in residents:
            residents[record["host"]].add(vm)
    # A live migration under way holds room on both ends until it lands; on its
    # destination it is no VM to stop to make room, it runs on its source.
    incoming: dict[str, set[str]] = {h: set() for h in residents}
    for vm, (record, dummy) in observed["records"].items():
        if (record.get("state") == MIGRATING and record.get("to") in incoming
                and vm not in residents[record["to"]]):
            incoming[record["to"]].add(vm)
    preemptible: dict[str, list[str]] = {h: [] for h in residents}
    labels: dict[str, set[str]] = {h: set() for h in residents}
    for host, names in residents.items():
        for vm in names | incoming[host]:
            entry = vms.get(vm, {})
            if host in free:
                for r, used in size(entry).items():
                    free[host][r] -= used
            if entry.get("kind") == "preemptible" and vm in names:
                preemptible[host].append(vm)
            labels[host] |= set(entry.get("anti_affinity", []))
    return free, preemptible, labels


def _fits(need: dict[str, float], room: dict[str, float]) -> bool:
    return all(room.get(r, float("inf")) >= need[r] for r in RESOURCES)


def make_room(vm: str, host: str, free, preemptible, vms) -> list[str] | None:
    """The preemptible VMs on `host` to stop so that `vm` fits, lowest priority and
    largest first; [] when it fits as it is; None when it cannot fit."""
    need = size(vms.get(vm, {}))
    room = dict(free.get(host, {}))
    stop: list[str] = []
    for name in sorted(preemptible.get(host, []),
                       key=lambda n: (int(vms.get(n, {}).get("priority", 0)),
                                      -size(vms.get(n, {}))["memory_mb"], n)):
        if _fits(need, room):
            break
        stop.append(name)
        for r, used in size(vms.get(name, {})).items():
            room[r] += used
    return stop if _fits(need, room) else None


def take(vm: str, host: str, free, preemptible, vms, preempt: list[str]) -> bool:
    """Whether `vm` fits on `host` once the preemptible VMs `preempt` there stop; if
    it does, its room is taken: `free` and `preemptible` then say what is left for the
    VMs after it. A host of unknown capacity takes anything."""
    if host not in free:
        return True
    room = dict(free[host])
    stopping = [n for n in preempt if n in preemptible.get(host, [])]
    for name in stopping:
        for r, used in size(vms.get(name, {})).items():
            room[r] += used
    need = size(vms.get(vm, {}))
    if not _fits(need, room):
        return False
    free[host] = {r: room[r] - need.get(r, 0) for r in room}
    for name in stopping:
        preemptible[host].remove(name)
    return True


def candidates(vm: str, entry: dict[str, Any], usable: set[str], free) -> list[str]:
    """Where `vm` may go, best first: home, its planned failover chain, then every
    other usable host it is allowed on, roomiest first."""
    planned = [entry.get("home")] + list(entry.get("chain", []))
    allowed = set(entry.get("allowed") or usable)
    ordered = [h for i, h in enumerate(planned) if h and h not in planned[:i]]
    others = sorted((h for h in usable if h not in ordered),
                    key=lambda h: (-free.get(h, {}).get("memory_mb", float("inf")), h))
    return [h for h in ordered + others if h in usable and h in allowed]


def first_room(vm: str, entry: dict[str, Any], usable: set[str], free, preemptible,
               labels: dict[str, set[str]], vms, exclude=()) -> tuple[str, list[str]] | None:
    """The first host in `candidates` order, not in `exclude` and holding no VM that
    shares an anti-affinity label with `vm`, where `vm` fits once preemptible VMs there
    stop, and those VMs (make_room); None when there is none."""
    mine = set(entry.get("anti_affinity", []))
    for host in candidates(vm, entry, usable, free):
        if host in exclude or mine & labels.get(host, set()):
            continue
        stop = make_room(vm, host, free, preemptible, vms)
        if stop is not None:
            return host, stop
    return None
