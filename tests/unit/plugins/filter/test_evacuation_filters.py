"""The hypervisors' Ceph addresses as the inventory declares them (yasco_ceph_addrs),
checked before the evacuation, the recovery or the return home changes anything: the
only addresses a fence of a host blocklists."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.filter.evacuation import hypervisor_ceph_addrs


def hostvars(name: str, **given) -> dict:
    return {"inventory_hostname": name, **given}


def test_each_host_has_its_declared_addresses_or_by_default_its_ansible_host():
    declared = hypervisor_ceph_addrs([
        hostvars("hv1", ansible_host="10.0.0.11"),
        hostvars("hv2", ansible_host="10.0.0.12", yasco_ceph_addrs=["10.1.0.12", "fd00::12"]),
        # What the agent role configures, when the inventory sets it.
        hostvars("hv3", ansible_host="10.0.0.13", agent_ceph_addrs=["10.1.0.13"]),
        hostvars("hv4", ansible_host="10.0.0.14", yasco_ceph_addrs=["10.1.0.14"],
                 agent_ceph_addrs=["10.2.0.14"])])
    assert declared == {"hv1": ["10.0.0.11"], "hv2": ["10.1.0.12", "fd00::12"],
                        "hv3": ["10.1.0.13"], "hv4": ["10.1.0.14"]}


def test_a_host_without_an_ip_address_to_default_to_has_none_declared():
    """Its evacuation is refused, saying so (evacuation.refusals)."""
    assert hypervisor_ceph_addrs([hostvars("hv1"), hostvars("hv2", ansible_host="hv2.lan")]) == {
        "hv1": [], "hv2": []}


@pytest.mark.parametrize("given, says", [
    ("10.1.0.1", "host hv1: yasco_ceph_addrs: must be a list of IP addresses, got '10.1.0.1'"),
    ({"ip": "10.1.0.1"}, "host hv1: yasco_ceph_addrs: must be a list of IP addresses"),
    ([], "host hv1: yasco_ceph_addrs: is empty; list the IP addresses"),
    (["10.1.0.300"], "host hv1: yasco_ceph_addrs[0]: '10.1.0.300' is not an IP address"),
    (["10.1.0.1", "10.1.0.0/24"],
     "host hv1: yasco_ceph_addrs[1]: '10.1.0.0/24' is not a plain IP address: list the "
     "host's own addresses one by one, never a range"),
    (["10.1.0.1:0/1234"], "host hv1: yasco_ceph_addrs[0]: '10.1.0.1:0/1234' is not a plain IP"),
    ([None], "host hv1: yasco_ceph_addrs[0]: None is not an IP address"),
])
def test_a_declaration_that_is_not_a_list_of_ip_addresses_fails_naming_host_and_field(given, says):
    with pytest.raises(AnsibleFilterError, match="^invalid yasco_ceph_addrs: ") as err:
        hypervisor_ceph_addrs([hostvars("hv1", ansible_host="10.0.0.11", yasco_ceph_addrs=given),
                               hostvars("hv2", ansible_host="10.0.0.12")])
    assert says in str(err.value)


def test_every_bad_declaration_is_named_at_once_the_defaults_too():
    with pytest.raises(AnsibleFilterError) as err:
        hypervisor_ceph_addrs([hostvars("hv1", yasco_ceph_addrs="10.1.0.1"),
                               hostvars("hv2", agent_ceph_addrs=["storage.hv2"])])
    assert str(err.value).startswith("invalid yasco_ceph_addrs, 2 problems:")
    assert ("host hv2: agent_ceph_addrs (yasco_ceph_addrs' default)[0]: 'storage.hv2' is "
            "not an IP address") in str(err.value)
