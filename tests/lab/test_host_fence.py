"""host_fence on the lab's Ceph and etcd, as the fencer and the controller run it: a
lift and a fence of the same hypervisor never undo each other.

The hypervisor is hv9, which the lab does not have, and its address one nothing uses:
only the blocklist entry and the record are at stake. A deposed watcher is played by
a run given a record as it was read before the newer fence, or by a lift mark written
as a lift writes it and left standing."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.ceph import CephError
from ansible_collections.yasco.cluster.plugins.module_utils.stories.ceph_fencing import (
    LIFT_TTL, FenceInfo, FenceRun, HostFenceRun)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json
from yasco_lab import credentials, layout
from yasco_lab.credentials import etcd_client

from ..ansible_run import local_play, run_playbook
from .test_domain_and_storage_modules import ceph_user

ADDRESS = "10.213.0.249"
ENTRY = f"{ADDRESS}:0/0"
KEY = etcd_keys.fence_key("hv9", cluster=layout.CLUSTER_NAME)
ALIVE = etcd_keys.alive_key("hv9", cluster=layout.CLUSTER_NAME)
VALUE = {"by": "evacuate", "method": "ceph-blocklist", "ceph_addrs": [ADDRESS], "boot_id": "b1"}


def fencer_options() -> dict[str, Any]:
    return {**ceph_user(layout.CEPH_FENCE_CLIENT), "ceph_timeout": 10.0, "images": [],
            "expire": 600.0}


def host_fence_params(lab, **options: Any) -> dict[str, Any]:
    """host_fence's options for hv9's record, as the fencer and the controller."""
    controller = credentials.EtcdUser(etcd_access.CONTROLLER_ROLE)
    return {**fencer_options(), **controller.options(lab["etcd_endpoints"]), "timeout": 5.0,
            "state": "present", "records": [{"key": KEY, "value": VALUE}], **options}


def run(lab, **options: Any) -> dict[str, Any]:
    """One host_fence run for hv9's record, as the evacuation and return home run it."""
    return HostFenceRun(host_fence_params(lab, **options), check_mode=False).run()


def unblocklist() -> None:
    """hv9's entry lifted in Ceph alone, as ceph_fence lifts it."""
    FenceRun({**fencer_options(), "state": "absent", "addresses": [ADDRESS]}, False).run()


def blocklisted() -> bool:
    return ENTRY in FenceInfo({**fencer_options(), "addresses": [ADDRESS]}, False).run()["fenced"]


@pytest.fixture(name="etcd")
def fixture_etcd(lab):
    """The lab's etcd as root; hv9's record and entry are gone before and after."""
    def clean():
        etcd.delete(KEY)
        etcd.delete(ALIVE)
        unblocklist()

    with etcd_client(lab["etcd_endpoints"]) as etcd:
        clean()
        yield etcd
        clean()


def test_a_lift_of_a_fence_read_before_a_newer_one_removes_nothing(lab, etcd):
    first = run(lab)
    assert first["blocklisted"] == [ENTRY] and first["records"] == [KEY]
    read_by_the_return = etcd.get_json(KEY)  # what a return home read, then stalled on
    assert read_by_the_return["ceph_addrs"] == [ADDRESS] and read_by_the_return["since"]
    # The evacuation of the same failure, run again, changes nothing.
    rerun = run(lab)
    assert not rerun["changed"] and etcd.get_json(KEY) == read_by_the_return, rerun
    # hv9 came back and its fence was lifted; it failed again, and a new leader fenced it
    # anew and started its VMs elsewhere.
    etcd.delete(KEY)
    unblocklist()
    again = run(lab)
    assert again["blocklisted"] == [ENTRY] and again["records"] == [KEY]
    newer = etcd.get_json(KEY)
    assert newer["since"] != read_by_the_return["since"]
    # hv9 is back once more: its agent registered again.
    etcd.put(ALIVE, to_json({"boot_id": "b1"}))
    # The stalled return home goes on with what it read: nothing is lifted.
    with pytest.raises(CephError, match="the fence changed since it was read"):
        run(lab, state="absent", records=[{"key": KEY, "value": read_by_the_return,
                                           "alive": ALIVE}])
    assert blocklisted() and etcd.get_json(KEY) == newer
    # A return home that read the newer fence lifts it, and a rerun finds nothing to do.
    lifted = run(lab, state="absent", records=[{"key": KEY, "value": newer, "alive": ALIVE}])
    assert lifted["unblocklisted"] == [ENTRY] and lifted["records"] == [KEY]
    assert lifted["actions"] == [f"mark {KEY}", f"unblocklist {ENTRY}", f"delete {KEY}"]
    assert etcd.get(KEY) is None and not blocklisted()
    rerun = run(lab, state="absent", records=[{"key": KEY, "value": newer, "alive": ALIVE}])
    assert not rerun["changed"]


def test_a_lift_is_refused_when_the_host_failed_again(lab, etcd):
    """The return home read the fence while hv9 was back; hv9 failed again before the
    lift (its liveness key expired): the fence stays, for the evacuation under way."""
    run(lab)
    read_by_the_return = etcd.get_json(KEY)
    with pytest.raises(CephError, match="the host is not alive any more"):
        run(lab, state="absent", records=[{"key": KEY, "value": read_by_the_return,
                                           "alive": ALIVE}])
    assert blocklisted() and etcd.get_json(KEY) == read_by_the_return


class StalledLift(HostFenceRun):
    """A lift that stalls before it removes an entry, until `go` is set: as a watcher
    paused mid-lift would."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        super().__init__(params, check_mode)
        self.stalled, self.go = threading.Event(), threading.Event()

    def removing(self, entry: str) -> None:
        self.stalled.set()
        self.go.wait(60)


def lift_in_background(lab, **options: Any) -> tuple[StalledLift, threading.Thread, dict]:
    """A StalledLift of hv9's fence as it stands, started, and what it ends with."""
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        held = etcd.get_json(KEY)
    lift = StalledLift(host_fence_params(
        lab, state="absent", records=[{"key": KEY, "value": held, "alive": ALIVE}], **options),
        check_mode=False)
    ended: dict[str, Any] = {}

    def go() -> None:
        try:
            ended["result"] = lift.run()
        except CephError as err:
            ended["error"] = str(err)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    assert lift.stalled.wait(30), "the lift never reached its removals"
    return lift, thread, ended


def test_a_fence_waits_for_a_lift_under_way_and_its_entry_stays(lab, etcd):
    run(lab)
    etcd.put(ALIVE, to_json({"boot_id": "b1"}))
    lift, lifter, lifted = lift_in_background(lab)
    assert "lifting" in etcd.get_json(KEY)
    # hv9 failed again: a new leader fences it, while the lift still stands.
    done: dict[str, Any] = {}
    fencer = threading.Thread(target=lambda: done.update(run(lab)), daemon=True)
    fencer.start()
    time.sleep(3)
    assert fencer.is_alive() and not done, "the fence did not wait for the lift"
    lift.go.set()  # the lift goes on: its entry and record go, then the fence comes
    lifter.join(30)
    fencer.join(30)
    assert lifted["result"]["unblocklisted"] == [ENTRY], lifted
    assert done["waited"] >= 3 and done["records"] == [KEY] and done["blocklisted"] == [ENTRY]
    assert blocklisted() and "lifting" not in etcd.get_json(KEY)


def test_a_lift_that_runs_out_of_time_puts_the_fence_back(lab, etcd):
    """With the largest ceph_timeout a lift takes (15 s), it has 5 s of its lease left
    for its removals: stalled longer, it removes nothing and leaves the fence as it was."""
    run(lab)
    held = etcd.get_json(KEY)
    etcd.put(ALIVE, to_json({"boot_id": "b1"}))
    lift, lifter, lifted = lift_in_background(lab, ceph_timeout=15.0)
    time.sleep(6)
    lift.go.set()
    lifter.join(30)
    assert "took longer than the lease allows" in lifted["error"], lifted
    assert "fence stands again as it was" in lifted["error"]
    assert blocklisted() and etcd.get_json(KEY) == held
    # Its lease is revoked: a fence does not wait for the mark it took back.
    assert run(lab)["waited"] < 2


def test_a_lift_that_finds_a_newer_fence_recorded_puts_its_entry_back(lab, etcd):
    run(lab)
    etcd.put(ALIVE, to_json({"boot_id": "b1"}))
    lift, lifter, lifted = lift_in_background(lab)
    # A fence recorded over the mark (by hand, ignoring it), before the lift's removal.
    etcd.put(KEY, to_json({**VALUE, "by": "operator", "since": "later"}))
    lift.go.set()
    lifter.join(30)
    assert "a newer fence was recorded" in lifted["error"], lifted
    assert blocklisted() and etcd.get_json(KEY)["by"] == "operator"


def test_a_rerun_puts_back_an_entry_gone_from_a_recorded_fence(lab, etcd):
    run(lab)
    # Lifted by hand in Ceph alone: etcd still says fenced (fence_check.yml reports it).
    unblocklist()
    assert not blocklisted()
    again = run(lab)
    assert again["blocklisted"] == [ENTRY] and again["records"] == [KEY]
    assert blocklisted()


def test_a_lift_mark_whose_lease_ended_holds_no_fence_back(lab, etcd):
    """A lift whose lease has ended may no longer remove anything (it stops at its own
    deadline, as the test above shows), so a fence does not wait for its mark; and a
    second lift refuses while a live one stands."""
    run(lab)
    held = etcd.get_json(KEY)
    lease = etcd.grant_lease(LIFT_TTL)
    etcd.put(KEY, to_json({**held, "lifting": {"lease": lease.id, "since": "now"}}))
    etcd.put(ALIVE, to_json({"boot_id": "b1"}))
    with pytest.raises(CephError, match="another run is lifting this fence"):
        run(lab, state="absent", records=[{"key": KEY, "value": held, "alive": ALIVE}])
    assert blocklisted()
    etcd.revoke_lease(lease.id)  # as if its 30 s had passed
    started = time.monotonic()
    fenced = run(lab)
    assert fenced["waited"] < 2 and time.monotonic() - started < 10
    assert blocklisted() and "lifting" not in etcd.get_json(KEY)


def test_through_ansible_check_mode_changes_nothing_and_bad_input_is_named(lab, etcd, tmp_path):
    module_defaults = {
        "group/yasco.cluster.etcd": credentials.EtcdUser(
            etcd_access.CONTROLLER_ROLE).options(lab["etcd_endpoints"]),
        "group/yasco.cluster.ceph": ceph_user(layout.CEPH_FENCE_CLIENT)}
    record = {"key": KEY, "value": VALUE}
    tasks = [{"name": name, "ignore_errors": True, "yasco.cluster.host_fence": options}
             for name, options in (
                 ("check", {"records": [record]}),
                 ("no address", {"records": [{"key": KEY, "value": {"by": "me"}}]}),
                 ("no liveness key", {"state": "absent", "records": [record]}),
                 ("slow Ceph", {"state": "absent", "ceph_timeout": 20,
                                "records": [{**record, "alive": ALIVE}]}),
                 ("fence", {"records": [record], "expire": 600}),
                 ("lift", {"state": "absent", "records": [{**record, "alive": ALIVE}]}))]
    tasks[0].update(check_mode=True, diff=True)
    rc, (checked, no_address, no_alive, slow, fenced, stale) = run_playbook(
        local_play(*tasks, module_defaults=module_defaults), tmp_path=tmp_path)
    assert rc == 0
    assert checked["changed"] and checked["blocklisted"] == [ENTRY], checked
    assert checked["actions"] == [f"blocklist {ENTRY}", f"record {KEY}"]
    assert ENTRY not in checked["diff"]["before"] and ENTRY in checked["diff"]["after"]
    assert "records[0] (" + KEY + "): its value names no ceph_addrs" in no_address["msg"]
    assert "a lift needs the host's liveness key" in no_alive["msg"]
    assert "ceph_timeout: a lift needs it at most 15 s" in slow["msg"]
    # The check changed nothing: the fence that followed added the entry itself.
    assert fenced["blocklisted"] == [ENTRY] and fenced["records"] == [KEY], fenced
    # The lift was given the record without the fence's `since`: not the one in etcd.
    assert stale["failed"] and "the fence changed since it was read" in stale["msg"]
    assert blocklisted()
