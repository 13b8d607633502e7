"""What draining a hypervisor does (module_utils/stories/drain.py), from a cluster status and a
VDM written out by hand. Carried out on the lab by tests/lab/test_ha.py."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.stories.drain import DrainError, plan

HOSTS = ("hv1", "hv2", "hv3")
VDM = {
    "version": 1,
    "hosts": {h: {"vcpus": 4, "memory_mb": 2048} for h in HOSTS},
    "vms": {"web": {"kind": "ha", "vcpus": 1, "memory_mb": 512},
            "plain": {"kind": "plain", "vcpus": 1, "memory_mb": 512},
            "spot": {"kind": "preemptible", "vcpus": 1, "memory_mb": 512},
            "batch": {"kind": "preemptible", "vcpus": 2, "memory_mb": 1536},
            "other": {"kind": "plain", "vcpus": 1, "memory_mb": 512}},
    "home": {"web": "hv1", "plain": "hv1", "spot": "hv1", "batch": "hv2", "other": "hv3"},
    "failover": {"hv1": {"web": "hv2"}, "hv2": {}, "hv3": {}},
    "preempt": {"hv1": ["batch"]},
}
URIS = {h: f"qemu+libssh://root@{h}/system" for h in HOSTS}


def status(alive=HOSTS, home=None, records=None) -> dict:
    home = home or VDM["home"]
    records = records or {n: {"host": h, "state": "running"} for n, h in home.items()}
    return {"hypervisors": [{"name": h, "uri": URIS[h], "alive": h in alive,
                             "maintenance": False, "libvirt": "reachable"} for h in HOSTS],
            "vms": [{"name": n, "record": records[n], "running_on": [h],
                     "record_revision": 9}
                    for n, h in home.items()]}


def test_every_vm_leaves_the_ha_ones_for_their_planned_slot_after_the_preemptions():
    done = plan(status(), VDM, "hv1", "c1")
    assert done["marker"] == {"key": "/yasco/c1/hosts/hv1/maintenance"}
    # The VDM stops batch on hv2 to make room for web's spare slot.
    assert [(p["vm"], p["host"]) for p in done["preempt"]] == [("batch", "hv2")]
    assert done["preempt"][0]["record"]["value"] == {"host": "hv2", "state": "preempted"}
    moves = {m["vm"]: (m["from"], m["to"]) for wave in done["waves"] for m in wave}
    assert moves["web"] == ("hv1", "hv2")
    assert set(moves) == {"web", "plain", "spot"} and all(f == "hv1" for f, t in moves.values())
    assert all(len(wave) <= 2 for wave in done["waves"])
    web = next(m for wave in done["waves"] for m in wave if m["vm"] == "web")
    assert web["claim"]["value"] == {"host": "hv1", "state": "migrating", "to": "hv2",
                                     "claimed_at": 9}
    # Only if its record is still the one read, and says it runs where it leaves.
    assert web["claim"]["if_revision"] == 9
    assert web["claim"]["if_value"] == {"host": "hv1", "state": "running"}


def test_a_preemptible_vm_without_room_stops_and_a_plain_one_refuses_the_drain():
    small = {**VDM, "hosts": {"hv1": {"vcpus": 4, "memory_mb": 2048},
                              "hv2": {"vcpus": 2, "memory_mb": 2048},
                              "hv3": {"vcpus": 1, "memory_mb": 512}}}
    done = plan(status(), small, "hv1")
    assert {p["vm"] for p in done["preempt"]} == {"batch", "spot"}
    smaller = {**small, "hosts": {**small["hosts"], "hv2": {"vcpus": 1, "memory_mb": 1024}}}
    with pytest.raises(DrainError, match="no room on hv2, hv3 for plain"):
        plan(status(), smaller, "hv1")


@pytest.mark.parametrize("change, words", [
    ({"alive": ("hv1",)}, "no other hypervisor is up"),
    ({"records": {**{n: {"host": h, "state": "running"} for n, h in VDM["home"].items()},
                  "web": {"host": "hv1", "state": "migrating", "to": "hv2"}}},
     "being moved or started"),
])
def test_a_drain_that_cannot_be_done_is_refused_before_anything_changes(change, words):
    with pytest.raises(DrainError, match=words):
        plan(status(**change), VDM, "hv1")
    with pytest.raises(DrainError, match="hv9: not a hypervisor"):
        plan(status(), VDM, "hv9")


def test_the_fallback_placement_keeps_allowed_hosts_and_anti_affinity_and_avoids_fences():
    # plain may go to hv2 only by its rules, other keeps it off hv3 by a label; hv2
    # has room for both once batch is preempted.
    vdm = {**VDM, "vms": {**VDM["vms"],
                          "plain": {**VDM["vms"]["plain"], "allowed": ["hv1", "hv2"]},
                          "spot": {**VDM["vms"]["spot"], "anti_affinity": ["db"]},
                          "other": {**VDM["vms"]["other"], "anti_affinity": ["db"]}}}
    moves = {m["vm"]: m["to"] for wave in plan(status(), vdm, "hv1")["waves"] for m in wave}
    assert moves["plain"] == "hv2" and moves["spot"] == "hv2"
    fenced = status()
    fenced["hypervisors"][1]["fenced"] = True  # hv2, still fenced from a failure
    with pytest.raises(DrainError, match="no room on hv3 for plain"):
        plan(fenced, vdm, "hv1")


def test_the_reason_is_the_markers_and_text_that_no_template_engine_renders():
    marked = status()
    marked["hypervisors"][0]["maintenance_marker"] = {
        "by": "hv1-root", "reason": "{{ lookup('pipe', 'id') }}\nforged"}
    assert plan(marked, VDM, "hv1", "c1")["reason"] == "{ { lookup('pipe', 'id') }}\\nforged"
    assert plan(status(), VDM, "hv1", "c1")["reason"] is None
