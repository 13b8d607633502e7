# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exact model over the failure sets that bind, found as they are needed: the
search of a re-plan that keeps the most VMs at home on a cluster that tolerates two
failures or more.

At X = 2 the exact model (vdm_exact_model) states every pair of hosts: at 18 hosts,
171 failure sets and some 280,000 variables, in which CP-SAT finds no plan in a
minute. Yet few of those sets bind. This search solves the model of the smallest
failure sets (each host alone) and of the larger sets with the least slack, keeping
the most VMs at their current homes (`relaxed`). A set's slack, for the homes of a
plan, is what the hosts outside it have left after their own firm VMs, less what the
HA VMs of its hosts need, in the resource where that is least. With the homes it
finds, the sets left out are tested (`_failing`): the few with the least slack one by
one, each with its subsets, then all together in the whole model with the homes held
(`_completed`). Sets that fail join the model, which is solved again from its last
plan; when all hold, the whole model's failover targets for those homes complete the
plan. It finds plans, never proves there is none.

On planted 18-host clusters filled to 98 % with X = 2 (171 failure sets), the re-plans
after 10 % more VMs that the greedy search misses are found this way in 33 to 43 s
with 36 sets, moving 0 % to 1.2 % of the VMs, where the repair found one plan that
kept the homes and planning afresh moved 23 % to 28 %. The sets that failed alone
were always among those with the least slack; the first round's model takes most of
its share of the time to keep the most VMs home (RELAXED_SHARE).

Pure Python and OR-Tools, no I/O and no Ansible.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_exact_model import (
    ExactModel, Shape, counts_shapes, cp_model, supported)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    Problem, failure_set_key)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_solver import (
    Outcome, cp_solver, hint, read)

# How many sets each round tests one by one, and for how long each; and the shares of
# the time left that a round's model of the sets that bind, and the whole model with
# its homes held, may take.
TESTED_ALONE = 12
ALONE_SECONDS = 1.0
RELAXED_SHARE = 0.6
COMPLETE_SHARE = 0.5

Counts = dict[tuple[Shape, str], int]


def applies(problem: Problem) -> bool:
    """Whether this search can take `problem`: some of its failure sets hold others,
    so that leaving them out makes the model smaller; they nest in chains, so that the
    model counts VMs by shape; and the whole model, which completes a plan, is not too
    large to search."""
    smallest = min((len(s) for s in problem.failure_sets), default=0)
    return (any(len(s) > smallest for s in problem.failure_sets)
            and counts_shapes(problem) and supported(problem) is None)


def _slack(problem: Problem, counts: Counts, failed: frozenset[str]) -> float:
    """What the hosts outside `failed` have left after their firm VMs, less what the
    HA VMs of its hosts need, as a share of the cluster's, in the resource where that
    is least."""
    least = float("inf")
    for r in ("vcpus", "memory_mb", "net_mbps"):
        caps = {h: getattr(host, r) for h, host in problem.hosts.items()}
        if any(cap is None for cap in caps.values()):
            continue
        left = sum(caps[h] for h in caps if h not in failed)
        for (c, h), n in counts.items():
            if h not in failed and not c.preemptible:
                left -= n * c.demand(r)
            elif h in failed and c.ha:
                left -= n * c.demand(r)
        least = min(least, left / max(sum(caps.values()), 1))
    return least


def _named(sets: list[frozenset[str]], shown: int = 3) -> str:
    """The failure sets a search took, for its answer: how many, and the first few."""
    smallest = min(len(s) for s in sets)
    larger = [f"{{{failure_set_key(s)}}}" for s in sets if len(s) > smallest]
    alone = "each host alone" if smallest == 1 else f"every set of {smallest} hosts"
    more = f", and {', '.join(larger[:shown])}{', ...' * (len(larger) > shown)}" * bool(larger)
    return f"{len(sets)} failure sets ({alone}{more})"


def _with(problem: Problem, sets: list[frozenset[str]]) -> Problem:
    return dataclasses.replace(problem, failure_sets=tuple(sets))


def _failing(problem: Problem, counts: Counts, sets: list[frozenset[str]]
             ) -> list[frozenset[str]]:
    """Of `sets`, those that fail alone with the homes `counts`: each tested with its
    subsets that are planned, for up to ALONE_SECONDS."""
    failing = []
    for failed in sets:
        inside = [s for s in problem.failure_sets if s < failed]  # in the problem's order
        model = ExactModel(_with(problem, [*inside, failed]))
        model.hold(counts)
        if cp_solver(ALONE_SECONDS, 0, 1).solve(model.model) == cp_model.INFEASIBLE:
            failing.append(failed)
    return failing


def _completed(whole: ExactModel, counts: Counts, time_limit: float, seed: int,
               workers: int | None, previous_home: dict[str, str]):
    """The whole model's plan with the homes `counts`, or None."""
    solver = cp_solver(time_limit, seed, workers)
    status = solver.solve(whole.hold(counts, whole.model.clone()))
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return read(whole, solver, previous_home)
    return None


def solve(problem: Problem, previous_home: dict[str, str], hint_home: dict[str, str],
          hint_targets: dict[str, dict[frozenset[str], str]], time_limit: float,
          seed: int = 0, workers: int | None = None, first: int | None = None
          ) -> Outcome:
    """A plan of `problem` that keeps the most VMs at `previous_home`, started from
    the partial plan `hint_home` and `hint_targets`, within `time_limit` seconds.

    The first round takes the smallest failure sets and `first` more (by default as
    many as there are hosts), those with the least slack for the hint's homes. Once a
    plan is found, each round looks for homes that keep more VMs, until there are none
    (the answer then moves the fewest VMs any plan can) or the time is up. "infeasible" when the sets
    taken alone have no plan (a proof, as they are part of every plan's), "unknown"
    when no plan was found in the time."""
    start = time.perf_counter()

    def left() -> float:
        return time_limit - (time.perf_counter() - start)

    smallest = min(len(s) for s in problem.failure_sets)
    family = [s for s in problem.failure_sets if len(s) == smallest]
    hint_counts = Counter((Shape.of(problem.vms[n]), h) for n, h in hint_home.items())
    rest = sorted((s for s in problem.failure_sets if len(s) > smallest),
                  key=lambda s: _slack(problem, hint_counts, s))
    first = len(problem.hosts) if first is None else first
    family, rest = family + rest[:first], rest[first:]
    whole, best, best_stays, rounds = None, None, 0, 0
    said = "no time was left for it"
    while left() > 1:
        rounds += 1
        relaxed = ExactModel(_with(problem, family))
        relaxed.keep(previous_home)
        stays = cp_model.LinearExpr.sum([s for s, dummy, dummy in relaxed.stay])
        relaxed.model.maximize(stays)
        hint(relaxed, *(best or (hint_home, hint_targets)))
        if best:  # only homes that keep more VMs are worth testing
            relaxed.model.add(stays >= best_stays + 1)
        solver = cp_solver(left() * RELAXED_SHARE, seed + rounds, workers)
        status = solver.solve(relaxed.model)
        if status == cp_model.INFEASIBLE and not best and relaxed.exact:
            return Outcome("infeasible", seconds=time.perf_counter() - start, reason=(
                "an exhaustive search (CP-SAT) proved that no plan holds every invariant "
                f"even of only {_named(family)}"))
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            said = f"round {rounds} with {len(family)} failure sets found no homes"
            break
        counts = {key: solver.value(v) for key, v in relaxed.home.items()}
        home, targets = read(relaxed, solver, previous_home)
        hint_targets = {n: {**(hint_targets.get(n, {}) if hint_home.get(n) == h else {}),
                            **targets.get(n, {})} for n, h in home.items()}
        hint_home = home
        rest.sort(key=lambda s: _slack(problem, counts, s))
        failing = _failing(problem, counts, rest[:TESTED_ALONE])
        if not failing and left() > 1:
            whole = whole or ExactModel(problem)
            plan = _completed(whole, counts, left() * COMPLETE_SHARE, seed + rounds,
                              workers, previous_home)
            if plan:
                best = plan
                best_stays = sum(plan[0].get(n) == h for n, h in previous_home.items())
                if status == cp_model.OPTIMAL:
                    break  # no homes keep more VMs, even with the other sets left out
                continue
            failing = rest[:TESTED_ALONE]
        family += failing
        rest = [s for s in rest if s not in failing]
        said = f"{rounds} rounds, the last with {len(family)} failure sets, found no plan"
    if best:
        return Outcome("plan", *best, seconds=time.perf_counter() - start,
                       reason=f"{rounds} rounds, the last with {len(family)} of "
                       f"{len(problem.failure_sets)} failure sets")
    return Outcome("unknown", seconds=time.perf_counter() - start,
                   reason=f"the search of the failure sets that bind: {said}")
