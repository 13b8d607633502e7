"""What a return home does (module_utils/stories/return_home.py), from a cluster status, a VDM
and provisioning items written out by hand. Carried out on the lab by
tests/lab/test_ha.py."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.stories.rebalance import settled_records
from ansible_collections.yasco.cluster.plugins.module_utils.stories.return_home import (
    ReturnHomeError, plan)

HOSTS = ("hv1", "hv2", "hv3")
VDM = {
    "version": 3,
    "hosts": {h: {"vcpus": 4, "memory_mb": 2048} for h in HOSTS},
    "vms": {"web": {"kind": "ha", "priority": 1, "vcpus": 1, "memory_mb": 512},
            "db": {"kind": "ha", "priority": 5, "vcpus": 1, "memory_mb": 512},
            "plain": {"kind": "plain", "vcpus": 1, "memory_mb": 512},
            "batch": {"kind": "preemptible", "vcpus": 2, "memory_mb": 1024},
            "filler": {"kind": "plain", "vcpus": 1, "memory_mb": 1024}},
    "home": {"web": "hv1", "db": "hv1", "plain": "hv1", "batch": "hv2", "filler": "hv2"},
    "failover": {"hv1": {"web": "hv2", "db": "hv3"}, "hv2": {}, "hv3": {}},
    "preempt": {"hv1": ["batch"]},
}
URIS = {h: f"qemu+libssh://root@{h}/system" for h in HOSTS}
FENCE = {"by": "evacuate", "method": "ceph-blocklist", "ceph_addrs": ["10.1.0.1"],
         "boot_id": "b1"}


def item(name: str) -> dict:
    return {"name": name, "uri": URIS[VDM["home"][name]], "home": VDM["home"][name],
            "priority": VDM["vms"][name].get("priority", 0),
            "autostart_on_home": name == "plain",
            "domain": {"name": name, "spec": {"kind": VDM["vms"][name]["kind"],
                                              "disks": [{"rbd": f"vms/{name}"}]}}}


ITEMS = [item(n) for n in VDM["home"]]

# hv1 came back after an evacuation: web and db run on their refuges, plain is down,
# batch was preempted on hv2.
AFTER_EVACUATION = {
    "web": ({"host": "hv2", "state": "running"}, ["hv2"]),
    "db": ({"host": "hv3", "state": "running"}, ["hv3"]),
    "plain": ({"host": "hv1", "state": "down"}, []),
    "batch": ({"host": "hv2", "state": "preempted"}, []),
    "filler": ({"host": "hv2", "state": "running"}, ["hv2"]),
}


def status(vms=None, fence="fenced", alive=HOSTS, maintenance=(), libvirt="reachable",
           boot="b2"):
    vms = AFTER_EVACUATION if vms is None else vms
    fence = FENCE if fence == "fenced" else fence
    return {
        "hypervisors": [{"name": h, "uri": URIS[h], "alive": h in alive,
                         "maintenance": h in maintenance,
                         "libvirt": libvirt if h == "hv1" else "reachable",
                         "fence": fence if h == "hv1" else None,
                         # Declared in the inventory (yasco_ceph_addrs).
                         "ceph_addrs": [f"10.1.0.{h[-1]}"],
                         "registered": {"boot_id": boot}, "boot_id": boot} for h in HOSTS],
        "vms": [{"name": n, "record": r, "running_on": on,
                 "record_revision": revision(n) if r else 0} for n, (r, on) in vms.items()],
    }


def revision(name: str) -> int:
    """The mod_revision status() gives VM `name`'s record: one of its own."""
    return 50 + len(name)


def test_a_returning_host_is_unfenced_gets_its_vms_back_and_the_preempted_restart():
    done = plan(status(), VDM, ITEMS, "hv1", "c1")
    assert done["stale"] == []
    assert done["unfence"] == {
        "addresses": ["10.1.0.1"],
        # Locks its fenced clients may still hold: the disks of the VMs it is home to.
        "images": ["vms/db", "vms/plain", "vms/web"],
        "record": {"key": "/yasco/c1/fences/hv1", "value": FENCE,
                   "alive": "/yasco/c1/hosts/hv1/alive"},
        "event": {"kind": "unfenced", "host": "hv1", "details": {"ceph_addrs": ["10.1.0.1"]}}}
    assert [(s["vm"], s["host"]) for s in done["autostart"]] == [("plain", "hv1")]
    assert done["autostart"][0]["record"] == {
        "key": "/yasco/c1/vms/plain", "value": {"host": "hv1", "state": "running"},
        "if_revision": revision("plain")}
    assert done["autostart"][0]["domain"]["uri"] == URIS["hv1"]
    moves = sorted((m["vm"], m["from"], m["to"]) for wave in done["waves"] for m in wave)
    assert moves == [("db", "hv3", "hv1"), ("web", "hv2", "hv1")]
    web = next(m for wave in done["waves"] for m in wave if m["vm"] == "web")
    assert web["claim"]["if_value"] == {"host": "hv2", "state": "running"}
    assert web["claim"]["if_revision"] == revision("web")
    assert web["record"] == {"key": "/yasco/c1/vms/web", "if_value": web["claim"]["value"],
                             "value": {"host": "hv1", "state": "running"}}
    assert web["stayed"]["value"] == {"host": "hv2", "state": "running"}
    # batch (2 vCPUs, 1 GiB) fits hv2 once web has left it.
    assert [(r["vm"], r["host"]) for r in done["restart"]] == [("batch", "hv2")]
    assert done["waiting"] == [] and done["away"] == []


def test_the_report_tells_a_reboot_from_a_host_that_was_only_cut_off():
    assert plan(status(), VDM, ITEMS, "hv1")["came_back"].startswith("rebooted")
    # Its boot as when it was fenced: a partition healed, nothing restarted.
    assert plan(status(boot="b1"), VDM, ITEMS, "hv1")["came_back"].startswith(
        "reconnected without a reboot")
    assert plan(status(fence=None), VDM, ITEMS, "hv1")["came_back"] == "was not fenced"


def test_a_preempted_vm_waits_while_its_home_has_no_room():
    vms = {**AFTER_EVACUATION, "filler2": ({"host": "hv2", "state": "running"}, ["hv2"])}
    filler2 = {"kind": "plain", "vcpus": 1, "memory_mb": 1024}
    vdm = {**VDM, "vms": {**VDM["vms"], "filler2": filler2},
           "home": {**VDM["home"], "filler2": "hv2"}}
    done = plan(status(vms), vdm, ITEMS, "hv1")
    assert done["restart"] == []
    assert done["waiting"] == [{"vm": "batch", "why": "no room on hv2 yet"}]


def test_stale_copies_on_a_fenced_host_are_destroyed_first():
    vms = {**AFTER_EVACUATION,
           "web": ({"host": "hv2", "state": "running"}, ["hv1", "hv2"]),
           "plain": ({"host": "hv1", "state": "down"}, ["hv1"])}
    done = plan(status(vms), VDM, ITEMS, "hv1")
    assert [(s["vm"], s["domain"]["state"]) for s in done["stale"]] == [
        ("plain", "destroyed"), ("web", "destroyed")]
    assert all(s["domain"]["uri"] == URIS["hv1"] for s in done["stale"])
    # Then started afresh, and moved back, as if the stale copies were not there.
    assert [s["vm"] for s in done["autostart"]] == ["plain"]
    assert "web" in {m["vm"] for wave in done["waves"] for m in wave}
    # The killed copies held their disks' locks while fenced: broken before the unfence.
    assert {"vms/plain", "vms/web"} <= set(done["unfence"]["images"])


def test_the_locks_of_a_stale_copy_homed_elsewhere_are_broken_too():
    vms = {**AFTER_EVACUATION, "batch": ({"host": "hv2", "state": "running"}, ["hv1", "hv2"])}
    done = plan(status(vms), VDM, ITEMS, "hv1")
    assert [s["vm"] for s in done["stale"]] == ["batch"]
    assert "vms/batch" in done["unfence"]["images"]
    assert "vms/filler" not in done["unfence"]["images"]


@pytest.mark.parametrize("change, words", [
    ({"alive": ("hv2", "hv3")}, "hv1: not alive"),
    ({"maintenance": ("hv1",)}, "undrain"),
    ({"libvirt": "unreachable"}, "libvirt cannot be reached"),
    ({"fence": None, "vms": {**AFTER_EVACUATION,
                             "web": ({"host": "hv2", "state": "running"}, ["hv1", "hv2"])}},
     "was never fenced"),
    ({"fence": {**FENCE, "ceph_addrs": []}}, "names no address"),
])
def test_a_host_not_ready_is_refused_before_anything_changes(change, words):
    with pytest.raises(ReturnHomeError, match=words):
        plan(status(**change), VDM, ITEMS, "hv1")


def test_an_unknown_host_and_a_missing_vdm_are_refused():
    with pytest.raises(ReturnHomeError, match="hv9: not a hypervisor"):
        plan(status(), VDM, ITEMS, "hv9")
    with pytest.raises(ReturnHomeError, match="no VDM"):
        plan(status(), {}, ITEMS, "hv1")


def test_a_host_that_never_failed_has_nothing_to_do():
    at_home = {n: ({"host": h, "state": "running"}, [h]) for n, h in VDM["home"].items()}
    done = plan(status(at_home, fence=None), VDM, ITEMS, "hv1")
    assert (done["stale"], done["unfence"], done["autostart"], done["waves"],
            done["restart"]) == ([], None, [], [], [])


def test_a_plain_vm_still_recorded_running_but_running_nowhere_starts_at_home():
    """Shut down with its host by a clean stop, or the host was back before its
    failure was acted on: nothing recorded it down. Not one requested stopped."""
    at_home = {n: ({"host": h, "state": "running"}, [h]) for n, h in VDM["home"].items()}
    gone = {**at_home, "plain": ({"host": "hv1", "state": "running"}, [])}
    done = plan(status(gone, fence=None), VDM, ITEMS, "hv1", "c1")
    assert [(s["vm"], s["record"]["if_revision"]) for s in done["autostart"]] == [
        ("plain", revision("plain"))]
    asked_off = status(gone, fence=None)
    next(v for v in asked_off["vms"] if v["name"] == "plain")["requested"] = "stopped"
    assert plan(asked_off, VDM, ITEMS, "hv1")["autostart"] == []


def test_a_failed_move_is_recorded_where_libvirt_runs_the_vm():
    done = plan(status(), VDM, ITEMS, "hv1")
    moves = {m["vm"]: m for wave in done["waves"] for m in wave}
    where = [{"name": "web", "running_on": ["hv2"]}, {"name": "db", "running_on": ["hv1"]}]
    assert settled_records([moves["web"], moves["db"]], where) == [
        moves["web"]["stayed"], moves["db"]["record"]]
    assert settled_records([moves["web"]], [{"name": "web", "running_on": []}]) == []


def test_every_vm_a_drain_moved_away_comes_back():
    drained = {**AFTER_EVACUATION, "plain": ({"host": "hv3", "state": "running"}, ["hv3"])}
    done = plan(status(drained, fence=None), VDM, ITEMS, "hv1")
    assert done["autostart"] == []
    moves = {(m["vm"], m["from"], m["to"]) for wave in done["waves"] for m in wave}
    assert ("plain", "hv3", "hv1") in moves


def test_a_preemptible_vm_that_went_down_with_its_home_restarts_there_once_there_is_room():
    vdm = {**VDM, "vms": {**VDM["vms"],
                          "scratch": {"kind": "preemptible", "vcpus": 1, "memory_mb": 512}},
           "home": {**VDM["home"], "scratch": "hv1"}}
    items = ITEMS + [{**item("plain"), "name": "scratch", "autostart_on_home": False,
                      "domain": {"name": "scratch", "spec": {"kind": "preemptible"}}}]
    down = {"host": "hv1", "state": "down"}
    done = plan(status({**AFTER_EVACUATION, "scratch": (down, [])}), vdm, items, "hv1", "c1")
    # Not with the plain VMs that start at once: after the HA VMs are home, with room.
    assert "scratch" not in [s["vm"] for s in done["autostart"]]
    assert [(r["vm"], r["host"], r["record"]["if_revision"]) for r in done["restart"]] == [
        ("batch", "hv2", revision("batch")), ("scratch", "hv1", revision("scratch"))]
    # One that went down with another host starts there once that host is up and
    # unfenced, whichever host's return comes first; not while its home is fenced.
    elsewhere = {**vdm, "home": {**vdm["home"], "scratch": "hv3"}}
    down3 = {"host": "hv3", "state": "down"}
    cluster = status({**AFTER_EVACUATION, "scratch": (down3, [])})
    done = plan(cluster, elsewhere, items, "hv1", "c1")
    assert [(r["vm"], r["host"]) for r in done["restart"]] == [("batch", "hv2"),
                                                               ("scratch", "hv3")]
    next(h for h in cluster["hypervisors"] if h["name"] == "hv3")["fence"] = FENCE
    done = plan(cluster, elsewhere, items, "hv1", "c1")
    assert [r["vm"] for r in done["restart"]] == ["batch"]


def test_a_preemptible_vm_its_cut_off_home_kept_running_is_destroyed_then_restarted():
    """Found by the nemesis (seed 1, episode 2): hv2 was partitioned, evacuated and
    fenced, its preemptible VM recorded down while its copy ran on there, unable to
    write. The return home destroyed that stale copy, and started the plain VM in
    the same case afresh, but left the preemptible one down for good."""
    cut_off = {"host": "hv2", "state": "down"}
    gone = {**AFTER_EVACUATION, "batch": (cut_off, ["hv2"]),
            "filler": ({"host": "hv2", "state": "down"}, ["hv2"])}
    cluster = status(gone, fence=None)
    for host in cluster["hypervisors"]:
        host["fence"] = FENCE if host["name"] == "hv2" else None
    done = plan(cluster, VDM, ITEMS, "hv2", "c1")
    assert [s["vm"] for s in done["stale"]] == ["batch", "filler"]
    assert [(r["vm"], r["host"], r["record"]["if_revision"]) for r in done["restart"]] == [
        ("batch", "hv2", revision("batch"))]


def test_the_disks_of_the_vms_a_return_starts_are_named_with_the_hosts_addresses():
    """Found by the nemesis (seed 1, episode 4): hv2 crashed and booted again within its
    lease, so nothing fenced it, and the QEMUs that died with it still held their
    disks' locks; the return home started its plain and preemptible VMs again, and
    they hung on their disks. The playbook breaks the locks of those dead clients
    (power.stale_locks with these addresses) before it starts them."""
    at_home = {n: ({"host": h, "state": "running"}, [h]) for n, h in VDM["home"].items()}
    crashed = {**at_home, "batch": ({"host": "hv2", "state": "running"}, []),
               "filler": ({"host": "hv2", "state": "running"}, [])}
    cluster = status(crashed, fence=None)
    for host in cluster["hypervisors"]:
        host["registered"] = {"boot_id": "b2", "ceph_addrs": [f"10.1.0.{host['name'][-1]}"]}
    items = [{**i, "autostart_on_home": i["name"] in ("plain", "filler")} for i in ITEMS]
    done = plan(cluster, VDM, items, "hv2", "c1")
    assert [a["vm"] for a in done["autostart"]] == ["filler"]
    assert [r["vm"] for r in done["restart"]] == ["batch"]
    assert done["start_images"] == ["vms/batch", "vms/filler"]
    assert done["addresses"] == ["10.1.0.2"]


def test_the_locks_a_return_breaks_are_of_the_hosts_declared_addresses_only():
    """Root on hv2 names hv3's address in hv2's registration: the locks held from hv3
    are not taken for hv2's dead QEMUs' (power.stale_locks with these addresses)."""
    at_home = {n: ({"host": h, "state": "running"}, [h]) for n, h in VDM["home"].items()}
    crashed = {**at_home, "batch": ({"host": "hv2", "state": "running"}, [])}
    cluster = status(crashed, fence=None)
    for host in cluster["hypervisors"]:
        host["registered"] = {"boot_id": "b2",
                              "ceph_addrs": ["10.1.0.2", "10.1.0.3", "10.1.0.0/24"]}
    assert plan(cluster, VDM, ITEMS, "hv2", "c1")["addresses"] == ["10.1.0.2"]


def test_a_preemptible_vm_still_recorded_running_at_home_but_running_nowhere_restarts():
    """Its host crashed and came back before anything recorded it down, as when etcd
    lost its quorum meanwhile: it restarts at home once there is room, as one that
    went down with its host does; not one requested stopped."""
    at_home = {n: ({"host": h, "state": "running"}, [h]) for n, h in VDM["home"].items()}
    gone = {**at_home, "batch": ({"host": "hv2", "state": "running"}, [])}
    done = plan(status(gone, fence=None), VDM, ITEMS, "hv2", "c1")
    assert [(r["vm"], r["host"], r["record"]["if_revision"]) for r in done["restart"]] == [
        ("batch", "hv2", revision("batch"))]
    asked_off = status(gone, fence=None)
    next(v for v in asked_off["vms"] if v["name"] == "batch")["requested"] = "stopped"
    assert plan(asked_off, VDM, ITEMS, "hv2")["restart"] == []
    # Left waiting by hv2's own return while the HA VMs fill its spare room; hv1's
    # return, which moves them home, starts it.
    refuge = {**at_home, "web": ({"host": "hv2", "state": "running"}, ["hv2"]),
              "db": ({"host": "hv2", "state": "running"}, ["hv2"]),
              "batch": ({"host": "hv2", "state": "running"}, [])}
    waited = plan(status(refuge, fence=None), VDM, ITEMS, "hv2")
    assert (waited["restart"], [w["vm"] for w in waited["waiting"]]) == ([], ["batch"])
    assert [r["vm"] for r in plan(status(refuge), VDM, ITEMS, "hv1", "c1")["restart"]] == [
        "batch"]
