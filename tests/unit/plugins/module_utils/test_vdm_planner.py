"""The planner: every plan it makes holds every invariant, by the independent checker,
and every input it cannot plan gets an error that says where and by how much."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_check import check
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (
    VdmInputError, load_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import VdmInfeasible
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import plan


def as_vdm(result):
    return {"home": result.home, "failover": result.failover, "preempt": result.preempt}


def hosts(*sizes, **extra):
    return {f"hv{i + 1}": {"yasco_capacity": {"vcpus": v, "memory_mb": m}, **extra}
            for i, (v, m) in enumerate(sizes)}


def settle(hostvars, vms, **settings_):
    problem = load_problem(hostvars, {"yasco_vms": vms, **settings_})
    return problem, plan(problem)


# -- generated clusters -------------------------------------------------------

LABELS = ["web", "db", "cache"]


@st.composite
def clusters(draw):
    k = draw(st.integers(2, 6))
    domains = draw(st.booleans()) and k >= 4
    hostvars = {}
    for i in range(k):
        hv = {"yasco_capacity": {"vcpus": draw(st.integers(4, 16)),
                                 "memory_mb": draw(st.sampled_from([4096, 8192, 16384]))}}
        if draw(st.booleans()):
            hv["yasco_capacity"]["net_mbps"] = draw(st.sampled_from([1000, 10000]))
        if domains:
            hv["yasco_failure_domain"] = f"rack-{i % 2}"
        hostvars[f"hv{i + 1}"] = hv
    names = sorted(hostvars)
    vms = {}
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["ha", "ha", "plain", "preemptible"]))
        spec = {"vcpus": draw(st.integers(1, 4)),
                "memory_mb": draw(st.sampled_from([256, 512, 1024, 2048])),
                "ha": kind == "ha", "preemptible": kind == "preemptible",
                "priority": draw(st.integers(0, 3))}
        if draw(st.integers(0, 3)) == 0:
            spec["anti_affinity"] = draw(st.lists(st.sampled_from(LABELS), max_size=2,
                                                  unique=True))
        if draw(st.integers(0, 4)) == 0:
            spec["hosts"] = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        if draw(st.integers(0, 6)) == 0:
            spec["home"] = draw(st.sampled_from(spec.get("hosts", names)))
        if draw(st.integers(0, 4)) == 0:
            spec["net_mbps"] = draw(st.sampled_from([100, 500]))
        vms[f"vm{i}"] = spec
    x = min(draw(st.sampled_from([0, 1, 1, 2, 2])), k - 1)
    return hostvars, {"yasco_vms": vms, "yasco_failures_to_tolerate": x,
                      "yasco_failure_domains_to_tolerate": int(domains)}


INFEASIBLE = re.compile(r"^(failure of [\w,]+: [\d.]+ (vCPUs|MB memory|Mbps network)"
                        r"( and [\d.]+ (MB memory|Mbps network))* short "
                        r"on hosts outside \{[\w,]+\} \(.*\)|the VMs need more .* short|"
                        r"VM \w+ \(.*\) fits nowhere: .+); add or enlarge hypervisors")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_plan_holds_every_invariant(cluster):
    try:
        problem = load_problem(*cluster)
    except VdmInputError as err:  # the generator may draw a VM larger than its hosts
        assert all("larger than every hypervisor" in p for p in err.problems), err.problems
        return
    try:
        result = plan(problem)
    except VdmInfeasible as err:
        assert INFEASIBLE.match(str(err)), str(err)
        return
    assert check(problem, as_vdm(result)) == []


@settings(max_examples=100, deadline=None)
@given(clusters(), st.integers(0, 3))
def test_replanning_keeps_every_invariant(cluster, rebalance_moves):
    hostvars, global_vars = cluster
    vms = global_vars["yasco_vms"]
    first = dict(list(vms.items())[: len(vms) // 2])
    try:
        before = plan(load_problem(hostvars, {**global_vars, "yasco_vms": first}))
        problem = load_problem(hostvars, global_vars)
        after = plan(problem, previous_home=before.home, rebalance_moves=rebalance_moves,
                     previous_failover=before.failover)
    except (VdmInputError, VdmInfeasible):
        return
    assert check(problem, as_vdm(after)) == []
    assert after.moved == sorted(n for n, h in before.home.items() if after.home[n] != h)


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 8), st.integers(1, 2), st.data())
def test_a_lightly_loaded_cluster_is_always_planned(k, x, data):
    """With HA load well under the ideal bound and no constraints, a plan must exist."""
    x = min(x, k - 1)
    hostvars = hosts(*[(16, 16384)] * k)
    budget = 16 * k * (k - x) / k * 0.5  # half the ideal bound, in vCPUs
    vms, used = {}, 0
    while True:
        size = data.draw(st.integers(1, 4))
        if used + size > budget:
            break
        used += size
        vms[f"vm{len(vms)}"] = {"vcpus": size, "memory_mb": 1024 * size, "ha": True}
    problem, result = settle(hostvars, vms, yasco_failures_to_tolerate=x)
    assert check(problem, as_vdm(result)) == []


# -- what a plan contains -----------------------------------------------------

def test_two_failures_are_planned_with_nested_targets():
    problem, result = settle(hosts(*[(8, 8192)] * 4),
                             {f"vm{i}": {"vcpus": 1, "memory_mb": 1024, "ha": True}
                              for i in range(8)}, yasco_failures_to_tolerate=2)
    assert check(problem, as_vdm(result)) == []
    assert len(result.failover) == 4 + 6
    for name, home in result.home.items():
        first = result.failover[home][name]
        for other in problem.hosts:
            if other not in (home, first):
                key = ",".join(sorted({home, other}))
                assert result.failover[key][name] == first


def test_a_whole_failure_domain_is_covered():
    hostvars = hosts(*[(8, 8192)] * 4)
    for i, hv in enumerate(hostvars.values()):
        hv["yasco_failure_domain"] = f"rack-{i // 2}"
    problem, result = settle(hostvars, {f"vm{i}": {"vcpus": 1, "memory_mb": 1024, "ha": True}
                                        for i in range(6)},
                             yasco_failures_to_tolerate=1, yasco_failure_domains_to_tolerate=1)
    assert check(problem, as_vdm(result)) == []
    for name, home in result.home.items():
        rack = {"hv1", "hv2"} if home in ("hv1", "hv2") else {"hv3", "hv4"}
        assert result.failover[",".join(sorted(rack))][name] not in rack


def test_preemptible_vms_live_in_the_spare_and_stop_on_failover():
    vms = {"web1": {"vcpus": 2, "memory_mb": 3072, "ha": True, "home": "hv1"},
           "batch1": {"vcpus": 2, "memory_mb": 3072, "preemptible": True, "home": "hv2"}}
    problem, result = settle(hosts((4, 4096), (4, 4096)), vms)
    assert result.failover["hv1"] == {"web1": "hv2"}
    assert result.preempt == {"hv1": ["batch1"]}
    assert result.reserve == {"hv2": {"vcpus": 2, "memory_mb": 3072}}
    assert check(problem, as_vdm(result)) == []


def test_anti_affinity_holds_after_a_failover():
    vms = {f"web{i}": {"vcpus": 1, "memory_mb": 512, "ha": True, "anti_affinity": ["web"]}
           for i in range(3)}
    problem, result = settle(hosts(*[(8, 8192)] * 4), vms)
    assert len(set(result.home.values())) == 3
    for key, moves in result.failover.items():
        survivors = {h for n, h in result.home.items() if h not in key.split(",")}
        assert not set(moves.values()) & survivors


# -- errors -------------------------------------------------------------------

def test_too_little_capacity_names_the_failure_set_the_resource_and_the_shortfall():
    vms = {f"vm{i}": {"vcpus": 1, "memory_mb": 4096, "ha": True} for i in range(4)}
    with pytest.raises(VdmInfeasible) as err:
        settle(hosts((8, 8192), (8, 8192), (8, 8192)), vms, yasco_failures_to_tolerate=2)
    assert str(err.value).startswith(
        "failure of hv1,hv2: 8192 MB memory short on hosts outside {hv1,hv2}")
    assert "lower yasco_failures_to_tolerate" in str(err.value)


def test_a_vm_that_cannot_be_protected_is_named_with_the_reason():
    # Capacity suffices in total, but no host has room for a whole VM once each holds one.
    vms = {f"db{i}": {"vcpus": 4, "memory_mb": 1024, "ha": True} for i in range(3)}
    with pytest.raises(VdmInfeasible) as err:
        settle(hosts((6, 8192), (6, 8192), (6, 8192)), vms)
    message = str(err.value)
    assert message.startswith("VM db2 (HA, 4 vCPUs, 1024 MB memory) fits nowhere:")
    assert "2 vCPUs short" in message


def test_anti_affinity_that_cannot_hold_after_a_failure_is_named():
    vms = {f"web{i}": {"vcpus": 1, "memory_mb": 512, "ha": True, "anti_affinity": ["web"]}
           for i in range(3)}
    with pytest.raises(VdmInfeasible) as err:
        settle(hosts(*[(8, 8192)] * 3), vms)
    assert "anti-affinity" in str(err.value)


# -- re-planning --------------------------------------------------------------

def test_replanning_with_more_vms_keeps_the_current_homes():
    hostvars = hosts(*[(16, 16384)] * 4)
    vms = {f"vm{i}": {"vcpus": 2, "memory_mb": 2048, "ha": i % 2 == 0} for i in range(12)}
    dummy, before = settle(hostvars, vms)
    more = {**vms, **{f"new{i}": {"vcpus": 2, "memory_mb": 2048, "ha": True} for i in range(3)}}
    problem = load_problem(hostvars, {"yasco_vms": more})
    after = plan(problem, previous_home=before.home)
    assert after.moved == []
    assert {n: after.home[n] for n in before.home} == before.home
    assert check(problem, as_vdm(after)) == []


def test_a_vm_that_no_longer_fits_its_home_moves_and_is_reported():
    hostvars = hosts((8, 8192), (8, 8192), (8, 8192))
    vms = {"a": {"vcpus": 1, "memory_mb": 1024, "ha": True}}
    dummy, before = settle(hostvars, vms)
    home = before.home["a"]
    vms["a"]["hosts"] = [h for h in hostvars if h != home]
    problem = load_problem(hostvars, {"yasco_vms": vms})
    after = plan(problem, previous_home=before.home)
    assert after.moved == ["a"]
    assert check(problem, as_vdm(after)) == []


def test_rebalancing_spends_at_most_its_budget_and_evens_out_the_hosts():
    hostvars = hosts(*[(16, 16384)] * 4)
    vms = {f"vm{i}": {"vcpus": 1, "memory_mb": 1024, "ha": True} for i in range(8)}
    crowded = {name: "hv1" for name in vms}
    problem = load_problem(hostvars, {"yasco_vms": vms})
    kept = plan(problem, previous_home=crowded)
    assert kept.moved == []
    balanced = plan(problem, previous_home=crowded, rebalance_moves=3)
    assert len(balanced.moved) == 3
    assert sum(1 for h in balanced.home.values() if h == "hv1") == 5
    assert check(problem, as_vdm(balanced)) == []


def test_pinning_a_planned_vm_elsewhere_moves_it_on_replanning():
    hostvars = hosts(*[(8, 8192)] * 3)
    vms = {f"vm{i}": {"vcpus": 1, "memory_mb": 1024, "ha": True} for i in range(4)}
    dummy, before = settle(hostvars, vms)
    target = next(h for h in hostvars if h != before.home["vm0"])
    vms["vm0"]["home"] = target
    problem = load_problem(hostvars, {"yasco_vms": vms})
    after = plan(problem, previous_home=before.home, previous_failover=before.failover)
    assert after.home["vm0"] == target and after.moved == ["vm0"]
    assert check(problem, as_vdm(after)) == []
