# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan the VDM on the controller from the inventory and write it as group vars.

It is an action plugin because planning needs every hypervisor's variables (a VM's
`placement` is evaluated against them) and writes into the inventory on the
controller; nothing runs on a managed host.
"""

from __future__ import annotations

import json
import os

import yaml

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import atomic_file
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_quorum import (
    quorum_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner import vdm_document, vdm_what_if
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_check import check
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (
    VdmInputError, headline, load_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    OBJECTIVES, VdmInfeasible, VdmNotFound, problem_digest)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import np, plan

ARGUMENT_SPEC = {
    "group": {"type": "str", "default": "yasco_hypervisors"},
    "path": {"type": "path"},
    "keep_homes": {"type": "bool", "default": True},
    "rebalance_moves": {"type": "int", "default": 0},
    "verify": {"type": "bool", "default": False},
    "time_limit": {"type": "float", "default": 60.0},
    "objective": {"type": "str", "default": "balance", "choices": list(OBJECTIVES)},
    "what_if": {"type": "str"},
    "what_if_flavour": {"type": "str"},
}
GLOBAL_VARS = ("yasco_vms", "yasco_vm_defaults", "yasco_failures_to_tolerate",
               "yasco_failure_domains_to_tolerate", "yasco_cpu_allocation_ratio")
# Not a hypervisor's own business, and large: left out of what placement sees.
SKIPPED_HOST_VARS = set(GLOBAL_VARS) | {"yasco_vdm", "hostvars", "groups", "vars",
                                        "omit", "environment"}
HEADER = ("# Written by yasco.cluster.vdm_plan (playbooks/plan.yml): re-plan rather than\n"
          "# edit it; the evacuation and provisioning playbooks read it as it is.\n")
# The message's note on a plan the greedy search did not find.
_FOUND_BY = {"exact": " (found by the exact search)",
             "repair": " (found by repairing the greedy plan a few hosts at a time)",
             "binding": " (found by the exact search over the failure sets that bind)",
             "afresh": " (planned afresh: no plan that keeps more VMs at home was found "
                       "in the time limit)"}


def _native(value):
    """Plain Python data (no templating wrappers), as planning and YAML expect."""
    return json.loads(json.dumps(value, default=str))


def _default_path(task_vars: dict) -> str:
    sources = task_vars.get("ansible_inventory_sources") or []
    source = next((s for s in sources if os.path.exists(s)), None)
    if source is None:
        raise AnsibleActionFail("cannot tell where the inventory is: set path")
    root = source if os.path.isdir(source) else os.path.dirname(source)
    return os.path.join(root, "group_vars", "all", "yasco_vdm.yml")


def _read(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            content = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as err:
        raise AnsibleActionFail(f"cannot read the current VDM {path}: {err}") from err
    vdm = content.get("yasco_vdm") if isinstance(content, dict) else None
    if not isinstance(vdm, dict):
        raise AnsibleActionFail(f"{path} holds no yasco_vdm mapping; move it aside and "
                                "plan again")
    return vdm


def _refuse_masking(path: str) -> None:
    """Ansible reads group_vars/all/ or group_vars/all.yml, never both: writing the
    directory next to the file would silently drop every variable in the file."""
    directory = os.path.dirname(path)
    for suffix in ("", ".yml", ".yaml", ".json"):
        sibling = directory + suffix
        if os.path.isfile(sibling):
            raise AnsibleActionFail(
                f"{sibling} exists, and Ansible ignores it once {directory}/ exists: move "
                f"it to {directory}/main.yml (same content) and plan again, or set path")


def _dump(vdm: dict) -> str:
    return HEADER + "---\n" + yaml.safe_dump({"yasco_vdm": vdm}, sort_keys=False,
                                             default_flow_style=False, width=100)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if np is None:
            raise AnsibleActionFail("yasco.cluster.vdm_plan needs the Python library numpy "
                                    "on the controller (pip install numpy)")
        if args["rebalance_moves"] < 0:
            raise AnsibleActionFail("rebalance_moves: must be 0 or more")
        if args["time_limit"] <= 0:
            raise AnsibleActionFail(f"time_limit: must be more than 0 seconds, got "
                                    f"{args['time_limit']:g} (yasco_plan_time_limit)")
        group = args["group"]
        members = (task_vars.get("groups") or {}).get(group) or []
        if not members:
            raise AnsibleActionFail(f"the inventory group {group} has no hosts: list the "
                                    "hypervisors in it")
        hostvars = task_vars["hostvars"]
        first = hostvars[members[0]]
        global_vars = _native({k: first[k] for k in GLOBAL_VARS if k in first})
        per_host = _native({h: {k: hostvars[h][k] for k in hostvars[h]
                                if k not in SKIPPED_HOST_VARS}
                            for h in members})
        if args["what_if"]:
            return self._what_if(result, per_host, global_vars, args)
        path = args["path"] or _default_path(task_vars)
        _refuse_masking(path)
        previous = _read(path)

        try:
            problem = load_problem(per_host, global_vars)
        except VdmInputError as err:
            result.update(failed=True, problems=err.problems, _ansible_verbose_always=True,
                          msg=headline("invalid VDM input", err.problems))
            return result
        quorum = quorum_problem(_native(first.get("yasco_etcd_endpoints") or []),
                                {h: {h, str(v.get("ansible_host", h))}
                                 for h, v in per_host.items()},
                                problem.failure_sets)
        if quorum:
            result.update(failed=True, problems=[quorum], msg=f"invalid VDM input: {quorum}")
            return result
        if args["verify"]:
            return self._verify(result, path, previous, problem)
        if (previous and previous.get("digest") == problem_digest(problem)
                and vdm_document.objective_of(previous) == args["objective"]
                and not args["rebalance_moves"] and not check(problem, previous)):
            result.update(changed=False, path=path, version=previous.get("version"),
                          moved=[], msg=f"VDM version {previous.get('version')} is current")
            return result
        keep = (previous or {}).get("home") if args["keep_homes"] else None
        # Three answers; only a plan is written, so the map on file stays as it was.
        try:
            planned = plan(problem, previous_home=keep,
                           previous_failover=(previous or {}).get("failover") if keep else None,
                           rebalance_moves=args["rebalance_moves"],
                           time_limit=args["time_limit"],
                           objective=str(args["objective"]),  # untagged, for YAML
                           current_home=(previous or {}).get("home"))
        except VdmInfeasible as err:
            result.update(failed=True, answer="infeasible", msg=f"no VDM can be planned: {err}")
            return result
        except VdmNotFound as err:
            kept = f"; the VDM at {path} is left as it was" if previous else ""
            result.update(failed=True, answer="not_found",
                          msg=f"no VDM found within {args['time_limit']:g} s: {err}{kept}")
            return result
        vdm = vdm_document.build(problem, planned, previous)
        violations = check(problem, vdm)
        if violations:  # a planner bug: never write a map that breaks an invariant
            result.update(failed=True, violations=violations[:20],
                          msg="the planned VDM fails its own check; nothing was written")
            return result

        before = _dump(previous) if previous else ""
        after = _dump(vdm)
        changed = before != after
        if changed and not self._task.check_mode:
            # A reader (a playbook starting) sees the old map or the new one.
            atomic_file.replace(path, after.encode("utf-8"))
        if self._task.diff and changed:
            result["diff"] = {"before": before, "after": after,
                              "before_header": path, "after_header": path}
        old_home = (previous or {}).get("home") or {}
        moved = sorted(n for n, h in vdm["home"].items() if old_home.get(n) not in (None, h))
        result.update(
            changed=changed, path=path, version=vdm["version"], digest=vdm["digest"],
            home=vdm["home"], reserve=vdm["reserve"], moved=moved, answer="plan",
            method=planned.method, preemptions=planned.preemptions,
            msg=(f"VDM version {vdm['version']}: {len(vdm['home'])} VMs on "
                 f"{len(problem.hosts)} hypervisors, {len(problem.failure_sets)} failure "
                 f"sets covered, {len(moved)} VMs move home"
                 + _FOUND_BY.get(planned.method, "")))
        return result

    @staticmethod
    def _what_if(result: dict, per_host: dict, global_vars: dict, args: dict) -> dict:
        """Only answer how much HA load fits in each scenario; write nothing."""
        try:
            probe, outcomes = vdm_what_if.what_if(per_host, global_vars, args["what_if"],
                                                  args["what_if_flavour"], args["time_limit"])
        except VdmInputError as err:
            result.update(failed=True, problems=err.problems, _ansible_verbose_always=True,
                          msg=headline("invalid what-if", err.problems))
            return result
        lines = vdm_what_if.table(probe, outcomes)
        result.update(changed=False, flavour=probe, table=lines,
                      what_if=[vars(o) for o in outcomes],
                      msg="what if (nothing written):\n" + "\n".join(lines))
        return result

    @staticmethod
    def _verify(result: dict, path: str, previous: dict | None, problem) -> dict:
        """Only say whether the map on file is the one for the inventory as it is."""
        if previous is None:
            raise AnsibleActionFail(f"no VDM at {path}: plan one first (playbooks/plan.yml)")
        if previous.get("digest") != problem_digest(problem):
            raise AnsibleActionFail(
                f"the VDM at {path} (version {previous.get('version')}) was planned from "
                "other inputs than the inventory holds now (hypervisors, VMs or settings "
                "changed): plan again (playbooks/plan.yml), then run this again")
        violations = check(problem, previous)
        if violations:
            raise AnsibleActionFail(f"the VDM at {path} breaks its invariants: "
                                    f"{'; '.join(violations[:5])}; plan again")
        result.update(changed=False, path=path, version=previous.get("version"), moved=[],
                      msg=f"VDM version {previous.get('version')} is current")
        return result
