# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VDM planner: a home for every VM and a failover chain for every HA VM.

Each HA VM's failover targets form a chain (vdm_chains says why); the greedy search
(vdm_homes) places the VMs one by one, each with its chain, and the exact search
(vdm_solver) and its repair (vdm_repair) take over where it fails; on a re-plan of a
cluster that tolerates two failures or more, the exact search over the failure sets
that bind (vdm_lazy). This module checks first that capacity alone can cover every
failure set, then chooses between the searches, and says why when none of them found
a plan.

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

try:
    import numpy as np
except ImportError:  # reported by the caller through missing_required_lib
    np = None

from ansible_collections.yasco.cluster.plugins.module_utils.planner import (
    vdm_exact_model, vdm_lazy, vdm_repair, vdm_solver)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_chains import (
    PlanState, plan_of)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_homes import (
    first_feasible, moves, placing_order, previous_chains, rebalance)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    DEFAULT_OBJECTIVE, EPSILON, OBJECTIVES, RESOURCES, UNIT_NAMES, WHAT_HELPS, Plan,
    Problem, VdmInfeasible, VdmNotFound, amount, failure_set_key)

# A re-plan that moves more than this share of the VMs is settled (vdm_repair.settle).
_STABLE_SHARE = vdm_solver.STABLE_SHARE
# Where the greedy search fails, the share of the time limit in which the exact search
# must find a first plan before the repair takes over; and on a re-plan, the share
# kept for planning afresh when the repair finds no plan that keeps the homes.
_EXACT_SHARE = 0.25
_AFRESH_SHARE = 0.25


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
    short = [f"{amount(need - have)} {UNIT_NAMES[r]}"
             for r, (need, have) in everything.items() if need > have + EPSILON]
    if short:
        raise VdmInfeasible(f"the VMs need more than all hypervisors have: "
                            f"{' and '.join(short)} short; " + WHAT_HELPS)
    # Report the worst failure set: covering it is what the operator must fix.
    by_set: dict[frozenset[str], tuple[list[str], list[str], float]] = {}
    for failed, r, need, have, dummy, total in margins:
        if need - have > EPSILON:
            short, needs, score = by_set.setdefault(failed, ([], [], 0.0))
            short.append(f"{amount(need - have)} {UNIT_NAMES[r]}")
            needs.append(f"{amount(need)} of {amount(have)} {UNIT_NAMES[r]}")
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
            + WHAT_HELPS)


def plan(problem: Problem, previous_home: dict[str, str] | None = None,
         rebalance_moves: int = 0,
         previous_failover: dict[str, dict[str, str]] | None = None,
         time_limit: float = 60.0, exact: bool = True,
         objective: str = DEFAULT_OBJECTIVE,
         current_home: dict[str, str] | None = None) -> Plan:
    """Plan a VDM for `problem`.

    With `previous_home` (the home map of the current VDM) VMs keep their homes unless
    they must move, and with `previous_failover` (its failover map) their failover
    targets where they still fit; up to `rebalance_moves` more may move to even out
    the hosts. Without them the plan is made afresh; with `current_home` (the current
    map's homes, not kept) VMs of one shape then trade places so that the most stay.

    The greedy search runs first; when it fails and `exact` is set, the exact search
    (vdm_solver) takes up to `time_limit` seconds. Three answers: a Plan; VdmInfeasible
    when no plan exists, with the proof (a failure set and resource whose demand
    exceeds what survives, or the exact search's); VdmNotFound when neither found a
    plan nor proved there is none, and without `exact` whenever the greedy search
    fails (it proves nothing). A re-plan whose failure sets hold one another (X = 2
    or more) goes to the exact search over the failure sets that bind (vdm_lazy,
    method "binding") instead of the exact search and the repair, unless asked for
    fewest preemptions. A re-plan for which no plan that keeps the current
    homes is found in three quarters of `time_limit` is planned afresh for the rest
    (method "afresh"). A re-plan's plan that moves VMs has VMs of one shape trade
    places so that the most stay home (vdm_repair.relabel); one that still moves
    more than 5 % of the VMs is then settled for what is left of `time_limit`
    (vdm_repair.settle), which moves VMs back a few hosts at a time.

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
    start = time.perf_counter()
    previous_home = {n: h for n, h in (previous_home or {}).items() if n in problem.vms}
    order = placing_order(list(problem.vms.values()), problem)
    chains = previous_chains(problem, previous_home, previous_failover or {})
    method = "greedy"
    preemptions = objective == "preemptions" and any(
        vm.preemptible for vm in problem.vms.values())
    try:
        state = first_feasible(problem, order, previous_home, chains)
    except VdmInfeasible as greedy:
        if not exact:
            raise _unproved(greedy) from greedy
        state, method = _solved(problem, previous_home, time_limit, greedy,
                                preemptions=objective == "preemptions")
    else:
        if exact and preemptions:
            state, method = _improved(problem, previous_home, time_limit, state)
    homes = previous_home or {n: h for n, h in (current_home or {}).items()
                              if n in problem.vms}
    if moves(state, homes):
        state = _relabelled(problem, state, homes)
    if (exact and not preemptions
            and moves(state, previous_home) > _STABLE_SHARE * len(previous_home)):
        state = _settled(problem, previous_home, state,
                         time_limit - (time.perf_counter() - start))
    if rebalance_moves:
        rebalance(state, problem, rebalance_moves)
    result = plan_of(state, problem)
    result.moved = sorted(n for n, h in previous_home.items() if result.home[n] != h)
    result.method = method
    result.objective = objective
    return result


def _unproved(greedy: VdmInfeasible) -> VdmNotFound:
    """Where the greedy search alone was asked for (exact=False) and found no plan:
    "not found", as a VM that fits nowhere in its plan may fit in another. It keeps
    where the greedy search got furthest (`partial`, `partial_afresh`)."""
    said = str(greedy).split("; " + WHAT_HELPS, maxsplit=1)[0]
    found = VdmNotFound("no plan found: the greedy search alone (exact: false), which "
                        f"proves nothing, stopped at {said}; the exact search may find a "
                        "plan or prove there is none")
    found.partial = getattr(greedy, "partial", None)
    found.partial_afresh = getattr(greedy, "partial_afresh", None)
    return found


def _hints(state: PlanState | None) -> tuple[dict[str, str], dict[str, dict[frozenset, str]]]:
    """A greedy state's homes and targets per failure set, for the exact search."""
    if state is None:
        return {}, {}
    home = {name: state.names[j] for name, j in state.home.items()}
    targets = {name: {state.sets[s]: state.names[t] for sets, t in chain for s in sets}
               for name, chain in state.chains.items()}
    return home, targets


def _state_of(problem: Problem, outcome: vdm_solver.Outcome) -> PlanState:
    """The exact search's plan as a planner state: each VM's targets grouped by host
    are the links of its chain."""
    state = PlanState(problem)
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
            greedy: VdmInfeasible, preemptions: bool) -> tuple[PlanState, str]:
    """A plan where the greedy search found none, and the search that found it.

    The exact search starts where the greedy search got furthest; it answers, or with
    `preemptions` improves its first plan, for up to `time_limit`, but gives up when it
    has found no plan in a share of it. The repair then completes the greedy partial
    plan window by window for the rest of the time (vdm_repair.repair): on a cluster
    too large or too full for the exact model it often finds a plan, but never proves
    there is none. A re-plan whose failure sets hold one another, not asked for fewest
    preemptions, goes instead to the exact search over the failure sets that bind
    (vdm_lazy) for three quarters of `time_limit`. Raises VdmInfeasible with the exact
    search's proof, or VdmNotFound."""
    start = time.perf_counter()
    hint_home, hint_targets = _hints(getattr(greedy, "partial", None))
    greedy_said = str(greedy).split("; " + WHAT_HELPS, maxsplit=1)[0]
    if previous_home and not preemptions and vdm_lazy.applies(problem):
        found = vdm_lazy.solve(problem, previous_home, hint_home, hint_targets,
                               time_limit * (1 - _AFRESH_SHARE))
        method, said = "binding", found.reason
    else:
        found = vdm_solver.solve(problem, time_limit, previous_home=previous_home,
                                 hint_home=hint_home, hint_targets=hint_targets,
                                 preemptions=preemptions,
                                 find_within=time_limit * _EXACT_SHARE)
        method, said = "exact", f"the exact search did not settle it ({found.reason})"
        if found.status not in ("plan", "infeasible"):
            left = time_limit - (time.perf_counter() - start)
            found = vdm_repair.repair(problem, hint_home, hint_targets, left, previous_home,
                                      find_within=left - time_limit * _AFRESH_SHARE
                                      if previous_home else None)
            method, said = "repair", f"{said}; {found.reason}"
    if found.status == "infeasible":
        raise VdmInfeasible(f"{greedy_said}; {found.reason}; {WHAT_HELPS}")
    if found.status == "plan":
        return _state_of(problem, found), method
    afresh_said, suggest = "", ""
    if previous_home:  # the last resort of a re-plan: plan afresh, keep what homes it can
        afresh = vdm_repair.repair(problem, *_hints(getattr(greedy, "partial_afresh", None)),
                                   time_limit - (time.perf_counter() - start),
                                   previous_home, retarget=False)
        if afresh.status == "plan":  # plan() then renames it after the current homes
            return _state_of(problem, afresh), "afresh"
        afresh_said = f"; planned afresh, {afresh.reason}"
        suggest = ("; or plan afresh for the whole time limit, which may move many VMs "
                   "(yasco_keep_homes=false, the module's keep_homes: false)")
    raise VdmNotFound(f"no plan found: the greedy search stopped at {greedy_said}; "
                      f"{said}{afresh_said}; {_likeliest_fix(problem)}{suggest}")


def _improved(problem: Problem, previous_home: dict[str, str], time_limit: float,
              state: PlanState) -> tuple[PlanState, str]:
    """A greedy plan whose preemptions are to be fewest: the exact search, started
    from it, looks for one that moves no more VMs and stops fewer preemptible VMs, for
    up to `time_limit`; the better of the two, and the search that found it ("greedy"
    for the plan given)."""
    if vdm_exact_model.supported(problem):
        return state, "greedy"
    hint_home, hint_targets = _hints(state)
    outcome = vdm_solver.solve(problem, time_limit, previous_home=previous_home,
                               hint_home=hint_home, hint_targets=hint_targets,
                               preemptions=True, hint_is_plan=True)
    if outcome.status != "plan":
        return state, "greedy"
    solved = _state_of(problem, outcome)

    def cost(candidate: PlanState) -> tuple[int, int]:
        return moves(candidate, previous_home), plan_of(candidate, problem).preemptions

    if cost(solved) < cost(state):
        return solved, "exact"
    return state, "greedy"


def _relabelled(problem: Problem, state: PlanState, previous_home: dict[str, str]
                ) -> PlanState:
    """The plan with VMs of one shape trading places so that the most stay at their
    current homes (vdm_repair.relabel); as it is when that moves no fewer."""
    relabelled = _state_of(problem, vdm_solver.Outcome(
        "plan", *vdm_repair.relabel(problem, *_hints(state), previous_home)))
    fewer = moves(relabelled, previous_home) < moves(state, previous_home)
    return relabelled if fewer else state


def _settled(problem: Problem, previous_home: dict[str, str], state: PlanState,
             time_limit: float) -> PlanState:
    """A re-plan's plan that moves more than _STABLE_SHARE of the VMs, settled by
    vdm_repair.settle for what is left of the time (every live migration it saves is
    one an operator does not wait for); as it is where the exact model is too large
    or no time is left."""
    if time_limit < 1 or vdm_exact_model.supported(problem):
        return state
    home, targets = _hints(state)
    settled = vdm_repair.settle(problem, home, targets, previous_home, time_limit)
    return _state_of(problem, settled)


def _likeliest_fix(problem: Problem) -> str:
    """What would most likely make the cluster fit: relief for the failure set that
    leaves the least room, by the same count as the infeasibility certificate."""
    tightest = None
    for failed, r, need, have, dummy, dummy in _demand_on_survivors(problem):
        share = (have - need) / max(have, EPSILON)
        if tightest is None or share < tightest[0]:
            tightest = (share, failure_set_key(failed), r, have - need)
    if tightest is None:
        return WHAT_HELPS
    share, key, r, left = tightest
    return (f"the failure of {key} leaves the least room, {amount(left)} {UNIT_NAMES[r]} "
            f"({100 * share:.1f} %) on the other hosts: most likely to help is more "
            f"{UNIT_NAMES[r].split()[-1]} outside {{{key}}}, fewer HA VMs, or a longer "
            f"yasco_plan_time_limit; or {WHAT_HELPS}")
