"""The planner's quorum check: which failure sets would take etcd's members below
quorum, with members found on hypervisors by name or address."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_quorum import (
    members_by_hypervisor, quorum_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import load_problem

ADDRESSES = {f"hv{i}": {f"hv{i}", f"10.0.0.1{i}"} for i in range(1, 6)}


def failure_sets(x: int, domains: dict[str, str] | None = None):
    hosts = {h: {"yasco_capacity": {"vcpus": 8, "memory_mb": 8192},
                 **({"yasco_failure_domain": domains[h]} if domains else {})}
             for h in ADDRESSES}
    return load_problem(hosts, {"yasco_failures_to_tolerate": x,
                                "yasco_failure_domains_to_tolerate": int(bool(domains))}
                        ).failure_sets


def test_members_are_found_by_address_or_name_and_others_are_not():
    endpoints = ["https://10.0.0.11:2379", "http://hv2:2379", "https://etcd9:2379",
                 "10.0.0.13:2379"]
    assert members_by_hypervisor(endpoints, ADDRESSES) == {
        "hv1": ["https://10.0.0.11:2379"], "hv2": ["http://hv2:2379"],
        "hv3": ["10.0.0.13:2379"]}


@pytest.mark.parametrize(("members", "x", "refused"), [
    (3, 1, None),  # one of three lost: two keep quorum
    (3, 2, "hv1, hv2"),
    (5, 2, None),
    (5, 3, "hv1, hv2, hv3"),
    (1, 1, "hv1"),  # a single member on a hypervisor survives nothing
])
def test_the_failure_set_that_takes_half_the_members_is_named(members, x, refused):
    endpoints = [f"https://10.0.0.1{i}:2379" for i in range(1, members + 1)]
    problem = quorum_problem(endpoints, ADDRESSES, failure_sets(x))
    if refused is None:
        assert problem is None
    else:
        assert problem.startswith(f"etcd quorum: a failure of {refused}, "), problem
        assert f"of etcd's {members} members" in problem


def test_a_failure_domain_holding_two_of_three_members_is_refused():
    endpoints = [f"https://10.0.0.1{i}:2379" for i in (1, 2, 4)]
    racks = {"hv1": "rack-a", "hv2": "rack-a", "hv3": "rack-b", "hv4": "rack-b",
             "hv5": "rack-b"}
    problem = quorum_problem(endpoints, ADDRESSES, failure_sets(1, racks))
    assert problem is not None and "a failure of hv1, hv2, which" in problem


def test_members_off_the_hypervisors_need_no_check():
    assert quorum_problem(["https://etcd1:2379", "https://etcd2:2379"], ADDRESSES,
                          failure_sets(4)) is None
    assert quorum_problem([], ADDRESSES, failure_sets(1)) is None
