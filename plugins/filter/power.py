# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of the emergency shutdown and the cold start (module_utils/stories/power.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

# Each filter imports its story's module when it runs, not when this file loads:
# Ansible loads every filter file of the collection, in every task's worker, to find
# any one filter (docs/architecture.md, "Filters").


def emergency_shutdown_plan(status, vdm, items, cluster=etcd_keys.DEFAULT_CLUSTER, at=""):
    """Every running VM by tier, lowest first, and the markers to set."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import power
    try:
        return power.shutdown_plan(status or {}, vdm or {}, items or [], cluster, str(at))
    except (power.PowerError, ValueError) as err:
        raise AnsibleFilterError(f"cannot plan the emergency shutdown: {err}") from err


def emergency_tier_timeout(deadline_at, now, tiers_left, longest=60, reserve=20):
    """Seconds the next tier's guests get to shut down before they are destroyed."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import power
    try:
        return power.tier_timeout(float(deadline_at), float(now), int(tiers_left),
                                  float(longest), float(reserve))
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"emergency_tier_timeout: {err}") from err


def emergency_shutdown_outcome(plan, tier_results):
    """Each VM's fate, and the records of those that are off, from the registered loop
    of the tiers' libvirt_domain batches."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import power
    results = [r for r in (tier_results or {}).get("results") or [] if not r.get("skipped")]
    fates = power.shutdown_fates(plan, results)
    return {"fates": fates, "records": power.stopped_records(fates, plan),
            "not_off": [f for f in fates if not f["ok"]],
            "events": [{"vm": f["vm"], "host": f["host"], "details": {"fate": f["fate"]}}
                       for f in fates],
            "lines": [f"{f['tier']}: {f['vm']} on {f['host']}: {f['fate']}" for f in fates]}


def cold_start_plan(status, vdm, items, without=None, cluster=etcd_keys.DEFAULT_CLUSTER):
    """What a cold start waits for, lifts, starts by tier and leaves down."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import power
    if isinstance(without, str):
        without = [w.strip() for w in without.split(",") if w.strip()]
    try:
        return power.cold_start_plan(status or {}, vdm or {}, items or [],
                                     list(without or []), cluster)
    except (power.PowerError, ValueError) as err:
        raise AnsibleFilterError(f"cannot cold start: {err}") from err


def stale_disk_locks(image_results, dead_at=None):
    """The disk locks no live client holds, from a loop of rbd_image_info results;
    those of clients on the addresses `dead_at` too."""
    from ansible_collections.yasco.cluster.plugins.module_utils.stories import power
    return power.stale_locks((image_results or {}).get("results") or [], list(dead_at or []))


class FilterModule:
    def filters(self):
        return {"emergency_shutdown_plan": emergency_shutdown_plan,
                "emergency_tier_timeout": emergency_tier_timeout,
                "emergency_shutdown_outcome": emergency_shutdown_outcome,
                "cold_start_plan": cold_start_plan, "stale_disk_locks": stale_disk_locks}
