"""The independent checker finds every way a VDM breaks an invariant."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_check import check
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import load_problem

HOSTVARS = {h: {"yasco_capacity": {"vcpus": 8, "memory_mb": 8192}} for h in ("hv1", "hv2", "hv3")}
VMS = {
    "web1": {"vcpus": 2, "memory_mb": 4096, "ha": True, "anti_affinity": ["web"]},
    "web2": {"vcpus": 2, "memory_mb": 4096, "ha": True, "anti_affinity": ["web"]},
    "db1": {"vcpus": 2, "memory_mb": 2048, "ha": True, "hosts": ["hv2", "hv3"]},
    "batch1": {"vcpus": 2, "memory_mb": 4096, "preemptible": True},
    "plain1": {"vcpus": 1, "memory_mb": 1024},
}
# Written by hand: a plan for X = 1 that holds every invariant.
VALID = {
    "home": {"web1": "hv1", "web2": "hv2", "db1": "hv2", "batch1": "hv3", "plain1": "hv1"},
    "failover": {"hv1": {"web1": "hv3"}, "hv2": {"web2": "hv3", "db1": "hv3"}, "hv3": {}},
    "preempt": {"hv1": ["batch1"], "hv2": ["batch1"]},
}


def problem(x=1):
    return load_problem(copy.deepcopy(HOSTVARS),
                        {"yasco_vms": copy.deepcopy(VMS), "yasco_failures_to_tolerate": x})


def valid_x1():
    return copy.deepcopy(VALID)


def test_a_valid_plan_has_no_violations():
    assert check(problem(), valid_x1()) == []


def test_a_plan_for_one_failure_does_not_cover_two():
    violations = check(problem(x=2), valid_x1())
    assert "failure of hv1,hv2: HA VM web1 has no target" in violations


def mutate(path, value):
    vdm = valid_x1()
    *parents, last = path
    node = vdm
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return vdm


DELETE = object()


@pytest.mark.parametrize("path, value, expected", [
    (("home", "plain1"), DELETE, "plain1: has no home"),
    (("home", "web1"), "hv9", "web1: home 'hv9' is not a hypervisor"),
    (("home", "db1"), "hv1", "db1: home hv1 is not allowed for it"),
    (("home", "web2"), "hv1", "home placement: on hv1, web1 and web2 share anti-affinity label"),
    (("home", "batch1"), "hv1", "home placement: hv1 over capacity: memory_mb 9216 > 8192"),
    (("failover", "hv1", "web1"), DELETE, "failure of hv1: HA VM web1 has no target"),
    (("failover", "hv1", "web1"), "hv1", "web1 goes to hv1, which is not a survivor"),
    (("failover", "hv1", "plain1"), "hv2", "moves plain1, which is not an HA VM of a failed"),
    (("failover", "hv2", "db1"), "hv1", "db1 goes to hv1, where it is not allowed"),
    (("failover", "hv2", "web2"), "hv1", "on hv1, web1 and web2 share anti-affinity label"),
    (("preempt", "hv2"), [], "failure of hv2: hv3 over capacity: memory_mb 10240 > 8192"),
    (("preempt", "hv3"), ["plain1"], "preempts plain1, which is not a preemptible VM"),
    (("failover", "hv1,hv2"), {}, "failover['hv1,hv2']: not a failure set to tolerate"),
])
def test_each_broken_invariant_is_reported(path, value, expected):
    violations = check(problem(), mutate(path, value))
    assert any(expected in v for v in violations), violations


def test_a_vm_moved_twice_by_accumulating_failures_breaks_nesting():
    hostvars = {h: {"yasco_capacity": {"vcpus": 8, "memory_mb": 8192}}
                for h in ("hv1", "hv2", "hv3", "hv4")}
    p = load_problem(hostvars, {"yasco_failures_to_tolerate": 2, "yasco_vms": {
        "a": {"vcpus": 1, "memory_mb": 1024, "ha": True, "home": "hv1"}}})
    failover = {"hv1": {"a": "hv2"}, "hv2": {}, "hv3": {}, "hv4": {},
                "hv1,hv2": {"a": "hv3"}, "hv1,hv3": {"a": "hv4"}, "hv1,hv4": {"a": "hv2"},
                "hv2,hv3": {}, "hv2,hv4": {}, "hv3,hv4": {}}
    vdm = {"home": {"a": "hv1"}, "failover": failover, "preempt": {}}
    assert check(p, vdm) == [
        "nesting: a goes to hv2 when hv1 fails but to hv4 when hv1,hv3 fails, "
        "though hv2 survives both"]
    failover["hv1,hv3"]["a"] = "hv2"
    assert check(p, vdm) == []


def test_a_pinned_home_holds_at_home_but_not_on_failover():
    p = load_problem(copy.deepcopy(HOSTVARS), {"yasco_vms": {
        "a": {"vcpus": 1, "memory_mb": 1024, "ha": True, "home": "hv1"}}})
    failover = {"hv1": {"a": "hv2"}, "hv2": {}, "hv3": {}}
    assert check(p, {"home": {"a": "hv1"}, "failover": failover, "preempt": {}}) == []
    assert check(p, {"home": {"a": "hv2"}, "failover": {"hv1": {}, "hv2": {"a": "hv1"},
                                                        "hv3": {}}, "preempt": {}}) == [
        "a: home hv2, but it is pinned to hv1"]
