"""The admission policies YASCO's planner is measured against, written from their
public descriptions and run on the same validated problems.

Both answer one question, "does this VM set fit with X host failures covered?", and
both are generous to themselves: they check every resource and home anti-affinity,
but neither guarantees anti-affinity after a failover, and preemptible VMs are plain
VMs to them, since neither has the notion.
"""

from __future__ import annotations

import math

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    RESOURCES, Problem, Vm)


def _resources(problem: Problem) -> list[str]:
    return [r for r in RESOURCES
            if all(getattr(h, r) is not None for h in problem.hosts.values())]


def _largest_failure(problem: Problem, per_host: dict[str, float]) -> float:
    """What the worst failure set to tolerate takes away, by `per_host`."""
    return max((sum(per_host[h] for h in failed) for failed in problem.failure_sets),
               default=0.0)


def _first_fit_homes(problem: Problem, vms: list[Vm], room: dict[str, dict[str, float]],
                     resources: list[str]) -> dict[str, str] | None:
    """Homes by first fit in host order, honouring pins, allowed hosts and home
    anti-affinity; None when a VM fits nowhere."""
    labels: dict[str, set[str]] = {h: set() for h in problem.hosts}
    homes = {}
    for vm in vms:
        for host in ([vm.home] if vm.home else sorted(problem.hosts)):
            if host not in vm.allowed or labels[host] & vm.anti_affinity:
                continue
            if all(room[host][r] >= vm.demand(r) for r in resources):
                for r in resources:
                    room[host][r] -= vm.demand(r)
                labels[host] |= vm.anti_affinity
                homes[vm.name] = host
                break
        else:
            return None
    return homes


def vsphere_slots(problem: Problem) -> bool:
    """vSphere HA admission control, slot policy: a slot is as large as the largest
    powered-on VM in every resource; a host holds as many slots as its smallest
    resource allows; the cluster admits VMs while they fit in the slots left after
    the hosts with the most slots fail (here: the worst failure set to tolerate)."""
    resources = _resources(problem)
    vms = list(problem.vms.values())
    if not vms:
        return True
    slot = {r: max(vm.demand(r) for vm in vms) or 1 for r in resources}
    slots = {h.name: min(math.floor(getattr(h, r) / slot[r]) for r in resources)
             for h in problem.hosts.values()}
    if len(vms) > sum(slots.values()) - _largest_failure(problem, slots):
        return False
    room = {h.name: {r: getattr(h, r) for r in resources} for h in problem.hosts.values()}
    return _first_fit_homes(problem, vms, room, resources) is not None


def ganeti_n1(problem: Problem) -> bool:
    """Ganeti-style greedy N+1: each VM goes by first fit (hosts in order, checked by
    memory first) to a primary, and each HA VM to X secondaries; every host keeps a
    failover reservation big enough for what its X heaviest primaries (or its heaviest
    failure domain) would send it, and home VMs plus that reservation must fit."""
    resources = ["memory_mb"] + [r for r in _resources(problem) if r != "memory_mb"]
    x = problem.failures_to_tolerate
    domains = {h.name: h.failure_domain for h in problem.hosts.values()}
    home_load = {h: {r: 0.0 for r in resources} for h in problem.hosts}
    # incoming[s][p][r]: what primary p's VMs would bring to secondary s.
    incoming: dict[str, dict[str, dict[str, float]]] = {h: {} for h in problem.hosts}
    labels: dict[str, set[str]] = {h: set() for h in problem.hosts}

    def reservation(s: str, extra: tuple[str, Vm] | None = None) -> dict[str, float]:
        per_primary = {p: dict(load) for p, load in incoming[s].items()}
        if extra:
            p, vm = extra
            load = per_primary.setdefault(p, {r: 0.0 for r in resources})
            for r in resources:
                load[r] += vm.demand(r)
        out = {}
        for r in resources:
            heaviest = sorted((load[r] for load in per_primary.values()), reverse=True)
            by_domain: dict[str | None, float] = {}
            for p, load in per_primary.items():
                by_domain[domains[p]] = by_domain.get(domains[p], 0.0) + load[r]
            domain_worst = max((v for d, v in by_domain.items() if d is not None),
                               default=0.0) if problem.failure_domains_to_tolerate else 0.0
            out[r] = max(sum(heaviest[:x]), domain_worst)
        return out

    def fits(host: str, vm: Vm | None, extra: tuple[str, Vm] | None = None) -> bool:
        reserve = reservation(host, extra)
        cap = problem.hosts[host]
        return all(home_load[host][r] + (vm.demand(r) if vm else 0) + reserve[r]
                   <= getattr(cap, r) + 1e-9 for r in resources)

    for vm in problem.vms.values():
        for primary in ([vm.home] if vm.home else sorted(problem.hosts)):
            if primary not in vm.allowed or labels[primary] & vm.anti_affinity:
                continue
            if not fits(primary, vm):
                continue
            secondaries: list[str] = []
            if vm.ha:
                for s in sorted(problem.hosts):
                    if len(secondaries) == x + problem.failure_domains_to_tolerate:
                        break
                    if s == primary or s not in vm.allowed or s in secondaries:
                        continue
                    if fits(s, None, (primary, vm)):
                        secondaries.append(s)
                if len(secondaries) < x or (problem.failure_domains_to_tolerate and not any(
                        domains[s] != domains[primary] for s in secondaries)):
                    continue
            for r in resources:
                home_load[primary][r] += vm.demand(r)
            for s in secondaries:
                load = incoming[s].setdefault(primary, {r: 0.0 for r in resources})
                for r in resources:
                    load[r] += vm.demand(r)
            labels[primary] |= vm.anti_affinity
            break
        else:
            return False
    return True
