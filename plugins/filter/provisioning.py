# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter that tells provisioning what to do for each VM."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.vm_provisioning import (
    ProvisioningError, provisioning_items)


def vm_provisioning(vms, vdm, defaults, cluster, uris):
    try:
        return provisioning_items(vms or {}, vdm or {}, defaults or {}, cluster or {},
                                  uris or {})
    except ProvisioningError as err:
        raise AnsibleFilterError("cannot provision: " + "; ".join(err.problems)) from err


def vm_record_key(vm, cluster=etcd_keys.DEFAULT_CLUSTER):
    try:
        return etcd_keys.vm_key(vm, cluster=cluster)
    except ValueError as err:
        raise AnsibleFilterError(f"vm_record_key: {err}") from err


class FilterModule:
    def filters(self):
        return {"vm_provisioning": vm_provisioning, "vm_record_key": vm_record_key}
