"""Reading the VDM in playbooks: planned failure sets and best effort beyond them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.filter.vdm import vdm_failover, vdm_failure_key
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import (
    VdmView, build, capacity)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import load_problem
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import plan

HOSTVARS = {f"hv{i}": {"yasco_capacity": {"vcpus": 8, "memory_mb": 8192}} for i in (1, 2, 3, 4)}
VMS = {
    "db1": {"vcpus": 2, "memory_mb": 2048, "ha": True, "priority": 10, "home": "hv1"},
    "web1": {"vcpus": 2, "memory_mb": 2048, "ha": True, "home": "hv1"},
    "web2": {"vcpus": 2, "memory_mb": 2048, "ha": True, "home": "hv2"},
    "plain1": {"vcpus": 2, "memory_mb": 2048, "home": "hv2"},
    "batch1": {"vcpus": 4, "memory_mb": 4096, "preemptible": True, "home": "hv3"},
}


@pytest.fixture(name="vdm")
def fixture_vdm():
    problem = load_problem(HOSTVARS, {"yasco_vms": VMS})
    return build(problem, plan(problem), None)


def test_a_planned_failure_set_reads_the_plan(vdm):
    answer = vdm_failover(vdm, ["hv1"])
    assert answer["planned"] is True
    assert answer["targets"] == vdm["failover"]["hv1"]
    assert set(answer["targets"]) == {"db1", "web1"}
    assert answer["down"] == []


def test_beyond_the_plan_vms_go_where_there_is_room_by_priority(vdm):
    answer = vdm_failover(vdm, "hv2,hv1")
    assert answer["planned"] is False
    assert answer["failed"] == "hv1,hv2"
    assert set(answer["targets"]) == {"db1", "web1", "web2"}
    assert answer["down"] == []
    for host in ("hv3", "hv4"):
        running = [n for n, h in vdm["home"].items()
                   if h == host and n not in answer["preempt"]]
        running += [n for n, h in answer["targets"].items() if h == host]
        assert sum(VMS[n]["memory_mb"] for n in running) <= 8192


def test_vms_that_find_no_room_stay_down_lowest_priority_first(vdm):
    answer = vdm_failover(vdm, ["hv1", "hv2", "hv4"])
    # hv3 alone: 8 vCPUs, batch1 (4) stops for db1 (priority 10) then one web VM.
    assert answer["preempt"] == ["batch1"]
    assert answer["targets"]["db1"] == "hv3"
    assert len(answer["targets"]) == 3 or len(answer["down"]) >= 1
    running = 2 * len(answer["targets"])
    assert running <= 8
    assert "db1" not in answer["down"]


def test_anti_affinity_holds_beyond_the_plan():
    vms = {f"web{i}": {"vcpus": 1, "memory_mb": 512, "ha": True, "anti_affinity": ["web"],
                       "home": f"hv{i}"} for i in (1, 2, 3)}
    problem = load_problem(HOSTVARS, {"yasco_vms": vms})
    vdm = build(problem, plan(problem), None)
    answer = vdm_failover(vdm, ["hv1", "hv2"])
    assert answer["targets"] == {"web1": "hv4"}
    assert answer["down"] == ["web2"]


def test_bad_input_is_named():
    with pytest.raises(AnsibleFilterError, match="not a VDM"):
        vdm_failover({"version": 1}, ["hv1"])
    with pytest.raises(AnsibleFilterError, match="hv9 is not a hypervisor"):
        vdm_failover({"home": {"a": "hv1"}, "hosts": {"hv1": {}}}, ["hv9"])
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        vdm_failure_key([1, 2])


def test_failure_keys_are_sorted_and_joined():
    assert vdm_failure_key(["hv2", "hv1"]) == "hv1,hv2"
    assert vdm_failure_key("hv3") == "hv3"


def test_the_vdm_view_reads_what_the_map_says_and_nothing_where_there_is_no_map(vdm):
    view = VdmView(vdm)
    assert view.planned and view.version == vdm["version"]
    assert view.home("db1") == "hv1" and view.homed_on("hv1") == {"db1", "web1"}
    assert view.kinds() == {"db1": "ha", "web1": "ha", "web2": "ha", "plain1": "plain",
                            "batch1": "preemptible"}
    assert view.size("batch1") == {"vcpus": 4.0, "memory_mb": 4096.0, "net_mbps": 0.0}
    assert capacity(view.hosts["hv1"])["memory_mb"] == vdm["hosts"]["hv1"]["memory_mb"]
    assert capacity({})["vcpus"] == float("inf")
    assert view.failover_for(["hv1"]) == vdm_failover(vdm, ["hv1"])
    for nothing in (None, "not a map", {"hosts": {"hv1": {}}}):
        empty = VdmView(nothing)
        assert not empty.planned
        assert (empty.homes, empty.kinds(), empty.home("db1"), empty.sizes()) == (
            {}, {}, None, {})
