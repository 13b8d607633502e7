"""What an evacuation does (module_utils/stories/evacuation.py), from a cluster status, a VDM
and provisioning items written out by hand. Carried out on the lab by
tests/lab/test_ha.py."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import (
    EvacuationError, after_fence, outcome, plan, refusals)

VDM = {
    "version": 3,
    "hosts": {h: {"vcpus": 8, "memory_mb": 8192} for h in ("hv1", "hv2", "hv3")},
    "vms": {"web": {"kind": "ha", "priority": 1, "vcpus": 1, "memory_mb": 512},
            "db": {"kind": "ha", "priority": 5, "vcpus": 1, "memory_mb": 512},
            "plain": {"kind": "plain", "vcpus": 1, "memory_mb": 512},
            "batch": {"kind": "preemptible", "vcpus": 1, "memory_mb": 512}},
    "home": {"web": "hv1", "db": "hv1", "plain": "hv1", "batch": "hv2"},
    "failover": {"hv1": {"web": "hv2", "db": "hv3"}, "hv2": {}, "hv3": {},
                 "hv1,hv2": {"web": "hv3", "db": "hv3"}},
    "preempt": {"hv1": ["batch"]},
}
URIS = {h: f"qemu+libssh://root@{h}/system" for h in ("hv1", "hv2", "hv3")}


def item(name: str) -> dict:
    return {"name": name, "uri": URIS[VDM["home"][name]],
            "priority": VDM["vms"][name].get("priority", 0),
            "domain": {"name": name, "spec": {"vcpus": 1, "memory_mb": 512, "kind": "ha",
                                              "disks": [{"rbd": f"yasco/{name}"}]}}}


ITEMS = [item(n) for n in VDM["home"]]


def status(alive=("hv2", "hv3"), maintenance=(), records=None, running=None,
           stopped=()) -> dict:
    """`stopped`: the hosts whose agent stopped cleanly (its registration says so)."""
    records = records or {n: {"host": h, "state": "running"} for n, h in VDM["home"].items()}
    running = running if running is not None else {n: [h] for n, h in VDM["home"].items()}
    return {
        "hypervisors": [{"name": h, "uri": URIS[h], "alive": h in alive,
                         "maintenance": h in maintenance,
                         # Declared in the inventory (yasco_ceph_addrs): what a fence
                         # of the host blocklists.
                         "ceph_addrs": [f"10.1.0.{i}"],
                         "registered": {"address": f"10.0.0.{i}",
                                        "ceph_addrs": [f"10.1.0.{i}"],
                                        **({"stopped": "then"} if h in stopped else {})}}
                        for i, h in enumerate(("hv1", "hv2", "hv3"), start=1)],
        "vms": [{"name": n, "record": records.get(n), "running_on": running.get(n, []),
                 "record_revision": revision(n) if records.get(n) else 0}
                for n in VDM["home"]],
    }


def revision(name: str) -> int:
    """The mod_revision status() gives VM `name`'s record."""
    return 40 + sorted(VDM["home"]).index(name)


def test_a_failed_host_is_fenced_and_its_ha_vms_claimed_for_their_targets():
    done = plan(status(), VDM, ITEMS, "c1")
    assert done["failed"] == ["hv1"] and done["planned"]
    assert done["fence"] == [{"host": "hv1", "addresses": ["10.1.0.1"]}]
    assert done["images"] == ["yasco/db", "yasco/web"]
    # Highest priority first, each claimed only if its record is still the revision read.
    assert [(s["vm"], s["from"], s["to"], s["uri"]) for s in done["start"]] == [
        ("db", "hv1", "hv3", URIS["hv3"]), ("web", "hv1", "hv2", URIS["hv2"])]
    claim = done["start"][0]["claim"]
    assert claim == {"key": "/yasco/c1/vms/db",
                     "value": {"host": "hv3", "state": "starting", "from": "hv1",
                               "claimed_at": revision("db")},
                     "if_revision": revision("db")}
    # Its record once it runs compares the claim, which names the revision it replaced.
    assert done["start"][0]["record"] == {"key": "/yasco/c1/vms/db", "if_value": claim["value"],
                                          "value": {"host": "hv3", "state": "running"}}
    assert [(p["vm"], p["host"]) for p in done["preempt"]] == [("batch", "hv2")]
    assert [(d["vm"], d["record"]["value"]) for d in done["down"]] == [
        ("plain", {"host": "hv1", "state": "down"})]


def test_a_rerun_starts_what_an_earlier_run_claimed_and_reports_what_it_finished():
    records = {"web": {"host": "hv2", "state": "starting", "from": "hv1"},
               "db": {"host": "hv3", "state": "running"},
               "plain": {"host": "hv1", "state": "down"},
               "batch": {"host": "hv2", "state": "preempted"}}
    done = plan(status(records=records, running={"db": ["hv3"]}), VDM, ITEMS)
    assert [(s["vm"], s["to"], s["claim"]) for s in done["start"]] == [("web", "hv2", None)]
    # The earlier run's claim is ended only if it is still the revision read.
    assert done["start"][0]["record"]["if_revision"] == revision("web")
    assert done["settled"] == ["db"]
    assert done["preempt"] == [] and done["down"] == []


def test_nothing_to_do_when_no_host_failed_or_the_missing_one_stopped_in_maintenance():
    for cluster in (status(alive=("hv1", "hv2", "hv3")),
                    status(alive=("hv2", "hv3"), maintenance=("hv1",), stopped=("hv1",))):
        done = plan(cluster, VDM, ITEMS)
        assert done["failed"] == [] and done["start"] == [] and done["fence"] == []


def test_a_host_that_went_down_in_maintenance_without_a_clean_stop_is_evacuated():
    """A crash during a drain: its marker says a stop was planned, but its agent never
    said it stopped, and VMs are still recorded there. A drained host (nothing
    recorded there) that does the same is left alone."""
    done = plan(status(maintenance=("hv1",)), VDM, ITEMS)
    assert done["failed"] == ["hv1"]
    assert [(s["vm"], s["to"]) for s in done["start"]] == [("db", "hv3"), ("web", "hv2")]
    assert [d["vm"] for d in done["down"]] == ["plain"]
    # The plain VM's move landed on hv3 before hv1 crashed: it is not down.
    landed = {**{n: {"host": h, "state": "running"} for n, h in VDM["home"].items()},
              "plain": {"host": "hv1", "state": "migrating", "to": "hv3"}}
    done = plan(status(maintenance=("hv1",), records=landed, running={
        **{n: [h] for n, h in VDM["home"].items()}, "plain": ["hv3"]}), VDM, ITEMS)
    assert done["failed"] == ["hv1"] and done["down"] == []
    moved = {n: {"host": "hv2", "state": "running"}
             for n in VDM["home"]}
    done = plan(status(maintenance=("hv1",), records=moved,
                       running={n: ["hv2"] for n in VDM["home"]}), VDM, ITEMS)
    assert done["failed"] == [] and done["fence"] == []


def test_a_vm_away_from_home_goes_home_when_only_its_refuge_fails():
    records = {**{n: {"host": h, "state": "running"} for n, h in VDM["home"].items()},
               "web": {"host": "hv2", "state": "running"}}
    running = {**{n: [h] for n, h in VDM["home"].items()}, "web": ["hv2"]}
    done = plan(status(alive=("hv1", "hv3"), records=records, running=running), VDM, ITEMS)
    assert done["failed"] == ["hv2"]
    assert [(s["vm"], s["to"]) for s in done["start"]] == [("web", "hv1")]


def test_a_vm_whose_return_home_the_failure_cut_short_is_evacuated_unless_its_source_runs_it():
    """web was live-migrating home to hv1 (from its spare slot on hv2) when hv1 failed
    again: its record still says migrating. Running on hv2 it stays; running nowhere,
    hv1 had its only copy, and it starts on its target as if it had been there."""
    migrating = {"host": "hv2", "state": "migrating", "to": "hv1"}
    records = {**{n: {"host": h, "state": "running"} for n, h in VDM["home"].items()},
               "web": migrating}
    on_hv2 = {**{n: [h] for n, h in VDM["home"].items()}, "web": ["hv2"]}
    done = plan(status(records=records, running=on_hv2), VDM, ITEMS)
    assert [s["vm"] for s in done["start"]] == ["db"]
    nowhere = {**on_hv2, "web": []}
    done = plan(status(records=records, running=nowhere), VDM, ITEMS)
    web = next(s for s in done["start"] if s["vm"] == "web")
    assert web["to"] == "hv2" and web["claim"]["if_revision"] == revision("web")
    assert "yasco/web" in done["images"]  # its lock broken, unless a live client holds it


def test_an_ha_vm_whose_move_landed_on_a_live_host_is_never_started_a_second_time():
    """web was live-migrating off hv1 to hv3 (a drain, a rebalance) and landed there,
    and hv1 crashed before the move was recorded: its record still says migrating on
    hv1. The plan sends web to hv2 for hv1's failure; a start there would be a second
    copy beside hv3's. Whatever moved it records it on hv3 (the reconciler confirms
    it); the evacuation leaves it alone, as it does any HA VM a live host runs."""
    records = {**{n: {"host": h, "state": "running"} for n, h in VDM["home"].items()},
               "web": {"host": "hv1", "state": "migrating", "to": "hv3"}}
    landed = {**{n: [h] for n, h in VDM["home"].items()}, "web": ["hv3"]}
    done = plan(status(records=records, running=landed), VDM, ITEMS)
    assert [s["vm"] for s in done["start"]] == ["db"]
    assert "web" in done["settled"] and "yasco/web" not in done["images"]
    # A live host running an HA VM that its record does not name there: no start
    # either. Never two copies; the reconciler reads what runs where.
    records["web"] = {"host": "hv1", "state": "running"}
    done = plan(status(records=records, running=landed), VDM, ITEMS)
    assert [s["vm"] for s in done["start"]] == ["db"]
    # Running nowhere but on the failed host: started on its target, as before.
    done = plan(status(records=records, running={**landed, "web": ["hv1"]}), VDM, ITEMS)
    assert [(s["vm"], s["to"]) for s in done["start"]] == [("db", "hv3"), ("web", "hv2")]


def test_two_failed_hosts_are_one_failure_set():
    done = plan(status(alive=("hv3",)), VDM, ITEMS)
    assert done["failed"] == ["hv1", "hv2"]
    assert sorted((s["vm"], s["to"]) for s in done["start"]) == [("db", "hv3"), ("web", "hv3")]
    assert sorted(d["vm"] for d in done["down"]) == ["batch", "plain"]


def test_a_failed_host_missing_from_the_vdm_is_refused():
    cluster = status()
    cluster["hypervisors"].append({"name": "hv9", "alive": False})
    with pytest.raises(EvacuationError, match="hv9: not in the VDM; re-plan"):
        plan(cluster, VDM, ITEMS)


def test_a_vm_whose_disk_a_live_client_holds_is_neither_claimed_nor_started():
    done = plan(status(), VDM, ITEMS, "c1")
    kept = [{"image": "yasco/web", "kind": "exclusive", "owner": "10.1.0.2:0/77"}]
    after = after_fence(done, {"locks_kept": kept, "images_missing": []})
    assert [s["vm"] for s in after["start"]] == ["db"] and after["targets"] == ["hv3"]
    assert after["held"] == [{"vm": "web", "images": {"yasco/web": "10.1.0.2:0/77"}}]
    assert after["missing"] == []
    assert after_fence(done, {"locks_kept": []})["start"] == done["start"]


def test_a_vm_whose_disk_is_missing_is_reported_and_the_others_still_start():
    done = plan(status(), VDM, ITEMS, "c1")
    after = after_fence(done, {"locks_kept": [], "images_missing": ["yasco/db"]})
    assert [s["vm"] for s in after["start"]] == ["web"] and after["held"] == []
    assert after["missing"] == [{"vm": "db", "images": ["yasco/db"]}]


def test_no_ha_vm_is_started_on_a_host_in_maintenance_or_still_fenced_or_cut_off_from_ceph():
    # hv2 is drained: the plan for hv1 and hv2 failed sends web to hv3 instead.
    drained = status(alive=("hv2", "hv3"), maintenance=("hv2",))
    drained["hypervisors"][0]["maintenance"] = False
    done = plan(drained, VDM, ITEMS)
    assert done["avoided"] == ["hv2"]
    assert {s["vm"]: s["to"] for s in done["start"]} == {"web": "hv3", "db": "hv3"}
    fenced = status()
    fenced["hypervisors"][1]["fenced"] = True
    assert {s["vm"]: s["to"] for s in plan(fenced, VDM, ITEMS)["start"]} == {
        "web": "hv3", "db": "hv3"}
    # hv2's agent has not reached Ceph for its grace period: alive, but no target.
    cut_off = status()
    cut_off["hypervisors"][1]["storage"] = "lost"
    done = plan(cut_off, VDM, ITEMS)
    assert done["avoided"] == ["hv2"] and done["failed"] == ["hv1"]
    assert {s["vm"]: s["to"] for s in done["start"]} == {"web": "hv3", "db": "hv3"}
    cut_off["hypervisors"][1]["storage"] = "ok"
    assert plan(cut_off, VDM, ITEMS)["avoided"] == []


def test_requested_states_are_kept_through_an_evacuation():
    requested = status()
    requested["requested"] = {"web": "stopped", "db": "ignored"}
    done = plan(requested, VDM, ITEMS)
    assert done["start"] == []
    # A VM requested stopped is recorded stopped; an ignored one is left as it is.
    assert [(d["vm"], d["record"]["value"]["state"]) for d in done["down"]] == [
        ("plain", "down"), ("web", "stopped")]


def test_an_evacuation_is_refused_while_disarmed_or_when_a_failed_host_has_no_address():
    cluster = status()
    done = plan(cluster, VDM, ITEMS)
    assert refusals(done, cluster) == []
    # A host that never registered is fenced all the same, at its declared address.
    cluster["hypervisors"][0]["registered"] = {}
    assert refusals(plan(cluster, VDM, ITEMS), cluster) == []
    cluster["ha_disarmed"] = {"by": "ops", "since": "09:00", "reason": "storage work"}
    # An inventory without ansible_host nor yasco_ceph_addrs for it.
    cluster["hypervisors"][0]["ceph_addrs"] = []
    done = plan(cluster, VDM, ITEMS)
    disarmed, silent = refusals(done, cluster)
    assert disarmed.startswith("HA is disarmed by ops since 09:00 (storage work): not "
                               "evacuating. Re-arm with playbooks/disarm.yml")
    assert silent.startswith("hv1: no Ceph address declared in the inventory "
                             "(yasco_ceph_addrs, by default the host's ansible_host")
    assert refusals(done, cluster, while_disarmed=True) == [silent]


def lying(registered: list[str]) -> dict:
    """The cluster as status() has it, hv1 failed, its agent having registered
    `registered` as its Ceph addresses before it stopped its heartbeat."""
    cluster = status()
    cluster["hypervisors"][0]["registered"]["ceph_addrs"] = registered
    return cluster


def test_a_failed_host_that_registered_another_hosts_address_is_fenced_at_its_own_only():
    """Root on hv1 writes hv1's registration: naming hv2's address there, then letting
    its lease lapse, must not have the evacuation blocklist hv2."""
    done = plan(lying(["10.1.0.1", "10.1.0.2"]), VDM, ITEMS, "c1")
    assert done["fence"] == [{"host": "hv1", "addresses": ["10.1.0.1"]}]
    assert [r["value"]["ceph_addrs"] for r in done["fence_records"]] == [["10.1.0.1"]]
    assert done["undeclared"] == [{"host": "hv1", "addresses": ["10.1.0.2"]}]
    (warning,) = done["warnings"]
    assert warning.startswith("hv1's agent registered Ceph addresses the inventory does "
                              "not declare for it (10.1.0.2): refused, not fenced")
    (fenced,) = [e for e in done["events"] if e["kind"] == "fenced"]
    assert fenced["details"] == {"ceph_addrs": ["10.1.0.1"],
                                 "undeclared_ceph_addrs": ["10.1.0.2"]}
    assert refusals(done, lying(["10.1.0.1", "10.1.0.2"])) == []


def test_a_failed_host_that_registered_a_range_is_fenced_at_its_own_address_only():
    for registered in (["10.1.0.0/24"], ["10.1.0.1", "10.1.0.0/24"], "10.1.0.0/24"):
        done = plan(lying(registered), VDM, ITEMS, "c1")
        assert done["fence"] == [{"host": "hv1", "addresses": ["10.1.0.1"]}]
        assert [r["value"]["ceph_addrs"] for r in done["fence_records"]] == [["10.1.0.1"]]
        assert done["undeclared"] == [{"host": "hv1", "addresses": ["10.1.0.0/24"]}]
        assert all("/" not in a for f in done["fence"] for a in f["addresses"])


def test_a_registration_that_matches_the_declared_addresses_raises_no_warning():
    done = plan(status(), VDM, ITEMS)
    assert done["undeclared"] == [] and done["warnings"] == []
    assert [e["details"] for e in done["events"] if e["kind"] == "fenced"] == [
        {"ceph_addrs": ["10.1.0.1"]}]
    # The same address written another way is the same address.
    cluster = status()
    cluster["hypervisors"][0]["ceph_addrs"] = ["fd00::1"]
    cluster["hypervisors"][0]["registered"]["ceph_addrs"] = ["fd00:0::0001"]
    assert plan(cluster, VDM, ITEMS)["undeclared"] == []


def test_a_registration_is_shown_in_the_warning_as_one_line_of_text():
    done = plan(lying(["10.1.0.1", "10.1.0.9\nfenced: nothing"]), VDM, ITEMS)
    (warning,) = done["warnings"]
    assert "\n" not in warning and "'10.1.0.9\\nfenced: nothing'" in warning


def test_an_outcome_warns_of_a_registration_not_declared_and_is_critical():
    done = after_fence(plan(lying(["10.1.0.0/24"]), VDM, ITEMS),
                       {"locks_kept": [], "images_missing": []})
    report = outcome(done, ["db", "web"], {"changed": True}, {}, ["hv1"], {})
    assert report["severity"] == "critical"
    assert report["lines"][1] == "fenced: 10.1.0.1; 0 disk locks broken"
    assert report["lines"][2].startswith(
        "WARNING: hv1's agent registered Ceph addresses the inventory does not declare "
        "for it (10.1.0.0/24)")
    assert report["details"]["undeclared_ceph_addrs"] == {"hv1": ["10.1.0.0/24"]}
    (fenced,) = [e for e in report["events"] if e["kind"] == "fenced"]
    assert fenced["details"]["undeclared_ceph_addrs"] == ["10.1.0.0/24"]


def test_an_outcome_names_what_started_what_did_not_and_why_it_is_critical():
    done = after_fence(plan(status(), VDM, ITEMS, "c1"),
                       {"locks_kept": [], "images_missing": []})
    times = {"started": 100.0, "fenced": 101.5, "done": 103.25}
    report = outcome(done, ["db"], {"changed": True, "locks_broken": ["yasco/db"]},
                     {}, ["hv1"], times)
    assert [s["vm"] for s in report["done"]] == ["db"] and report["not_started"] == ["web"]
    assert report["severity"] == "critical"
    assert report["lines"] == [
        "failed: hv1 (planned)", "fenced: 10.1.0.1; 1 disk locks broken",
        "powered off by their BMCs: -", "started: db on hv3", "did not start: web",
        "already evacuated: -", "held by a live client elsewhere, not started: -",
        "disk missing, not started: -", "preempted: batch", "left down: plain",
        "seconds: fenced 1.5, all started 3.2"]
    assert [(e["kind"], e.get("vm"), e["host"]) for e in report["events"]] == [
        ("fenced", None, "hv1"), ("preempted", "batch", "hv2"), ("evacuated", "db", "hv3")]
    assert report["details"]["started"] == {"db": "hv3"}
    assert report["details"]["seconds"] == pytest.approx(3.25)


def test_an_outcome_leaves_out_a_fence_an_earlier_run_put_up_and_says_what_etcd_saw():
    done = after_fence(plan(status(), VDM, ITEMS), {"locks_kept": [], "images_missing": []})
    powered = {"powered_off": ["hv1"], "confirmed": [], "errors": []}
    report = outcome(done, ["db", "web"], {"changed": False}, powered, ["hv2"], {})
    assert report["severity"] == "warning"
    assert report["lines"][0] == ("triggered for hv2, but etcd sees hv1: went by etcd")
    assert "powered off by their BMCs: hv1" in report["lines"]
    assert report["lines"][-1] == "seconds: -"
    assert "fenced" not in [e["kind"] for e in report["events"]]
    assert outcome(done, [], {}, {}, None, {})["lines"][0] == "failed: hv1 (planned)"


def test_beyond_the_plan_room_is_counted_from_what_runs_where_not_from_the_homes():
    """A cascade: hv2 failed and its HA VM b runs on its planned target hv3; then hv1
    fails, more failures than the map's one. Counted from the homes, hv3 is empty and
    a (higher priority) would go there too, beside b on a host with room for one; what
    runs there says it goes to hv4. With hv4 drained, it stays down, and the
    preemptible VM on hv3 is stopped only when that makes room. A VM whose refuge
    fails beyond the plan goes home only if home has room."""
    vdm = {"version": 1,
           "hosts": {"hv1": {"vcpus": 4, "memory_mb": 512}, "hv2": {"vcpus": 4, "memory_mb": 512},
                     "hv3": {"vcpus": 4, "memory_mb": 384}, "hv4": {"vcpus": 4, "memory_mb": 512}},
           "vms": {"a": {"kind": "ha", "priority": 5, "vcpus": 1, "memory_mb": 256},
                   "b": {"kind": "ha", "priority": 0, "vcpus": 1, "memory_mb": 256},
                   "spot": {"kind": "preemptible", "vcpus": 1, "memory_mb": 128}},
           "home": {"a": "hv1", "b": "hv2", "spot": "hv3"},
           "failover": {"hv1": {"a": "hv3"}, "hv2": {"b": "hv3"}, "hv3": {}, "hv4": {}},
           "preempt": {"hv1": ["spot"], "hv2": ["spot"]}}
    uris = {h: f"qemu+libssh://root@{h}/system" for h in vdm["hosts"]}
    items = [{"name": n, "uri": uris[h], "priority": vdm["vms"][n].get("priority", 0),
              "domain": {"name": n, "spec": {"disks": [{"rbd": f"yasco/{n}"}]}}}
             for n, h in vdm["home"].items()]

    def cascade(drained=(), alive=("hv3", "hv4"), where=None):
        where = where or {"a": "hv1", "b": "hv3", "spot": "hv3"}
        return {"hypervisors": [{"name": h, "uri": uris[h], "alive": h in alive,
                                 "maintenance": h in drained,
                                 "registered": {"ceph_addrs": [f"10.1.0.{i}"]}}
                                for i, h in enumerate(vdm["hosts"], start=1)],
                "vms": [{"name": n, "record": {"host": h, "state": "running"},
                         "record_revision": 40 + i, "running_on": [h] if h in alive else []}
                        for i, (n, h) in enumerate(where.items())]}

    done = plan(cascade(), vdm, items)
    assert done["failed"] == ["hv1", "hv2"] and not done["planned"]
    assert [(s["vm"], s["to"]) for s in done["start"]] == [("a", "hv4")]
    assert done["preempt"] == [] and done["down"] == []
    # hv4 drained: room on hv3 only, 384 MiB, b holding 256 of it, spot 128: a stays
    # down (a running HA VM is never stopped for it), and spot keeps running.
    done = plan(cascade(drained=("hv4",)), vdm, items)
    assert done["start"] == [] and done["preempt"] == []
    assert [d["vm"] for d in done["down"]] == ["a"] and done["left_down"] == ["a"]
    # hv2 came back and took a; then hv3 fails, with b on it, and hv4 is drained: b's
    # home has no room for it beside a, and b is left down, not sent home regardless.
    vdm["hosts"]["hv2"]["memory_mb"] = 384
    done = plan(cascade(drained=("hv4",), alive=("hv2", "hv4"),
                        where={"a": "hv2", "b": "hv3", "spot": "hv3"}), vdm, items)
    assert done["failed"] == ["hv1", "hv3"] and done["start"] == []
    assert [d["vm"] for d in done["down"]] == ["b", "spot"]
