# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of playbooks/evacuate.yml (module_utils/stories/evacuation.py): the
hypervisors' declared Ceph addresses, what to fence, stop and start, what the fence and
the BMCs left to start, and what came of it."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

# Each filter imports its story's module when it runs, not when this file loads:
# Ansible loads every filter file of the collection, in every task's worker, to find
# any one filter (docs/architecture.md, "Filters").


def hypervisor_ceph_addrs(hypervisors):
    """Hypervisor name -> its Ceph addresses as the inventory declares them
    (yasco_ceph_addrs, checked), from each hypervisor's hostvars: the only addresses a
    fence of it blocklists."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import evacuation
    try:
        return evacuation.declared_ceph_addrs(list(hypervisors or []))
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from err


def evacuation_plan(status, vdm, items, cluster=etcd_keys.DEFAULT_CLUSTER):
    """The evacuation of every failed hypervisor (see module_utils/stories/evacuation.py)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import evacuation
    try:
        return evacuation.plan(status or {}, vdm or {}, items or [], cluster)
    except (evacuation.EvacuationError, ValueError) as err:
        raise AnsibleFilterError(f"cannot evacuate: {err}") from err


def evacuation_refusals(evacuation, status, while_disarmed=False):
    """Why the evacuation must not go on, each reason with what to do; none when it
    may."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import refusals
    return refusals(evacuation or {}, status or {}, bool(while_disarmed))


def evacuation_fenced(evacuation, fence_result):
    """The evacuation less the VMs the fence says must not start."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import (
        after_fence)
    return after_fence(evacuation or {"start": []}, fence_result or {})


def evacuation_powered(power_result, failed, policy="none", confirmed=None):
    """What the power fencing of the failed hosts came to (module_utils/adapters/power_fence.py)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.adapters import power_fence
    try:
        return power_fence.outcome(failed or [], (power_result or {}).get("results") or [],
                                   policy, confirmed or [])
    except power_fence.PowerFenceError as err:
        raise AnsibleFilterError(str(err)) from err


def evacuation_outcome(evacuation, started, fence=None, powered=None, triggered=None,
                       times=None):
    """What the evacuation came to: the VMs started and not, the history's events, the
    summary's lines and the notification's severity and details
    (module_utils/stories/evacuation.py)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories.evacuation import outcome
    return outcome(evacuation or {}, list(started or []), fence or {}, powered or {},
                   None if triggered is None else list(triggered), times or {})


class FilterModule:
    def filters(self):
        return {"hypervisor_ceph_addrs": hypervisor_ceph_addrs,
                "evacuation_plan": evacuation_plan, "evacuation_refusals": evacuation_refusals,
                "evacuation_fenced": evacuation_fenced,
                "evacuation_powered": evacuation_powered,
                "evacuation_outcome": evacuation_outcome}
