"""The inventory schema: valid input becomes a planning problem, bad input is named."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (
    VdmInputError, load_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import failure_set_key

HOSTVARS = {
    "hv1": {"yasco_capacity": {"vcpus": 8, "memory_mb": 16384, "net_mbps": 10000},
            "yasco_reserved": {"vcpus": 2, "memory_mb": 2048}, "yasco_failure_domain": "rack-a"},
    "hv2": {"yasco_capacity": {"vcpus": 8, "memory_mb": 16384},
            "yasco_cpu_allocation_ratio": 4.0, "yasco_failure_domain": "rack-a"},
    "hv3": {"yasco_capacity": {"vcpus": 16, "memory_mb": 65536}, "yasco_failure_domain": "rack-b"},
}
VMS = {
    "web1": {"vcpus": 2, "memory_mb": 2048, "ha": True, "anti_affinity": ["web"]},
    "db1": {"vcpus": 4, "memory_mb": 8192, "ha": True, "priority": 10,
            "placement": "yasco_capacity.memory_mb >= `32768`"},
    "batch1": {"vcpus": 1, "memory_mb": 1024, "preemptible": True, "hosts": ["hv1", "hv2"],
               "image": "debian-12", "networks": ["br0"]},
}


def problem(hostvars=None, vms=None, **settings):
    return load_problem(copy.deepcopy(hostvars or HOSTVARS),
                        {"yasco_vms": copy.deepcopy(VMS if vms is None else vms), **settings})


def test_usable_capacity_subtracts_reserved_and_applies_the_cpu_ratio():
    p = problem(yasco_cpu_allocation_ratio=2.0)
    assert (p.hosts["hv1"].vcpus, p.hosts["hv1"].memory_mb) == (12, 14336)
    assert p.hosts["hv1"].net_mbps == 10000
    assert p.hosts["hv2"].vcpus == 32  # the host's own ratio wins over the global one
    assert p.hosts["hv3"].net_mbps is None  # not declared: not constrained


def test_placement_expressions_and_host_lists_restrict_where_a_vm_may_run():
    p = problem()
    assert p.vms["db1"].allowed == {"hv3"}
    assert p.vms["batch1"].allowed == {"hv1", "hv2"}
    assert p.vms["web1"].allowed == {"hv1", "hv2", "hv3"}


def test_boot_fields_of_provisioning_are_accepted_and_ignored():
    assert problem().vms["batch1"].memory_mb == 1024


def test_failure_sets_cover_up_to_x_hosts_and_whole_domains():
    assert [failure_set_key(s) for s in problem().failure_sets] == ["hv1", "hv2", "hv3"]
    two = [failure_set_key(s) for s in problem(yasco_failures_to_tolerate=2).failure_sets]
    assert two == ["hv1", "hv2", "hv3", "hv1,hv2", "hv1,hv3", "hv2,hv3"]
    domains = problem(yasco_failure_domains_to_tolerate=1).failure_sets
    assert frozenset({"hv1", "hv2"}) in domains


@pytest.mark.parametrize("vms, hostvars, settings, expected", [
    ({"a": {"vcpus": 1}}, None, {},
     "yasco_vms.a.memory_mb: missing; give it a size in MB, here or in yasco_vm_defaults"),
    ({"a": {"vcpus": -1, "memory_mb": 1}}, None, {}, "yasco_vms.a.vcpus: must be positive"),
    ({"a": {"vcpus": 1, "memory_mb": "lots"}}, None, {}, "yasco_vms.a.memory_mb: must be a number"),
    ({"a": {"vcpus": 1, "memory_mb": 1, "colour": "red"}}, None, {},
     "yasco_vms.a.colour: unknown key; known keys are "),
    ({"a": {"vcpus": 1, "memory_mb": 1, "hosts": ["hv9"]}}, None, {},
     "yasco_vms.a.hosts: names 'hv9', which is not in yasco_hypervisors"),
    ({"a": {"vcpus": 1, "memory_mb": 1, "placement": "yasco_capacity.["}}, None, {},
     "yasco_vms.a.placement: 'yasco_capacity.[' is not a valid JMESPath expression"),
    ({"a": {"vcpus": 1, "memory_mb": 1, "placement": "yasco_failure_domain == 'rack-z'"}},
     None, {}, "yasco_vms.a: no hypervisor is allowed"),
    ({"a": {"vcpus": 1, "memory_mb": 999999}}, None, {},
     "yasco_vms.a: larger than every hypervisor it may run on"),
    ({"a": {"vcpus": 1, "memory_mb": 1, "ha": True, "preemptible": True}}, None, {},
     "yasco_vms.a: ha and preemptible exclude each other"),
    ({"a": {"vcpus": 1, "memory_mb": 1, "home": "hv9"}}, None, {},
     "yasco_vms.a.home: 'hv9' is not in yasco_hypervisors"),
    # A misspelt name gets the known one it is closest to; a name far from all, none.
    ({"a": {"vcpus": 1, "memory_mb": 1, "memroy_mb": 2}}, None, {},
     "yasco_vms.a.memroy_mb: unknown key; did you mean 'memory_mb'?; known keys are "),
    ({"a": {"vcpus": 1, "memory_mb": 1, "home": "hv01"}}, None, {},
     "yasco_vms.a.home: 'hv01' is not in yasco_hypervisors; did you mean 'hv1'?"),
    ({"a": {"vcpus": 1, "memory_mb": 1, "hosts": ["hv01", "hv9"]}}, None, {},
     "yasco_vms.a.hosts: names 'hv01', which is not in yasco_hypervisors; did you mean 'hv1'?"),
    # The largest host it may run on, for a VM that fits none.
    ({"a": {"vcpus": 1, "memory_mb": 999999, "hosts": ["hv1", "hv2"]}},
     {"hv1": {"yasco_capacity": {"vcpus": 4, "memory_mb": 4096}},
      "hv2": {"yasco_capacity": {"vcpus": 8, "memory_mb": 16384},
              "yasco_reserved": {"memory_mb": 2048}},
      "hv3": {"yasco_capacity": {"vcpus": 64, "memory_mb": 524288}}}, {},
     "yasco_vms.a: larger than every hypervisor it may run on (1 vCPUs, 999999 MB); the largest, "
     "hv2, holds 8 vCPUs and 14336 MB after yasco_reserved and the CPU allocation ratio"),
    ({}, {"hv1": {"yasco_capacity": {"vcpus": 4}}}, {},
     "host hv1: yasco_capacity.memory_mb: missing; give it a size in MB"),
    # Missing or empty, a field says so and what it takes, not "got None".
    ({}, {"hv1": {}}, {},
     "host hv1: yasco_capacity: missing; set it to a mapping of vcpus, memory_mb"),
    ({"a": {"vcpus": 1, "memory_mb": None}}, None, {},
     "yasco_vms.a.memory_mb: is empty; give it a number"),
    ({"a": {"vcpus": 1, "memory_mb": 1, "priority": "high"}}, None, {},
     "yasco_vms.a.priority: must be an integer (higher starts first), got 'high'"),
    ({}, {"hv1": {"yasco_capacity": {"vcpus": 4, "memory_mb": 1024},
                  "yasco_reserved": {"memory_mb": 2048}}}, {},
     "host hv1: yasco_reserved.memory_mb (2048) is more than yasco_capacity.memory_mb (1024)"),
    ({}, None, {"yasco_failures_to_tolerate": 3},
     "yasco_failures_to_tolerate: 3 failures of 3 hypervisors"),
    ({}, None, {"yasco_failure_domains_to_tolerate": 2},
     "yasco_failure_domains_to_tolerate: must be 0 or 1"),
])
def test_invalid_input_names_the_vm_or_host_and_the_field(vms, hostvars, settings, expected):
    with pytest.raises(VdmInputError) as raised:
        problem(hostvars=hostvars, vms=vms, **settings)
    assert any(expected in p for p in raised.value.problems), raised.value.problems


def test_a_name_far_from_every_known_one_gets_no_suggestion():
    with pytest.raises(VdmInputError) as raised:
        problem(vms={"a": {"vcpus": 1, "memory_mb": 1, "hosts": ["hv9"], "colour": "red"}})
    assert "yasco_vms.a.hosts: names 'hv9', which is not in yasco_hypervisors" in \
        raised.value.problems
    assert not [p for p in raised.value.problems if "did you mean" in p]


def test_every_problem_is_reported_at_once_each_on_a_line_of_its_own():
    with pytest.raises(VdmInputError) as raised:
        problem(vms={"a": {"vcpus": 0, "memory_mb": 1}, "b": {"memory_mb": 1}})
    assert len(raised.value.problems) == 2
    assert str(raised.value).splitlines() == [
        "invalid VDM input, 2 problems:",
        "  - yasco_vms.a.vcpus: must be positive, got 0",
        "  - yasco_vms.b.vcpus: missing; give it a number of vCPUs, here or in "
        "yasco_vm_defaults"]


def test_a_single_problem_is_said_on_one_line():
    with pytest.raises(VdmInputError) as raised:
        problem(vms={"a": {"vcpus": 0, "memory_mb": 1}})
    assert str(raised.value) == "invalid VDM input: yasco_vms.a.vcpus: must be positive, got 0"
