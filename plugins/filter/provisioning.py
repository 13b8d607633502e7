# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter that tells provisioning what to do for each VM."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils import etcd_access, etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.drain import (
    DrainError, plan as drain)
from ansible_collections.yasco.cluster.plugins.module_utils.evacuation import (
    EvacuationError, after_fence, plan as evacuation)
from ansible_collections.yasco.cluster.plugins.module_utils.power_fence import (
    PowerFenceError, outcome as power_outcome)
from ansible_collections.yasco.cluster.plugins.module_utils.return_home import (
    ReturnHomeError, plan as return_home)
from ansible_collections.yasco.cluster.plugins.module_utils.rebalance import (
    RebalanceError, migration_settings as check_migration_settings, plan_moves,
    settled_records, wave_steps, waves)
from ansible_collections.yasco.cluster.plugins.module_utils.vm_provisioning import (
    ProvisioningError, by_record, provisioning_items)


def vm_provisioning(vms, vdm, defaults, cluster, uris):
    try:
        return provisioning_items(vms or {}, vdm or {}, defaults or {}, cluster or {},
                                  uris or {})
    except ProvisioningError as err:
        raise AnsibleFilterError(str(err)) from err


def _key(name, make, *args, **kwargs):
    """An etcd key from etcd_keys, a bad name becoming the filter `name`'s error."""
    try:
        return make(*args, **kwargs)
    except ValueError as err:
        raise AnsibleFilterError(f"{name}: {err}") from err


def vm_record_key(vm, cluster=etcd_keys.DEFAULT_CLUSTER, kind="record"):
    """The etcd key of a VM's record, or of its requested state."""
    makers = {"record": etcd_keys.vm_key, "requested": etcd_keys.requested_key}
    if kind not in makers:
        raise AnsibleFilterError(f"vm_record_key: kind must be one of {', '.join(makers)}, "
                                 f"got {kind!r}")
    return _key("vm_record_key", makers[kind], vm, cluster=cluster)


def host_key(host, kind, cluster=etcd_keys.DEFAULT_CLUSTER):
    """The etcd key of one of a host's records: alive, registered, maintenance or
    frozen."""
    makers = {"alive": etcd_keys.alive_key, "registered": etcd_keys.registered_key,
              "maintenance": etcd_keys.maintenance_key, "frozen": etcd_keys.frozen_key}
    if kind not in makers:
        raise AnsibleFilterError(f"host_key: kind must be one of {', '.join(makers)}, "
                                 f"got {kind!r}")
    return _key("host_key", makers[kind], host, cluster=cluster)


def ha_disarmed_key(cluster=etcd_keys.DEFAULT_CLUSTER):
    """The etcd key whose presence pauses automatic evacuation cluster-wide."""
    return _key("ha_disarmed_key", etcd_keys.disarmed_key, cluster=cluster)


def vdm_version_key(cluster=etcd_keys.DEFAULT_CLUSTER):
    return _key("vdm_version_key", etcd_keys.vdm_version_key, cluster=cluster)


def vm_records_prefix(cluster=etcd_keys.DEFAULT_CLUSTER):
    return _key("vm_records_prefix", etcd_keys.vms_prefix, cluster=cluster)


def rebalance_waves(status_vms, vdm, concurrency=2, cluster=etcd_keys.DEFAULT_CLUSTER,
                    per_host=0):
    """Waves of live migrations from where VMs run (cluster_status's vms) to their
    homes in `vdm`."""
    current = {vm["name"]: vm["running_on"][0] for vm in status_vms or []
               if len(vm.get("running_on") or []) == 1}
    try:
        moves = plan_moves(current, vdm or {})
        grouped = waves(moves, current, vdm or {}, max(1, int(concurrency)), int(per_host))
        return wave_steps(grouped, {vm["name"]: vm for vm in status_vms or []}, cluster)
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


def evacuation_powered(power_result, failed, policy="none", confirmed=None):
    """What the power fencing of the failed hosts came to (module_utils/power_fence.py)."""
    try:
        return power_outcome(failed or [], (power_result or {}).get("results") or [],
                             policy, confirmed or [])
    except PowerFenceError as err:
        raise AnsibleFilterError(str(err)) from err


def migration_settings(given):
    """yasco_migration checked: the libvirt_domain module's `migration`, the timeout and
    the limit per host (module_utils/rebalance.py)."""
    try:
        return check_migration_settings(given)
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from err


def rebalance_settled(failed_moves, status_vms):
    """The records of the moves that failed, where libvirt says their VMs run."""
    return settled_records(failed_moves or [], status_vms or [])


def rebalance_outcome(waited):
    """The moves of a wave that were made and those that failed, with why, from the
    registered loop of async_status over its migrations."""
    outcome = {"moved": [], "failed": [], "errors": []}
    for result in (waited or {}).get("results") or []:
        move = (result.get("item") or {}).get("item") or {}
        if result.get("failed"):
            outcome["failed"].append(move)
            outcome["errors"].append(f"{move.get('label', move.get('vm'))}: "
                                     f"{result.get('msg', 'failed')}")
        else:
            # The history keeps the migration's figures (guest pause, total time).
            figures = result.get("migration") or {}
            if figures and move.get("event"):
                event = move["event"]
                move = {**move, "event": {**event, "details": {
                    **(event.get("details") or {}), **figures}}}
            outcome["moved"].append(move)
    return outcome


def drain_plan(status, vdm, host, cluster=etcd_keys.DEFAULT_CLUSTER, concurrency=2,
               per_host=0):
    """The drain of `host` for maintenance (see module_utils/drain.py)."""
    try:
        return drain(status or {}, vdm or {}, host, cluster, int(concurrency), int(per_host))
    except (DrainError, ValueError) as err:
        raise AnsibleFilterError(f"cannot drain {host}: {err}") from err


def return_home_plan(status, vdm, items, host, cluster=etcd_keys.DEFAULT_CLUSTER,
                     concurrency=2, per_host=0):
    """The return home of `host` once it is back (see module_utils/return_home.py)."""
    try:
        return return_home(status or {}, vdm or {}, items or [], host, cluster,
                           int(concurrency), int(per_host))
    except (ReturnHomeError, ValueError) as err:
        raise AnsibleFilterError(f"cannot return {host} home: {err}") from err


def batch_succeeded(result):
    """The names of the items a batch task (with keep_going) did, from its registered
    result; none when it was skipped."""
    return [item.get("name") for item in (result or {}).get("results") or []
            if item and not item.get("failed")]


def batch_errors(result):
    """Why a batch task failed, as a list of one message; empty when it did not."""
    return [result.get("msg", "failed")] if (result or {}).get("failed") else []


def etcd_access_commands(hosts, cluster=etcd_keys.DEFAULT_CLUSTER):
    """The etcdctl commands that create YASCO's etcd roles and users for `hosts`."""
    try:
        return etcd_access.as_script(list(hosts), cluster).splitlines()
    except ValueError as err:
        raise AnsibleFilterError(f"etcd_access_commands: {err}") from err


def provisioning_by_record(items, kvs, host, cluster=etcd_keys.DEFAULT_CLUSTER):
    """A host's provisioning items sorted by what etcd records of each VM."""
    try:
        return by_record(list(items or []), list(kvs or []), host, cluster)
    except ValueError as err:
        raise AnsibleFilterError(f"provisioning_by_record: {err}") from err


class FilterModule:
    def filters(self):
        return {"vm_provisioning": vm_provisioning, "vm_record_key": vm_record_key,
                "rebalance_waves": rebalance_waves, "vdm_version_key": vdm_version_key,
                "vm_records_prefix": vm_records_prefix, "evacuation_plan": evacuation_plan,
                "evacuation_fenced": evacuation_fenced, "return_home_plan": return_home_plan,
                "evacuation_powered": evacuation_powered,
                "rebalance_settled": rebalance_settled,
                "rebalance_outcome": rebalance_outcome, "drain_plan": drain_plan,
                "migration_settings": migration_settings,
                "host_key": host_key, "ha_disarmed_key": ha_disarmed_key,
                "batch_succeeded": batch_succeeded, "batch_errors": batch_errors,
                "etcd_access_commands": etcd_access_commands,
                "provisioning_by_record": provisioning_by_record}
