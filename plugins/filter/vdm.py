# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read the Virtual Distribution Map (yasco_vdm) in playbooks."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# Each filter imports its story's module when it runs, not when this file loads:
# Ansible loads every filter file of the collection, in every task's worker, to find
# any one filter (docs/architecture.md, "Filters").


def _hosts(failed, name: str) -> list[str]:
    if isinstance(failed, str):
        failed = [h for h in failed.split(",") if h]
    if not isinstance(failed, (list, tuple, set)) or not all(isinstance(h, str) for h in failed):
        raise AnsibleFilterError(f"{name}: failed hosts must be a list of host names or a "
                                 f"comma-separated string, got {failed!r}")
    return list(failed)


def vdm_failover(vdm, failed):
    from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import (
        VdmView)
    view = VdmView(vdm)
    if not view.planned:
        raise AnsibleFilterError("vdm_failover: the input is not a VDM (yasco_vdm); "
                                 "plan one with playbooks/plan.yml")
    hosts = _hosts(failed, "vdm_failover")
    unknown = sorted(set(hosts) - set(view.hosts))
    if unknown:
        raise AnsibleFilterError(f"vdm_failover: {', '.join(unknown)} is not a hypervisor "
                                 "of this VDM; re-plan if hypervisors were added")
    return view.failover_for(hosts)


def vdm_failure_key(failed):
    from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
        failure_set_key)
    return failure_set_key(set(_hosts(failed, "vdm_failure_key")))


class FilterModule:
    def filters(self):
        return {"vdm_failover": vdm_failover, "vdm_failure_key": vdm_failure_key}
