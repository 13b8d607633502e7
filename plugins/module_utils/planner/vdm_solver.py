# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exact VDM search: homes and failover targets solved together with CP-SAT.

The greedy planner (vdm_planner) is fast and good on uniform clusters, but on mixed
hardware it can miss plans that exist: where the plain VMs sit decides whether a big
host's HA load can be absorbed, and a greedy fixes that too early. The planner calls
this module when the greedy fails; it either finds a plan, proves that none exists, or
runs out of time, and says which.

The model, and why it is exact, is vdm_exact_model; the repair of a partial plan where
the search is too slow, or the model too large, is vdm_repair.

The solution is turned back into one home and one target per failure set for every
VM, which the planner turns into its usual plan and the checker re-checks. After the
first plan the search looks for a better one: fewest VMs moved from the current map,
then, when asked, fewest preemptible VMs stopped (summed over the failure sets), then
the most balanced spare (the smallest largest share of a host's memory taken by its
firm VMs with what one failure set brings).

Pure Python and OR-Tools, no I/O and no Ansible.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_exact_model import (
    ExactModel, Shape, cp_model, supported)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import Problem

# After the first plan of a re-plan, how long to look for one that moves fewer VMs.
IMPROVE_SECONDS = 5.0
# A re-plan's first plan that moves more than this share of the VMs is not improved
# here: the planner settles it (vdm_repair.settle), which brings VMs back faster.
STABLE_SHARE = 0.05


@dataclass
class Outcome:
    """`status` is "plan" (home and targets set), "infeasible" (proved), "unknown"
    (no plan found in the time), or "unsupported" (`reason` says why)."""

    status: str
    home: dict[str, str] = field(default_factory=dict)
    targets: dict[str, dict[frozenset[str], str]] = field(default_factory=dict)
    reason: str = ""
    seconds: float = 0.0


def cp_solver(time_limit: float, seed: int = 0, workers: int | None = None):
    """A CP-SAT solver for `time_limit` seconds, with `seed` and `workers` threads (by
    default one per core, at most eight)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers or min(8, os.cpu_count() or 1)
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.random_seed = seed
    return solver


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
    model = ExactModel(problem)
    if previous_home:
        model.keep(previous_home)
    if hint_home:
        hint(model, hint_home, hint_targets or {})
    solver = cp_solver(time_limit, workers=workers)

    def left() -> float:
        return max(0.01, time_limit - (time.perf_counter() - start))

    if hint_is_plan and "memory_mb" in model.resources:
        # The search starts from the plan given and keeps it unless it finds better.
        hinted = dict(zip(model.model.proto.solution_hint.vars,
                          model.model.proto.solution_hint.values))
        improve(model, lambda v: hinted.get(v.index, 0), preemptions)
        solver.parameters.max_time_in_seconds = left() if preemptions else min(
            IMPROVE_SECONDS, left())
        tried = solver.parameters.max_time_in_seconds
        if solver.solve(model.model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Outcome("unknown", reason=f"no better plan found in {tried:g} s",
                           seconds=time.perf_counter() - start)
        return Outcome("plan", *read(model, solver, previous_home),
                       seconds=time.perf_counter() - start)
    # First any plan (CP-SAT stops at the first), then from there a better one.
    solver.parameters.max_time_in_seconds = min(left(), find_within or time_limit)
    status = solver.solve(model.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and "memory_mb" in model.resources:
        home, targets = read(model, solver, previous_home)
        moved = sum(home[n] != h for n, h in previous_home.items() if n in home)
        if not preemptions and moved > STABLE_SHARE * len(previous_home):
            return Outcome("plan", home, targets, seconds=time.perf_counter() - start)
        took = time.perf_counter() - start
        improve(model, solver.value, preemptions)
        improve_for = (left() if preemptions else IMPROVE_SECONDS if model.stay
                       else min(IMPROVE_SECONDS, max(1.0, took)))
        solver.parameters.max_time_in_seconds = min(improve_for, left())
        if solver.solve(model.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            home, targets = read(model, solver, previous_home)
        return Outcome("plan", home, targets, seconds=time.perf_counter() - start)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        home, targets = read(model, solver, previous_home)
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


def hint(model: ExactModel, home: dict[str, str],
         targets: dict[str, dict[frozenset[str], str]]) -> None:
    """Start the search from `home` and `targets` (a partial plan will do)."""
    go: Counter = Counter()
    for c, names in model.vms_of.items():
        counts = Counter(home[n] for n in names if n in home)
        for h in (c.allowed if c.home is None else [c.home]):
            if (c, h) in model.home:
                model.model.add_hint(model.home[(c, h)], counts.get(h, 0))
        for name in names:
            for failed, t in targets.get(name, {}).items():
                go[(c, home[name], failed, t)] += 1
    for (c, h, failed), variables in model.go.items():
        for t, v in variables.items():
            model.model.add_hint(v, go.get((c, h, failed, t), 0))


def improve(model: ExactModel, value, preemptions: bool) -> None:
    """From a plan (`value` gives each variable's value in it: a solver's, or the
    hint's), look for one that moves the fewest VMs, then among those (with
    `preemptions`) the one that stops the fewest preemptible VMs, then the most
    balanced spare."""
    model.model.clear_hints()
    for (dummy, h), v in model.home.items():
        model.model.add_hint(v, value(v))
    for go in model.go.values():
        for v in go.values():
            model.model.add_hint(v, value(v))
    for stay, home, count in model.stay:
        model.model.add_hint(stay, min(value(home), count))
    # Each term outweighs all that follow it: balance is at most 1000.
    per_preemption = 1001
    preempted, most = _preempted(model) if preemptions else (0, 0)
    per_stay = per_preemption * (most + 1)
    model.model.maximize(per_stay * sum(stay for stay, dummy, dummy in model.stay)
                         - per_preemption * preempted - _fullest_share(model))


def _fullest_share(model: ExactModel) -> cp_model.IntVar:
    """The largest share of a host's memory, in thousandths, that its firm VMs at
    home take, alone or with what any one failure set brings it: the spare
    reservations are most balanced when it is smallest."""
    r = "memory_mb"
    worst = model.model.new_int_var(0, 1000, "")
    for t in model.hosts:
        firm, needs = model.firm[(t, r)]
        model.model.add(cp_model.LinearExpr.weighted_sum(
            firm + [worst], [1000 * n for n in needs] + [-model.cap[t][r]]) <= 0)
    for (failed, t), incoming in model.arriving.items():
        firm, needs = model.firm[(t, r)]
        model.model.add(cp_model.LinearExpr.weighted_sum(
            firm + [count for c, count in incoming] + [worst],
            [1000 * n for n in needs] + [1000 * model.need[c][r] for c, count in incoming]
            + [-model.cap[t][r]]) <= 0)
    return worst


def _preempted(model: ExactModel) -> tuple[cp_model.LinearExpr, int]:
    """How many preemptible VMs stop, summed over the failure sets, and the most it
    can be. Under a failure set, a preemptible VM on a host that VMs arrive at keeps
    running only if the firm VMs, the arrivals and the preemptible VMs kept all fit,
    and no arrival shares an anti-affinity label with it (as the plan's `preempt`
    decides)."""
    m = model.model
    preemptible = [c for c in model.shapes if c.preemptible]
    stopped, kept, most = [], [], 0
    for (failed, t), incoming in model.arriving.items():
        here = [c for c in preemptible if (c, t) in model.home]
        if not here:
            continue
        keep = {c: m.new_int_var(0, model.fits(c, t), "") for c in here}
        for c, v in keep.items():
            m.add(v <= model.home[(c, t)])
            stopped.append(model.home[(c, t)])
            kept.append(v)
            most += model.fits(c, t)
            for label in c.anti_affinity:
                clash = [count for a, count in incoming if label in a.anti_affinity]
                if clash:
                    m.add(cp_model.LinearExpr.sum([v] + clash) <= 1)
        for r in model.resources:
            if model.cap[t][r] is not None:
                firm, needs = model.firm[(t, r)]
                m.add(cp_model.LinearExpr.weighted_sum(
                    firm + [count for c, count in incoming] + list(keep.values()),
                    needs + [model.need[c][r] for c, count in incoming]
                    + [model.need[c][r] for c in keep]) <= model.cap[t][r])
    return (cp_model.LinearExpr.sum(stopped) - cp_model.LinearExpr.sum(kept)), most


def read(model: ExactModel, solver, previous_home: dict[str, str]) -> tuple[dict, dict]:
    """One home per VM and, per failure set holding it, one target per HA VM (in a
    window, for the VMs it gives a home, those that had one first)."""
    home: dict[str, str] = {}
    targets: dict[str, dict[frozenset[str], str]] = {}
    for c, names in model.vms_of.items():
        left = {h: solver.value(v) for (shape, h), v in model.home.items() if shape == c}
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
                _targets(model, c, h, group, solver, targets)
    return home, targets


def _targets(model: ExactModel, c: Shape, h: str, group: list[str], solver,
             targets: dict[str, dict[frozenset[str], str]]) -> None:
    for name in group:
        targets[name] = {}
    for failed in sorted((s for s in model.problem.failure_sets if h in s), key=len):
        want = {t: solver.value(v) for t, v in model.go[(c, h, failed)].items()}
        smaller = model.inside[(failed, h)][-1:]
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
