# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The greedy planner's state: each VM's home, each HA VM's failover chain, and the
load every failure set puts on every host, kept in step; the search for a chain; and
the plan read from it.

Why chains. Each HA VM gets an ordered list of distinct hosts other than its home;
under a failure set S containing its home it goes to the first host of its chain that
is not in S. A chain of X hosts always has a survivor, one more host outside the home's
failure domain covers a whole domain, and nesting (invariant 3) holds by construction:
if the target under S survives a larger S', every host before it in the chain is
already in S, so it is the target under S' too. The planner therefore never searches
failover maps, only chains, and it still sees every failure set's load exactly.

Every choice is checked against the load of every failure set it touches, kept in one
array, so a plan is valid by construction (and then re-checked independently).

Pure Python and numpy; no I/O and no Ansible.
"""

from __future__ import annotations

from collections import Counter

try:
    import numpy as np
except ImportError:  # reported by the caller through missing_required_lib
    np = None

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    EPSILON, RESOURCES, UNIT_NAMES, Plan, Problem, Vm, amount, failure_set_key)

_BRANCHES = 3  # runners-up tried at each link of a chain before giving up


class PlanState:
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
        short = [f"{amount(-room[best, i])} {UNIT_NAMES[r]}"
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
        short = [f"{amount(-room[i])} {UNIT_NAMES[r]}" for i, r in enumerate(self.resources)
                 if room[i] < -EPSILON]
        spare = [f"{amount(self.peak[j, i])} {UNIT_NAMES[r]}"
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


def _preemptions(state: PlanState, problem: Problem) -> dict[str, list[str]]:
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


def plan_of(state: PlanState, problem: Problem) -> Plan:
    """The plan `state` holds: homes, failover targets per failure set, the preemptible
    VMs each failure set stops, and the spare each host reserves."""
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
