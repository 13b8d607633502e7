"""The host agent's restart in place (agent_restart.py): when it may restart a VM,
its budget, the disks it frees and whose locks, and the cephx caps that let a host
blocklist its own dead clients and nothing else. The restarts themselves run against
real etcd and libvirt's test driver (tests/etcd/test_agent_restart.py) and on the
lab (tests/lab/test_ha.py)."""

from __future__ import annotations

import re

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_restart import (
    Budget, ceph_caps, holders_split, rbd_disks, refusal)

RUNNING_HERE = {"host": "hv1", "state": "running"}


@pytest.mark.parametrize("record,requested,maintenance,disarmed,why", [
    (RUNNING_HERE, None, False, False, None),
    (RUNNING_HERE, {"state": "started"}, False, False, None),
    (RUNNING_HERE, {"state": "stopped"}, False, False, "it is requested stopped"),
    (RUNNING_HERE, {"state": "ignored"}, False, False, "it is requested ignored"),
    (RUNNING_HERE, {"state": "disabled"}, False, False, "it is requested disabled"),
    (RUNNING_HERE, None, True, False, "hv1 is in maintenance"),
    (RUNNING_HERE, None, False, True, "HA is disarmed"),
    (None, None, False, False, "it has no record"),
    ({"host": "hv2", "state": "running"}, None, False, False,
     "its record says running on hv2"),
    ({"host": "hv1", "state": "migrating", "to": "hv2"}, None, False, False,
     "its record says migrating on hv1"),
    ({"host": "hv1", "state": "starting"}, None, False, False,
     "its record says starting on hv1"),
    ({"host": "hv1", "state": "stopped"}, None, False, False,
     "its record says stopped on hv1"),
])
def test_the_agent_restarts_only_a_vm_meant_to_run_on_its_host(
        record, requested, maintenance, disarmed, why):
    assert refusal("hv1", record, requested, maintenance, disarmed) == why


def test_the_agent_of_a_fenced_host_restarts_nothing():
    """Its clients are blocklisted until its return lifts the fence: a copy started
    now could never write to its disk."""
    assert refusal("hv1", RUNNING_HERE, None, False, False, fenced=True) == (
        "hv1 is fenced: its Ceph clients are blocklisted until its return lifts the fence")


def test_the_budget_allows_so_many_restarts_per_window_and_then_forgets_them():
    budget = Budget(2, 600)
    assert budget.left("web", 0.0)
    assert budget.spend("web", 0.0) == 1
    assert budget.spend("web", 100.0) == 2
    assert not budget.left("web", 500.0)
    assert budget.left("web", 600.5)  # the first is out of the window
    assert budget.count("web", 600.5) == 1
    assert budget.expired(650.0) == [] and budget.expired(701.0) == ["web"]
    assert budget.done == {}
    assert not Budget(0, 600).left("web", 0.0)


def test_the_disks_are_the_domains_rbd_sources():
    xml = """<domain><devices>
      <disk type='network'><source protocol='rbd' name='yasco/web'><host name='m'/></source></disk>
      <disk type='network'><source protocol='rbd' name='yasco/web-cidata@base'/></disk>
      <disk type='file'><source file='/var/lib/x.img'/></disk>
      <disk type='network'><source protocol='nbd' name='other'/></disk>
    </devices></domain>"""
    assert rbd_disks(xml) == [("yasco", "web"), ("yasco", "web-cidata")]


def test_a_holder_on_this_host_is_dead_and_one_elsewhere_is_a_live_copy():
    holders = {"yasco/web": "10.0.0.11:0/1234", "yasco/web-cidata": "10.0.0.11:0/1234",
               "yasco/data": "10.0.0.12:0/99"}
    assert holders_split(holders, ["10.0.0.11"]) == (
        ["10.0.0.11:0/1234"], {"yasco/data": "10.0.0.12:0/99"})
    assert holders_split({"yasco/web": "[fd00::11]:0/7"}, ["fd00::11"]) == (
        ["[fd00::11]:0/7"], {})
    assert holders_split({}, ["10.0.0.11"]) == ([], {})


def test_an_agents_cephx_user_may_blocklist_its_own_hosts_client_instances_alone():
    mon, mon_caps, osd, osd_caps = ceph_caps(["10.0.0.11"], "yasco")
    assert (mon, osd, osd_caps) == ("mon", "osd", "profile rbd pool=yasco")
    assert mon_caps.startswith('allow r, allow command "osd blocklist" with blocklistop=add ')
    regex = re.search(r'addr regex "(.*)"$', mon_caps).group(1)
    allowed = re.compile(regex)
    assert allowed.fullmatch("10.0.0.11:0/3421")
    for other in ("10.0.0.12:0/3421", "10.0.0.110:0/3421", "10.0.0.1:0/3421",
                  "10.0.0.11:0/0",  # nonce 0: every client of the host's IP
                  "10.0.0.11", "10.0.0.11:0/1 ", "x10.0.0.11:0/3"):
        assert not allowed.fullmatch(other), other
    both = ceph_caps(["10.0.0.11", "10.1.0.11"], "yasco")[1]
    two = re.compile(re.search(r'regex "(.*)"$', both).group(1))
    assert two.fullmatch("10.1.0.11:6800/42") and not two.fullmatch("10.2.0.11:0/42")
    with pytest.raises(ValueError):
        ceph_caps([], "yasco")
