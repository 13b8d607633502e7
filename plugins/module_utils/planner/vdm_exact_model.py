# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exact VDM model: homes and failover targets of a planning problem as one CP-SAT
model, for the exact search (vdm_solver) and the repair (vdm_repair).

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

Pure Python and OR-Tools, no I/O and no Ansible.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

try:
    from ortools.sat.python import cp_model
except ImportError:  # the planner reports the missing library
    cp_model = None  # the solver and the repair take OR-Tools from here too

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    RESOURCES, Problem, Vm)

# The largest model (shape, host and failure-set variables) built within a minute.
MAX_VARIABLES = 400_000
SCALE = 1000  # sizes with up to three decimals (vCPUs times a ratio) stay exact


@dataclass(frozen=True)
class Shape:
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
    def of(vm: Vm, alone: bool = False) -> Shape:
        return Shape(vm.vcpus, vm.memory_mb, vm.net_mbps, vm.ha, vm.preemptible,
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


def counts_shapes(problem: Problem) -> bool:
    """Whether the model counts the VMs of one shape (the failure sets that nest form
    chains), rather than stating each HA VM alone."""
    return _nested_in_chains(_inside(problem))


def supported(problem: Problem) -> str | None:
    """Why the exact search cannot take `problem` (None when it can)."""
    if cp_model is None:
        return "the exact search needs the Python library ortools (pip install ortools)"
    size = ExactModel.size(problem)
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

    def __init__(self, model: ExactModel, window: Window | None) -> None:
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


class ExactModel:
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
        self.vms_of: dict[Shape, list[str]] = {}
        for name in window.free(problem) if window else sorted(problem.vms):
            vm = problem.vms[name]
            self.vms_of.setdefault(Shape.of(vm, alone and vm.ha), []).append(name)
        self.shapes = list(self.vms_of)
        self.cap = {h: {r: self.scaled(getattr(problem.hosts[h], r), down=True)
                        for r in self.resources} for h in self.hosts}
        self.need = {c: {r: self.scaled(c.demand(r), down=False) for r in self.resources}
                     for c in self.shapes}
        self.home: dict[tuple[Shape, str], cp_model.IntVar] = {}
        self.go: dict[tuple[Shape, str, frozenset[str]], dict[str, cp_model.IntVar]] = {}
        # (failure set, host) -> (shape, count) of the VMs that may arrive there
        self.arriving: dict[tuple[frozenset[str], str], list] = {}
        self.stay: list[tuple[cp_model.IntVar, cp_model.IntVar, int]] = []
        self.firm: dict[tuple[str, str], tuple[list, list[int]]] = {}  # host, resource
        self.fit_cache: dict[tuple[Shape, str], int] = {}
        self.fixed = _Fixed(self, window)
        self._homes()
        self._failures()
        self._anti_affinity()

    @staticmethod
    def size(problem: Problem) -> int:
        """About how many variables the model of `problem` has."""
        alone = not _nested_in_chains(_inside(problem))
        shapes = Counter(Shape.of(vm, alone) for vm in problem.vms.values() if vm.ha)
        return (sum(len(s) for s in problem.failure_sets) * len(problem.hosts)
                * len(shapes))

    def scaled(self, value: float | None, down: bool) -> int | None:
        if value is None:
            return None
        scaled = value * SCALE
        whole = round(scaled)
        if abs(scaled - whole) > 1e-6:
            self.exact = False  # rounded the safe way: a plan holds, a proof may not
            return int(scaled) if down else int(scaled) + 1
        return whole

    def fits(self, c: Shape, h: str) -> int:
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
                self.home[(c, h)] = m.new_int_var(0, self.fits(c, h), "")
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
                    go = {t: m.new_int_var(0, self.fits(c, t), "")
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

    def hold(self, counts: dict[tuple[Shape, str], int], into=None,
             hosts: set[str] | None = None):
        """`into` (a clone of the model, the model itself by default: a variable's index
        is the same in a clone) with how many VMs of each shape are at home on each host
        (of `hosts`, all by default) held at `counts`."""
        into = into or self.model
        for (c, h), v in self.home.items():
            if hosts is None or h in hosts:
                into.add(into.get_int_var_from_proto_index(v.index) == counts.get((c, h), 0))
        return into

    def keep(self, previous_home: dict[str, str]) -> None:
        """Count the VMs that stay where `previous_home` has them (`stay`)."""
        for c, names in self.vms_of.items():
            before = Counter(previous_home[n] for n in names if n in previous_home)
            for h, count in before.items():
                if (c, h) in self.home:
                    stay = self.model.new_int_var(0, count, "")
                    self.model.add(stay <= self.home[(c, h)])
                    self.stay.append((stay, self.home[(c, h)], count))
