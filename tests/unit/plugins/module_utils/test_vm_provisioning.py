"""What provisioning asks libvirt for, from the inventory's VM fields: here, what a
guest's crash or hang does (on_crash, watchdog), and the error that names the VM and
the allowed values when a field is wrong."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.vm_provisioning import (
    ProvisioningError, provisioning_items)

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
    ({"on_crash": "reboot"}, "VM web: on_crash must be one of restart, destroy, got 'reboot'"),
    ({"watchdog": "yes"}, "VM web: watchdog must be true or false, got 'yes'"),
    ({"guest_agent": 1}, "VM web: guest_agent must be true or false, got 1"),
])
def test_a_wrong_crash_or_watchdog_field_names_the_vm_and_what_it_may_be(fields, message):
    with pytest.raises(ProvisioningError) as raised:
        domains(web=fields)
    assert raised.value.problems == [message]
