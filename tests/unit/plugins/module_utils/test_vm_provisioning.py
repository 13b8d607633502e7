"""What provisioning asks libvirt for, from the inventory's VM fields: here, what a
guest's crash or hang does (on_crash, watchdog), and the error that names the VM and
the allowed values when a field is wrong; and which VMs a run starts and records, by
what etcd records of each."""

from __future__ import annotations

import json

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.stories.vm_provisioning import (
    ProvisioningError, by_record, provisioning_items)

CLUSTER = {"pool": "yasco", "monitors": ["10.0.0.2:6789"], "ceph_user": "hypervisor",
           "secret_uuid": "5b3f0a6e-7a1c-4e0b-9d53-1f2ad0c0ffee", "virt_type": "qemu"}


def domains(**vms) -> dict:
    items = provisioning_items(vms, {"home": dict.fromkeys(vms, "hv1")},
                               {"vcpus": 1, "memory_mb": 256, "disk_gb": 1}, CLUSTER,
                               {"hv1": "qemu+libssh://root@hv1/system"})
    return {item["name"]: item["domain"]["spec"] for item in items}


def test_a_panic_resets_the_guest_unless_the_vm_says_destroy_and_a_watchdog_is_asked_for():
    specs = domains(web={}, db={"on_crash": "destroy", "watchdog": True, "ha": True})
    assert "on_crash" not in specs["web"] and "watchdog" not in specs["web"]  # the defaults
    assert (specs["db"]["on_crash"], specs["db"]["watchdog"]) == ("destroy", True)


@pytest.mark.parametrize("fields, message", [
    ({"on_crash": "reboot"}, "yasco_vms.web.on_crash: must be one of restart, destroy, got 'reboot'"),
    ({"watchdog": "yes"}, "yasco_vms.web.watchdog: must be true or false, got 'yes'"),
    ({"guest_agent": 1}, "yasco_vms.web.guest_agent: must be true or false, got 1"),
])
def test_a_wrong_crash_or_watchdog_field_names_the_vm_and_what_it_may_be(fields, message):
    with pytest.raises(ProvisioningError) as raised:
        domains(web=fields)
    assert raised.value.problems == [message]


def test_a_run_starts_new_vms_and_those_recorded_running_here_and_holds_the_rest():
    items = [{"name": n} for n in ("new", "web", "half", "moved", "off", "spot", "gone")]
    records = {"web": ("hv1", "running"), "half": ("hv1", "starting"),
               "moved": ("hv2", "running"), "off": ("hv1", "stopped"),
               "spot": ("hv1", "preempted"), "gone": ("hv1", "failed")}
    kvs = [{"key": f"/yasco/c1/vms/{name}", "mod_revision": 100 + i,
            "value": json.dumps({"host": host, "state": state})}
           for i, (name, (host, state)) in enumerate(records.items())]
    done = by_record(items, kvs, "hv1", "c1")
    assert [i["name"] for i in done["new"]] == ["new"]
    assert [i["name"] for i in done["here"]] == ["new", "web", "half"]
    assert done["elsewhere"] == ["moved"]
    assert done["held"] == [{"vm": "off", "state": "stopped"},
                            {"vm": "spot", "state": "preempted"},
                            {"vm": "gone", "state": "failed"}]
    # A new VM is claimed only where no record is; each record written only if it is
    # still the revision read.
    assert done["claims"] == [{"key": "/yasco/c1/vms/new", "if_revision": 0, "value": {
        "host": "hv1", "state": "starting", "claimed_at": 0}}]
    assert [(r["key"], r.get("if_revision"), r.get("if_value")) for r in done["records"]] == [
        ("/yasco/c1/vms/new", None, done["claims"][0]["value"]),
        ("/yasco/c1/vms/web", 100, None), ("/yasco/c1/vms/half", 101, None)]
    assert {r["value"]["state"] for r in done["records"]} == {"running"}
