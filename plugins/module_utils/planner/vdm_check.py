# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An independent checker of a Virtual Distribution Map against its problem.

It shares nothing with the planner but the validated inputs: it re-derives every
invariant of docs/vdm.md from the VDM as written, so a planner bug cannot hide behind
a helper both use. The planner runs it on every plan before anything is written, and
the tests run it on every plan they make.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    RESOURCES, Problem, Vm, failure_set_key)

_EPSILON = 1e-9


def _overruns(problem: Problem, host: str, vms: list[Vm]) -> list[str]:
    limits = problem.hosts[host]
    out = []
    for resource in RESOURCES:
        limit = getattr(limits, resource)
        used = sum(getattr(vm, resource) for vm in vms)
        if limit is not None and used > limit + _EPSILON:
            out.append(f"{resource} {used:g} > {limit:g}")
    return out


def _anti_affinity_clashes(vms: list[Vm]) -> list[str]:
    seen: dict[str, str] = {}
    clashes = []
    for vm in sorted(vms, key=lambda v: v.name):
        for label in sorted(vm.anti_affinity):
            if label in seen:
                clashes.append(f"{seen[label]} and {vm.name} share anti-affinity label {label!r}")
            else:
                seen[label] = vm.name
    return clashes


def _crowding(problem: Problem, host: str, vms: list[Vm], where: str) -> list[str]:
    """What is wrong with running `vms` together on `host`: capacity and anti-affinity."""
    return ([f"{where}: {host} over capacity: {o}" for o in _overruns(problem, host, vms)]
            + [f"{where}: on {host}, {c}" for c in _anti_affinity_clashes(vms)])


def check(problem: Problem, vdm: dict[str, Any]) -> list[str]:
    """Every way `vdm` breaks an invariant; [] when it is a valid plan for `problem`."""
    violations: list[str] = []
    home = vdm.get("home", {})
    failover = vdm.get("failover", {})
    preempt = vdm.get("preempt", {})
    vms = problem.vms

    # 1. Home placement.
    for name in sorted(set(vms) - set(home)):
        violations.append(f"{name}: has no home")
    for name in sorted(set(home) - set(vms)):
        violations.append(f"{name}: has a home but is not in yasco_vms")
    residents: dict[str, list[Vm]] = {h: [] for h in problem.hosts}
    for name, host in sorted(home.items()):
        if name not in vms:
            continue
        if host not in problem.hosts:
            violations.append(f"{name}: home {host!r} is not a hypervisor")
            continue
        if host not in vms[name].allowed:
            violations.append(f"{name}: home {host} is not allowed for it")
        if vms[name].home not in (None, host):
            violations.append(f"{name}: home {host}, but it is pinned to {vms[name].home}")
        residents[host].append(vms[name])
    for host, here in residents.items():
        violations += _crowding(problem, host, here, "home placement")

    # 2. Every failure set.
    expected_keys = {failure_set_key(s) for s in problem.failure_sets}
    for key in sorted(set(failover) - expected_keys):
        violations.append(f"failover[{key!r}]: not a failure set to tolerate")
    for key in sorted(set(preempt) - expected_keys):
        violations.append(f"preempt[{key!r}]: not a failure set to tolerate")
    for failed in problem.failure_sets:
        key = failure_set_key(failed)
        moves = failover.get(key, {})
        stopped = set(preempt.get(key, []))
        where = f"failure of {key}"
        for name in sorted(stopped):
            vm = vms.get(name)
            if vm is None or not vm.preemptible:
                violations.append(f"{where}: preempts {name}, which is not a preemptible VM")
            elif home.get(name) in failed:
                violations.append(f"{where}: preempts {name}, whose home has failed anyway")
        displaced = {n for n, h in home.items() if h in failed and n in vms and vms[n].ha}
        for name in sorted(displaced - set(moves)):
            violations.append(f"{where}: HA VM {name} has no target")
        # Only hosts that gain or lose VMs differ from the home placement checked above.
        touched = {t for t in moves.values() if t in problem.hosts and t not in failed}
        touched |= {home[n] for n in stopped if home.get(n) in problem.hosts} - failed
        running = {h: [vm for vm in residents[h] if vm.name not in stopped] for h in touched}
        for name, target in sorted(moves.items()):
            if name not in displaced:
                violations.append(f"{where}: moves {name}, which is not an HA VM of a "
                                  "failed host")
            elif target in failed or target not in problem.hosts:
                violations.append(f"{where}: {name} goes to {target}, which is not a survivor")
            elif target not in vms[name].allowed:
                violations.append(f"{where}: {name} goes to {target}, where it is not allowed")
            else:
                running[target].append(vms[name])
        for host, here in running.items():
            violations += _crowding(problem, host, here, where)

    # 3. Nesting: failures that accumulate never move a VM twice. Checking each set
    # against those with one host fewer covers every chain of host failures; a whole
    # failure domain larger than X is checked against all its subsets.
    family = set(problem.failure_sets)
    for larger in problem.failure_sets:
        if len(larger) <= problem.failures_to_tolerate:
            smaller_sets = [larger - {h} for h in sorted(larger) if larger - {h} in family]
        else:
            smaller_sets = [s for s in problem.failure_sets if s < larger]
        for smaller in smaller_sets:
            small_moves = failover.get(failure_set_key(smaller), {})
            large_moves = failover.get(failure_set_key(larger), {})
            for name, target in sorted(small_moves.items()):
                if target not in larger and large_moves.get(name) != target:
                    violations.append(
                        f"nesting: {name} goes to {target} when {failure_set_key(smaller)} "
                        f"fails but to {large_moves.get(name)} when {failure_set_key(larger)} "
                        f"fails, though {target} survives both")
    return violations
