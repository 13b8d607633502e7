# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of the stories that live-migrate VMs: the rebalance
(module_utils/stories/rebalance.py), the drain (drain.py) and the return home (return_home.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

# Each filter imports its story's module when it runs, not when this file loads:
# Ansible loads every filter file of the collection, in every task's worker, to find
# any one filter (docs/architecture.md, "Filters").


def migration_settings(given):
    """yasco_migration checked: the libvirt_domain module's `migration`, the timeout and
    the limit per host (module_utils/stories/rebalance.py)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import rebalance
    try:
        return rebalance.migration_settings(given)
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from err


def rebalance_waves(status_vms, vdm, concurrency=2, cluster=etcd_keys.DEFAULT_CLUSTER,
                    per_host=0):
    """Waves of live migrations from where VMs run (cluster_status's vms) to their
    homes in `vdm`."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import rebalance
    current = {vm["name"]: vm["running_on"][0] for vm in status_vms or []
               if len(vm.get("running_on") or []) == 1}
    try:
        moves = rebalance.plan_moves(current, vdm or {})
        grouped = rebalance.waves(moves, current, vdm or {}, max(1, int(concurrency)),
                                  int(per_host))
        return rebalance.wave_steps(grouped, {vm["name"]: vm for vm in status_vms or []},
                                    cluster)
    except (rebalance.RebalanceError, ValueError) as err:
        raise AnsibleFilterError(f"cannot rebalance: {err}") from err


def rebalance_settled(failed_moves, status_vms):
    """The records of the moves that failed, where libvirt says their VMs run."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import rebalance
    return rebalance.settled_records(failed_moves or [], status_vms or [])


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
    """The drain of `host` for maintenance (see module_utils/stories/drain.py)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import drain
    try:
        return drain.plan(status or {}, vdm or {}, host, cluster, int(concurrency),
                          int(per_host))
    except (drain.DrainError, ValueError) as err:
        raise AnsibleFilterError(f"cannot drain {host}: {err}") from err


def return_home_plan(status, vdm, items, host, cluster=etcd_keys.DEFAULT_CLUSTER,
                     concurrency=2, per_host=0):
    """The return home of `host` once it is back (see module_utils/stories/return_home.py)."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import return_home
    try:
        return return_home.plan(status or {}, vdm or {}, items or [], host, cluster,
                                int(concurrency), int(per_host))
    except (return_home.ReturnHomeError, ValueError) as err:
        raise AnsibleFilterError(f"cannot return {host} home: {err}") from err


class FilterModule:
    def filters(self):
        return {"migration_settings": migration_settings,
                "rebalance_waves": rebalance_waves, "rebalance_settled": rebalance_settled,
                "rebalance_outcome": rebalance_outcome, "drain_plan": drain_plan,
                "return_home_plan": return_home_plan}
