# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters that name etcd keys (module_utils/adapters/etcd_keys.py) and write the
etcdctl commands of YASCO's etcd roles and users."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access, etcd_keys


def _key(name, make, *args, **kwargs):
    """An etcd key from etcd_keys, a bad name becoming the filter `name`'s error."""
    try:
        return make(*args, **kwargs)
    except ValueError as err:
        raise AnsibleFilterError(f"{name}: {err}") from err


def _kind(name, makers, kind):
    if kind not in makers:
        raise AnsibleFilterError(f"{name}: kind must be one of {', '.join(makers)}, "
                                 f"got {kind!r}")
    return makers[kind]


def vm_record_key(vm, cluster=etcd_keys.DEFAULT_CLUSTER, kind="record"):
    """The etcd key of a VM's record, or of its requested state."""
    make = _kind("vm_record_key", {"record": etcd_keys.vm_key,
                                   "requested": etcd_keys.requested_key}, kind)
    return _key("vm_record_key", make, vm, cluster=cluster)


def host_key(host, kind, cluster=etcd_keys.DEFAULT_CLUSTER):
    """The etcd key of one of a host's records: alive, registered, maintenance or
    frozen."""
    make = _kind("host_key", {"alive": etcd_keys.alive_key,
                              "registered": etcd_keys.registered_key,
                              "maintenance": etcd_keys.maintenance_key,
                              "frozen": etcd_keys.frozen_key}, kind)
    return _key("host_key", make, host, cluster=cluster)


def ha_disarmed_key(cluster=etcd_keys.DEFAULT_CLUSTER):
    """The etcd key whose presence pauses automatic evacuation cluster-wide."""
    return _key("ha_disarmed_key", etcd_keys.disarmed_key, cluster=cluster)


def vdm_version_key(cluster=etcd_keys.DEFAULT_CLUSTER):
    return _key("vdm_version_key", etcd_keys.vdm_version_key, cluster=cluster)


def vm_records_prefix(cluster=etcd_keys.DEFAULT_CLUSTER):
    return _key("vm_records_prefix", etcd_keys.vms_prefix, cluster=cluster)


def etcd_access_commands(hosts, cluster=etcd_keys.DEFAULT_CLUSTER):
    """The etcdctl commands that create YASCO's etcd roles and users for `hosts`."""
    try:
        return etcd_access.as_script(list(hosts), cluster).splitlines()
    except ValueError as err:
        raise AnsibleFilterError(f"etcd_access_commands: {err}") from err


class FilterModule:
    def filters(self):
        return {"vm_record_key": vm_record_key, "host_key": host_key,
                "ha_disarmed_key": ha_disarmed_key, "vdm_version_key": vdm_version_key,
                "vm_records_prefix": vm_records_prefix,
                "etcd_access_commands": etcd_access_commands}
