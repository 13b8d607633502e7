# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Large-neighbourhood searches with the exact model: the repair of a partial VDM
plan, and the settling of a re-plan that moved many VMs; and the renaming of a plan's
VMs of one shape so that the most stay at home.

The exact model (vdm_exact_model) also repairs a partial plan where the exact search
is too slow or its model too large (`repair`): a large-neighbourhood search that frees
the VMs of a few hosts at a time (a `Window`), holds the rest of the plan fixed as
load on each host and on each host under each failure set, and solves the window
exactly. The planner calls it on the partial plan where the greedy search stopped:
it often finds a plan, but never proves there is none. On a re-plan, where the exact
model is not too large, its first step is one window over every host that holds every
home the plan has and frees every failover target (`_retarget`): on a cluster that
tolerates two failures and is nearly full, what leaves a VM without a home is most
often where the spare lies, which a window of a few hosts, holding the targets of the
VMs outside it, cannot change; and with every home held, the VMs stay where they are.
From scratch the windows alone do better: on planted 18-host clusters filled to 98 %
with X = 2, the first step's three quarters of the time left one of ten unplanned.

A re-plan's plan that moves many VMs from their current homes is settled (`settle`,
which also ends the repair of a re-plan where the exact model is not too large):
each step frees the homes on a few hosts, those that moved VMs left and went to,
and holds every other host's homes as they are, but leaves every HA VM's failover
targets free, so the spare can be laid out anew around the VMs brought back. On a
cluster that tolerates two failures and is nearly full, a window with the targets
held fixed can seldom bring a VM back: where it goes, every failure set that takes
its home must find it room.

A plan found afresh, that need not keep the current homes, first has its VMs renamed
(`relabel`): VMs of one shape need and may use the same, so any of them may take
another's place, home and failover targets together. On a re-plan the repair
planned afresh, on the planted 18-host clusters above moved about 91 % of the VMs
by name, and a third after the renaming.

Pure Python and OR-Tools, no I/O and no Ansible.
"""

from __future__ import annotations

import random
import time
from collections import Counter

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_exact_model import (
    SCALE, ExactModel, Shape, Window, cp_model, supported)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    Problem, amount)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_solver import (
    Outcome, cp_solver, hint, read)

# The repair's windows: how many hosts each frees, and how long each may search; and
# how many windows in a row may bring no moved VM back before it stops trying.
WINDOW_HOSTS = 4
WINDOW_SECONDS = 5.0
SETTLE_TRIES = 6
# The share of the repair's time its first step, over every host, may take.
RETARGET_SHARE = 0.75


def _fill(model: ExactModel) -> None:
    """Look for the plan that gives homes to the most memory of firm VMs, then
    keeps the most VMs where they were (`keep`), then gives homes to the most
    memory of preemptible VMs (a window's: they need only room at home, which firm
    VMs need first)."""
    memory = {c: max(1, model.need[c].get("memory_mb", 0) // SCALE) for c in model.shapes}
    # Each term outweighs all that follow it.
    per_stay = 1 + sum(memory[c] * len(model.vms_of[c])
                       for c in model.shapes if c.preemptible)
    per_firm = per_stay * (1 + sum(count for dummy, dummy, count in model.stay))
    model.model.maximize(cp_model.LinearExpr.weighted_sum(
        list(model.home.values()) + [stay for stay, dummy, dummy in model.stay],
        [memory[c] * (1 if c.preemptible else per_firm) for c, dummy in model.home]
        + [per_stay] * len(model.stay)))


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


def _unplaced(problem: Problem, home: dict[str, str], shown: int = 5) -> str:
    """The VMs a partial plan leaves without a home, for the repair's answer: how many
    of each kind, the memory they need, and the first `shown` by name."""
    left = [problem.vms[n] for n in sorted(set(problem.vms) - set(home))]
    kinds = Counter(vm.kind_label for vm in left)
    names = [vm.name for vm in left[:shown]] + ["..."] * (len(left) > shown)
    return (f"left without a home: {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}"
            f" ({amount(sum(vm.memory_mb for vm in left))} MB memory): {', '.join(names)}")


def relabel(problem: Problem, home: dict[str, str],
            targets: dict[str, dict[frozenset[str], str]], previous_home: dict[str, str]
            ) -> tuple[dict[str, str], dict[str, dict[frozenset[str], str]]]:
    """The plan `home` and `targets` with VMs of one shape trading places, each taking
    another's home and failover targets together, so that the most VMs are at home
    where `previous_home` has them: VMs of one shape need and may use the same, so the
    plan holds as it did. On each host a shape keeps min(VMs there before, places
    there), the most any relabelling can; a VM already at home keeps its own place,
    failover targets and all."""
    places: dict[Shape, list[str]] = {}
    for name in sorted(home):
        places.setdefault(Shape.of(problem.vms[name]), []).append(name)
    new_home, new_targets = {}, {}
    for names in places.values():
        taken = {n: n for n in names if home[n] == previous_home.get(n)}
        free: dict[str, list[str]] = {}  # host -> the names whose place there is free
        for name in names:
            if name not in taken:
                free.setdefault(home[name], []).append(name)
        waiting = []
        for name in names:
            if name in taken:
                continue
            if free.get(previous_home.get(name)):
                taken[name] = free[previous_home[name]].pop()
            else:
                waiting.append(name)
        taken.update(zip(waiting, [place for h in sorted(free) for place in free[h]]))
        for name, place in taken.items():
            new_home[name] = home[place]
            if place in targets:
                new_targets[name] = targets[place]
    return new_home, new_targets


def _moved(home: dict[str, str], previous_home: dict[str, str]) -> list[str]:
    return sorted(n for n, h in previous_home.items() if n in home and home[n] != h)


def settle(problem: Problem, home: dict[str, str],
           targets: dict[str, dict[frozenset[str], str]], previous_home: dict[str, str],
           time_limit: float, seed: int = 0, workers: int | None = None) -> Outcome:
    """From the plan `home` and `targets`, one that moves fewer VMs from
    `previous_home`, within `time_limit` seconds: each step frees the homes on
    WINDOW_HOSTS hosts (`_settle_hosts`), holds the number of VMs of each shape at home
    on every other host, leaves all failover targets free, and keeps the most VMs
    where they were. It stops when none is moved, when SETTLE_TRIES windows in a
    row bring none back, or when the time is up; the plan it answers moves no more
    than the one given (which it answers when it found none better)."""
    start = time.perf_counter()
    rng = random.Random(seed)

    def left() -> float:
        return time_limit - (time.perf_counter() - start)

    model = ExactModel(problem)
    model.keep(previous_home)
    model.model.maximize(cp_model.LinearExpr.sum([stay for stay, dummy, dummy in model.stay]))
    moved, idle, steps = _moved(home, previous_home), 0, 0
    while moved and idle < SETTLE_TRIES and left() > 0.5:
        steps += 1
        window = _settle_hosts(problem, home, moved, previous_home, rng)
        # The step's model: the whole one, started from the plan as it is, with the
        # homes outside the window held.
        model.model.clear_hints()
        hint(model, home, targets)
        held = Counter((c, home[name]) for c, names in model.vms_of.items() for name in names)
        step = model.hold(held, model.model.clone(), set(problem.hosts) - window)
        solver = cp_solver(min(WINDOW_SECONDS, left()), rng.randrange(1 << 16), workers)
        if solver.solve(step) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            idle += 1
            continue
        settled, settled_targets = read(model, solver, previous_home)
        now_moved = _moved(settled, previous_home)
        if len(now_moved) >= len(moved):
            idle += 1
            continue
        home, targets, moved, idle = settled, settled_targets, now_moved, 0
    return Outcome("plan", home, targets, seconds=time.perf_counter() - start,
                   reason=f"settled in {steps} windows: {len(moved)} moved")


def _retarget(problem: Problem, home: dict[str, str],
              targets: dict[str, dict[frozenset[str], str]], time_limit: float,
              seed: int, workers: int | None) -> tuple[dict, dict] | None:
    """The partial plan `home` and `targets` with every failover target laid out anew:
    each host keeps every VM it has at home and may take VMs that have none, as many as
    the spare laid out anew leaves room for (`_fill`); None when no better plan was
    found in `time_limit` seconds."""
    model = ExactModel(problem, Window(frozenset(problem.hosts), home, targets))
    held = Counter((c, home[name]) for c, names in model.vms_of.items()
                   for name in names if name in home)
    for (c, h), v in model.home.items():
        model.model.add(v >= held[(c, h)])
    hint(model, home, targets)
    _fill(model)
    solver = cp_solver(time_limit, seed, workers)
    if solver.solve(model.model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return read(model, solver, home)


def repair(problem: Problem, home: dict[str, str],
           targets: dict[str, dict[frozenset[str], str]], time_limit: float,
           previous_home: dict[str, str] | None = None, seed: int = 0,
           workers: int | None = None, find_within: float | None = None,
           retarget: bool = True) -> Outcome:
    """Complete the partial plan `home` and `targets` (where the greedy search stopped)
    within `time_limit` seconds (`find_within`, when given, to find one): a
    large-neighbourhood search. Each step frees the VMs at home on a few hosts
    (`_window_hosts`) and the VMs without a home that may go there, holds the rest of
    the plan fixed as load, and solves that window exactly, giving homes to as much
    memory of firm VMs as it can, then leaving VMs at `previous_home` where it can,
    then giving homes to preemptible VMs; firm VMs that had a home keep one. It stops
    when every VM has a home ("plan") or the time to find one is up ("unknown", with
    the VMs it placed); it proves nothing.

    With `previous_home`, once every VM has a home it goes on to move VMs back where
    they were, with windows drawn around the hosts moved VMs left and went to, in
    which every VM keeps a home: until none is moved, SETTLE_TRIES windows in a row
    bring none back, or the time is up. Where the exact model is not too large those
    are the settle's windows (`settle`), which free every failover target too; and,
    with `retarget`, the first step lays every failover target out anew around the
    homes the plan has (`_retarget`), for up to RETARGET_SHARE of the time."""
    start = time.perf_counter()
    if cp_model is None:
        return Outcome("unsupported", reason="the repair needs the Python library ortools")
    rng = random.Random(seed)
    home = {n: h for n, h in home.items() if n in problem.vms}
    targets = {n: dict(t) for n, t in targets.items() if n in home}

    def left(complete: bool = True) -> float:  # to settle a plan, or to find one
        until = time_limit if complete or find_within is None else min(time_limit,
                                                                       find_within)
        return until - (time.perf_counter() - start)

    steps, idle = 0, 0
    whole = bool(previous_home) and supported(problem) is None  # models of every host fit
    if retarget and whole and len(home) < len(problem.vms) and left(False) > 1:
        steps += 1
        retargeted = _retarget(problem, home, targets, left(False) * RETARGET_SHARE,
                               rng.randrange(1 << 16), workers)
        if retargeted:  # every VM that had a home keeps it
            home, targets = retargeted
    moved = _moved(home, previous_home or {})
    while left() > 0.1:
        complete = len(home) == len(problem.vms)
        if (complete and (not moved or idle >= SETTLE_TRIES or whole)
                or left(complete) <= 0.1):
            break
        steps += 1
        window = (Window(_settle_hosts(problem, home, moved, previous_home or {}, rng), home,
                         targets, keep_all=True) if complete
                  else Window(_window_hosts(problem, home, targets, rng), home, targets))
        model = ExactModel(problem, window)
        hint(model, home, targets)
        if previous_home:
            model.keep(previous_home)
        _fill(model)
        solver = cp_solver(min(WINDOW_SECONDS, left(complete)), rng.randrange(1 << 16),
                           workers)
        if solver.solve(model.model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            idle += complete
            continue
        placed, placed_targets = read(model, solver, home)
        free = {name for names in model.vms_of.values() for name in names}
        new_home = {n: h for n, h in home.items() if n not in free} | placed
        now_moved = _moved(new_home, previous_home or {})
        if complete and len(now_moved) >= len(moved):
            idle += 1  # kept as it was: a window cut short may have found worse
            continue
        home, moved, idle = new_home, now_moved, 0
        targets = {n: t for n, t in targets.items() if n not in free} | placed_targets
    if whole and moved and len(home) == len(problem.vms) and left() > 0.5:
        # the targets free too: windows that hold them seldom bring a VM back
        settled = settle(problem, home, targets, previous_home, left(),
                         rng.randrange(1 << 16), workers)
        home, targets = settled.home, settled.targets
    seconds = time.perf_counter() - start
    if len(home) == len(problem.vms):
        return Outcome("plan", home, targets, seconds=seconds)
    return Outcome("unknown", home, targets, seconds=seconds,
                   reason=f"the repair gave homes to {len(home)} of {len(problem.vms)} "
                   f"VMs in {seconds:.1f} s ({steps} windows); {_unplaced(problem, home)}"
                   if steps
                   else "no time was left for the repair")
