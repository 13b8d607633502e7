"""The planner's proofs of infeasibility, and its plans, against a brute force
(vdm_brute_force) on clusters of 4 and 5 hosts that tolerate two failures, or one
and a whole failure domain, or both: every "infeasible" of the exact search, of the search over the
failure sets that bind and of plan() is a cluster where no map exists, every plan
holds every invariant, and the greedy search alone never calls a cluster infeasible
without a proof. Each judge is shown to catch a planner with a planted fault."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from ansible_collections.yasco.cluster.plugins.module_utils.planner import (
    vdm_exact_model, vdm_lazy, vdm_solver)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_check import check
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (
    load_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    VdmInfeasible, VdmNotFound)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import plan

from . import vdm_brute_force as brute

# Generous for models of a few VMs, which CP-SAT settles in milliseconds; plan()
# may spend what is left of its time limit settling a re-plan.
SECONDS = 20
PLAN_SECONDS = 5
JUDGED = settings(max_examples=120, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])
# How many generated clusters a planted fault may take to be caught.
WITHIN = 150


@st.composite
def tight_clusters(draw):
    """4 or 5 small hosts, X = 2 (or X = 1 with failure domains), 2 to 5 VMs (4 on
    5 hosts) with labels, allowed hosts and pins: full enough that a third have no
    map, small enough that the brute force tries every map in well under a second.
    Also a current home for each VM, for a re-plan."""
    k = draw(st.sampled_from([4, 5]))
    domains = draw(st.booleans())
    x = draw(st.sampled_from([1, 2])) if domains else 2
    hostvars = {}
    for i in range(k):
        hv = {"yasco_capacity": {"vcpus": draw(st.sampled_from([2, 4, 6])),
                                 "memory_mb": draw(st.sampled_from([2048, 3072, 4096]))}}
        if domains:  # at least two racks; with five hosts, maybe three
            hv["yasco_failure_domain"] = (f"rack{i}" if i < 2 else
                                          f"rack{draw(st.integers(0, k - 3))}")
        hostvars[f"hv{i + 1}"] = hv
    names = sorted(hostvars)
    vms, current = {}, {}
    for i in range(draw(st.integers(2, 5 if k == 4 else 4))):
        kind = draw(st.sampled_from(["ha", "ha", "ha", "plain", "preemptible"]))
        spec = {"vcpus": draw(st.sampled_from([1, 2])),
                "memory_mb": draw(st.sampled_from([512, 1024, 2048])),
                "ha": kind == "ha", "preemptible": kind == "preemptible"}
        labels = draw(st.sampled_from([[], [], ["web"], ["db"], ["web", "db"]]))
        if labels:
            spec["anti_affinity"] = labels
        if draw(st.integers(0, 4)) == 0:
            spec["hosts"] = draw(st.lists(st.sampled_from(names), min_size=2, max_size=k,
                                          unique=True))
        if draw(st.integers(0, 6)) == 0:
            spec["home"] = draw(st.sampled_from(spec.get("hosts", names)))
        vms[f"vm{i}"] = spec
        current[f"vm{i}"] = spec.get("home") or draw(st.sampled_from(
            spec.get("hosts", names)))
    return hostvars, {"yasco_vms": vms, "yasco_failures_to_tolerate": x,
                      "yasco_failure_domains_to_tolerate": int(domains)}, current


def _truth(hostvars, settings_):
    """The brute force's answer (a map or None), its witness accepted by the
    planner's own checker and by the brute force's judge, so that neither a too lax
    nor a too strict brute force goes unseen."""
    cluster = brute.Cluster(hostvars, settings_)
    found = brute.find_map(cluster)
    if found is not None:
        problem = load_problem(hostvars, settings_)
        assert check(problem, found) == [], ("the brute force's map fails the checker",
                                             found, check(problem, found))
        assert brute.violations(cluster, found) == []
    return cluster, found


def _outcome_vdm(cluster, outcome) -> dict:
    """An exact search's homes and targets as a VDM, every preemptible VM of a host
    that receives VMs stopped."""
    failover: dict[str, dict[str, str]] = {}
    for name, targets in outcome.targets.items():
        for failed, target in targets.items():
            failover.setdefault(brute.set_key(failed), {})[name] = target
    return {"home": outcome.home, "failover": failover,
            "preempt": brute.stop_preemptible(cluster, outcome.home, failover)}


def _judge_outcome(what, cluster, truth, problem, outcome, complete: bool) -> list[str]:
    """What is wrong with a search's outcome: "infeasible" where a map exists, a plan
    that breaks an invariant, and (`complete`) any other answer than the truth."""
    if outcome.status == "infeasible" and truth is not None:
        return [f"{what} proved infeasible ({outcome.reason}), but this map holds: {truth}"]
    if outcome.status == "plan":
        vdm = _outcome_vdm(cluster, outcome)
        wrong = brute.violations(cluster, vdm) + check(problem, vdm)
        if wrong:
            return [f"{what}'s plan {vdm} breaks: {wrong}"]
        if truth is None:
            return [f"{what} found the valid plan {vdm} where the brute force found none"]
    if complete and outcome.status != ("plan" if truth is not None else "infeasible"):
        return [f"{what} answered {outcome.status} ({outcome.reason}); a map "
                + ("exists" if truth is not None else "does not exist")]
    return []


def exact_search_wrong(case) -> list[str]:
    hostvars, settings_, dummy = case
    cluster, truth = _truth(hostvars, settings_)
    problem = load_problem(hostvars, settings_)
    outcome = vdm_solver.solve(problem, SECONDS, workers=1)
    # The exact model is exact for whole sizes (docs/vdm.md): it settles every one.
    return _judge_outcome("the exact search", cluster, truth, problem, outcome,
                          complete=True)


def binding_search_wrong(case) -> list[str]:
    hostvars, settings_, current = case
    problem = load_problem(hostvars, settings_)
    if not vdm_lazy.applies(problem):
        return []
    cluster, truth = _truth(hostvars, settings_)
    wrong = []
    for previous in ({}, current):
        outcome = vdm_lazy.solve(problem, previous, {}, {}, SECONDS, workers=1)
        wrong += _judge_outcome("the search over the binding failure sets", cluster, truth,
                                problem, outcome, complete=False)
    return wrong


def planner_wrong(case, planner=plan) -> list[str]:
    """What is wrong with plan()'s answers, afresh, as a re-plan from the current
    homes, and with the greedy search alone: an "infeasible" where a map exists, or a
    plan that breaks an invariant ("not found" claims nothing)."""
    hostvars, settings_, current = case
    cluster, truth = _truth(hostvars, settings_)
    problem = load_problem(hostvars, settings_)
    wrong = []
    for how, kwargs in (("plan()", {}), ("a re-plan", {"previous_home": current}),
                        ("the greedy search alone", {"exact": False})):
        try:
            result = planner(problem, time_limit=PLAN_SECONDS, **kwargs)
        except VdmNotFound:
            continue
        except VdmInfeasible as err:
            if truth is not None:
                wrong.append(f"{how} said infeasible ({err}), but this map holds: {truth}")
            continue
        vdm = {"home": result.home, "failover": result.failover, "preempt": result.preempt}
        broken = brute.violations(cluster, vdm) + check(problem, vdm)
        if broken:
            wrong.append(f"{how}'s plan breaks: {broken}")
    return wrong


@JUDGED
@given(tight_clusters())
def test_the_exact_search_proves_infeasible_exactly_where_no_map_exists(case):
    assert exact_search_wrong(case) == []


@JUDGED
@given(tight_clusters())
def test_the_search_over_binding_sets_proves_infeasible_only_where_no_map_exists(case):
    assert binding_search_wrong(case) == []


@JUDGED
@given(tight_clusters())
def test_the_planner_calls_a_cluster_infeasible_only_where_no_map_exists(case):
    assert planner_wrong(case) == []


# A cluster with a map that the greedy search misses. The HA vm0 (2048 MB) needs that
# much on three hosts, its home and a target for each of two failures, which leaves
# room only when the plain vm1 and vm2 share hv1 or hv2. The greedy search puts vm0 on
# hv4 and vm2 on hv3; then hv1 and hv2, the only hosts vm1 may run on, keep their
# 2048 MB spare for vm0.
GREEDY_MISSES = (
    {"hv1": {"yasco_capacity": {"vcpus": 6, "memory_mb": 2048}},
     "hv2": {"yasco_capacity": {"vcpus": 4, "memory_mb": 2048}},
     "hv3": {"yasco_capacity": {"vcpus": 4, "memory_mb": 2048}},
     "hv4": {"yasco_capacity": {"vcpus": 2, "memory_mb": 3072}}},
    {"yasco_vms": {"vm0": {"vcpus": 1, "memory_mb": 2048, "ha": True},
                   "vm1": {"vcpus": 1, "memory_mb": 1024, "hosts": ["hv2", "hv1"]},
                   "vm2": {"vcpus": 2, "memory_mb": 1024, "anti_affinity": ["db"]}},
     "yasco_failures_to_tolerate": 2},
    {"vm0": "hv1", "vm1": "hv2", "vm2": "hv3"})


def test_the_greedy_search_alone_answers_not_found_and_says_it_proves_nothing():
    hostvars, settings_, dummy = GREEDY_MISSES
    dummy, truth = _truth(hostvars, settings_)
    assert truth is not None
    problem = load_problem(hostvars, settings_)
    with pytest.raises(VdmNotFound) as err:
        plan(problem, exact=False)
    assert str(err.value).startswith(
        "no plan found: the greedy search alone (exact: false), which proves nothing, "
        "stopped at VM vm1 (plain, 1 vCPUs, 1024 MB memory) fits nowhere: "), err.value
    assert str(err.value).endswith("; the exact search may find a plan or prove there is "
                                   "none")
    assert err.value.partial is not None  # where the exact search and the repair start
    assert check(problem, {k: getattr(plan(problem), k)
                           for k in ("home", "failover", "preempt")}) == []


# -- the judges, each shown to catch a planted fault -----------------------------

def _caught(judge, **kwargs):
    """The first generated cluster (of at most WITHIN) on which `judge` finds
    something wrong, shrunk; fails when it finds nothing."""
    try:
        return find(tight_clusters(), lambda case: bool(judge(case, **kwargs)),
                    settings=settings(max_examples=WITHIN, database=None, derandomize=True,
                                      deadline=None, phases=[Phase.generate],
                                      suppress_health_check=list(HealthCheck)))
    except NoSuchExample:
        pytest.fail(f"{judge.__name__} found nothing wrong in {WITHIN} clusters")


def test_the_oracle_catches_an_exact_search_that_claims_infeasible_for_any_cluster(
        monkeypatch):
    monkeypatch.setattr(vdm_solver, "solve", lambda *a, **k: vdm_solver.Outcome(
        "infeasible", reason="tampered"))
    case = _caught(exact_search_wrong)
    assert "proved infeasible (tampered), but this map holds" in exact_search_wrong(case)[0]


def _room_short_by_a_tenth(monkeypatch):
    """A planted fault in the exact model: every survivor is given nine tenths of its
    room under a failure set."""
    room = vdm_exact_model.ExactModel.room
    monkeypatch.setattr(vdm_exact_model.ExactModel, "room",
                        lambda self, failed, t, r: room(self, failed, t, r) * 9 // 10)


def test_the_oracle_refutes_the_proof_of_a_model_that_leaves_room_unused(monkeypatch):
    _room_short_by_a_tenth(monkeypatch)
    case = _caught(exact_search_wrong)
    wrong = exact_search_wrong(case)
    assert "the exact search proved infeasible" in wrong[0], wrong


def test_the_oracle_refutes_the_binding_searchs_proof_from_that_model(monkeypatch):
    _room_short_by_a_tenth(monkeypatch)
    case = _caught(binding_search_wrong)
    wrong = binding_search_wrong(case)
    assert "the search over the binding failure sets proved infeasible" in wrong[0], wrong


def test_the_oracle_rejects_plans_of_a_model_without_anti_affinity(monkeypatch):
    monkeypatch.setattr(vdm_exact_model.ExactModel, "_anti_affinity", lambda self: None)
    case = _caught(exact_search_wrong)
    wrong = exact_search_wrong(case)
    assert "share" in wrong[0] and "'s plan" in wrong[0], wrong


def test_the_oracle_rejects_plans_of_a_model_that_forgets_capacity_after_a_failure(
        monkeypatch):
    monkeypatch.setattr(vdm_exact_model.ExactModel, "room",
                        lambda self, failed, t, r: 10 ** 9)
    case = _caught(exact_search_wrong)
    wrong = exact_search_wrong(case)
    assert "holds" in wrong[0] and "more than" in wrong[0], wrong


def _greedy_failure_as_proof(problem, **kwargs):
    """plan() as it was: the greedy search alone re-raised its failure as a proof."""
    try:
        return plan(problem, **kwargs)
    except VdmNotFound as err:
        if kwargs.get("exact") is False and isinstance(err.__cause__, VdmInfeasible):
            raise VdmInfeasible(*err.__cause__.args) from None
        raise


def test_the_oracle_catches_a_greedy_search_that_calls_its_failure_a_proof():
    assert planner_wrong(GREEDY_MISSES) == []
    (wrong,) = planner_wrong(GREEDY_MISSES, planner=_greedy_failure_as_proof)
    assert wrong.startswith("the greedy search alone said infeasible (VM vm1 "), wrong


def test_the_brute_forces_witness_is_checked_an_oracle_that_forgets_nesting_is_caught(
        monkeypatch):
    """The brute force's own maps go through the planner's checker: one that lets a
    VM's targets break nesting is caught before it judges anything."""
    monkeypatch.setattr(brute, "nested", lambda targets: True)

    def witness_refused(case) -> bool:
        try:
            _truth(*case[:2])
        except AssertionError as err:
            return "nesting" in str(err)
        return False

    try:
        find(tight_clusters(), witness_refused,
             settings=settings(max_examples=WITHIN, database=None, derandomize=True,
                               deadline=None, phases=[Phase.generate]))
    except NoSuchExample:
        pytest.fail("a brute force without nesting went unseen")


def test_a_brute_force_that_drops_maps_is_caught_by_the_plans_it_calls_impossible(
        monkeypatch):
    """The exact search must settle every cluster as the brute force does: one whose
    bound gives up on any cluster of three VMs or more is refuted by a valid plan."""
    monkeypatch.setattr(brute._Search, "_room_left", lambda self, i: i < 2)
    case = _caught(exact_search_wrong)
    wrong = exact_search_wrong(case)
    assert "found the valid plan" in wrong[0] and "where the brute force found none" \
        in wrong[0], wrong
