# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter that tells provisioning what to do for each VM."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.rebalance import (
    RebalanceError, plan_moves, waves)
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


def vdm_version_key(cluster=etcd_keys.DEFAULT_CLUSTER):
    try:
        return etcd_keys.vdm_version_key(cluster=cluster)
    except ValueError as err:
        raise AnsibleFilterError(f"vdm_version_key: {err}") from err


def rebalance_waves(status_vms, vdm, concurrency=2):
    """Waves of live migrations from where VMs run (cluster_status's vms) to their
    homes in `vdm`."""
    current = {vm["name"]: vm["running_on"][0] for vm in status_vms or []
               if len(vm.get("running_on") or []) == 1}
    try:
        moves = plan_moves(current, vdm or {})
        grouped = waves(moves, current, vdm or {}, max(1, int(concurrency)))
        return [[{**m, "label": f"{m['vm']}: {m['from']} -> {m['to']}"} for m in wave]
                for wave in grouped]
    except RebalanceError as err:
        raise AnsibleFilterError(f"cannot rebalance: {err}") from err


class FilterModule:
    def filters(self):
        return {"vm_provisioning": vm_provisioning, "vm_record_key": vm_record_key,
                "rebalance_waves": rebalance_waves, "vdm_version_key": vdm_version_key}
