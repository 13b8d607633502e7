# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The greedy search for homes: VMs placed one by one, each where it fits with a
failover chain (vdm_chains), homes of the current map kept where they still fit.

Pinned VMs go first, then HA, plain and preemptible VMs, each largest first, on the
emptiest host (worst fit, which spreads each host's HA VMs evenly over the others); a
VM that fits nowhere evicts one or two VMs from a host and re-places them, and when
spreading fails the hosts are packed in order instead. Moves spent on evening out the
hosts take VMs off the fullest one.

Pure Python and numpy; no I/O and no Ansible.
"""

from __future__ import annotations

try:
    import numpy as np
except ImportError:  # reported by the caller through missing_required_lib
    np = None

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_chains import (
    PlanState)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    EPSILON, RESOURCES, UNIT_NAMES, WHAT_HELPS, Problem, VdmInfeasible, Vm, amount,
    failure_set_key)

_EVICTION_HOMES = 4  # hosts on which a VM that fits nowhere tries to make room
_EVICTION_TRIALS = 4  # single VMs tried for eviction on each of them


def placing_order(vms: list[Vm], problem: Problem) -> list[Vm]:
    """Pinned first, then HA, plain and preemptible VMs, each largest first."""
    totals = {r: sum(getattr(h, r) or 0 for h in problem.hosts.values()) or 1
              for r in RESOURCES}

    def size(vm: Vm) -> float:
        return max(vm.demand(r) / totals[r] for r in RESOURCES)

    kind = {True: 0, False: 1}
    return sorted(vms, key=lambda vm: (vm.home is None, vm.preemptible, kind[vm.ha],
                                       -size(vm), vm.name))


def _place_all(state: PlanState, vms: list[Vm], homes: dict[str, str]) -> None:
    """Place `vms` in order, at `homes` where they still fit, elsewhere if not.
    Raise VdmInfeasible, naming the VM and why, when one fits nowhere."""
    for vm in vms:
        d = state.demand(vm)
        wanted = homes.get(vm.name)
        if wanted in state.index and state.try_home(vm, d, state.index[wanted]) is None:
            continue
        reasons = []
        homes_to_try = [state.index[vm.home]] if vm.home else state.best_homes(vm, d)
        for j in homes_to_try:
            reason = state.try_home(vm, d, j)
            if reason is None:
                break
            reasons.append(reason)
        else:
            if any(_evict_for(state, vm, d, j) for j in homes_to_try[:_EVICTION_HOMES]):
                continue
            sizes = ", ".join(f"{amount(vm.demand(r))} {UNIT_NAMES[r]}" for r in RESOURCES
                              if vm.demand(r))
            detail = "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "")
            raise VdmInfeasible(f"VM {vm.name} ({vm.kind_label}, {sizes}) fits nowhere: {detail}; "
                                + WHAT_HELPS)


def _evict_for(state: PlanState, vm: Vm, d: np.ndarray, j: int) -> bool:
    """Local search for a VM that fits nowhere: make room on host j by moving one or
    two of its VMs elsewhere. Everything is put back as it was when that fails."""
    problem = state.problem
    residents = sorted((problem.vms[n] for n, h in state.home.items()
                        if h == j and problem.vms[n].home is None),
                       key=lambda other: (state.demand(other).max(), other.name))
    trials = [[other] for other in residents[:_EVICTION_TRIALS]]
    trials += [residents[-2:]] if len(residents) >= 2 else []
    for evicted in trials:
        saved = [(other, state.home[other.name], state.chains.get(other.name, []))
                 for other in evicted]
        for other, dummy, dummy in saved:
            state.remove(other, state.demand(other))
        placed = []
        if state.try_home(vm, d, j) is None:
            placed.append(vm)
            for other, dummy, dummy in saved:
                od = state.demand(other)
                if not any(state.try_home(other, od, k) is None
                           for k in state.best_homes(other, od) if k != j):
                    break
                placed.append(other)
            else:
                return True
        for other in reversed(placed):
            state.remove(other, state.demand(other))
        for other, home, chain in reversed(saved):
            state.place(other, home, state.demand(other), chain)
    return False


def rebalance(state: PlanState, problem: Problem, budget: int) -> None:
    """Spend up to `budget` moves taking VMs off the fullest host, each only where it
    lowers that host's share without making another host fuller."""
    for dummy in range(budget):
        shares = state.balance()
        fullest = int(np.argmax(shares))
        movable = sorted((problem.vms[n] for n, j in state.home.items()
                          if j == fullest and problem.vms[n].home is None
                          and not problem.vms[n].preemptible),
                         key=lambda vm: (-state.demand(vm).sum(), vm.name))
        if not any(_move_off(state, vm, fullest, shares[fullest]) for vm in movable):
            return


def _move_off(state: PlanState, vm: Vm, fullest: int, share: float) -> bool:
    d = state.demand(vm)
    chain = state.chains.get(vm.name, [])
    state.remove(vm, d)
    for j in state.best_homes(vm, d):
        if j == fullest or state.try_home(vm, d, j) is not None:
            continue
        if state.balance().max() < share - EPSILON:
            return True
        state.remove(vm, d)
    state.place(vm, fullest, d, chain)  # exactly as it was
    return False


def previous_chains(problem: Problem, previous_home: dict[str, str],
                    previous_failover: dict[str, dict[str, str]]
                    ) -> dict[tuple[str, int], list[str]]:
    """Each HA VM's chain in the current map: its target when its home fails, then when
    that target fails too, and so on; then its targets when whole domains fail."""
    index = {h: i for i, h in enumerate(sorted(problem.hosts))}
    targets: dict[str, set[str]] = {}
    for chosen in previous_failover.values():
        for name, target in chosen.items():
            targets.setdefault(name, set()).add(target)
    chains = {}
    for name, home in previous_home.items():
        if home not in index or not problem.vms[name].ha:
            continue
        chain: list[str] = []
        failed = {home}
        while (step := previous_failover.get(failure_set_key(failed), {}).get(name)) \
                and step not in failed:
            chain.append(step)
            failed.add(step)
        chain += sorted(targets.get(name, set()) - set(chain) - {home})
        chains[(name, index[home])] = chain
    return chains


def first_feasible(problem: Problem, order: list[Vm], previous_home: dict[str, str],
                   chains: dict[tuple[str, int], list[str]]) -> PlanState:
    """Try ways of placing, most balanced and fewest moves first, keeping `chains` (the
    current map's, by VM and home) where they fit; the first that succeeds wins, and
    the first failure is the one reported."""
    new = [vm for vm in order if vm.name not in previous_home]
    kept = [vm for vm in order if vm.name in previous_home]
    attempts = []
    if previous_home:
        # Kept VMs go home first, as they are, and new VMs take the room left; failing
        # that, everything in planning order with homes kept where they fit; then new
        # VMs first; only then plan afresh, moving whatever must move.
        for vms in (kept + new, order, new + kept):
            attempts += [(pack, vms, previous_home) for pack in (False, True)]
    attempts += [(pack, order, {}) for pack in (False, True)]
    failure, furthest, afresh = None, None, None

    def progress(state: PlanState) -> int:  # VMs placed, less those it moved
        return len(state.home) - moves(state, previous_home)

    for pack, vms, homes in attempts:
        state = PlanState(problem, pack=pack, previous_chains=chains if homes else None)
        try:
            _place_all(state, vms, homes)
            return state
        except VdmInfeasible as err:
            failure = failure or err
            if furthest is None or progress(state) > progress(furthest):
                furthest = state
            if not homes and (afresh is None or len(state.home) > len(afresh.home)):
                afresh = state
    # Where the attempt that got furthest put its VMs: the exact search and the repair
    # start there; and where the furthest of those that planned afresh did.
    failure.partial, failure.partial_afresh = furthest, afresh
    raise failure


def moves(state: PlanState, previous_home: dict[str, str]) -> int:
    """How many of the VMs in `previous_home` the state has at another home."""
    return sum(state.names[j] != previous_home[n] for n, j in state.home.items()
               if n in previous_home)
