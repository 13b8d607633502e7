# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters that tell provisioning what to do for each VM
(module_utils/stories/vm_provisioning.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

# Each filter imports its story's module when it runs, not when this file loads:
# Ansible loads every filter file of the collection, in every task's worker, to find
# any one filter (docs/architecture.md, "Filters").


def vm_provisioning(vms, vdm, defaults, cluster, uris):
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import vm_provisioning as vp
    try:
        return vp.provisioning_items(vms or {}, vdm or {}, defaults or {}, cluster or {},
                                     uris or {})
    except vp.ProvisioningError as err:
        raise AnsibleFilterError(str(err)) from err


def provisioning_by_record(items, kvs, host, cluster=etcd_keys.DEFAULT_CLUSTER):
    """A host's provisioning items sorted by what etcd records of each VM."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import vm_provisioning as vp
    try:
        return vp.by_record(list(items or []), list(kvs or []), host, cluster)
    except ValueError as err:
        raise AnsibleFilterError(f"provisioning_by_record: {err}") from err


class FilterModule:
    def filters(self):
        return {"vm_provisioning": vm_provisioning,
                "provisioning_by_record": provisioning_by_record}
