# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VDM planner: a home for every VM and a failover chain for every HA VM.

Why chains. Each HA VM gets an ordered list of distinct hosts other than its home;
under a failure set S containing its home it goes to the first host of its chain that
is not in S. A chain of X hosts always has a survivor, one more host outside the home's
failure domain covers a whole domain, and nesting (invariant 3) holds by construction:
if the target under S survives a larger S', every host before it in the chain is
already in S, so it is the target under S' too. The planner therefore never searches
failover maps, only chains, and it still sees every failure set's load exactly.

Why a greedy heuristic first, and an exact search after it. Spreading each host's HA
VMs evenly over the others reaches the ideal bound (K - X)/K asymptotically, and a
worst-fit greedy over chains does exactly that in a fraction of a second even for 200
hosts and X = 2, where an exact model is out of reach. Largest VMs go first and every
choice is checked against the load of every failure set it touches, kept in one array,
so a plan is valid by construction and then re-checked independently. But on mixed
hardware filled close to what it allows, the greedy misses plans that exist. When it
fails, the exact search (vdm_solver, CP-SAT) solves homes and failover targets
together for the clusters most users have; the planner then has three answers: a plan,
"infeasible" with a proof (a failure set and resource whose demand exceeds what
survives, or the exact search's), or "not found" (VdmNotFound) when the time limit
ran out or the model is too large, never "infeasible" for a cluster it has not proved
so.

Pure Python, numpy and (for the exact search) OR-Tools; no I/O and no Ansible.
"""

from __future__ import annotations

import time
from collections import Counter

try:
    import numpy as np
except ImportError:  # reported by the caller through missing_required_lib
    np = None

from ansible_collections.yasco.cluster.plugins.module_utils.planner import vdm_solver
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    DEFAULT_OBJECTIVE, EPSILON, OBJECTIVES, RESOURCES, Plan, Problem, Vm, amount,
    failure_set_key)

_UNITS = {"vcpus": "vCPUs", "memory_mb": "MB memory", "net_mbps": "Mbps network"}
_BRANCHES = 3  # runners-up tried at each link of a chain before giving up
_EVICTION_HOMES = 4  # hosts on which a VM that fits nowhere tries to make room
_EVICTION_TRIALS = 4  # single VMs tried for eviction on each of them
# A re-plan that moves more than this share of the VMs asks the exact search for fewer.
_STABLE_SHARE = vdm_solver.STABLE_SHARE
# Where the greedy search fails, the share of the time limit in which the exact search
# must find a first plan before the repair takes over.
_EXACT_SHARE = 0.25
_WHAT_HELPS = ("add or enlarge hypervisors, lower yasco_failures_to_tolerate, or make "
               "some VMs plain (ha: false) or preemptible")


class VdmInfeasible(Exception):
    """No plan holds every invariant; the message names the failure set or VM."""


class VdmNotFound(Exception):
    """No plan was found, and none was proved impossible: the message says what the
    greedy planner could not place, why the exact search stopped, and what would most
    likely make the cluster fit."""


class _State:
    """Homes, chains and the load every failure set puts on every host, kept in step."""

    def __init__(self, problem: Problem, pack: bool = False,
                 previous_chains: dict[tuple[str, int], list[str]] | None = None) -> None:
        self.problem = problem
        self.previous_chains = previous_chains or {}  # (VM, home) -> the current chain
        self.pack = pack  # fill hosts in order (first fit) instead of spreading
        self.names = sorted(problem.hosts)
        self.index = {h: i for i, h in enumerate(self.names)}
        hosts = [problem.hosts[h] for h in self.names]
        # Network is a constraint only if some host declares it.
        self.resources = [r for r in RESOURCES
                          if any(getattr(h, r) is not None for h in hosts)]
        self.cap = np.array([[np.inf if getattr(h, r) is None else getattr(h, r)
                              for r in self.resources] for h in hosts], dtype=float)
        self.sets = list(problem.failure_sets)
        self.keys = [failure_set_key(s) for s in self.sets]
        k, f, n = len(self.names), len(self.sets), len(self.resources)
        self.in_set = np.zeros((f, k), dtype=bool)
        for i, failed in enumerate(self.sets):
            self.in_set[i, [self.index[h] for h in failed]] = True
        self.sets_of = [np.flatnonzero(self.in_set[:, j]) for j in range(k)]
        self.load = np.zeros((f, k, n))         # HA demand arriving on each host per set
        self.peak = np.zeros((k, n))            # the most any one set brings to a host
        self.firm = np.zeros((k, n))            # home demand of VMs that are not preemptible
        self.all = np.zeros((k, n))             # home demand of every VM
        self.home: dict[str, int] = {}
        self.chains: dict[str, list[tuple[np.ndarray, int]]] = {}
        self.home_labels = [Counter() for dummy in range(k)]     # every VM at home
        self.firm_labels = [Counter() for dummy in range(k)]     # non-preemptible VMs at home
        self.incoming_labels: dict[str, dict[int, Counter]] = {}  # label -> set -> hosts
        self.incoming_any = [Counter() for dummy in range(k)]    # labels arriving under any set
        # Labels of pinned VMs not placed yet: chains keep clear of their homes.
        self.pinned_labels = [Counter() for dummy in range(k)]
        for vm in problem.vms.values():
            if vm.home is not None and not vm.preemptible:
                self.pinned_labels[self.index[vm.home]].update(vm.anti_affinity)
        self.allowed_cache: dict[frozenset, np.ndarray] = {}
        self.scale = np.where(np.isinf(self.cap) | (self.cap <= 0), 1.0, self.cap)  # for shares

    def demand(self, vm: Vm) -> np.ndarray:
        return np.array([vm.demand(r) for r in self.resources], dtype=float)

    def allowed(self, vm: Vm) -> np.ndarray:
        mask = self.allowed_cache.get(vm.allowed)
        if mask is None:
            mask = np.array([h in vm.allowed for h in self.names])
            self.allowed_cache[vm.allowed] = mask
        return mask

    # -- feasibility -----------------------------------------------------------

    def home_room(self, vm: Vm, d: np.ndarray) -> np.ndarray:
        """Per host, the least headroom left if `vm` is homed there (negative: no)."""
        room = self.cap - self.all - d
        if not vm.preemptible:
            room = np.minimum(room, self.cap - self.firm - self.peak - d)
        return (room / self.scale).min(axis=1)

    def home_clash(self, vm: Vm, j: int) -> bool:
        if any(self.home_labels[j][label] for label in vm.anti_affinity):
            return True
        return not vm.preemptible and any(self.incoming_any[j][lbl] for lbl in vm.anti_affinity)

    def chain_for(self, vm: Vm, j: int, d: np.ndarray):
        """A failover chain for `vm` homed on host j, or the reason there is none."""
        candidates = self.allowed(vm).copy()
        candidates[j] = False
        reasons: list[str] = []
        chain = self._extend(vm, d, self.sets_of[j], candidates, reasons)
        return (chain, None) if chain is not None else (None, reasons[0])

    def _extend(self, vm: Vm, d: np.ndarray, remaining: np.ndarray, candidates: np.ndarray,
                reasons: list[str]):
        """The rest of a chain covering the failure sets `remaining`: the roomiest host
        first, backtracking over a few runners-up when a later link finds no room."""
        if not remaining.size:
            return []
        covers = ~self.in_set[remaining]              # the set would send the VM there
        usable = candidates & covers.any(axis=0)
        worst = np.where(covers[:, :, None], self.load[remaining], -np.inf).max(axis=0)
        room = self.cap - self.firm - worst - d
        fits = usable & (room >= -EPSILON).all(axis=1)
        for label in vm.anti_affinity:
            fits &= ~self._label_clash(label, remaining, covers)
        if not fits.any():
            reasons.append(self._chain_shortfall(vm, remaining, usable, room))
            return None
        # Cheapest first: the host whose spare grows least, since spare that one failure
        # set already needs is free for every other set. Among equals the roomiest,
        # then the one the failed hosts lean on least on average, which spreads each
        # host's VMs over all the others.
        growth = np.round((np.maximum(worst + d - self.peak, 0) / self.scale).max(axis=1), 9)
        loaded = covers[:, :, None] * self.load[remaining]
        mean = (loaded.sum(axis=0) / np.maximum(covers.sum(axis=0), 1)[:, None]
                / self.scale).max(axis=1)
        roomiest = np.round((room / self.scale).min(axis=1), 9)
        if self.pack:
            order = np.lexsort((np.arange(len(fits)), ~fits))
        else:
            order = np.lexsort((mean, -roomiest, np.where(fits, growth, np.inf)))
        for target in order[:_BRANCHES]:
            if not fits[target]:
                break
            taken = covers[:, target]
            rest = candidates.copy()
            rest[target] = False
            tail = self._extend(vm, d, remaining[~taken], rest, reasons)
            if tail is not None:
                return [(remaining[taken], int(target))] + tail
        return None

    def _label_clash(self, label: str, remaining: np.ndarray, covers: np.ndarray
                     ) -> np.ndarray:
        clash = np.array([self.firm_labels[t][label] + self.pinned_labels[t][label] > 0
                          for t in range(len(self.names))])
        arriving = self.incoming_labels.get(label, {})
        for row, s in enumerate(remaining):
            for t, count in arriving.get(int(s), {}).items():
                if count and covers[row, t]:
                    clash[t] = True
        return clash

    def _chain_shortfall(self, vm: Vm, remaining, usable, room) -> str:
        first = self.keys[int(remaining[0])]
        if not usable.any():
            return (f"when {first} fails it has no allowed host left to go to "
                    "(check its hosts/placement)")
        best = int(np.argmax(np.where(usable[:, None], room, -np.inf).min(axis=1)))
        short = [f"{amount(-room[best, i])} {_UNITS[r]}"
                 for i, r in enumerate(self.resources) if room[best, i] < -EPSILON]
        if not short:
            return (f"when {first} fails every host it may go to already holds a VM "
                    f"sharing one of its anti-affinity labels {sorted(vm.anti_affinity)}")
        return (f"when {first} fails the best host to take it, {self.names[best]}, is "
                f"{' and '.join(short)} short")

    # -- changes ---------------------------------------------------------------

    def place(self, vm: Vm, j: int, d: np.ndarray, chain) -> None:
        self.home[vm.name] = j
        if vm.home is not None and not vm.preemptible:
            self.pinned_labels[self.index[vm.home]].subtract(vm.anti_affinity)
        self.all[j] += d
        for label in vm.anti_affinity:
            self.home_labels[j][label] += 1
        if vm.preemptible:
            return
        self.firm[j] += d
        for label in vm.anti_affinity:
            self.firm_labels[j][label] += 1
        if not vm.ha:
            return
        self.chains[vm.name] = chain
        for sets, t in chain:
            self.load[sets, t] += d
            self.peak[t] = np.maximum(self.peak[t], self.load[sets, t].max(axis=0))
            for label in vm.anti_affinity:
                arriving = self.incoming_labels.setdefault(label, {})
                for s in sets:
                    arriving.setdefault(int(s), Counter())[t] += 1
                self.incoming_any[t][label] += len(sets)

    def remove(self, vm: Vm, d: np.ndarray) -> None:
        j = self.home.pop(vm.name)
        if vm.home is not None and not vm.preemptible:
            self.pinned_labels[self.index[vm.home]].update(vm.anti_affinity)
        self.all[j] -= d
        for label in vm.anti_affinity:
            self.home_labels[j][label] -= 1
        if vm.preemptible:
            return
        self.firm[j] -= d
        for label in vm.anti_affinity:
            self.firm_labels[j][label] -= 1
        for sets, t in self.chains.pop(vm.name, []):
            self.load[sets, t] -= d
            self.peak[t] = self.load[:, t].max(axis=0) if len(self.sets) else 0
            for label in vm.anti_affinity:
                for s in sets:
                    self.incoming_labels[label][int(s)][t] -= 1
                self.incoming_any[t][label] -= len(sets)

    def _home_shortfall(self, vm: Vm, j: int, d: np.ndarray) -> str:
        room = self.cap[j] - self.all[j] - d
        if not vm.preemptible:
            room = np.minimum(room, self.cap[j] - self.firm[j] - self.peak[j] - d)
        short = [f"{amount(-room[i])} {_UNITS[r]}" for i, r in enumerate(self.resources)
                 if room[i] < -EPSILON]
        spare = [f"{amount(self.peak[j, i])} {_UNITS[r]}"
                 for i, r in enumerate(self.resources) if self.peak[j, i] > EPSILON]
        kept = f", counting the {' and '.join(spare)} it keeps spare" if spare else ""
        return f"{self.names[j]} is {' and '.join(short)} short{kept}"

    def try_home(self, vm: Vm, d: np.ndarray, j: int):
        """Place `vm` on host j if it fits with a chain; else the reason it does not."""
        if not self.allowed(vm)[j]:
            return f"it is not allowed on {self.names[j]}"
        if vm.home is not None and vm.home != self.names[j]:
            return f"it is pinned to {vm.home}"
        if self.home_clash(vm, j):
            return f"on {self.names[j]} it would share an anti-affinity label"
        if self.home_room(vm, d)[j] < -EPSILON:
            return self._home_shortfall(vm, j, d)
        chain = []
        if vm.ha:
            chain = self.fixed_chain(vm, j, d, self.previous_chains.get((vm.name, j), []))
            if chain is None:
                chain, reason = self.chain_for(vm, j, d)
                if chain is None:
                    return f"homed on {self.names[j]}, {reason}"
        self.place(vm, j, d, chain)
        return None

    def fixed_chain(self, vm: Vm, j: int, d: np.ndarray, hosts: list[str]):
        """The chain through `hosts` (the current map's, kept so that failover targets
        stay put) if it still covers every failure set and fits; else None."""
        remaining = self.sets_of[j]
        chain = []
        for host in hosts:
            t = self.index.get(host)
            if t is None or t == j or not self.allowed(vm)[t]:
                return None
            covers = ~self.in_set[remaining]
            taken = covers[:, t]
            if not taken.any():
                continue
            sets = remaining[taken]
            if (self.load[sets, t] + d > self.cap[t] - self.firm[t] + EPSILON).any():
                return None
            if any(self._label_clash(label, remaining, covers)[t] for label in vm.anti_affinity):
                return None
            chain.append((sets, t))
            remaining = remaining[~taken]
        return None if remaining.size else chain

    def best_homes(self, vm: Vm, d: np.ndarray) -> list[int]:
        """Allowed homes, the emptiest first (worst fit spreads failover load evenly),
        or in host order when packing."""
        room = self.home_room(vm, d)
        allowed = self.allowed(vm)
        if self.pack:
            order = np.arange(len(room))
        else:
            order = np.lexsort((np.arange(len(room)), -room))
        return [int(j) for j in order if allowed[j]]

    def balance(self) -> np.ndarray:
        """Per host, the largest share of a resource held by home VMs plus spare."""
        return ((self.firm + self.peak) / self.scale).max(axis=1)


def _placing_order(vms: list[Vm], problem: Problem) -> list[Vm]:
    """Pinned first, then HA, plain and preemptible VMs, each largest first."""
    totals = {r: sum(getattr(h, r) or 0 for h in problem.hosts.values()) or 1
              for r in RESOURCES}

    def size(vm: Vm) -> float:
        return max(vm.demand(r) / totals[r] for r in RESOURCES)

    kind = {True: 0, False: 1}
    return sorted(vms, key=lambda vm: (vm.home is None, vm.preemptible, kind[vm.ha],
                                       -size(vm), vm.name))


def _demand_on_survivors(problem: Problem):
    """Per failure set and resource (those every host declares): the demand that must
    run outside the set, and what the hosts outside it have. Plain VMs may sit on the
    failed hosts; HA VMs must all run on survivors."""
    firm = [vm for vm in problem.vms.values() if not vm.preemptible]
    resources = [r for r in RESOURCES
                 if all(getattr(h, r) is not None for h in problem.hosts.values())]
    for r in resources:
        caps = {h.name: getattr(h, r) for h in problem.hosts.values()}
        ha = sum(vm.demand(r) for vm in firm if vm.ha)
        plain = sum(vm.demand(r) for vm in firm if not vm.ha)
        total = sum(caps.values())
        for failed in problem.failure_sets:
            lost = sum(caps[h] for h in failed)
            yield failed, r, ha + max(0.0, plain - lost), total - lost, ha + plain, total


def _check_totals(problem: Problem) -> None:
    """Fail early, naming a failure set and every resource short, when capacity alone
    cannot cover it."""
    margins = list(_demand_on_survivors(problem))
    everything = {r: (need, have) for dummy, r, dummy, dummy, need, have in margins}
    short = [f"{amount(need - have)} {_UNITS[r]}" for r, (need, have) in everything.items()
             if need > have + EPSILON]
    if short:
        raise VdmInfeasible(f"the VMs need more than all hypervisors have: "
                            f"{' and '.join(short)} short; " + _WHAT_HELPS)
    # Report the worst failure set: covering it is what the operator must fix.
    by_set: dict[frozenset[str], tuple[list[str], list[str], float]] = {}
    for failed, r, need, have, dummy, total in margins:
        if need - have > EPSILON:
            short, needs, score = by_set.setdefault(failed, ([], [], 0.0))
            short.append(f"{amount(need - have)} {_UNITS[r]}")
            needs.append(f"{amount(need)} of {amount(have)} {_UNITS[r]}")
            by_set[failed] = (short, needs, max(score, (need - have) / total))
    worst = None
    for failed in problem.failure_sets:
        if failed in by_set and (worst is None or by_set[failed][2] > worst[3] + EPSILON):
            worst = (failure_set_key(failed), *by_set[failed])
    if worst:
        key, short, needs, dummy = worst
        raise VdmInfeasible(
            f"failure of {key}: {' and '.join(short)} short on hosts outside "
            f"{{{key}}} (the VMs that must run there need {', '.join(needs)}); "
            + _WHAT_HELPS)


def _place_all(state: _State, vms: list[Vm], homes: dict[str, str]) -> None:
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
            kind = "HA" if vm.ha else "preemptible" if vm.preemptible else "plain"
            sizes = ", ".join(f"{amount(vm.demand(r))} {_UNITS[r]}" for r in RESOURCES
                              if vm.demand(r))
            detail = "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "")
            raise VdmInfeasible(f"VM {vm.name} ({kind}, {sizes}) fits nowhere: {detail}; "
                                + _WHAT_HELPS)


def _evict_for(state: _State, vm: Vm, d: np.ndarray, j: int) -> bool:
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


def _rebalance(state: _State, problem: Problem, budget: int) -> None:
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


def _move_off(state: _State, vm: Vm, fullest: int, share: float) -> bool:
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


def _preemptions(state: _State, problem: Problem) -> dict[str, list[str]]:
    """Per failure set, the preemptible VMs to stop so that incoming HA VMs fit."""
    if not state.sets:
        return {}
    by_host: dict[int, list[Vm]] = {}
    for name, j in state.home.items():
        if problem.vms[name].preemptible:
            by_host.setdefault(j, []).append(problem.vms[name])
    for vms in by_host.values():
        vms.sort(key=lambda vm: (vm.priority, -state.demand(vm).sum(), vm.name))
    incoming_names: dict[tuple[int, int], list[Vm]] = {}
    for name, chain in state.chains.items():
        for sets, t in chain:
            if t in by_host:
                for s in sets:
                    incoming_names.setdefault((int(s), t), []).append(problem.vms[name])
    preempt: dict[str, list[str]] = {}
    for (s, t), arriving in sorted(incoming_names.items()):
        labels = set().union(*(vm.anti_affinity for vm in arriving))
        over = state.all[t] + state.load[s, t] - state.cap[t]
        stopped = []
        for vm in by_host[t]:
            if vm.anti_affinity & labels:
                stopped.append(vm)
                over -= state.demand(vm)
        for vm in by_host[t]:
            if (over <= EPSILON).all():
                break
            if vm not in stopped:
                stopped.append(vm)
                over -= state.demand(vm)
        if stopped:
            preempt.setdefault(state.keys[s], []).extend(vm.name for vm in stopped)
    return {key: sorted(names) for key, names in sorted(preempt.items())}


def _previous_chains(problem: Problem, previous_home: dict[str, str],
                     previous_failover: dict[str, dict[str, str]]
                     ) -> dict[tuple[str, int], list[str]]:
    """Each HA VM's chain in the current map: its target when its home fails, then when
    that target fails too, and so on; then its targets when whole domains fail."""
    index = {h: i for i, h in enumerate(sorted(problem.hosts))}
    targets: dict[str, set[str]] = {}
    for moves in previous_failover.values():
        for name, target in moves.items():
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


def _first_feasible(problem: Problem, order: list[Vm], previous_home: dict[str, str],
                    previous_chains: dict[tuple[str, int], list[str]]) -> _State:
    """Try ways of placing, most balanced and fewest moves first; the first that
    succeeds wins, and the first failure is the one reported."""
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
    failure, furthest = None, None

    def progress(state: _State) -> int:  # VMs placed, less those it moved
        return len(state.home) - _moves(state, previous_home)

    for pack, vms, homes in attempts:
        state = _State(problem, pack=pack, previous_chains=previous_chains if homes else None)
        try:
            _place_all(state, vms, homes)
            return state
        except VdmInfeasible as err:
            failure = failure or err
            if furthest is None or progress(state) > progress(furthest):
                furthest = state
    # Where the attempt that got furthest put its VMs: the exact search and the repair
    # start there.
    failure.partial = furthest
    raise failure


def plan(problem: Problem, previous_home: dict[str, str] | None = None,
         rebalance_moves: int = 0,
         previous_failover: dict[str, dict[str, str]] | None = None,
         time_limit: float = 60.0, exact: bool = True,
         objective: str = DEFAULT_OBJECTIVE) -> Plan:
    """Plan a VDM for `problem`.

    With `previous_home` (the home map of the current VDM) VMs keep their homes unless
    they must move, and with `previous_failover` (its failover map) their failover
    targets where they still fit; up to `rebalance_moves` more may move to even out
    the hosts.

    The greedy search runs first; when it fails and `exact` is set, the exact search
    (vdm_solver) takes up to `time_limit` seconds. Three answers: a Plan; VdmInfeasible
    when no plan exists, with the proof (a failure set and resource whose demand
    exceeds what survives, or the exact search's); VdmNotFound when neither found a
    plan nor proved there is none.

    With `objective` "preemptions" the exact search, started from the greedy plan, then
    looks for one that stops fewer preemptible VMs (summed over the failure sets) for
    up to `time_limit` seconds, moving no more VMs; with "balance" the greedy plan is
    kept as it is.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: must be one of {', '.join(OBJECTIVES)}, "
                         f"got {objective!r}")
    if np is None:
        raise RuntimeError("the VDM planner needs the Python library numpy")
    _check_totals(problem)
    previous_home = {n: h for n, h in (previous_home or {}).items() if n in problem.vms}
    order = _placing_order(list(problem.vms.values()), problem)
    chains = _previous_chains(problem, previous_home, previous_failover or {})
    method = "greedy"
    try:
        state = _first_feasible(problem, order, previous_home, chains)
    except VdmInfeasible as greedy:
        if not exact:
            raise
        state, method = _solved(problem, previous_home, time_limit, greedy,
                                preemptions=objective == "preemptions")
    else:
        preemptions = objective == "preemptions" and any(
            vm.preemptible for vm in problem.vms.values())
        if exact and (preemptions or _moves(state, previous_home)
                      > _STABLE_SHARE * len(previous_home)):
            state, method = _improved(problem, previous_home, time_limit, state, preemptions)
    if rebalance_moves:
        _rebalance(state, problem, rebalance_moves)
    result = _plan_of(state, problem)
    result.moved = sorted(n for n, h in previous_home.items() if result.home[n] != h)
    result.method = method
    result.objective = objective
    return result


def _plan_of(state: _State, problem: Problem) -> Plan:
    home = {name: state.names[j] for name, j in sorted(state.home.items())}
    failover: dict[str, dict[str, str]] = {key: {} for key in state.keys}
    for name in sorted(state.chains):
        for sets, t in state.chains[name]:
            for s in sets:
                failover[state.keys[s]][name] = state.names[t]
    reserve = {state.names[t]: {r: amount(state.peak[t, i])
                                for i, r in enumerate(state.resources)}
               for t in range(len(state.names)) if state.peak[t].any()}
    return Plan(home=home, failover=failover, preempt=_preemptions(state, problem),
                reserve=reserve)


def _hints(state: _State | None) -> tuple[dict[str, str], dict[str, dict[frozenset, str]]]:
    """A greedy state's homes and targets per failure set, for the exact search."""
    if state is None:
        return {}, {}
    home = {name: state.names[j] for name, j in state.home.items()}
    targets = {name: {state.sets[s]: state.names[t] for sets, t in chain for s in sets}
               for name, chain in state.chains.items()}
    return home, targets


def _state_of(problem: Problem, outcome: vdm_solver.Outcome) -> _State:
    """The exact search's plan as a planner state: each VM's targets grouped by host
    are the links of its chain."""
    state = _State(problem)
    index = {key: i for i, key in enumerate(state.sets)}
    for name in sorted(outcome.home):
        vm = problem.vms[name]
        by_target: dict[str, list[int]] = {}
        for failed, target in outcome.targets.get(name, {}).items():
            by_target.setdefault(target, []).append(index[failed])
        chain = [(np.array(sorted(sets)), state.index[t]) for t, sets in by_target.items()]
        state.place(vm, state.index[outcome.home[name]], state.demand(vm), chain)
    return state


def _solved(problem: Problem, previous_home: dict[str, str], time_limit: float,
            greedy: VdmInfeasible, preemptions: bool) -> tuple[_State, str]:
    """A plan where the greedy search found none, and the search that found it.

    The exact search starts where the greedy search got furthest; it answers, or with
    `preemptions` improves its first plan, for up to `time_limit`, but gives up when it
    has found no plan in a share of it. The repair then completes the greedy partial
    plan window by window for the rest of the time (vdm_solver.repair): on a cluster
    too large or too full for the exact model it often finds a plan, but never proves
    there is none. Raises VdmInfeasible with the exact search's proof, or VdmNotFound."""
    start = time.perf_counter()
    hint_home, hint_targets = _hints(getattr(greedy, "partial", None))
    exact = vdm_solver.solve(problem, time_limit, previous_home=previous_home,
                             hint_home=hint_home, hint_targets=hint_targets,
                             preemptions=preemptions, find_within=time_limit * _EXACT_SHARE)
    greedy_said = str(greedy).split("; " + _WHAT_HELPS, maxsplit=1)[0]
    if exact.status == "infeasible":
        raise VdmInfeasible(f"{greedy_said}; {exact.reason}; {_WHAT_HELPS}")
    if exact.status == "plan":
        return _state_of(problem, exact), "exact"
    repaired = vdm_solver.repair(problem, hint_home, hint_targets,
                                 time_limit - (time.perf_counter() - start), previous_home)
    if repaired.status == "plan":
        state = _state_of(problem, repaired)
        left = time_limit - (time.perf_counter() - start)
        if left > 1 and _moves(state, previous_home) > _STABLE_SHARE * len(previous_home):
            # A re-plan that moved many: the exact search, started from the repair's
            # plan, keeps more VMs where they were (the repair's windows see too few
            # hosts at once to swap them back).
            state, method = _improved(problem, previous_home, left, state, preemptions,
                                      from_plan=True)
            return state, "repair" if method == "greedy" else method
        return state, "repair"
    raise VdmNotFound(f"no plan found: the greedy search stopped at {greedy_said}; "
                      f"the exact search did not settle it ({exact.reason}); "
                      f"{repaired.reason}; {_likeliest_fix(problem)}")


def _moves(state: _State, previous_home: dict[str, str]) -> int:
    return sum(state.names[j] != previous_home[n] for n, j in state.home.items()
               if n in previous_home)


def _improved(problem: Problem, previous_home: dict[str, str], time_limit: float,
              state: _State, preemptions: bool, from_plan: bool = False
              ) -> tuple[_State, str]:
    """A greedy plan that moved many VMs on a re-plan, or whose preemptions are to be
    fewest: the exact search, started from it, looks for one that moves fewer VMs (and
    with `preemptions`, then stops fewer preemptible VMs, searching for up to
    `time_limit`); the better of the two, and the search that found it ("greedy" for
    the plan given). With `from_plan` the search starts from that plan itself, not
    from a first plan of its own: for plans the exact search is slow to find."""
    if vdm_solver.supported(problem):
        return state, "greedy"
    hint_home, hint_targets = _hints(state)
    outcome = vdm_solver.solve(problem, time_limit, previous_home=previous_home,
                               hint_home=hint_home, hint_targets=hint_targets,
                               preemptions=preemptions,
                               hint_is_plan=preemptions or from_plan)
    if outcome.status != "plan":
        return state, "greedy"
    solved = _state_of(problem, outcome)

    def cost(candidate: _State) -> tuple[int, int]:
        return (_moves(candidate, previous_home),
                _plan_of(candidate, problem).preemptions if preemptions else 0)

    if cost(solved) < cost(state):
        return solved, "exact"
    return state, "greedy"


def _likeliest_fix(problem: Problem) -> str:
    """What would most likely make the cluster fit: relief for the failure set that
    leaves the least room, by the same count as the infeasibility certificate."""
    tightest = None
    for failed, r, need, have, dummy, dummy in _demand_on_survivors(problem):
        share = (have - need) / max(have, EPSILON)
        if tightest is None or share < tightest[0]:
            tightest = (share, failure_set_key(failed), r, have - need)
    if tightest is None:
        return _WHAT_HELPS
    share, key, r, left = tightest
    return (f"the failure of {key} leaves the least room, {amount(left)} {_UNITS[r]} "
            f"({100 * share:.1f} %) on the other hosts: most likely to help is more "
            f"{_UNITS[r].split()[-1]} outside {{{key}}}, fewer HA VMs, or a longer "
            f"yasco_plan_time_limit; or {_WHAT_HELPS}")
