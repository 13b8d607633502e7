"""How recover_vm.yml carries out the reconciler's steps (module_utils/stories/recovery.py):
a step decided on a record's revision that changed is left alone, a VM still running where it
was is not started, only the dead QEMU's own client is fenced, a lock held from
another host keeps the VM down. Carried out on the lab by tests/lab/test_ha.py."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.stories import recovery

from .test_evacuation import ITEMS, URIS, VDM, revision, status

RUNNING = {"host": "hv1", "state": "running"}


def restart(vm="web", record=None, rev=None):
    return {"action": "restart", "vm": vm, "from": "hv1", "to": "hv1", "hosts": [],
            "preempt": [], "record": record or RUNNING,
            "revision": revision(vm) if rev is None else rev,
            "reason": "not running on hv1"}


def alive_status():
    return status(alive=("hv1", "hv2", "hv3"), running={"db": ["hv1"]})


def test_a_restart_claims_the_record_it_was_decided_on_and_starts_where_it_died():
    done = recovery.plan([restart()], alive_status(), ITEMS, "c1")
    (start,) = done["start"]
    assert start["claim"] == {"key": "/yasco/c1/vms/web", "if_revision": revision("web"),
                              "value": {"host": "hv1", "state": "starting", "from": "hv1",
                                        "claimed_at": revision("web")}}
    assert start["domain"]["uri"] == URIS["hv1"] and start["images"] == ["yasco/web"]
    assert start["source_addresses"] == ["10.1.0.1"]
    assert done["sources"] == [{"name": "web", "uri": URIS["hv1"]}]
    assert start["event"]["kind"] == "restarted"


def test_a_claim_holds_only_while_the_agents_word_on_restarting_it_is_as_read():
    step = {**restart(), "to": "hv2", "action": "relocate",
            "agent_restart": {"host": "hv1", "revision": 17}}
    (start,) = recovery.plan([step], alive_status(), ITEMS, "c1")["start"]
    assert start["claim"]["if_unchanged"] == {"/yasco/c1/hosts/hv1/restarts/web": 17}
    with pytest.raises(recovery.RecoveryError, match="agent_restart: revision"):
        recovery.plan([{**step, "agent_restart": {"host": "hv1", "revision": "x"}}],
                      alive_status(), ITEMS, "c1")


def test_a_step_on_a_record_that_changed_since_is_left_alone():
    done = recovery.plan([restart(record={"host": "hv1", "state": "down"}, rev=3)],
                         alive_status(), ITEMS)
    assert done["start"] == [] and [s["vm"] for s in done["stale"]] == ["web"]
    # Changed and back to the same value (migrated away and back): a new revision.
    done = recovery.plan([restart(rev=revision("web") - 1)], alive_status(), ITEMS)
    assert done["start"] == [] and [s["vm"] for s in done["stale"]] == ["web"]


def test_a_vm_libvirt_still_runs_where_it_was_is_not_started():
    done = recovery.plan([restart()], alive_status(), ITEMS)
    assert recovery.after_source_check(done, {"domains": [
        {"name": "web", "state": "running"}]})["start"] == []
    assert recovery.after_source_check(done, {})["still_running"][0]["state"].startswith(
        "unknown")
    assert len(recovery.after_source_check(done, {"domains": [
        {"name": "web", "state": "shutoff"}]})["start"]) == 1


def disks(owner: str) -> dict:
    return {"results": [{"item": "yasco/web", "exists": True, "image": {
        "pool": "yasco", "name": "web", "watchers": [],
        "locks": [{"kind": "exclusive", "owner": owner, "id": "auto 1",
                   "address": owner}]}}]}


def test_only_the_dead_qemus_own_client_on_that_host_is_fenced():
    done = recovery.plan([restart()], alive_status(), ITEMS)
    dead = recovery.after_lock_check(done, disks("10.1.0.1:0/1234"))
    assert dead["dead_clients"] == ["10.1.0.1:0/1234"]
    assert dead["locked_images"] == ["yasco/web"] and len(dead["start"]) == 1
    held = recovery.after_lock_check(done, disks("10.1.0.2:0/99"))
    assert held["start"] == [] and held["held"] == [
        {"vm": "web", "images": {"yasco/web": "10.1.0.2:0/99"}}]
    gone = recovery.after_lock_check(done, {"results": [{"item": "yasco/web",
                                                         "exists": False}]})
    assert gone["start"] == [] and gone["missing"][0]["vm"] == "web"


def test_the_outcome_records_what_started_and_what_did_not_with_why():
    done = recovery.plan([restart()], alive_status(), ITEMS)
    ok = recovery.outcome(done, ["web"], [])
    assert ok["records"][0]["value"] == {"host": "hv1", "state": "running"}
    # What the notification tells: restarted in place, or relocated, and where.
    assert ok["done"] == [{"vm": "web", "action": "restart", "from": "hv1", "to": "hv1"}]
    bad = recovery.outcome(done, [], ["name web: no memory"])
    assert bad["failed_records"][0]["value"] == {"host": "hv1", "state": "down",
                                                 "reason": "name web: no memory"}
    assert bad["events"][0]["kind"] == "start-failed"
    assert bad["done"] == [] and bad["not_started"] == ["web"]


def test_stop_and_fail_steps_record_their_state():
    steps = [{"action": "stop", "vm": "web", "from": "hv1", "to": None, "hosts": ["hv1"],
              "record": RUNNING, "revision": revision("web"), "reason": "requested stopped"},
             {"action": "fail", "vm": "db", "from": "hv1", "to": None, "hosts": [],
              "record": RUNNING, "revision": revision("db"), "reason": "no room"}]
    done = recovery.plan(steps, alive_status(), ITEMS)
    assert done["stop"][0]["domains"] == [{"name": "web", "uri": URIS["hv1"]}]
    assert done["stop"][0]["record"]["value"]["state"] == "stopped"
    assert done["fail"][0]["record"]["value"] == {"host": "hv1", "state": "failed",
                                                  "reason": "no room"}


def test_a_confirm_step_records_running_what_runs_where_its_start_was_claimed():
    starting = {"host": "hv2", "state": "starting", "from": "hv1"}
    step = {"action": "confirm", "vm": "web", "from": "hv2", "to": None, "hosts": ["hv2"],
            "record": starting, "revision": revision("web"),
            "reason": "runs on hv2, where its start was claimed"}
    done = recovery.plan([step], status(alive=("hv1", "hv2", "hv3"), records={
        "web": starting, "db": RUNNING}, running={"web": ["hv2"]}), ITEMS, "c1")
    assert done["confirm"] == [{"vm": "web", "record": {
        "key": "/yasco/c1/vms/web", "if_revision": revision("web"),
        "value": {"host": "hv2", "state": "running"}}}]
    assert done["start"] == [] and [e["kind"] for e in done["events"]] == ["confirmed"]


def test_a_confirm_step_records_a_migrated_vm_at_the_migrations_destination():
    migrating = {"host": "hv1", "state": "migrating", "to": "hv3"}
    step = {"action": "confirm", "vm": "web", "from": "hv1", "to": "hv3", "hosts": ["hv3"],
            "record": migrating, "revision": revision("web"),
            "reason": "runs on hv3, where its live migration from hv1 went"}
    done = recovery.plan([step], status(alive=("hv2", "hv3"), records={
        "web": migrating, "db": RUNNING}, running={"web": ["hv3"]}), ITEMS, "c1")
    assert done["confirm"][0]["record"]["value"] == {"host": "hv3", "state": "running"}


def test_bad_input_names_the_vm_the_state_and_what_is_allowed():
    with pytest.raises(recovery.RecoveryError, match="did you mean 'web'"):
        recovery.requested_record("wbe", "stopped", VDM, "yasco", "me", "", "")
    with pytest.raises(recovery.RecoveryError, match="must be one of started, stopped"):
        recovery.requested_record("web", "sleeping", VDM, "yasco", "me", "", "")
    with pytest.raises(recovery.RecoveryError, match="action 'reboot'"):
        recovery.plan([{**restart(), "action": "reboot"}], alive_status(), ITEMS)
    assert recovery.requested_record("web", "started", VDM, "c", "me", "", "")[
        "state"] == "absent"


def test_a_lock_held_from_a_fenced_host_is_dead():
    # web was moved to hv2 by hand, hv2 failed and was fenced; its record says hv1.
    cluster = alive_status()
    cluster["hypervisors"][1].update(alive=False, fenced=True,
                                     fence={"ceph_addrs": ["10.1.0.2"]})
    done = recovery.after_lock_check(recovery.plan([restart()], cluster, ITEMS),
                                     disks("10.1.0.2:0/77"))
    assert done["dead_clients"] == ["10.1.0.2:0/77"] and len(done["start"]) == 1


def test_no_lock_is_dead_for_an_address_a_host_registered_but_was_not_declared_for_it():
    """Root on hv1 names hv3's address in hv1's registration: a lock held from hv3 is
    a live client there, not a dead QEMU of hv1's, whether hv1 is the host the VM died
    on or a fenced one; its client is not fenced, and the VM not started beside it."""
    cluster = alive_status()
    cluster["hypervisors"][0]["registered"]["ceph_addrs"] = ["10.1.0.1", "10.1.0.3"]
    done = recovery.plan([restart()], cluster, ITEMS)
    assert done["start"][0]["source_addresses"] == ["10.1.0.1"]
    held = recovery.after_lock_check(done, disks("10.1.0.3:0/77"))
    assert held["dead_clients"] == [] and held["start"] == []
    assert held["held"] == [{"vm": "web", "images": {"yasco/web": "10.1.0.3:0/77"}}]
    # hv2, fenced, registered hv3's address too, and its fence record (written before
    # fences came from the inventory) names it: only hv2's declared one is cut off.
    cluster = alive_status()
    cluster["hypervisors"][1].update(
        alive=False, fenced=True, fence={"ceph_addrs": ["10.1.0.2", "10.1.0.3"]},
        registered={"ceph_addrs": ["10.1.0.2", "10.1.0.3"]})
    done = recovery.plan([restart()], cluster, ITEMS)
    assert done["start"][0]["source_addresses"] == ["10.1.0.1", "10.1.0.2"]
    held = recovery.after_lock_check(done, disks("10.1.0.3:0/77"))
    assert held["dead_clients"] == [] and held["start"] == []


def relocate(vm: str, to: str, preempt=()) -> dict:
    return {"action": "relocate", "vm": vm, "from": "hv1", "to": to, "hosts": [],
            "preempt": list(preempt), "record": DOWN, "revision": revision(vm),
            "reason": "recorded down"}


DOWN = {"host": "hv1", "state": "down"}
# hv2 holds two VMs: the preemptible batch, and one more.
SMALL_HV2 = {**VDM, "hosts": {**VDM["hosts"], "hv2": {"vcpus": 8, "memory_mb": 1024}}}


def test_a_relocation_whose_target_was_claimed_since_it_was_decided_is_left_alone():
    """The reconciler sent web to hv2, where an evacuation has since claimed db: beside
    the preemptible VM it does not fit, so it is not started; it would once batch
    stops, as the step says when it was decided to."""
    claimed = status(alive=("hv2", "hv3"), records={
        "web": DOWN, "db": {"host": "hv2", "state": "starting", "from": "hv1"},
        "batch": {"host": "hv2", "state": "running"}}, running={"batch": ["hv2"]})
    done = recovery.plan([relocate("web", "hv2")], claimed, ITEMS, "c1", SMALL_HV2)
    assert done["start"] == [] and done["crowded"] == [{"vm": "web", "to": "hv2"}]
    done = recovery.plan([relocate("web", "hv2", ["batch"])], claimed, ITEMS, "c1", SMALL_HV2)
    assert [s["vm"] for s in done["start"]] == ["web"] and done["crowded"] == []
    assert [p["vm"] for p in done["preempt"]] == ["batch"]
    # Before the claim, hv2 has room for web beside batch.
    free = status(alive=("hv2", "hv3"), records={"web": DOWN, "db": DOWN},
                  running={"batch": ["hv2"]})
    assert [s["vm"] for s in recovery.plan([relocate("web", "hv2")], free, ITEMS, "c1",
                                           SMALL_HV2)["start"]] == ["web"]


def test_two_relocations_to_one_host_take_its_room_in_turn_and_a_restart_keeps_its_own():
    free = status(alive=("hv2", "hv3"), records={"web": DOWN, "db": DOWN},
                  running={"batch": ["hv2"]})
    done = recovery.plan([relocate("db", "hv2"), relocate("web", "hv2")], free, ITEMS, "c1",
                         SMALL_HV2)
    assert [s["vm"] for s in done["start"]] == ["db"]
    assert done["crowded"] == [{"vm": "web", "to": "hv2"}]
    # A VM restarted where it died goes back into its own room, however full the host.
    full = {**VDM, "hosts": {**VDM["hosts"], "hv1": {"vcpus": 1, "memory_mb": 512}}}
    done = recovery.plan([restart()], alive_status(), ITEMS, "c1", full)
    assert [s["vm"] for s in done["start"]] == ["web"] and done["crowded"] == []
