"""What an emergency shutdown stops and in which order, and what a cold start brings
back (module_utils/stories/power.py), from cluster statuses written out by hand. Carried out
on the lab by tests/lab/test_power_and_backup.py."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.stories.power import (
    EMERGENCY, PowerError, cold_start_plan, shutdown_fates, shutdown_plan, stale_locks,
    stopped_records, tier_timeout)

HOSTS = ("hv1", "hv2", "hv3")
URIS = {h: f"qemu+libssh://root@{h}/system" for h in HOSTS}
VDM = {
    "vms": {"db": {"kind": "ha", "priority": 5}, "web": {"kind": "ha", "priority": 1},
            "app": {"kind": "plain", "priority": 1}, "spot": {"kind": "preemptible"}},
    "home": {"db": "hv1", "web": "hv2", "app": "hv2", "spot": "hv3"},
}
ITEMS = [{"name": n, "home": h, "uri": URIS[h], "kind": VDM["vms"][n]["kind"],
          "priority": VDM["vms"][n].get("priority", 0),
          "record_key": f"/yasco/yasco/vms/{n}",
          "domain": {"name": n, "spec": {"disks": [{"rbd": f"yasco/{n}"}]}}}
         for n, h in VDM["home"].items()]


def status(running=None, records=None, hosts=None):
    running = VDM["home"] if running is None else running
    records = records if records is not None else {
        n: {"host": h, "state": "running"} for n, h in VDM["home"].items()}
    hosts = hosts or {}
    return {"hypervisors": [{"name": h, "uri": URIS[h], "alive": True, "libvirt": "reachable",
                             "maintenance": False, "boot_id": "b2", "fence": None,
                             **hosts.get(h, {})} for h in HOSTS],
            "vms": [{"name": n, "kind": VDM["vms"][n]["kind"], "record": records.get(n),
                     "running_on": [running[n]] if n in running else [],
                     "record_revision": 30 if records.get(n) else 0}
                    for n in VDM["home"]]}


def test_the_shutdown_goes_from_preemptible_to_the_highest_priority_ha_vm():
    plan = shutdown_plan(status(), VDM, ITEMS, at="now")
    assert [[v["vm"] for v in t["vms"]] for t in plan["tiers"]] == [
        ["spot"], ["app"], ["web"], ["db"]]
    assert plan["tiers"][0]["vms"][0]["domain"] == {"name": "spot", "uri": URIS["hv3"]}
    assert [m["key"] for m in plan["markers"]] == [
        f"/yasco/yasco/hosts/{h}/maintenance" for h in HOSTS]
    assert plan["markers"][0]["value"]["by"] == EMERGENCY
    assert plan["markers"][0]["if_revision"] == 0


def test_an_operators_marker_stays_and_an_unreachable_host_is_named():
    plan = shutdown_plan(status(running={"db": "hv1"}, hosts={
        "hv2": {"maintenance": True}, "hv3": {"libvirt": "unreachable"}}), VDM, ITEMS)
    assert [m["key"].split("/")[4] for m in plan["markers"]] == ["hv1", "hv3"]
    assert plan["unreachable"] == ["hv3"] and plan["vms"] == 1


def test_each_tier_gets_a_share_of_the_time_left_and_never_less_than_a_second():
    assert tier_timeout(1000.0, 900.0, 4, 60, 20) == 20.0
    assert tier_timeout(1000.0, 900.0, 1, 60, 20) == 60.0
    assert tier_timeout(1000.0, 999.0, 2, 60, 20) == 1.0


def test_fates_say_shut_down_destroyed_failed_or_not_reached_and_only_the_off_are_recorded():
    plan = shutdown_plan(status(), VDM, ITEMS)
    results = [{"results": [{"name": "spot", "actions": ["shutdown"]}]},
               {"results": [{"name": "app", "actions": ["shutdown", "destroy"]}]},
               {"results": [{"name": "web", "failed": True, "msg": "libvirt said no"}]}]
    fates = {f["vm"]: f for f in shutdown_fates(plan, results)}
    assert fates["spot"]["fate"] == "shut down"
    assert fates["app"]["fate"].startswith("destroyed")
    assert fates["web"]["fate"] == "FAILED: libvirt said no" and not fates["web"]["ok"]
    assert fates["db"]["fate"].startswith("NOT REACHED") and not fates["db"]["ok"]
    records = stopped_records(list(fates.values()), plan)
    assert {r["key"].rsplit("/", 1)[1] for r in records} == {"spot", "app"}
    assert records[0]["value"] == {"host": "hv3", "state": "stopped", "by": EMERGENCY}


def stopped():
    return {n: {"host": h, "state": "stopped", "by": EMERGENCY}
            for n, h in VDM["home"].items()}


def test_a_cold_start_starts_every_vm_at_home_highest_tier_first_claiming_it_first():
    plan = cold_start_plan(status(running={}, records=stopped()), VDM, ITEMS)
    assert [[v["vm"] for v in t["vms"]] for t in plan["tiers"]] == [
        ["db"], ["web"], ["app"], ["spot"]]
    db = plan["tiers"][0]["vms"][0]
    assert db["claim"]["if_revision"] == 30  # its record as read: stopped by the shutdown
    assert db["claim"]["value"]["state"] == "starting"
    assert db["record"]["value"] == {"host": "hv1", "state": "running"}
    assert db["domain"]["uri"] == URIS["hv1"] and plan["images"][0] == "yasco/app"
    assert plan["missing"] == [] and plan["left_down"] == []


def test_what_runs_is_left_alone_and_a_vm_never_recorded_is_claimed_only_if_still_absent():
    records = {**stopped(), "web": None}
    plan = cold_start_plan(status(running={"db": "hv1"}, records=records), VDM, ITEMS)
    assert plan["running"] == [{"vm": "db", "host": "hv1"}]
    web = next(v for t in plan["tiers"] for v in t["vms"] if v["vm"] == "web")
    assert web["claim"]["if_revision"] == 0


def test_hosts_not_up_are_missing_unless_left_out_and_their_vms_stay_down():
    down = {"hv2": {"alive": False}}
    assert cold_start_plan(status(running={}, hosts=down), VDM, ITEMS)["missing"] == ["hv2"]
    plan = cold_start_plan(status(running={}, hosts=down), VDM, ITEMS, without=["hv2"])
    assert plan["missing"] == []
    assert {v["vm"] for v in plan["left_down"]} == {"web", "app"}
    # Recorded on the host left out, which may still run it: never started elsewhere.
    records = {**stopped(), "db": {"host": "hv2", "state": "running"}}
    plan = cold_start_plan(status(running={}, records=records, hosts=down), VDM, ITEMS,
                           without=["hv2"])
    assert "may still run it" in next(v["why"] for v in plan["left_down"] if v["vm"] == "db")
    with pytest.raises(PowerError, match="hv9 is not a hypervisor"):
        cold_start_plan(status(), VDM, ITEMS, without=["hv9"])


def test_a_fence_is_lifted_after_a_reboot_and_kept_for_the_same_boot():
    fence = {"ceph_addrs": ["10.0.0.1"], "boot_id": "b1"}
    plan = cold_start_plan(status(running={}, hosts={"hv1": {"fence": fence}}), VDM, ITEMS)
    assert [u["host"] for u in plan["unfence"]] == ["hv1"]
    assert plan["unfence"][0]["record"]["value"] == fence
    same = {**fence, "boot_id": "b2"}
    plan = cold_start_plan(status(running={}, hosts={"hv1": {"fence": same}}), VDM, ITEMS)
    assert plan["still_fenced"] == ["hv1"]
    assert "return_home.yml" in next(v["why"] for v in plan["left_down"] if v["vm"] == "db")


def test_a_host_a_drain_holds_takes_no_vm_which_starts_where_it_ran_last():
    hosts = {"hv2": {"maintenance": True, "maintenance_marker": {"by": "drain"}}}
    records = {**stopped(), "web": {"host": "hv3", "state": "stopped", "by": EMERGENCY}}
    plan = cold_start_plan(status(running={}, records=records, hosts=hosts), VDM, ITEMS)
    assert plan["in_maintenance"] == ["hv2"]
    web = next(v for t in plan["tiers"] for v in t["vms"] if v["vm"] == "web")
    assert web["host"] == "hv3" and web["domain"]["uri"] == URIS["hv3"]
    assert web["record"]["value"] == {"host": "hv3", "state": "running"}
    assert "undrain" in next(v["why"] for v in plan["left_down"] if v["vm"] == "app")


def test_only_the_emergency_shutdowns_markers_are_lifted():
    hosts = {"hv1": {"maintenance": True, "maintenance_marker": {"by": EMERGENCY}},
             "hv2": {"maintenance": True, "maintenance_marker": {"by": "drain"}}}
    plan = cold_start_plan(status(running={}, hosts=hosts), VDM, ITEMS)
    assert plan["markers"] == [{"key": "/yasco/yasco/hosts/hv1/maintenance",
                                "state": "absent", "if_value": {"by": EMERGENCY}}]


def test_a_lock_whose_client_no_longer_has_the_image_open_is_stale():
    def info(name, locks, watchers):
        return {"exists": True, "image": {"pool": "yasco", "name": name, "locks": locks,
                                          "watchers": [{"address": w} for w in watchers]}}
    dead = {"kind": "advisory", "address": "10.0.0.1:0/111"}
    live = {"kind": "advisory", "address": "10.0.0.2:0/222"}
    found = stale_locks([info("a", [dead], []), info("b", [live], ["10.0.0.2:0/222"]),
                         {"exists": False, "image": {}}])
    assert found == {"addresses": ["10.0.0.1:0/111"], "images": ["yasco/a"]}
    # QEMU's exclusive lock, named by its owner's address, or by a client id alone.
    exclusive = {"kind": "exclusive", "owner": "10.0.0.3:0/333", "mode": "1"}
    by_id = {"kind": "exclusive", "owner": "client.4242 auto 1", "mode": "1"}
    assert stale_locks([info("c", [exclusive, by_id], [])]) == {
        "addresses": ["10.0.0.3:0/333"], "images": ["yasco/c"]}
    # A host back from a crash shorter than the OSDs' watch timeout: its dead QEMU's
    # watch lingers, but libvirt there says the VM runs no more; another host's client
    # with the image open is left alone.
    lingering = info("d", [dead], ["10.0.0.1:0/111"])
    assert stale_locks([lingering]) == {"addresses": [], "images": []}
    assert stale_locks([lingering, info("b", [live], ["10.0.0.2:0/222"])],
                       dead_at=["10.0.0.1"]) == {
        "addresses": ["10.0.0.1:0/111"], "images": ["yasco/d"]}
