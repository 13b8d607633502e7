# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of the HA reconciler's playbooks: requested states (vm_state.yml), the
VDM's HA view that provisioning publishes, and recover_vm.yml's steps
(module_utils/stories/recovery.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.filter.batch import batch_succeeded
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

# Each filter imports its story's module when it runs, not when this file loads:
# Ansible loads every filter file of the collection, in every task's worker, to find
# any one filter (docs/architecture.md, "Filters").


def vm_state_record(vm, state, vdm, cluster=etcd_keys.DEFAULT_CLUSTER, by="operator",
                    reason="", at=""):
    """The etcd_key spec that sets a VM's requested state."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import recovery
    try:
        return recovery.requested_record(vm, state, vdm or {}, cluster, by, reason, str(at))
    except (recovery.RecoveryError, ValueError) as err:
        raise AnsibleFilterError(f"cannot set the requested state: {err}") from err


def vdm_ha_record(vdm, cluster=etcd_keys.DEFAULT_CLUSTER):
    """The etcd_key spec that publishes the VDM's HA view for the reconciler."""
    from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import (
        VdmView, ha_view)
    if not VdmView(vdm).planned:
        raise AnsibleFilterError("vdm_ha_record: no VDM; plan one with playbooks/plan.yml")
    try:
        return {"key": etcd_keys.vdm_ha_key(cluster=cluster), "value": ha_view(vdm)}
    except ValueError as err:
        raise AnsibleFilterError(f"vdm_ha_record: {err}") from err


def recovery_plan(steps, status, items, cluster=etcd_keys.DEFAULT_CLUSTER, vdm=None):
    """What to do for the reconciler's steps, against the cluster as it is now and
    the VDM's capacities."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import recovery
    try:
        return recovery.plan(steps, status or {}, items or [], cluster, vdm)
    except (recovery.RecoveryError, KeyError, ValueError) as err:
        raise AnsibleFilterError(f"cannot recover: {err}") from err


def recovery_checked(plan, sources, disks):
    """The plan less the VMs that still run where they were, or whose disks a live
    client holds or that are missing; with the dead clients to fence."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import recovery
    return recovery.after_lock_check(recovery.after_source_check(plan, sources or {}),
                                     disks or {})


def recovery_outcome(plan, starts):
    """The records and history events of the starts (libvirt_domain's batch)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import recovery
    started = batch_succeeded(starts)
    errors = [str(item.get("msg", "")) for item in (starts or {}).get("results") or []
              if item and item.get("failed")]
    if (starts or {}).get("failed") and not errors:
        errors = [str(starts.get("msg", "failed"))]
    return recovery.outcome(plan, started, errors)


class FilterModule:
    def filters(self):
        return {"vm_state_record": vm_state_record, "vdm_ha_record": vdm_ha_record,
                "recovery_plan": recovery_plan, "recovery_checked": recovery_checked,
                "recovery_outcome": recovery_outcome}
