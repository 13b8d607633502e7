"""The evacuation and the HA reconciler write the same records: the reconciler may read
the cluster between any two of the evacuation's writes, and what it decides then must
still be safe once the evacuation is done. From the lab's drained-host test
(tests/lab/test_ha.py), where an HA VM left down was once sent to the slot the
evacuation was about to claim for another, and both ran on a host with room for one."""

from __future__ import annotations

from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler import decide
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_pacing import (
    Memory, Policy)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster.reconciler_placement import (
    host_loads, take)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import ha_view
from ansible_collections.yasco.cluster.plugins.module_utils.stories import evacuation

HOSTS = ("hv1", "hv2", "hv3")
# The lab's HA test: hv1 holds three VMs, hv2 a preemptible one, hv3 has room for the
# larger HA VM only. The map plans for one failure; hv2 is drained when hv1 fails.
VDM = {
    "version": 1,
    "hosts": {"hv1": {"vcpus": 4, "memory_mb": 512}, "hv2": {"vcpus": 4, "memory_mb": 512},
              "hv3": {"vcpus": 4, "memory_mb": 256}},
    "vms": {"ha1": {"kind": "ha", "priority": 5, "vcpus": 1, "memory_mb": 256},
            "ha2": {"kind": "ha", "priority": 0, "vcpus": 1, "memory_mb": 128},
            "plain": {"kind": "plain", "priority": 0, "vcpus": 1, "memory_mb": 128},
            "batch": {"kind": "preemptible", "priority": 0, "vcpus": 1, "memory_mb": 512}},
    "home": {"ha1": "hv1", "ha2": "hv1", "plain": "hv1", "batch": "hv2"},
    "failover": {"hv1": {"ha1": "hv3", "ha2": "hv2"}, "hv2": {}, "hv3": {}},
    "preempt": {"hv1": ["batch"]},
}
URIS = {h: f"qemu+libssh://root@{h}/system" for h in HOSTS}
ITEMS = [{"name": n, "uri": URIS[h], "priority": VDM["vms"][n]["priority"],
          "domain": {"name": n, "spec": {"disks": [{"rbd": f"yasco/{n}"}]}}}
         for n, h in VDM["home"].items()]


def evacuation_writes() -> tuple[list[dict], dict[str, tuple[dict, int]]]:
    """hv1 failed while hv2 is drained (its preemptible VM stopped by the drain): the
    fence play's etcd writes, in order, and the records they start from."""
    records = {"ha1": ({"host": "hv1", "state": "running"}, 11),
               "ha2": ({"host": "hv1", "state": "running"}, 12),
               "plain": ({"host": "hv1", "state": "running"}, 13),
               "batch": ({"host": "hv2", "state": "preempted"}, 14)}
    status = {
        "hypervisors": [{"name": h, "uri": URIS[h], "alive": h != "hv1",
                         "maintenance": {"by": "drain"} if h == "hv2" else None,
                         "registered": {"ceph_addrs": [f"10.1.0.{i}"]}}
                        for i, h in enumerate(HOSTS, start=1)],
        "vms": [{"name": n, "record": record, "record_revision": revision,
                 "running_on": []} for n, (record, revision) in records.items()]}
    planned = evacuation.after_fence(evacuation.plan(status, VDM, ITEMS), {})
    assert [(s["vm"], s["to"]) for s in planned["start"]] == [("ha1", "hv3")]
    assert [d["vm"] for d in planned["down"]] == ["ha2", "plain"]
    return planned["writes"], records


def observed_after(records: dict[str, tuple[dict, int]]) -> dict:
    """What the reconciler reads: hv1 down, hv2 drained, nothing running yet."""
    return {"hosts": {"hv1": {}, "hv2": {"alive": True, "maintenance": True},
                      "hv3": {"alive": True}},
            "domains": {h: {} for h in HOSTS}, "records": dict(records), "requested": {},
            "vdm": ha_view(VDM), "disarmed": False}


def test_a_reconciler_reading_between_any_two_of_the_evacuations_writes_overfills_no_host():
    writes, records = evacuation_writes()
    revision = 100
    done = dict(records)
    decided = []
    for write in [None] + writes:
        if write is not None:
            revision += 1
            done[write["key"].rsplit("/", 1)[-1]] = (write["value"], revision)
        decided.append(decide(observed_after(done), Memory(), Policy(), 0.0)["steps"])
    # Once the evacuation is done, what each of those steps starts must fit beside it.
    final = observed_after(done)
    for steps in decided:
        free, preemptible, dummy = host_loads(final, {})
        for step in steps:
            if step["action"] in ("restart", "relocate"):
                assert take(step["vm"], step["to"], free, preemptible, final["vdm"]["vms"],
                            step["preempt"]), (step["vm"], step["to"], steps)
    # And the VM the evacuation left down is left down: no host has room for it.
    (ha2,) = [s for s in decide(final, Memory(), Policy(), 0.0)["steps"] if s["vm"] == "ha2"]
    assert ha2["action"] == "fail" and "no usable host" in ha2["reason"]


def test_the_claims_come_before_the_records_of_the_vms_left_down():
    writes, dummy = evacuation_writes()
    states = [(w["key"].rsplit("/", 1)[-1], w["value"]["state"]) for w in writes]
    assert states == [("ha1", "starting"), ("ha2", "down"), ("plain", "down")]
