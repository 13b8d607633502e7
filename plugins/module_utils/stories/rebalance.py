# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The live migrations that take VMs from where they run to their VDM homes, in an
order in which no host is ever over capacity.

A move is made only when its destination has room for the VM while every VM still
runs where it is; when no such move is left but VMs are still away from home (a
cycle: A waits for room on B, B for room on A), one of them first hops to a host with
room. Moves are grouped in waves that may run at the same time: a wave's moves
together fit their destinations even before any of them has left its source. Pure
Python, no I/O.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import vm_records
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.cluster_view import ClusterView
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import VdmView
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import RESOURCES

_EPSILON = 1e-9
NOTHING = {r: 0.0 for r in RESOURCES}  # the size of a VM the map does not know


class RebalanceError(Exception):
    """The homes cannot be reached without overloading a host."""


def loads(where: dict[str, str], sizes: dict[str, dict[str, float]],
          capacity: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each host's load with every VM where `where` (VM -> host) has it."""
    load = {h: {r: 0.0 for r in RESOURCES} for h in capacity}
    for name, host in where.items():
        if host in load:
            for r, amount in sizes.get(name, NOTHING).items():
                load[host][r] += amount
    return load


def fits(load: dict[str, float], size: dict[str, float], capacity: dict[str, Any]) -> bool:
    return all(load[r] + size[r] <= float(capacity[r]) + _EPSILON
               for r in RESOURCES if capacity.get(r) is not None)


def room(load: dict[str, float], capacity: dict[str, Any]) -> float:
    """The smallest share of any resource left free on a host."""
    shares = [(float(capacity[r]) - load[r]) / float(capacity[r]) for r in RESOURCES
              if capacity.get(r)]
    return min(shares) if shares else 0.0


def plan_moves(current: dict[str, str], vdm: dict[str, Any],
               only: set[str] | None = None) -> list[dict[str, str]]:
    """Moves (vm, from, to), in order, from `current` (VM -> host it runs on) to the
    VDM's homes, using the sizes and capacities the VDM records; with `only`, of
    those VMs alone (the others stay where they are, and take their room)."""
    view = VdmView(vdm)
    sizes, capacity, home = view.sizes(), view.hosts, view.homes
    unknown = sorted(set(current.values()) - set(capacity))
    if unknown:
        raise RebalanceError(f"VMs run on {', '.join(unknown)}, which the VDM does not know; "
                             "plan again with every hypervisor in the inventory")
    where = dict(current)
    load = loads(where, sizes, capacity)
    pending = {n for n, h in where.items() if n in home and home[n] != h
               and (only is None or n in only)}
    moves: list[dict[str, str]] = []

    def move(name: str, destination: str) -> None:
        source = where[name]
        for r, amount in sizes[name].items():
            load[source][r] -= amount
            load[destination][r] += amount
        where[name] = destination
        moves.append({"vm": name, "from": source, "to": destination})

    # Largest first: they are the hardest to place once the small ones have moved.
    def order(names):
        return sorted(names, key=lambda n: (-sum(sizes[n].values()), n))

    while pending:
        ready = [n for n in order(pending) if fits(load[home[n]], sizes[n], capacity[home[n]])]
        if ready:
            move(ready[0], home[ready[0]])
            pending.discard(ready[0])
            continue
        # A cycle: hop the smallest waiting VM to the roomiest host that takes it.
        for name in reversed(order(pending)):
            hops = [h for h in sorted(capacity) if h not in (where[name], home[name])
                    and fits(load[h], sizes[name], capacity[h])]
            if hops:
                move(name, max(hops, key=lambda h: room(load[h], capacity[h])))
                break
        else:
            waiting = ", ".join(f"{n} ({where[n]} to {home[n]})" for n in order(pending))
            raise RebalanceError(f"no order of live migrations reaches the homes without "
                                 f"overloading a host: {waiting} wait for room and no host "
                                 "has room for a temporary hop; free capacity or plan again")
        if len(moves) > 4 * (len(current) + 1):  # a hop that undoes a hop: stop, not loop
            raise RebalanceError("the moves do not converge; plan again")
    return moves


def waves(moves: list[dict[str, str]], current: dict[str, str], vdm: dict[str, Any],
          concurrency: int, per_host: int = 0) -> list[list[dict[str, str]]]:
    """`moves` in order, grouped into waves of at most `concurrency` moves that fit their
    destinations together while their VMs still take room at their sources, that
    touch each VM once, and, with `per_host`, that send or receive at most that many
    migrations on any one host."""
    view = VdmView(vdm)
    sizes, capacity = view.sizes(), view.hosts
    load = loads(current, sizes, capacity)
    out: list[list[dict[str, str]]] = []
    wave: list[dict[str, str]] = []
    for step in moves:
        size = sizes[step["vm"]]
        clash = any(m["vm"] == step["vm"] for m in wave)
        busy = per_host and any(
            sum(host in (m["from"], m["to"]) for m in wave) >= per_host
            for host in (step["from"], step["to"]))
        if wave and (clash or busy or len(wave) >= concurrency
                     or not fits(load[step["to"]], size, capacity[step["to"]])):
            for done in wave:  # the wave ends: its VMs leave their sources
                for r, amount in sizes[done["vm"]].items():
                    load[done["from"]][r] -= amount
            out.append(wave)
            wave = []
        for r, amount in size.items():
            load[step["to"]][r] += amount
        wave.append(step)
    if wave:
        out.append(wave)
    return out


def wave_steps(grouped: list[list[dict[str, str]]], vms: dict[str, dict[str, Any]],
               cluster: str) -> list[list[dict[str, Any]]]:
    """The waves' moves, each with what it writes (move_steps). `vms` are the VMs'
    cluster_status entries by name: a VM's first move claims its record as read; a
    later one (home after a temporary hop) the record its previous move wrote."""
    last: dict[str, dict[str, Any]] = {}
    out = []
    for wave in grouped:
        steps = [{**m, **move_steps(m, vms[m["vm"]], cluster, last.get(m["vm"]))}
                 for m in wave]
        last.update((step["vm"], step["record"]) for step in steps)
        out.append(steps)
    return out


def move_steps(move: dict[str, str], vm: dict[str, Any], cluster: str,
               after: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a live migration writes: its etcd claim (on the record of `vm`, the VM's
    cluster_status entry, or on what `after`, an earlier move's record, wrote), its
    record once moved, the record that puts it back where it was when the move fails
    (each an element of etcd_key's batch), and its history event."""
    claimed = vm_records.migrate(vm, move["from"], move["to"], cluster, after)
    return {"label": f"{move['vm']}: {move['from']} -> {move['to']}",
            "claim": claimed,
            "record": vm_records.complete(claimed, vm_records.RUNNING, move["to"]),
            "stayed": vm_records.complete(claimed, vm_records.RUNNING, move["from"]),
            "event": {"vm": move["vm"], "host": move["to"],
                      "details": {"from": move["from"]}}}


def settled_records(failed: list[dict[str, Any]], vms: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """For the moves that failed (move_steps' elements), the records that say where
    each VM runs by libvirt (cluster_status' vms): still at its source, or at its
    target after all. A VM that runs nowhere or twice keeps its `migrating` record,
    for an operator to settle."""
    where = {vm["name"]: vm.get("running_on") or [] for vm in vms}
    records = []
    for move in failed:
        running = where.get(move["vm"], [])
        if running == [move["from"]]:
            records.append(move["stayed"])
        elif running == [move["to"]]:
            records.append(move["record"])
    return records


def hypervisors_of(status: dict[str, Any], vdm: Any, host: str,
                   error: type[Exception]) -> dict[str, dict[str, Any]]:
    """cluster_status' hypervisors by name, once `vdm` is a VDM and `host` one of the
    hypervisors; else `error` raised, saying what to do."""
    if not VdmView(vdm).planned:
        raise error("no VDM: plan one with playbooks/plan.yml")
    hosts = ClusterView(status).hosts
    if host not in hosts:
        raise error(f"{host}: not a hypervisor of this inventory (known: "
                    f"{', '.join(sorted(hosts)) or 'none'})")
    return hosts


# The inventory's yasco_migration: how each live migration runs (libvirt_domain's
# `migration` option), its completion timeout, and how many a host sends or receives
# at once. Each key: what it must be, and what it is checked by.
MIGRATION_SETTINGS = {
    "bandwidth": ("a whole number of MiB/s, 0 for no limit", lambda v: _whole(v, 0)),
    "max_downtime": ("a whole number of milliseconds, 0 for QEMU's 300",
                     lambda v: _whole(v, 0)),
    "auto_converge": ("true or false", lambda v: isinstance(v, bool)),
    "compressed": ("true or false", lambda v: isinstance(v, bool)),
    "post_copy_after": ("a number of seconds above 0, or null for never",
                        lambda v: v is None or _number(v) and v > 0),
    "timeout": ("a whole number of seconds above 0", lambda v: _whole(v, 1)),
    "per_host": ("a whole number of migrations, 0 for no limit", lambda v: _whole(v, 0)),
}
MIGRATION_DEFAULTS = {"timeout": 600, "per_host": 0}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def migration_settings(given: dict[str, Any] | None,
                       field: str = "yasco_migration") -> dict[str, Any]:
    """`given` checked: {'policy': the libvirt_domain module's `migration`, 'timeout',
    'per_host'}; a ValueError names each key that is wrong and what it must be."""
    given = given or {}
    if not isinstance(given, dict):
        raise ValueError(f"{field}: must be a mapping of "
                         f"{', '.join(MIGRATION_SETTINGS)}, got {given!r}")
    problems = [f"{field}.{key}: unknown; known are {', '.join(MIGRATION_SETTINGS)}"
                for key in given if key not in MIGRATION_SETTINGS]
    problems += [f"{field}.{key}: must be {wanted}, got {given[key]!r}"
                 for key, (wanted, ok) in MIGRATION_SETTINGS.items()
                 if key in given and not ok(given[key])]
    settings = {**MIGRATION_DEFAULTS, **given}
    after = settings.get("post_copy_after")
    if not problems and after is not None and after >= settings["timeout"]:
        problems.append(f"{field}.post_copy_after: {after} is not less than "
                        f"{field}.timeout ({settings['timeout']}): it would never switch")
    if problems:
        raise ValueError("; ".join(problems))
    return {"policy": {k: v for k, v in settings.items() if k not in MIGRATION_DEFAULTS},
            "timeout": settings["timeout"], "per_host": settings["per_host"]}
