# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether Ceph can serve VM disks: its health, and the checks that mean it cannot.

Ceph's overall status is a poor gate on its own. HEALTH_WARN covers harmless things
(a clock skew, an OSD down in a replicated pool) and also PGs that cannot serve I/O;
HEALTH_ERR covers a full OSD. So the caller names the checks that block, and the
answer is ready when none of them is raised and the status is not HEALTH_ERR.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import ReadOnlyRun

# PGs inactive or down (I/O to them blocks), and full OSDs or pools (writes fail).
BLOCKING_CHECKS = ["PG_AVAILABILITY", "OSD_FULL", "POOL_FULL"]


class HealthInfo(ReadOnlyRun):
    """One run of the ceph_health_info module: read the health, change nothing."""

    def run(self) -> dict[str, Any]:
        with ceph.connect(self.params) as cluster:
            health = cluster.mon("health") or {}
        return judged(health, self.params["blocking_checks"])


def judged(health: dict[str, Any], blocking_checks: list[str]) -> dict[str, Any]:
    """The module's result from `ceph health -f json`."""
    checks = {name: {"severity": check.get("severity", ""),
                     "summary": (check.get("summary") or {}).get("message", "")}
              for name, check in (health.get("checks") or {}).items()}
    status = health.get("status", "HEALTH_UNKNOWN")
    blocking = sorted(name for name in checks if name in set(blocking_checks))
    reasons = [f"{name}: {checks[name]['summary']}" for name in blocking]
    if status == "HEALTH_ERR":
        reasons.insert(0, "HEALTH_ERR")
    return {"changed": False, "status": status, "checks": checks, "blocking": blocking,
            "ready": status in ("HEALTH_OK", "HEALTH_WARN") and not blocking,
            "why_not_ready": "; ".join(reasons)}
