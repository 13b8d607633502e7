"""Capacity what-if: how many more HA VMs fit if a host joins or leaves or VMs join,
checked against the counting bound, which no plan can beat."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import VdmInputError
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_what_if import (
    table, what_if)

# Three alike hosts and X = 1: HA VMs may use two thirds of the cluster, 16 of 1 vCPU
# and 1024 MB; a 17th breaks the failure of any host. Two are there already.
HOSTS = {f"hv{i}": {"yasco_capacity": {"vcpus": 8, "memory_mb": 8192}} for i in (1, 2, 3)}
SETTINGS = {"yasco_vms": {f"vm{i}": {"vcpus": 1, "memory_mb": 1024, "ha": True}
                          for i in range(2)}}


def test_each_scenario_says_how_many_more_ha_vms_fit_up_to_the_bound():
    probe, outcomes = what_if(HOSTS, SETTINGS, "add-host:8:8192, remove-host:hv3, "
                              "add-vms:4:1:1024:ha, add-vms:20:1:1024", time_limit=10)
    assert probe == {"vcpus": 1, "memory_mb": 1024}  # the inventory's usual HA VM
    found = {o.scenario: (o.hosts, o.vms, o.answer, o.fits, o.at_least) for o in outcomes}
    assert found == {
        "as is": (3, 2, "plan", 14, False),
        "add-host:8:8192": (4, 2, "plan", 22, False),    # three quarters of four hosts
        "remove-host:hv3": (2, 2, "plan", 6, False),     # half of two hosts
        "add-vms:4:1:1024:ha": (3, 6, "plan", 10, False),
        "add-vms:20:1:1024": (3, 22, "infeasible", 0, False),
    }
    lines = table(probe, outcomes)
    assert lines[0].split() == ["scenario", "hosts", "VMs", "answer", "more", "HA", "VMs",
                                "of", "1", "vCPUs,", "1024", "MB", "that", "fit"]
    assert lines[3].split() == ["add-host:8:8192", "4", "2", "plan", "22"]
    assert lines[6].split() == ["add-vms:20:1:1024", "3", "22", "infeasible", "-"]


def test_the_probe_flavour_can_be_chosen():
    probe, outcomes = what_if(HOSTS, SETTINGS, "remove-host:hv1", "2:4096", time_limit=10)
    assert probe == {"vcpus": 2, "memory_mb": 4096}
    # 14336 MB of HA room left on three hosts, 6144 MB on two.
    assert [(o.scenario, o.fits) for o in outcomes] == [("as is", 3), ("remove-host:hv1", 1)]


@pytest.mark.parametrize("spec, problem", [
    ("add-host:64", "yasco_what_if: 'add-host:64' is not a scenario; write add-host:"),
    ("add-vms:ten:1:1024", "yasco_what_if: 'add-vms:ten:1:1024': COUNT must be a whole "
                           "number above 0, got 'ten'"),
    ("add-vms:1:1:1024:gold", "yasco_what_if: 'add-vms:1:1:1024:gold': the kind must be "
                              "one of ha, plain, preemptible, got 'gold'"),
    ("remove-host:hv9", "yasco_what_if: 'remove-host:hv9': hv9 is not in "
                        "yasco_hypervisors (hv1, hv2, hv3)"),
    (" , ", "yasco_what_if: no scenario given; write add-host:VCPUS:MEMORY_MB"),
])
def test_a_scenario_that_cannot_be_read_is_named_with_what_to_write(spec, problem):
    with pytest.raises(VdmInputError) as err:
        what_if(HOSTS, SETTINGS, spec)
    assert err.value.problems[0].startswith(problem), err.value.problems
