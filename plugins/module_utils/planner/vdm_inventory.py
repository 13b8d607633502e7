# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory read as a planning problem: hypervisors, VMs and the failures to
tolerate, validated once.

This is the contract of the inventory schema (docs/vdm.md). Pure Python with no I/O
and no Ansible. Validation collects every problem it finds, each naming the host or
VM and the field, so an operator fixes an inventory in one pass.
"""

from __future__ import annotations

import difflib
import itertools
from typing import Any

try:
    import jmespath
    from jmespath.exceptions import JMESPathError
except ImportError:  # reported by the module through missing_required_lib
    jmespath = None
    JMESPathError = Exception

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (
    RESOURCES, Host, Problem, Vm)

VM_KEYS = {"vcpus", "memory_mb", "disk_gb", "net_mbps", "ha", "priority", "preemptible",
           "anti_affinity", "hosts", "placement", "home"}
# Boot and disk fields belong to provisioning; the planner accepts and ignores them.
VM_KEYS_IGNORED = {"image", "kernel", "initrd", "cmdline", "networks", "cloud_init",
                   "autostart_on_home", "guest_agent", "on_crash", "watchdog"}
CAPACITY_KEYS = set(RESOURCES)
UNITS = {"vcpus": "a number of vCPUs", "memory_mb": "a size in MB",
         "disk_gb": "a size in GB", "net_mbps": "a bandwidth in Mbps"}


def headline(what: str, problems: list[str]) -> str:
    """A failed task's message: the one problem, or how many there are and where."""
    if len(problems) == 1:
        return f"{what}: {problems[0]}"
    return (f"{what}: {len(problems)} problems, one per line in `problems`; fix them all "
            "and run again")


def problems_text(what: str, problems: list[str]) -> str:
    """An error's text: the one problem after `what`, or each on a line of its own."""
    if len(problems) == 1:
        return headline(what, problems)
    return f"{what}, {len(problems)} problems:" + "".join(f"\n  - {p}" for p in problems)


class VdmInputError(Exception):
    """The inventory does not describe a valid planning problem; `problems` says where."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems_text("invalid VDM input", problems))
        self.problems = problems


def vm_field(name: str, key: str | None = None) -> str:
    """Where a VM's setting is in the inventory: `yasco_vms.web1.memory_mb`."""
    return f"yasco_vms.{name}" + (f".{key}" if key else "")


def _number(value: Any, where: str, problems: list[str], *, positive: bool,
            integer: bool = False) -> float | None:
    kind = "an integer" if integer else "a number"
    if value is None:  # `memory_mb:` with nothing after it
        problems.append(f"{where}: is empty; give it {kind}")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (integer and not float(value).is_integer()):
        problems.append(f"{where}: must be {kind}, got {value!r}")
        return None
    if value < 0 or (positive and value == 0):
        problems.append(f"{where}: must be {'positive' if positive else 'zero or more'}, "
                        f"got {value!r}")
        return None
    return float(value)


def _resources(spec: Any, where: str, problems: list[str], *, required: tuple[str, ...]
               ) -> dict[str, float]:
    if spec is None:
        if required:
            problems.append(f"{where}: missing; set it to a mapping of "
                            f"{', '.join(required)} (and optionally the others of "
                            f"{', '.join(RESOURCES)})")
        return {}
    if not isinstance(spec, dict):
        problems.append(f"{where}: must be a mapping of {', '.join(RESOURCES)}, got {spec!r}")
        return {}
    for key in sorted(set(spec) - CAPACITY_KEYS):
        problems.append(f"{where}.{key}: unknown key; known keys are {', '.join(RESOURCES)}")
    out = {}
    for key in RESOURCES:
        if key not in spec:
            if key in required:
                problems.append(f"{where}.{key}: missing; give it {UNITS[key]}")
            continue
        value = _number(spec[key], f"{where}.{key}", problems, positive=key in required)
        if value is not None:
            out[key] = value
    return out


def _hosts(hostvars: dict[str, dict], default_ratio: float, problems: list[str]
           ) -> dict[str, Host]:
    hosts = {}
    for name in sorted(hostvars):
        hv = hostvars[name]
        where = f"host {name}"
        capacity = _resources(hv.get("yasco_capacity"), f"{where}: yasco_capacity", problems,
                              required=("vcpus", "memory_mb"))
        reserved = _resources(hv.get("yasco_reserved") or {}, f"{where}: yasco_reserved",
                              problems, required=())
        ratio = hv.get("yasco_cpu_allocation_ratio", default_ratio)
        ratio = _number(ratio, f"{where}: yasco_cpu_allocation_ratio", problems, positive=True)
        domain = hv.get("yasco_failure_domain")
        if domain is not None and not isinstance(domain, str):
            problems.append(f"{where}: yasco_failure_domain: must be a string (the rack, "
                            f"room or power feed the host shares with others), got {domain!r}")
        if len(capacity) < 2 or ratio is None:
            continue
        usable = {}
        for key in RESOURCES:
            if key in capacity:
                usable[key] = capacity[key] - reserved.get(key, 0)
                if usable[key] < 0:
                    problems.append(f"{where}: yasco_reserved.{key} ({reserved[key]:g}) is "
                                    f"more than yasco_capacity.{key} ({capacity[key]:g})")
        hosts[name] = Host(name, vcpus=usable["vcpus"] * ratio, memory_mb=usable["memory_mb"],
                           net_mbps=usable.get("net_mbps"), failure_domain=domain)
    return hosts


def _allowed_hosts(name: str, spec: dict, hostvars: dict[str, dict], problems: list[str]
                   ) -> frozenset[str]:
    allowed = set(hostvars)
    where = vm_field(name)
    if "hosts" in spec:
        listed = spec["hosts"]
        if not isinstance(listed, list) or not all(isinstance(h, str) for h in listed):
            problems.append(f"{where}.hosts: must be a list of host names of "
                            f"yasco_hypervisors, got {listed!r}")
        else:
            for unknown in sorted(set(listed) - set(hostvars)):
                problems.append(f"{where}.hosts: names {unknown!r}, which is not in "
                                f"yasco_hypervisors{_did_you_mean(unknown, hostvars)}")
            allowed &= set(listed)
    expression = spec.get("placement")
    if expression is not None:
        if jmespath is None:
            raise VdmInputError([f"{where}.placement: needs the Python library jmespath"])
        try:
            compiled = jmespath.compile(expression)
            allowed = {h for h in allowed if compiled.search(hostvars[h])}
        except (JMESPathError, TypeError, ValueError) as err:
            problems.append(f"{where}.placement: {expression!r} is not a valid JMESPath "
                            f"expression: {err}")
    return frozenset(allowed)


def _vm(name: str, spec: Any, defaults: dict, hostvars: dict[str, dict],
        problems: list[str]) -> Vm | None:
    where = vm_field(name)
    if not isinstance(spec, dict):
        problems.append(f"{where}: must be a mapping, got {spec!r}")
        return None
    spec = {**{k: v for k, v in defaults.items() if k in VM_KEYS}, **spec}
    for key in sorted(set(spec) - VM_KEYS - VM_KEYS_IGNORED):
        hint = _did_you_mean(key, VM_KEYS | VM_KEYS_IGNORED)
        problems.append(f"{where}.{key}: unknown key{hint}; known keys are "
                        f"{', '.join(sorted(VM_KEYS))}")
    before = len(problems)
    sizes = {}
    for key, positive in (("vcpus", True), ("memory_mb", True), ("disk_gb", False),
                          ("net_mbps", False)):
        if key not in spec:
            if key in ("vcpus", "memory_mb"):
                problems.append(f"{where}.{key}: missing; give it {UNITS[key]}, here "
                                f"or in yasco_vm_defaults")
            continue
        value = _number(spec[key], f"{where}.{key}", problems, positive=positive)
        if value is not None:
            sizes[key] = value
    flags = {}
    for key in ("ha", "preemptible"):
        value = spec.get(key, False)
        if not isinstance(value, bool):
            problems.append(f"{where}.{key}: must be true or false, got {value!r}")
        flags[key] = value is True
    if flags["ha"] and flags["preemptible"]:
        problems.append(f"{where}: ha and preemptible exclude each other (a preemptible VM "
                        "is stopped to make room, an HA VM is restarted); set one of them "
                        "to false")
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        problems.append(f"{where}.priority: must be an integer (higher starts first), "
                        f"got {priority!r}")
    labels = spec.get("anti_affinity", [])
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        problems.append(f"{where}.anti_affinity: must be a list of labels, got {labels!r}")
        labels = []
    allowed = _allowed_hosts(name, spec, hostvars, problems)
    home = spec.get("home")
    if home is not None:
        if home not in hostvars:
            problems.append(f"{where}.home: {home!r} is not in yasco_hypervisors"
                            f"{_did_you_mean(home, hostvars)}")
        elif home not in allowed:
            problems.append(f"{where}.home: {home!r} is not allowed by the VM's hosts or "
                            f"placement")
    if len(problems) > before:
        return None
    if not allowed:
        problems.append(f"{where}: no hypervisor is allowed by its hosts and placement; "
                        f"widen one of them")
        return None
    return Vm(name, vcpus=sizes["vcpus"], memory_mb=sizes["memory_mb"],
              disk_gb=sizes.get("disk_gb", 0), net_mbps=sizes.get("net_mbps", 0),
              ha=flags["ha"], priority=priority, preemptible=flags["preemptible"],
              anti_affinity=frozenset(labels), allowed=allowed, home=home)


def _did_you_mean(name: str, known) -> str:
    """`; did you mean 'hv1'?` for a name close to a known one, else ''."""
    close = difflib.get_close_matches(str(name), sorted(map(str, known)), n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


def _largest(hosts) -> str:
    """What the biggest of `hosts` (by memory) holds for VMs, for a VM that fits none."""
    biggest = max(hosts, key=lambda host: (host.memory_mb, host.vcpus), default=None)
    if biggest is None:
        return ""
    return (f"; the largest, {biggest.name}, holds {biggest.vcpus:g} vCPUs and "
            f"{biggest.memory_mb:g} MB after yasco_reserved and the CPU allocation ratio")


def _failure_sets(hosts: dict[str, Host], x: int, domains: int) -> tuple[frozenset[str], ...]:
    sets = {frozenset(c) for k in range(1, x + 1) for c in itertools.combinations(hosts, k)}
    if domains:
        by_domain: dict[str, set[str]] = {}
        for host in hosts.values():
            if host.failure_domain is not None:
                by_domain.setdefault(host.failure_domain, set()).add(host.name)
        sets |= {frozenset(members) for members in by_domain.values()}
    return tuple(sorted(sets, key=lambda s: (len(s), sorted(s))))


def load_problem(hostvars: dict[str, dict], global_vars: dict[str, Any]) -> Problem:
    """Validate the inventory and return the planning problem.

    `hostvars` maps each host of yasco_hypervisors to its variables; `global_vars`
    holds yasco_vms, yasco_vm_defaults and the yasco_* settings.
    """
    problems: list[str] = []
    if not hostvars:
        raise VdmInputError(["yasco_hypervisors: the group has no hosts"])
    ratio = _number(global_vars.get("yasco_cpu_allocation_ratio", 1.0),
                    "yasco_cpu_allocation_ratio", problems, positive=True) or 1.0
    x = global_vars.get("yasco_failures_to_tolerate", 1)
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        problems.append(f"yasco_failures_to_tolerate: must be an integer of 0 or more, got {x!r}")
        x = 0
    elif x >= len(hostvars):
        problems.append(f"yasco_failures_to_tolerate: {x} failures of {len(hostvars)} "
                        "hypervisors would leave none to fail over to; add hypervisors or "
                        "lower it")
    domains = global_vars.get("yasco_failure_domains_to_tolerate", 0)
    if domains not in (0, 1) or isinstance(domains, bool):
        problems.append(f"yasco_failure_domains_to_tolerate: must be 0 or 1, got {domains!r}")
        domains = 0
    hosts = _hosts(hostvars, ratio, problems)
    if domains and any(h.failure_domain is None for h in hosts.values()):
        missing = sorted(h.name for h in hosts.values() if h.failure_domain is None)
        problems.append(f"yasco_failure_domains_to_tolerate is 1 but hosts "
                        f"{', '.join(missing)} have no yasco_failure_domain")
    vm_specs = global_vars.get("yasco_vms", {})
    defaults = global_vars.get("yasco_vm_defaults", {}) or {}
    if not isinstance(vm_specs, dict):
        raise VdmInputError([f"yasco_vms: must be a mapping of VM name to settings, "
                             f"got {type(vm_specs).__name__}"])
    vms = {}
    for name in sorted(vm_specs):
        vm = _vm(str(name), vm_specs[name], defaults, hostvars, problems)
        if vm is None:
            continue
        candidates = [vm.home] if vm.home else sorted(vm.allowed)
        fitting = [h for h in candidates if h in hosts and not hosts[h].overruns([vm])]
        if not fitting:
            problems.append(f"{vm_field(name)}: larger than every hypervisor it may run on "
                            f"({vm.vcpus:g} vCPUs, {vm.memory_mb:g} MB"
                            + (f", {vm.net_mbps:g} Mbps" if vm.net_mbps else "") + ")"
                            + _largest(hosts[h] for h in candidates if h in hosts))
        vms[vm.name] = vm
    if problems:
        raise VdmInputError(problems)
    return Problem(hosts, vms, x, domains, _failure_sets(hosts, x, domains))
