# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exact VDM search: homes and failover targets solved together with CP-SAT.

The greedy planner (vdm_planner) is fast and good on uniform clusters, but on mixed
hardware it can miss plans that exist: where the plain VMs sit decides whether a big
host's HA load can be absorbed, and a greedy fixes that too early. The planner calls
this module when the greedy fails; it either finds a plan, proves that none exists, or
runs out of time, and says which.

Why counts rather than VMs. VMs of one shape (size, kind, labels, allowed hosts, pin)
are interchangeable, so the model counts them: m[c, h] VMs of shape c at home on host
h and, for every failure set S holding h, f[c, h, S, t] of those that go to host t.
That is a few variables per shape, host pair and failure set instead of one per VM,
and it removes the symmetry between equal VMs that makes a model per VM slow.

Why this is exact. Every invariant of vdm_check is a linear constraint on the counts:
homes fit (all VMs) and keep anti-affinity; under every failure set, firm VMs at home
plus arrivals fit every survivor (preemptible VMs may all stop) and keep
anti-affinity; and nesting. Nesting is stated on counts, f[c, h, S', t] >=
f[c, h, S, t] for t surviving S', where S is the largest planned subset of S' that
holds h. When the planned subsets holding h form a chain (X <= 2 without failure
domains, or X = 1 with them) this is exactly what per-VM nesting needs: the VMs that
keep their target are those counts, and the others are free to go anywhere. For other
families (X = 3, or X = 2 with racks of three) every HA VM is counted alone, and
nesting is stated against every subset, as the checker states it; exact too, only
larger. `supported` refuses models too large to search in a minute. Capacities and
sizes are scaled to integers; when that is not exact (sizes with more than three
decimals) an "infeasible" status is reported as "not found", never as a proof.

The same model repairs a partial plan where the exact search is too slow or its
model too large (`repair`): a large-neighbourhood search that frees the VMs of a few
hosts at a time (a `Window`), holds the rest of the plan fixed as load on each host
and on each host under each failure set (`_Fixed`), and solves the window exactly.

The solution is turned back into one home and one target per failure set for every
VM, which the planner turns into its usual plan and the checker re-checks. After the
first plan the search looks for a better one: fewest VMs moved from the current map,
then, when asked, fewest preemptible VMs stopped (summed over the failure sets), then
the most balanced spare (the smallest largest share of a host's memory taken by its
firm VMs with what one failure set brings).

Pure Python and OR-Tools, no I/O and no Ansible.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field

try:
    from ortools.sat.python import cp_model
except ImportError:  # the planner reports the missing library
    cp_model = None

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    RESOURCES, Problem, Vm)

# The largest model (shape, host and failure-set variables) built within a minute.
MAX_VARIABLES = 400_000
# After the first plan of a re-plan, how long to look for one that moves fewer VMs;
# and the share of the VMs a re-plan may move before it searches on, for the time it
# has left, until it moves no more.
IMPROVE_SECONDS = 5.0
STABLE_SHARE = 0.05
# The repair's windows: how many hosts each frees, and how long each may search; and
# how many windows in a row may bring no moved VM back before it stops trying.
WINDOW_HOSTS = 4
WINDOW_SECONDS = 5.0
SETTLE_TRIES = 6
_SCALE = 1000  # sizes with up to three decimals (vCPUs times a ratio) stay exact


@dataclass
class Outcome:
    """`status` is "plan" (home and targets set), "infeasible" (proved), "unknown"
    (no plan found in the time), or "unsupported" (`reason` says why)."""

    status: str
    home: dict[str, str] = field(default_factory=dict)
    targets: dict[str, dict[frozenset[str], str]] = field(default_factory=dict)
    reason: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class _Shape:
    vcpus: float
    memory_mb: float
    net_mbps: float
    ha: bool
    preemptible: bool
    anti_affinity: frozenset[str]
    allowed: frozenset[str]
    home: str | None
    name: str | None = None  # one VM's own shape, when VMs cannot be counted

    @staticmethod
    def of(vm: Vm, alone: bool = False) -> _Shape:
        return _Shape(vm.vcpus, vm.memory_mb, vm.net_mbps, vm.ha, vm.preemptible,
                      vm.anti_affinity, vm.allowed, vm.home, vm.name if alone else None)

    def demand(self, resource: str) -> float:
        return getattr(self, resource)


@dataclass
class Window:
    """One step of the repair: the VMs at home on `hosts`, and the VMs without a home
    that may go there, are free; the rest of the plan (`home`, `targets`) is held
    fixed, as load on each host and on each host under each failure set. Its firm
    VMs that had a home keep one, and with `keep_all` its preemptible VMs too."""

    hosts: frozenset[str]
    home: dict[str, str]
    targets: dict[str, dict[frozenset[str], str]]
    keep_all: bool = False

    def free(self, problem: Problem) -> list[str]:
        return sorted(n for n, vm in problem.vms.items()
                      if self.home.get(n) in self.hosts or n not in self.home
                      and (vm.home in self.hosts if vm.home else vm.allowed & self.hosts))


def _inside(problem: Problem) -> dict[tuple[frozenset[str], str], list[frozenset[str]]]:
    """For each failure set S and host h in it, the planned proper subsets of S that
    hold h, smallest first: where nesting ties a VM of h under S to its target."""
    family = set(problem.failure_sets)
    sets_with: dict[str, list[frozenset[str]]] = {}
    for failed in problem.failure_sets:
        for h in failed:
            sets_with.setdefault(h, []).append(failed)
    inside = {}
    for larger in problem.failure_sets:
        for h in larger:
            if len(larger) <= 4:  # X hosts: try its few subsets
                others = sorted(larger - {h})
                found = [frozenset((h, *c)) for k in range(len(others))
                         for c in itertools.combinations(others, k)]
                found = [s for s in found if s in family]
            else:  # a whole failure domain: look through the sets that hold h
                found = [s for s in sets_with[h] if s < larger]
            inside[(larger, h)] = sorted(found, key=lambda s: (len(s), sorted(s)))
    return inside


def _nested_in_chains(inside: dict[tuple[frozenset[str], str], list[frozenset[str]]]
                      ) -> bool:
    return all(a < b for subsets in inside.values() for a, b in zip(subsets, subsets[1:]))


def supported(problem: Problem) -> str | None:
    """Why the exact search cannot take `problem` (None when it can)."""
    if cp_model is None:
        return "the exact search needs the Python library ortools (pip install ortools)"
    size = _Model.size(problem)
    if size > MAX_VARIABLES:
        return (f"the exact model would have about {size:,} variables "
                f"({len(problem.hosts)} hosts, {len(problem.failure_sets)} failure sets), "
                f"more than {MAX_VARIABLES:,} can be searched in a minute")
    return None


class _Fixed:
    """What the VMs a window holds fixed take, in the model's units: the firm ones at
    home on each host, and all that arrive on each host under each failure set; and
    the anti-affinity labels they hold there. All zero without a window, and at home
    in the window (whose VMs are free)."""

    def __init__(self, model: _Model, window: Window | None) -> None:
        self.firm: Counter = Counter()  # (host, resource)
        self.arriving: Counter = Counter()  # (failure set, host, resource)
        self.worst: Counter = Counter()  # (host, resource): most under any failure set
        self.firm_labels: set[tuple] = set()  # (label, host)
        # (label, failure set, host) and (label, host) of VMs arriving there
        self.arriving_labels: set[tuple] = set()
        if window is None:
            return
        free = {name for names in model.vms_of.values() for name in names}
        for name, h in window.home.items():
            if name in free:
                continue
            vm = model.problem.vms[name]
            need = {r: model.scaled(vm.demand(r), down=False) for r in model.resources}
            if not vm.preemptible:
                for r in model.resources:
                    self.firm[(h, r)] += need[r]
                self.firm_labels.update((label, h) for label in vm.anti_affinity)
            for failed, t in window.targets.get(name, {}).items():
                for r in model.resources:
                    self.arriving[(failed, t, r)] += need[r]
                for label in vm.anti_affinity:
                    self.arriving_labels.update(((label, failed, t), (label, t)))
        for (dummy, t, r), need in self.arriving.items():
            self.worst[(t, r)] = max(self.worst[(t, r)], need)


class _Model:
    """The CP-SAT model of one problem, and the variables to read a plan from."""

    def __init__(self, problem: Problem, window: Window | None = None) -> None:
        self.problem = problem
        self.window = window
        self.model = cp_model.CpModel()
        self.hosts = sorted(problem.hosts)
        self.resources = [r for r in RESOURCES
                          if any(getattr(h, r) is not None for h in problem.hosts.values())]
        self.exact = True
        self.inside = _inside(problem)
        # Counts are exact when the sets nesting ties together form chains; otherwise
        # every HA VM is its own shape and nesting is stated per VM, as the checker has it.
        alone = not _nested_in_chains(self.inside)
        self.vms_of: dict[_Shape, list[str]] = {}
        for name in window.free(problem) if window else sorted(problem.vms):
            vm = problem.vms[name]
            self.vms_of.setdefault(_Shape.of(vm, alone and vm.ha), []).append(name)
        self.shapes = list(self.vms_of)
        self.cap = {h: {r: self.scaled(getattr(problem.hosts[h], r), down=True)
                        for r in self.resources} for h in self.hosts}
        self.need = {c: {r: self.scaled(c.demand(r), down=False) for r in self.resources}
                     for c in self.shapes}
        self.home: dict[tuple[_Shape, str], cp_model.IntVar] = {}
        self.go: dict[tuple[_Shape, str, frozenset[str]], dict[str, cp_model.IntVar]] = {}
        # (failure set, host) -> (shape, count) of the VMs that may arrive there
        self.arriving: dict[tuple[frozenset[str], str], list] = {}
        self.stay: list[tuple[cp_model.IntVar, cp_model.IntVar, int]] = []
        self.firm: dict[tuple[str, str], tuple[list, list[int]]] = {}  # host, resource
        self.fit_cache: dict[tuple[_Shape, str], int] = {}
        self.fixed = _Fixed(self, window)
        self._homes()
        self._failures()
        self._anti_affinity()

    @staticmethod
    def size(problem: Problem) -> int:
        """About how many variables the model of `problem` has."""
        alone = not _nested_in_chains(_inside(problem))
        shapes = Counter(_Shape.of(vm, alone) for vm in problem.vms.values() if vm.ha)
        return (sum(len(s) for s in problem.failure_sets) * len(problem.hosts)
                * len(shapes))

    def scaled(self, value: float | None, down: bool) -> int | None:
        if value is None:
            return None
        scaled = value * _SCALE
        whole = round(scaled)
        if abs(scaled - whole) > 1e-6:
            self.exact = False  # rounded the safe way: a plan holds, a proof may not
            return int(scaled) if down else int(scaled) + 1
        return whole

    def _fits(self, c: _Shape, h: str) -> int:
        """How many VMs of shape c host h could hold alone."""
        most = self.fit_cache.get((c, h))
        if most is None:
            most = len(self.vms_of[c])
            if c.anti_affinity:
                most = min(most, 1)
            for r in self.resources:
                cap, need = self.cap[h][r], self.need[c][r]
                if cap is not None and need:
                    most = min(most, cap // need)
            self.fit_cache[(c, h)] = most = max(most, 0)
        return most

    # Sums go through LinearExpr.weighted_sum: building them with + is what makes a
    # model of a few hundred thousand variables slow to state in Python.

    def _homes(self) -> None:
        m = self.model
        window = self.window.hosts if self.window else None
        for c in self.shapes:
            hosts = [c.home] if c.home else sorted(c.allowed)
            hosts = [h for h in hosts if window is None or h in window]
            for h in hosts:
                self.home[(c, h)] = m.new_int_var(0, self._fits(c, h), "")
            placed = cp_model.LinearExpr.sum([self.home[(c, h)] for h in hosts])
            if window is None:
                m.add(placed == len(self.vms_of[c]))
            else:  # a window's firm VMs with a home keep one; others may find one
                m.add(placed <= len(self.vms_of[c]))
                if not c.preemptible or self.window.keep_all:
                    m.add(placed >= sum(n in self.window.home for n in self.vms_of[c]))
        for h in self.hosts:
            here = [c for c in self.shapes if (c, h) in self.home]
            firm = [c for c in here if not c.preemptible]
            for r in self.resources:
                self.firm[(h, r)] = ([self.home[(c, h)] for c in firm],
                                     [self.need[c][r] for c in firm])
                if self.cap[h][r] is not None:
                    m.add(cp_model.LinearExpr.weighted_sum(
                        [self.home[(c, h)] for c in here], [self.need[c][r] for c in here])
                        <= self.cap[h][r])
                if self.cap[h][r] is not None and self.fixed.worst[(h, r)] and firm:
                    # with what fixed VMs bring under the failure set that brings most
                    m.add(cp_model.LinearExpr.weighted_sum(*self.firm[(h, r)])
                          <= self.cap[h][r] - self.fixed.worst[(h, r)])

    def _failures(self) -> None:
        m = self.model
        ha = [c for c in self.shapes if c.ha]
        for failed in self.problem.failure_sets:
            for c in ha:
                for h in sorted(failed):
                    home = self.home.get((c, h))
                    if home is None:
                        continue
                    go = {t: m.new_int_var(0, self._fits(c, t), "")
                          for t in sorted(c.allowed - failed)}
                    self.go[(c, h, failed)] = go
                    m.add(cp_model.LinearExpr.sum(list(go.values())) == home)
                    for t, count in go.items():
                        self.arriving.setdefault((failed, t), []).append((c, count))
        for (failed, t), incoming in self.arriving.items():
            for r in self.resources:
                if self.cap[t][r] is not None:
                    firm, needs = self.firm[(t, r)]
                    m.add(cp_model.LinearExpr.weighted_sum(
                        firm + [count for c, count in incoming],
                        needs + [self.need[c][r] for c, count in incoming])
                        <= self.room(failed, t, r))
        # Nesting: whoever goes to a host that survives the larger set too still goes
        # there. On counts, against the largest subset (the others are inside it).
        for (c, h, failed), go in self.go.items():
            inside = self.inside[(failed, h)]
            for smaller in inside[-1:] if c.name is None else inside:
                before = self.go[(c, h, smaller)]
                for t, count in go.items():
                    m.add(count >= before[t])

    def room(self, failed: frozenset[str], t: str, r: str) -> int:
        """What host t has of resource r, under failure set `failed`, for the model's
        firm VMs at home and arrivals: all of it, less what fixed VMs take."""
        return (self.cap[t][r] - self.fixed.firm[(t, r)]
                - self.fixed.arriving[(failed, t, r)])

    def _anti_affinity(self) -> None:
        m, fixed = self.model, self.fixed
        labels = sorted(set().union(*(c.anti_affinity for c in self.shapes)))
        firm_with: dict[tuple[str, str], list] = {}
        for label in labels:
            sharing = [c for c in self.shapes if label in c.anti_affinity]
            for h in self.hosts:
                here = [self.home[(c, h)] for c in sharing if (c, h) in self.home]
                if len(here) > 1:
                    m.add(cp_model.LinearExpr.sum(here) <= 1)
                firm_with[(label, h)] = [self.home[(c, h)] for c in sharing
                                         if not c.preemptible and (c, h) in self.home]
                if firm_with[(label, h)] and (label, h) in fixed.arriving_labels:
                    m.add(cp_model.LinearExpr.sum(firm_with[(label, h)]) == 0)
        for (failed, t), incoming in self.arriving.items():
            by_label: dict[str, list] = {}
            for c, count in incoming:
                for label in c.anti_affinity:
                    by_label.setdefault(label, []).append(count)
            for label, arriving in by_label.items():
                taken = ((label, t) in fixed.firm_labels
                         or (label, failed, t) in fixed.arriving_labels)
                m.add(cp_model.LinearExpr.sum(arriving + firm_with[(label, t)]) <= 1 - taken)

    def keep(self, previous_home: dict[str, str]) -> None:
        """Count the VMs that stay where `previous_home` has them (`stay`)."""
        for c, names in self.vms_of.items():
            before = Counter(previous_home[n] for n in names if n in previous_home)
            for h, count in before.items():
                if (c, h) in self.home:
                    stay = self.model.new_int_var(0, count, "")
                    self.model.add(stay <= self.home[(c, h)])
                    self.stay.append((stay, self.home[(c, h)], count))

    def _fullest_share(self) -> cp_model.IntVar:
        """The largest share of a host's memory, in thousandths, that its firm VMs at
        home take, alone or with what any one failure set brings it: the spare
        reservations are most balanced when it is smallest."""
        r = "memory_mb"
        worst = self.model.new_int_var(0, 1000, "")
        for t in self.hosts:
            firm, needs = self.firm[(t, r)]
            self.model.add(cp_model.LinearExpr.weighted_sum(
                firm + [worst], [1000 * n for n in needs] + [-self.cap[t][r]]) <= 0)
        for (failed, t), incoming in self.arriving.items():
            firm, needs = self.firm[(t, r)]
            self.model.add(cp_model.LinearExpr.weighted_sum(
                firm + [count for c, count in incoming] + [worst],
                [1000 * n for n in needs] + [1000 * self.need[c][r] for c, count in incoming]
                + [-self.cap[t][r]]) <= 0)
        return worst

    def _preempted(self) -> tuple[cp_model.LinearExpr, int]:
        """How many preemptible VMs stop, summed over the failure sets, and the most it
        can be. Under a failure set, a preemptible VM on a host that VMs arrive at keeps
        running only if the firm VMs, the arrivals and the preemptible VMs kept all fit,
        and no arrival shares an anti-affinity label with it (as the plan's `preempt`
        decides)."""
        m = self.model
        preemptible = [c for c in self.shapes if c.preemptible]
        stopped, kept, most = [], [], 0
        for (failed, t), incoming in self.arriving.items():
            here = [c for c in preemptible if (c, t) in self.home]
            if not here:
                continue
            keep = {c: m.new_int_var(0, self._fits(c, t), "") for c in here}
            for c, v in keep.items():
                m.add(v <= self.home[(c, t)])
                stopped.append(self.home[(c, t)])
                kept.append(v)
                most += self._fits(c, t)
                for label in c.anti_affinity:
                    clash = [count for a, count in incoming if label in a.anti_affinity]
                    if clash:
                        m.add(cp_model.LinearExpr.sum([v] + clash) <= 1)
            for r in self.resources:
                if self.cap[t][r] is not None:
                    firm, needs = self.firm[(t, r)]
                    m.add(cp_model.LinearExpr.weighted_sum(
                        firm + [count for c, count in incoming] + list(keep.values()),
                        needs + [self.need[c][r] for c, count in incoming]
                        + [self.need[c][r] for c in keep]) <= self.cap[t][r])
        return (cp_model.LinearExpr.sum(stopped) - cp_model.LinearExpr.sum(kept)), most

    def planned(self) -> list:
        """The variables a plan is made of: the homes, and the failover targets."""
        return [*self.home.values(), *(v for go in self.go.values() for v in go.values())]

    def values(self, solver) -> dict[int, int]:
        """The solver's plan as improve() takes it: each variable's value by index."""
        return {v.index: solver.value(v) for v in self.planned()}

    def improve(self, value, preemptions: bool) -> None:
        """From a plan (`value` gives each variable's value in it: a solver's, or the
        hint's), look for one that moves the fewest VMs, then among those (with
        `preemptions`) the one that stops the fewest preemptible VMs, then the most
        balanced spare."""
        self.model.clear_hints()
        for (dummy, h), v in self.home.items():
            self.model.add_hint(v, value(v))
        for go in self.go.values():
            for v in go.values():
                self.model.add_hint(v, value(v))
        for stay, home, count in self.stay:
            self.model.add_hint(stay, min(value(home), count))
        # Each term outweighs all that follow it: balance is at most 1000.
        per_preemption = 1001
        preempted, most = self._preempted() if preemptions else (0, 0)
        per_stay = per_preemption * (most + 1)
        self.model.maximize(per_stay * sum(stay for stay, dummy, dummy in self.stay)
                            - per_preemption * preempted - self._fullest_share())

    def fill(self) -> None:
        """Look for the plan that gives homes to the most memory of firm VMs, then
        keeps the most VMs where they were (`keep`), then gives homes to the most
        memory of preemptible VMs (a window's: they need only room at home, which firm
        VMs need first)."""
        memory = {c: max(1, self.need[c].get("memory_mb", 0) // _SCALE) for c in self.shapes}
        # Each term outweighs all that follow it.
        per_stay = 1 + sum(memory[c] * len(self.vms_of[c])
                           for c in self.shapes if c.preemptible)
        per_firm = per_stay * (1 + sum(count for dummy, dummy, count in self.stay))
        self.model.maximize(cp_model.LinearExpr.weighted_sum(
            list(self.home.values()) + [stay for stay, dummy, dummy in self.stay],
            [memory[c] * (1 if c.preemptible else per_firm) for c, dummy in self.home]
            + [per_stay] * len(self.stay)))

    def hint(self, home: dict[str, str],
             targets: dict[str, dict[frozenset[str], str]]) -> None:
        """Start the search from `home` and `targets` (a partial plan will do)."""
        go: Counter = Counter()
        for c, names in self.vms_of.items():
            counts = Counter(home[n] for n in names if n in home)
            for h in (c.allowed if c.home is None else [c.home]):
                if (c, h) in self.home:
                    self.model.add_hint(self.home[(c, h)], counts.get(h, 0))
            for name in names:
                for failed, t in targets.get(name, {}).items():
                    go[(c, home[name], failed, t)] += 1
        for (c, h, failed), variables in self.go.items():
            for t, v in variables.items():
                self.model.add_hint(v, go.get((c, h, failed, t), 0))

    def read(self, solver, previous_home: dict[str, str]) -> tuple[dict, dict]:
        """One home per VM and, per failure set holding it, one target per HA VM (in a
        window, for the VMs it gives a home, those that had one first)."""
        home: dict[str, str] = {}
        targets: dict[str, dict[frozenset[str], str]] = {}
        for c, names in self.vms_of.items():
            left = {h: solver.value(v) for (shape, h), v in self.home.items() if shape == c}
            # VMs that may stay where they were do, so a re-plan moves few.
            waiting = []
            for name in names:
                was = previous_home.get(name)
                if left.get(was, 0) > 0:
                    home[name] = was
                    left[was] -= 1
                else:
                    waiting.append(name)
            waiting.sort(key=lambda n: n in previous_home)  # the last are placed first
            for h in sorted(left):
                for dummy in range(left[h]):
                    home[waiting.pop()] = h
            if c.ha:
                by_home: dict[str, list[str]] = {}
                for name in names:
                    if name in home:
                        by_home.setdefault(home[name], []).append(name)
                for h, group in by_home.items():
                    self._targets(c, h, group, solver, targets)
        return home, targets

    def _targets(self, c: _Shape, h: str, group: list[str], solver,
                 targets: dict[str, dict[frozenset[str], str]]) -> None:
        for name in group:
            targets[name] = {}
        for failed in sorted((s for s in self.problem.failure_sets if h in s), key=len):
            want = {t: solver.value(v) for t, v in self.go[(c, h, failed)].items()}
            smaller = self.inside[(failed, h)][-1:]
            free = []
            for name in group:
                kept = targets[name].get(smaller[0]) if smaller else None
                if kept is not None and kept not in failed:
                    targets[name][failed] = kept
                    want[kept] -= 1
                else:
                    free.append(name)
            for t in sorted(want):
                for dummy in range(want[t]):
                    targets[free.pop()][failed] = t
            if free or any(n < 0 for n in want.values()):
                raise RuntimeError(f"the exact search's counts for {','.join(sorted(failed))} "
                                   "do not split into VMs")  # a bug, never an answer


def solve(problem: Problem, time_limit: float, previous_home: dict[str, str] | None = None,
          hint_home: dict[str, str] | None = None,
          hint_targets: dict[str, dict[frozenset[str], str]] | None = None,
          workers: int | None = None, preemptions: bool = False,
          hint_is_plan: bool = False, find_within: float | None = None) -> Outcome:
    """Search for a plan of `problem` for up to `time_limit` seconds, leaving VMs at
    `previous_home` where it can and starting from the homes `hint_home` and failover
    targets `hint_targets` (a partial plan, such as where the greedy search stopped).
    Once a plan is found, look for a better one: one that moves fewer VMs, then with
    `preemptions` one that stops fewer preemptible VMs, then one whose spare is better
    balanced; with `preemptions` for the rest of `time_limit`, otherwise for a few
    seconds on a re-plan and about as long as the first plan took on a first plan.
    With `hint_is_plan` the hint is a whole plan: the search looks for a better one
    from it at once (the caller keeps the better of the two). With `find_within` it
    gives up ("unknown") when it has found no plan in that many seconds."""
    start = time.perf_counter()
    reason = supported(problem)
    if reason:
        return Outcome("unsupported", reason=reason)
    previous_home = previous_home or {}
    model = _Model(problem)
    if previous_home:
        model.keep(previous_home)
    if hint_home:
        model.hint(hint_home, hint_targets or {})
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers or min(8, os.cpu_count() or 1)

    def left() -> float:
        return max(0.01, time_limit - (time.perf_counter() - start))

    if hint_is_plan and "memory_mb" in model.resources:
        # The search starts from the plan given and keeps it unless it finds better.
        hinted = dict(zip(model.model.proto.solution_hint.vars,
                          model.model.proto.solution_hint.values))
        model.improve(lambda v: hinted.get(v.index, 0), preemptions)
        solver.parameters.max_time_in_seconds = left() if preemptions else min(
            IMPROVE_SECONDS, left())
        tried = solver.parameters.max_time_in_seconds
        last = solver.solve(model.model)
        found, values = None, {v.index: hinted.get(v.index, 0) for v in model.planned()}
        if last in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            found, values = model.read(solver, previous_home), model.values(solver)
        found = _kept_more(model, solver, found, values, last == cp_model.OPTIMAL,
                           previous_home, preemptions, left)
        if found is None:
            return Outcome("unknown", reason=f"no better plan found in {tried:g} s",
                           seconds=time.perf_counter() - start)
        return Outcome("plan", *found, seconds=time.perf_counter() - start)
    # First any plan (CP-SAT stops at the first), then from there a better one.
    solver.parameters.max_time_in_seconds = min(left(), find_within or time_limit)
    status = solver.solve(model.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and "memory_mb" in model.resources:
        first = model.read(solver, previous_home)
        values = model.values(solver)
        took = time.perf_counter() - start
        model.improve(solver.value, preemptions)
        improve = (left() if preemptions else IMPROVE_SECONDS if model.stay
                   else min(IMPROVE_SECONDS, max(1.0, took)))
        solver.parameters.max_time_in_seconds = min(improve, left())
        last = solver.solve(model.model)
        if last in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            first, values = model.read(solver, previous_home), model.values(solver)
        home, targets = _kept_more(model, solver, first, values, last == cp_model.OPTIMAL,
                                   previous_home, preemptions, left)
        return Outcome("plan", home, targets, seconds=time.perf_counter() - start)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        home, targets = model.read(solver, previous_home)
        return Outcome("plan", home, targets, seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if status == cp_model.INFEASIBLE and model.exact:
        return Outcome("infeasible", reason="an exhaustive search (CP-SAT) proved that no "
                       "plan holds every invariant", seconds=seconds)
    if status == cp_model.INFEASIBLE:
        return Outcome("unknown", reason="no plan with sizes rounded to 1/1000 exists; "
                       "the exact sizes may still have one", seconds=seconds)
    return Outcome("unknown", reason="no plan found in "
                   f"{solver.parameters.max_time_in_seconds:g} s", seconds=seconds)


def _kept_more(model: _Model, solver, found: tuple[dict, dict] | None, values: dict[int, int],
               optimal: bool, previous_home: dict[str, str], preemptions: bool,
               left) -> tuple[dict, dict]:
    """The plan `found` (whose variables have `values`; None for the hint given, whose
    plan the caller has); but on a re-plan that still moves more than STABLE_SHARE of
    the VMs, unless it was proved to move fewest, the search goes on from it for the
    time `left()` gives, until it finds one that moves no more than that: the few
    seconds of the first improvement are often too few for a cluster that tolerates
    two failures, and VMs moved for nothing cost live migrations."""
    total = sum(count for dummy, dummy, count in model.stay)
    enough = total - int(STABLE_SHARE * total)
    if (preemptions or optimal or not total or left() < 1
            or sum(min(values[home.index], count)
                   for dummy, home, count in model.stay) >= enough):
        return found
    model.improve(lambda v: values[v.index], preemptions)
    solver.parameters.max_time_in_seconds = left()
    if solver.solve(model.model, _StopWhenKept(model, enough)) not in (
            cp_model.OPTIMAL, cp_model.FEASIBLE):
        return found
    return model.read(solver, previous_home)


class _StopWhenKept(cp_model.CpSolverSolutionCallback if cp_model else object):
    """Stops the search at the first plan that keeps `enough` VMs where they were."""

    def __init__(self, model: _Model, enough: int) -> None:
        super().__init__()
        self.stays = [stay for stay, dummy, dummy in model.stay]
        self.enough = enough

    def on_solution_callback(self) -> None:
        if sum(self.value(stay) for stay in self.stays) >= self.enough:
            self.stop_search()


def _window_hosts(problem: Problem, home: dict[str, str],
                  targets: dict[str, dict[frozenset[str], str]],
                  rng: random.Random) -> frozenset[str]:
    """Where to look next: a host where a VM without a home may go, drawn by the
    memory it has free at home, with the failure set that brings it most (whose VMs
    may then go elsewhere), and hosts drawn at random up to WINDOW_HOSTS."""
    vm = problem.vms[rng.choice(sorted(set(problem.vms) - set(home)))]
    hosts = sorted(problem.hosts)
    free = {h: problem.hosts[h].memory_mb for h in hosts}
    for name, h in home.items():
        free[h] -= problem.vms[name].memory_mb
    allowed = [vm.home] if vm.home else sorted(vm.allowed)
    first = rng.choices(allowed, [max(free[h], 0) + 1 for h in allowed])[0]
    brought: Counter = Counter()
    for name, chosen in targets.items():
        for failed, t in chosen.items():
            if t == first:
                brought[failed] += problem.vms[name].memory_mb
    window = {first, *(max(brought, key=brought.get) if brought else ())}
    rest = [h for h in hosts if h not in window]
    return frozenset([*window, *rng.sample(rest, max(0, min(WINDOW_HOSTS - len(window),
                                                            len(rest))))])


def _settle_hosts(problem: Problem, home: dict[str, str], moved: list[str],
                  previous_home: dict[str, str], rng: random.Random) -> frozenset[str]:
    """Where to look for VMs to move back: the host a moved VM left and the one it is
    on, the hosts other moved VMs left or went to, then hosts drawn at random, up to
    WINDOW_HOSTS."""
    name = rng.choice(moved)
    window = {h for h in (previous_home[name], home[name]) if h in problem.hosts}
    others = sorted({h for n in moved for h in (previous_home[n], home[n])
                     if h in problem.hosts} - window)
    window.update(rng.sample(others, min(len(others), max(0, WINDOW_HOSTS - len(window)))))
    rest = sorted(set(problem.hosts) - window)
    window.update(rng.sample(rest, min(len(rest), max(0, WINDOW_HOSTS - len(window)))))
    return frozenset(window)


def _moved(home: dict[str, str], previous_home: dict[str, str]) -> list[str]:
    return sorted(n for n, h in previous_home.items() if n in home and home[n] != h)


def repair(problem: Problem, home: dict[str, str],
           targets: dict[str, dict[frozenset[str], str]], time_limit: float,
           previous_home: dict[str, str] | None = None, seed: int = 0,
           workers: int | None = None) -> Outcome:
    """Complete the partial plan `home` and `targets` (where the greedy search stopped)
    within `time_limit` seconds: a large-neighbourhood search. Each step frees the VMs
    at home on a few hosts (`_window_hosts`) and the VMs without a home that may go
    there, holds the rest of the plan fixed as load, and solves that window exactly,
    giving homes to as much memory of firm VMs as it can, then leaving VMs at
    `previous_home` where it can, then giving homes to preemptible VMs; firm VMs that
    had a home keep one. It stops when every VM has a home ("plan") or
    the time is up ("unknown", with the VMs it placed); it proves nothing.

    With `previous_home`, once every VM has a home it goes on to move VMs back where
    they were, with windows drawn around the hosts moved VMs left and went to, in
    which every VM keeps a home: until none is moved, SETTLE_TRIES windows in a row
    bring none back, or the time is up."""
    start = time.perf_counter()
    if cp_model is None:
        return Outcome("unsupported", reason="the repair needs the Python library ortools")
    rng = random.Random(seed)
    home = {n: h for n, h in home.items() if n in problem.vms}
    targets = {n: dict(t) for n, t in targets.items() if n in home}

    def left() -> float:
        return time_limit - (time.perf_counter() - start)

    steps, idle = 0, 0
    moved = _moved(home, previous_home or {})
    while left() > 0.1:
        complete = len(home) == len(problem.vms)
        if complete and (not moved or idle >= SETTLE_TRIES):
            break
        steps += 1
        window = (Window(_settle_hosts(problem, home, moved, previous_home or {}, rng), home,
                         targets, keep_all=True) if complete
                  else Window(_window_hosts(problem, home, targets, rng), home, targets))
        model = _Model(problem, window)
        model.hint(home, targets)
        if previous_home:
            model.keep(previous_home)
        model.fill()
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers or min(8, os.cpu_count() or 1)
        solver.parameters.max_time_in_seconds = min(WINDOW_SECONDS, left())
        solver.parameters.random_seed = rng.randrange(1 << 16)
        if solver.solve(model.model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            idle += complete
            continue
        placed, placed_targets = model.read(solver, home)
        free = {name for names in model.vms_of.values() for name in names}
        new_home = {n: h for n, h in home.items() if n not in free} | placed
        now_moved = _moved(new_home, previous_home or {})
        if complete and len(now_moved) >= len(moved):
            idle += 1  # kept as it was: a window cut short may have found worse
            continue
        home, moved, idle = new_home, now_moved, 0
        targets = {n: t for n, t in targets.items() if n not in free} | placed_targets
    seconds = time.perf_counter() - start
    if len(home) == len(problem.vms):
        return Outcome("plan", home, targets, seconds=seconds)
    return Outcome("unknown", home, targets, seconds=seconds,
                   reason=f"the repair gave homes to {len(home)} of {len(problem.vms)} "
                   f"VMs in {seconds:.1f} s ({steps} windows)" if steps
                   else "no time was left for the repair")
