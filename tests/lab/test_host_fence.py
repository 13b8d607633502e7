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

from ansible_collections.yasco.cluster.plugins.module_utils import etcd_access, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.ceph import CephError
from ansible_collections.yasco.cluster.plugins.module_utils.ceph_fencing import (
    LIFT_TTL, FenceInfo, FenceRun, HostFenceRun)
from ansible_collections.yasco.cluster.plugins.module_utils.etcd import to_json
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


def run(lab, **options: Any) -> dict[str, Any]:
    """One host_fence run for hv9's record, as the evacuation and return home run it."""
    controller = credentials.EtcdUser(etcd_access.CONTROLLER_ROLE)
    params = {**fencer_options(), **controller.options(lab["etcd_endpoints"]), "timeout": 5.0,
              "state": "present", "records": [{"key": KEY, "value": VALUE}], **options}
    return HostFenceRun(params, check_mode=False).run()


def blocklisted() -> bool:
    return ENTRY in FenceInfo({**fencer_options(), "addresses": [ADDRESS]}, False).run()["fenced"]


@pytest.fixture(name="etcd")
def fixture_etcd(lab):
    """The lab's etcd as root; hv9's record and entry are gone before and after."""
    def clean():
        etcd.delete(KEY)
        etcd.delete(ALIVE)
        FenceRun({**fencer_options(), "state": "absent", "addresses": [ADDRESS]}, False).run()

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
    FenceRun({**fencer_options(), "state": "absent", "addresses": [ADDRESS]}, False).run()
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


def test_a_fence_waits_for_a_lift_under_way_and_its_entry_stays(lab, etcd):
    run(lab)
    held = etcd.get_json(KEY)
    # A lift under way, as host_fence marks it: then it stalls before removing anything.
    lease = etcd.grant_lease(LIFT_TTL)
    etcd.put(KEY, to_json({**held, "lifting": {"lease": lease.id, "since": "now"}}))
    done: dict[str, Any] = {}
    fencer = threading.Thread(target=lambda: done.update(run(lab)), daemon=True)
    fencer.start()
    time.sleep(3)
    assert fencer.is_alive() and not done, "the fence did not wait for the lift"
    # The lift goes on and ends, as host_fence ends one: entry, record, lease gone.
    FenceRun({**fencer_options(), "state": "absent", "addresses": [ADDRESS]}, False).run()
    assert not blocklisted()
    etcd.delete(KEY)
    etcd.revoke_lease(lease.id)
    fencer.join(30)
    assert done["waited"] >= 3 and done["records"] == [KEY]
    assert blocklisted() and "lifting" not in etcd.get_json(KEY)


def test_a_lift_mark_whose_lease_ended_holds_no_fence_back(lab, etcd):
    """A lift that stalled past its lease may no longer remove anything (it checks its
    own deadline), so a fence does not wait for it; and a second lift refuses while a
    live one stands."""
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
                 ("images on a lift", {"state": "absent", "records": [record],
                                       "images": ["yasco/x"]}),
                 ("fence", {"records": [record], "expire": 600}),
                 ("lift", {"state": "absent", "records": [record]}))]
    tasks[0]["check_mode"] = True
    rc, (checked, no_address, images, fenced, stale) = run_playbook(
        local_play(*tasks, module_defaults=module_defaults), tmp_path=tmp_path)
    assert rc == 0
    assert checked["changed"] and checked["blocklisted"] == [ENTRY], checked
    assert checked["actions"] == [f"blocklist {ENTRY}", f"record {KEY}"]
    assert "records[0] (" + KEY + "): its value names no ceph_addrs" in no_address["msg"]
    assert "only broken when fencing" in images["msg"]
    assert fenced["records"] == [KEY] and not fenced.get("failed"), fenced
    # The lift was given the record without the fence's `since`: not the one in etcd.
    assert stale["failed"] and "the fence changed since it was read" in stale["msg"]
    assert blocklisted()
