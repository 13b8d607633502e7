# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capacity what-if: how much more HA load fits if the cluster changed, as Ganeti's
hspace answers for its clusters.

A scenario changes a copy of the inventory's variables; the planner then says whether
the changed cluster has a plan and how many more HA VMs of a probe flavour would fit
on top of it, found by doubling and then halving the count, each count planned as
`playbooks/plan.yml` would plan it. Nothing is written. Scenarios, each compared with
the inventory as it is:

    add-host:VCPUS:MEMORY_MB                 a hypervisor of that capacity joins
    remove-host:NAME                         that hypervisor leaves
    add-vms:COUNT:VCPUS:MEMORY_MB[:KIND]     COUNT VMs join (KIND ha, plain or
                                             preemptible; ha when not given)

Pure Python, no I/O and no Ansible.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (
    VdmInputError, load_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    VdmInfeasible, VdmNotFound)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import plan

SYNTAX = ("add-host:VCPUS:MEMORY_MB, remove-host:NAME or "
          "add-vms:COUNT:VCPUS:MEMORY_MB[:ha|plain|preemptible]")
KINDS = ("ha", "plain", "preemptible")


@dataclass
class Outcome:
    scenario: str
    hosts: int
    vms: int
    answer: str  # plan, infeasible, not_found or invalid
    fits: int  # more HA VMs of the probe flavour that still fit (0 unless a plan)
    at_least: bool  # a larger count was not settled in time: more may fit
    detail: str = ""


def _whole(text: str, what: str, item: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise VdmInputError([f"yasco_what_if: {item!r}: {what} must be a whole number "
                             f"above 0, got {text!r}; write {SYNTAX}"])
    return int(text)


def parse(spec: str) -> list[tuple[str, list[str]]]:
    """The scenarios of `spec` (comma-separated), each as its verb and arguments."""
    scenarios = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        verb, *args = item.split(":")
        if verb == "add-host" and len(args) == 2:
            _whole(args[0], "VCPUS", item)
            _whole(args[1], "MEMORY_MB", item)
        elif verb == "remove-host" and len(args) == 1 and args[0]:
            pass
        elif verb == "add-vms" and len(args) in (3, 4):
            for text, what in zip(args, ("COUNT", "VCPUS", "MEMORY_MB")):
                _whole(text, what, item)
            if len(args) == 4 and args[3] not in KINDS:
                raise VdmInputError([f"yasco_what_if: {item!r}: the kind must be one of "
                                     f"{', '.join(KINDS)}, got {args[3]!r}"])
        else:
            raise VdmInputError([f"yasco_what_if: {item!r} is not a scenario; write "
                                 f"{SYNTAX}, several separated by commas"])
        scenarios.append((verb, args))
    if not scenarios:
        raise VdmInputError([f"yasco_what_if: no scenario given; write {SYNTAX}"])
    return scenarios


def flavour(spec: str | None, global_vars: dict[str, Any]) -> dict[str, int]:
    """The probe VM: VCPUS:MEMORY_MB, or by default the most common HA VM size."""
    if spec:
        parts = spec.split(":")
        if len(parts) != 2:
            raise VdmInputError([f"yasco_what_if_flavour: write VCPUS:MEMORY_MB, got "
                                 f"{spec!r}"])
        return {"vcpus": _whole(parts[0], "VCPUS", spec),
                "memory_mb": _whole(parts[1], "MEMORY_MB", spec)}
    sizes: dict[tuple, int] = {}
    for vm in (global_vars.get("yasco_vms") or {}).values():
        if isinstance(vm, dict) and vm.get("ha") is True:
            key = (vm.get("vcpus"), vm.get("memory_mb"))
            sizes[key] = sizes.get(key, 0) + 1
    if not sizes:
        return {"vcpus": 2, "memory_mb": 4096}
    vcpus, memory = max(sizes, key=lambda k: (sizes[k], str(k)))
    return {"vcpus": vcpus, "memory_mb": memory}


def _changed(hostvars: dict, global_vars: dict, verb: str, args: list[str], item: str
             ) -> tuple[dict, dict]:
    hostvars, global_vars = copy.deepcopy(hostvars), copy.deepcopy(global_vars)
    vms = global_vars.setdefault("yasco_vms", {})
    if verb == "add-host":
        name = next(f"what-if-{i}" for i in range(len(hostvars) + 1)
                    if f"what-if-{i}" not in hostvars)
        hostvars[name] = {"yasco_capacity": {"vcpus": int(args[0]),
                                             "memory_mb": int(args[1])}}
    elif verb == "remove-host":
        if args[0] not in hostvars:
            raise VdmInputError([f"yasco_what_if: {item!r}: {args[0]} is not in "
                                 f"yasco_hypervisors ({', '.join(sorted(hostvars))})"])
        del hostvars[args[0]]
    else:
        kind = args[3] if len(args) == 4 else "ha"
        for i in range(int(args[0])):
            vms[f"what-if-vm{i}"] = {"vcpus": int(args[1]), "memory_mb": int(args[2]),
                                     "ha": kind == "ha", "preemptible": kind == "preemptible"}
    return hostvars, global_vars


def _answer(hostvars: dict, global_vars: dict, time_limit: float) -> tuple[str, str]:
    try:
        plan(load_problem(hostvars, global_vars), time_limit=time_limit)
    except VdmInputError as err:
        return "invalid", "; ".join(err.problems)
    except VdmInfeasible as err:
        return "infeasible", str(err)
    except VdmNotFound as err:
        return "not_found", str(err)
    return "plan", ""


def _most_that_fit(hostvars: dict, global_vars: dict, probe: dict[str, int],
                   time_limit: float) -> tuple[int, bool]:
    """How many probe HA VMs fit on top, and whether a larger count was left unsettled."""
    unsettled = False

    def fits(n: int) -> bool:
        nonlocal unsettled
        vms = {**global_vars.get("yasco_vms", {}),
               **{f"what-if-probe{i}": {**probe, "ha": True} for i in range(n)}}
        answer, dummy = _answer(hostvars, {**global_vars, "yasco_vms": vms}, time_limit)
        unsettled |= answer == "not_found"
        return answer == "plan"

    good, bad = 0, 1
    while fits(bad):
        good, bad = bad, bad * 2
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good, unsettled


def what_if(hostvars: dict, global_vars: dict, spec: str, probe_spec: str | None = None,
            time_limit: float = 60.0) -> tuple[dict[str, int], list[Outcome]]:
    """The probe flavour and, for the inventory as it is and each scenario of `spec`,
    the planner's answer and how many more HA VMs of that flavour fit. Each plan may
    take a tenth of `time_limit` (at least a second) in the exact search."""
    scenarios = parse(spec)
    probe = flavour(probe_spec, global_vars)
    per_plan = max(1.0, time_limit / 10)
    cases = [("as is", hostvars, global_vars)]
    for verb, args in scenarios:
        item = ":".join([verb, *args])
        cases.append((item, *_changed(hostvars, global_vars, verb, args, item)))
    outcomes = []
    for item, hosts, settings in cases:
        answer, detail = _answer(hosts, settings, per_plan)
        fits, at_least = 0, False
        if answer == "plan":
            fits, at_least = _most_that_fit(hosts, settings, probe, per_plan)
        outcomes.append(Outcome(item, len(hosts), len(settings.get("yasco_vms") or {}),
                                answer, fits, at_least, detail))
    return probe, outcomes


def table(probe: dict[str, int], outcomes: list[Outcome]) -> list[str]:
    """The outcomes as the lines of a table, one scenario a row."""
    fit = f"more HA VMs of {probe['vcpus']} vCPUs, {probe['memory_mb']} MB that fit"
    rows = [["scenario", "hosts", "VMs", "answer", fit]]
    for o in outcomes:
        rows.append([o.scenario, str(o.hosts), str(o.vms), o.answer,
                     (f"at least {o.fits}" if o.at_least else str(o.fits))
                     if o.answer == "plan" else "-"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in rows]
    return lines[:1] + ["  ".join("-" * w for w in widths)] + lines[1:]
