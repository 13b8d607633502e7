#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""etcd's housekeeping: compact its history, defragment its members one at a time and
disarm a NOSPACE alarm once there is room again. The client belongs to
module_utils/adapters/etcd.py, its errors to etcd_errors.py beside it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_maintenance
short_description: Compact etcd, defragment its members one at a time and disarm NOSPACE
version_added: 0.1.0
description:
  - etcd keeps every revision of every key until it is compacted, and a compacted
    database file keeps its size until it is defragmented. The YASCO agents rewrite
    their liveness keys twice a second, so a cluster whose members run without
    C(--auto-compaction-*) fills its quota (C(--quota-backend-bytes), 2 GiB by
    default) in days. etcd then raises the C(NOSPACE) alarm and refuses every write
    until an operator frees space and disarms it.
  - This module does that, in order. It compacts the history up to the current
    revision (O(compact)); defragments each member whose file is at least
    O(defragment_free_percent) free, or every member while an alarm stands, one at a
    time, since a member answers nothing while it is defragmented; then, when every
    member's file is below O(quota_bytes) again, disarms the C(NOSPACE) alarms
    (O(disarm)).
  - Run it on a schedule (the members' own auto-compaction does the compacting; the
    defragmentation gives the space back to the file system), and at once after an
    C(etcd_alarm) event. It needs etcd's root user when authentication is on.
  - A member that does not answer is left out and listed in RV(unreachable); the
    others are still maintained.
author:
  - YASCO developers (@yasco)
options:
  compact:
    description: Compact the history of every key up to the current revision first.
    type: bool
    default: true
  defragment_free_percent:
    description:
      - Defragment a member when at least this share of its database file, and at
        least 1 MiB, is free (after the compaction). Every member is defragmented
        while an alarm stands.
    type: float
    default: 20
  disarm:
    description:
      - Disarm the C(NOSPACE) alarms once every member's file is below 90 % of
        O(quota_bytes) (nearer to it, etcd would raise the alarm again within
        minutes). A member still over that fails the task, naming the member, and
        nothing is disarmed.
    type: bool
    default: true
  quota_bytes:
    description:
      - The members' C(--quota-backend-bytes). etcd does not say it, and raises the
        alarm again at the next write if a member is still over it.
    type: int
    default: 2147483648
  defragment_timeout:
    description: Seconds to wait for one member's defragmentation.
    type: float
    default: 300
attributes:
  check_mode:
    details:
      - It reads the alarms and each member's size, and returns what it would do.
  diff_mode:
    support: none
extends_documentation_fragment:
  - yasco.cluster.attributes
  - yasco.cluster.etcd
seealso:
  - module: yasco.cluster.etcd_key
  - name: etcd's maintenance guide
    description: Compaction, defragmentation and the space quota.
    link: https://etcd.io/docs/v3.4/op-guide/maintenance/
"""

EXAMPLES = r"""
- name: Free etcd's space, one member at a time, and disarm NOSPACE
  yasco.cluster.etcd_maintenance:
    endpoints: "{{ yasco_etcd_endpoints }}"
    username: root
    password: "{{ etcd_root_password }}"
    quota_bytes: 8589934592
  register: housekeeping

- name: Say what it freed
  ansible.builtin.debug:
    msg: "{{ housekeeping.members | map(attribute='db_size') | list }}"
"""

RETURN = r"""
alarms:
  description: The alarms that stood before the run, each with C(member) (its id in
    hex) and C(alarm) (C(NOSPACE) or C(CORRUPT)).
  returned: always
  type: list
  elements: dict
  sample: [{member: 8e9e05c52164694d, alarm: NOSPACE}]
compacted_to:
  description: The revision the history was compacted to; null when it was not (not
    asked, or compacted that far already).
  returned: always
  type: int
  sample: 48211
members:
  description: Each member that answered, with C(endpoint), C(member), C(db_size_before),
    C(db_size) (its file's size now, in bytes), C(db_size_in_use) and C(defragmented).
  returned: always
  type: list
  elements: dict
disarmed:
  description: The alarms disarmed.
  returned: always
  type: list
  elements: dict
unreachable:
  description: The endpoints that did not answer, left out.
  returned: always
  type: list
  elements: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (
    EtcdClient, connect)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_module import (
    ETCD_REQUIREMENTS, etcd_run, module_argument_spec)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import run_module

ARGUMENT_SPEC = module_argument_spec(
    compact={"type": "bool", "default": True},
    defragment_free_percent={"type": "float", "default": 20.0},
    disarm={"type": "bool", "default": True},
    quota_bytes={"type": "int", "default": 2 * 1024 ** 3},
    defragment_timeout={"type": "float", "default": 300.0},
)


def refusal(params: dict[str, Any]) -> str | None:
    """Why the options do not make sense, naming the option, or None."""
    if not 0 <= params["defragment_free_percent"] <= 100:
        return (f"defragment_free_percent: must be between 0 and 100, got "
                f"{params['defragment_free_percent']}")
    if params["quota_bytes"] <= 0:
        return (f"quota_bytes: must be the members' --quota-backend-bytes in bytes, got "
                f"{params['quota_bytes']}")
    if params["defragment_timeout"] <= 0:
        return (f"defragment_timeout: must be a positive number of seconds, got "
                f"{params['defragment_timeout']}")
    return None


def _member(params: dict[str, Any], endpoint: str, timeout: float) -> EtcdClient:
    """A client of the one member at `endpoint`, with the task's credentials."""
    return connect({**params, "endpoints": [endpoint], "timeout": timeout})


# A NOSPACE alarm is disarmed only when every member's file is below this share of
# the quota: nearer to it, etcd would raise it again within minutes.
DISARM_BELOW = 0.9
# Less free space than this is not worth a member's pause.
DEFRAGMENT_MIN_FREE = 2 ** 20


def _needs_defragment(status: dict[str, Any], free_percent: float, alarmed: bool) -> bool:
    size = status["db_size"]
    free = size - status["db_size_in_use"]
    return alarmed or (free >= DEFRAGMENT_MIN_FREE and free * 100 >= free_percent * size)


def maintain(etcd: EtcdClient, params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    """Compact, defragment member by member, disarm; in check mode, what it would do."""
    alarms = etcd.alarms()
    # From the member's status, which any user may read (a range needs a role).
    revision = etcd.status()["revision"]
    compacted_to = None
    if params["compact"] and (check_mode or etcd.compact(revision)):
        compacted_to = revision
    members, unreachable = [], []
    for endpoint in etcd.endpoints:
        try:
            with _member(params, endpoint, params["timeout"]) as member:
                before = member.status()
        except EtcdError:
            unreachable.append(endpoint)
            continue
        entry = {"endpoint": endpoint, "member": before["member"],
                 "db_size_before": before["db_size"], "db_size": before["db_size"],
                 "db_size_in_use": before["db_size_in_use"], "defragmented": False}
        if _needs_defragment(before, params["defragment_free_percent"], bool(alarms)):
            entry["defragmented"] = True
            if not check_mode:
                # One member at a time: it answers nothing until it is done.
                with _member(params, endpoint, params["defragment_timeout"]) as member:
                    member.defragment()
                    after = member.status()
                entry.update(db_size=after["db_size"], db_size_in_use=after["db_size_in_use"])
        members.append(entry)
    disarmed = []
    if params["disarm"] and alarms:
        over = [m for m in members if m["db_size"] >= DISARM_BELOW * params["quota_bytes"]]
        if over and not check_mode:
            raise EtcdError(
                "; ".join(f"etcd member {m['member']} at {m['endpoint']}: its database is "
                          f"{m['db_size']} bytes after defragmentation, "
                          f"{100 * m['db_size'] / params['quota_bytes']:.0f} % of quota_bytes "
                          f"{params['quota_bytes']}" for m in over)
                + ": delete keys that are not needed, or raise --quota-backend-bytes on every "
                  "member (and quota_bytes here); the alarm is left standing")
        disarmed = [alarm for alarm in alarms if alarm["alarm"] == "NOSPACE"]
        if not check_mode:
            for alarm in disarmed:
                etcd.disarm(alarm)
    changed = bool(compacted_to is not None or disarmed
                   or any(m["defragmented"] for m in members))
    return {"changed": changed, "alarms": alarms, "compacted_to": compacted_to,
            "members": members, "disarmed": disarmed, "unreachable": unreachable}


def main(module_class=AnsibleModule) -> None:
    module = module_class(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, etcd_run(maintain, refusal), EtcdError, ETCD_REQUIREMENTS)


if __name__ == "__main__":
    main()
