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

RESOURCES = ("vcpus", "memory_mb", "net_mbps")
_EPSILON = 1e-9


class RebalanceError(Exception):
    """The homes cannot be reached without overloading a host."""


def _size(vm: dict[str, Any]) -> dict[str, float]:
    return {r: float(vm.get(r, 0) or 0) for r in RESOURCES}


def _fits(load: dict[str, float], size: dict[str, float], capacity: dict[str, Any]) -> bool:
    return all(load[r] + size[r] <= float(capacity[r]) + _EPSILON
               for r in RESOURCES if capacity.get(r) is not None)


def plan_moves(current: dict[str, str], vdm: dict[str, Any]) -> list[dict[str, str]]:
    """Moves (vm, from, to), in order, from `current` (VM -> host it runs on) to the
    VDM's homes, using the sizes and capacities the VDM records."""
    sizes = {name: _size(vm) for name, vm in (vdm.get("vms") or {}).items()}
    capacity = vdm.get("hosts") or {}
    home = vdm.get("home") or {}
    unknown = sorted(set(current.values()) - set(capacity))
    if unknown:
        raise RebalanceError(f"VMs run on {', '.join(unknown)}, which the VDM does not know; "
                             "plan again with every hypervisor in the inventory")
    where = dict(current)
    load = {h: {r: 0.0 for r in RESOURCES} for h in capacity}
    for name, host in where.items():
        for r, amount in sizes.get(name, _size({})).items():
            load[host][r] += amount
    pending = {n for n, h in where.items() if n in home and home[n] != h}
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
        ready = [n for n in order(pending) if _fits(load[home[n]], sizes[n], capacity[home[n]])]
        if ready:
            move(ready[0], home[ready[0]])
            pending.discard(ready[0])
            continue
        # A cycle: hop the smallest waiting VM to the roomiest host that takes it.
        for name in reversed(order(pending)):
            hops = [h for h in sorted(capacity) if h not in (where[name], home[name])
                    and _fits(load[h], sizes[name], capacity[h])]
            if hops:
                move(name, max(hops, key=lambda h: min(
                    (float(capacity[h][r]) - load[h][r]) / float(capacity[h][r])
                    for r in RESOURCES if capacity[h].get(r))))
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
          concurrency: int) -> list[list[dict[str, str]]]:
    """`moves` in order, grouped into waves of at most `concurrency` moves that fit their
    destinations together while their VMs still take room at their sources, and that
    touch each VM once."""
    sizes = {name: _size(vm) for name, vm in (vdm.get("vms") or {}).items()}
    capacity = vdm.get("hosts") or {}
    load = {h: {r: 0.0 for r in RESOURCES} for h in capacity}
    for name, host in current.items():
        for r, amount in sizes.get(name, _size({})).items():
            load[host][r] += amount
    out: list[list[dict[str, str]]] = []
    wave: list[dict[str, str]] = []
    for step in moves:
        size = sizes[step["vm"]]
        clash = any(m["vm"] == step["vm"] for m in wave)
        if wave and (clash or len(wave) >= concurrency
                     or not _fits(load[step["to"]], size, capacity[step["to"]])):
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
