# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planning problem and the planner's answers: hypervisors, VMs and the failures to
tolerate; a plan, or why there is none.

Everything here is pure Python with no I/O and no Ansible, so the planner and its
checker can be used and tested directly. The inventory is read into a Problem, and
checked, by vdm_inventory; the independent checker (vdm_check) imports this module
alone: it trusts nothing of the search whose plans it checks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

RESOURCES = ("vcpus", "memory_mb", "net_mbps")


@dataclass(frozen=True)
class Host:
    name: str
    # Usable capacity: capacity minus reserved, vCPUs times the allocation ratio.
    # net_mbps is None when the host does not declare it: then it is not constrained.
    vcpus: float
    memory_mb: float
    net_mbps: float | None
    failure_domain: str | None = None

    def overruns(self, vms: list[Vm]) -> list[str]:
        """The resources `vms` together overrun on this host ([] when they fit)."""
        return [resource for resource in RESOURCES
                if getattr(self, resource) is not None
                and sum(vm.demand(resource) for vm in vms) > getattr(self, resource) + 1e-9]


@dataclass(frozen=True)
class Vm:
    name: str
    vcpus: float
    memory_mb: float
    disk_gb: float = 0
    net_mbps: float = 0
    ha: bool = False
    priority: int = 0
    preemptible: bool = False
    anti_affinity: frozenset[str] = frozenset()
    allowed: frozenset[str] = frozenset()  # hosts it may run on (hosts:, placement:)
    home: str | None = None  # a pinned home; failover may still take it elsewhere

    def demand(self, resource: str) -> float:
        return getattr(self, resource)

    @property
    def kind(self) -> str:
        """The VM's kind as the VDM document writes it: "ha", "preemptible" or "plain"."""
        return "ha" if self.ha else "preemptible" if self.preemptible else "plain"

    @property
    def kind_label(self) -> str:
        """The VM's kind as messages name it: "HA", "preemptible" or "plain"."""
        return "HA" if self.ha else self.kind


@dataclass(frozen=True)
class Problem:
    """A validated planning problem."""

    hosts: dict[str, Host]
    vms: dict[str, Vm]
    failures_to_tolerate: int = 1
    failure_domains_to_tolerate: int = 0
    failure_sets: tuple[frozenset[str], ...] = field(default=())


# Resource amounts closer than this are equal: an amount this close to whole is whole.
EPSILON = 1e-6
# What a plan may be asked to do best once it holds: keep the greedy plan and its
# balanced spare, or stop the fewest preemptible VMs over all failure sets.
DEFAULT_OBJECTIVE = "balance"
OBJECTIVES = (DEFAULT_OBJECTIVE, "preemptions")


@dataclass
class Plan:
    """A VDM as the planner answers it: homes, failover targets per failure set (by
    failure_set_key), the preemptible VMs each failure set stops, and the spare each
    host reserves."""

    home: dict[str, str]
    failover: dict[str, dict[str, str]]
    preempt: dict[str, list[str]]
    reserve: dict[str, dict[str, float]]
    moved: list[str] = field(default_factory=list)  # VMs whose previous home changed
    method: str = "greedy"  # or "exact" or "repair": the search that found it
    objective: str = DEFAULT_OBJECTIVE  # what it was asked to do best (OBJECTIVES)

    @property
    def preemptions(self) -> int:
        """How many preemptible VMs the plan stops, summed over the failure sets."""
        return sum(len(names) for names in self.preempt.values())


class VdmInfeasible(Exception):
    """No plan holds every invariant; the message names the failure set or VM."""


class VdmNotFound(Exception):
    """No plan was found, and none was proved impossible: the message says what the
    greedy planner could not place, why the exact search stopped (or that it was not
    asked for), and what would most likely make the cluster fit."""


# How the planner's messages name an amount of each resource: `2048 MB memory`.
UNIT_NAMES = {"vcpus": "vCPUs", "memory_mb": "MB memory", "net_mbps": "Mbps network"}
WHAT_HELPS = ("add or enlarge hypervisors, lower yasco_failures_to_tolerate, or make "
              "some VMs plain (ha: false) or preemptible")


def amount(value: float) -> float | int:
    """A resource amount as written in the VDM and in messages: whole when it is."""
    return int(round(value)) if abs(value - round(value)) < EPSILON else round(value, 3)


def failure_set_key(failed: frozenset[str] | set[str]) -> str:
    """How a failure set is written in the VDM: host names sorted and joined by ','."""
    return ",".join(sorted(failed))


def problem_digest(problem: Problem) -> str:
    """A digest of everything planning depends on: equal digests, equal problems."""
    def plain(value: Any) -> Any:
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value
    document = plain({"hosts": {n: asdict(h) for n, h in problem.hosts.items()},
                      "vms": {n: asdict(v) for n, v in problem.vms.items()},
                      "x": problem.failures_to_tolerate,
                      "domains": problem.failure_domains_to_tolerate})
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
