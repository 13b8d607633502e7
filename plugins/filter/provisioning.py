# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter that tells provisioning what to do for each VM."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.evacuation import (
    EvacuationError, after_fence, plan as evacuation)
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


def vm_records_prefix(cluster=etcd_keys.DEFAULT_CLUSTER):
    try:
        return etcd_keys.vms_prefix(cluster=cluster)
    except ValueError as err:
        raise AnsibleFilterError(f"vm_records_prefix: {err}") from err


def _move_steps(move, cluster):
    """What the rebalance role writes for one move: its etcd claim and record (each an
    element of etcd_key's batch) and its history event."""
    key = etcd_keys.vm_key(move["vm"], cluster=cluster)
    migrating = {"host": move["from"], "state": "migrating", "to": move["to"]}
    return {"label": f"{move['vm']}: {move['from']} -> {move['to']}",
            "claim": {"key": key, "value": migrating,
                      "if_value": {"host": move["from"], "state": "running"}},
            "record": {"key": key, "value": {"host": move["to"], "state": "running"},
                       "if_value": migrating},
            "event": {"vm": move["vm"], "host": move["to"],
                      "details": {"from": move["from"]}}}


def rebalance_waves(status_vms, vdm, concurrency=2, cluster=etcd_keys.DEFAULT_CLUSTER):
    """Waves of live migrations from where VMs run (cluster_status's vms) to their
    homes in `vdm`."""
    current = {vm["name"]: vm["running_on"][0] for vm in status_vms or []
               if len(vm.get("running_on") or []) == 1}
    try:
        moves = plan_moves(current, vdm or {})
        grouped = waves(moves, current, vdm or {}, max(1, int(concurrency)))
        return [[{**m, **_move_steps(m, cluster)} for m in wave] for wave in grouped]
    except (RebalanceError, ValueError) as err:
        raise AnsibleFilterError(f"cannot rebalance: {err}") from err


def evacuation_plan(status, vdm, items, cluster=etcd_keys.DEFAULT_CLUSTER):
    """The evacuation of every failed hypervisor (see module_utils/evacuation.py)."""
    try:
        return evacuation(status or {}, vdm or {}, items or [], cluster)
    except (EvacuationError, ValueError) as err:
        raise AnsibleFilterError(f"cannot evacuate: {err}") from err


def evacuation_fenced(evacuation, fence_result):
    """The evacuation less the VMs the fence says must not start."""
    return after_fence(evacuation or {"start": []}, fence_result or {})


class FilterModule:
    def filters(self):
        return {"vm_provisioning": vm_provisioning, "vm_record_key": vm_record_key,
                "rebalance_waves": rebalance_waves, "vdm_version_key": vdm_version_key,
                "vm_records_prefix": vm_records_prefix, "evacuation_plan": evacuation_plan,
                "evacuation_fenced": evacuation_fenced}
