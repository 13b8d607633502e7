# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cluster report shows, worked out from the VDM and the cluster's history:
which VMs fill each hypervisor's capacity, what one failure set does to it, and the
latest incident as rows of events in time (found in cluster_report_incident.py).

Plain data, no I/O and no plotting: cluster_report_render.py draws it,
cluster_report_html.py lays out the page, cluster_report_write.py writes the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import (
    failover_for, size)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_incident import (
    Incident, latest_incident)

# The resources drawn, in the order of the pictures' panels.
RESOURCES = ("memory_mb", "vcpus")
VM_KINDS = ("ha", "plain", "preemptible")


class ReportError(Exception):
    """The VDM or an option cannot be reported on; the message says which and why."""


@dataclass(frozen=True)
class Segment:
    """A stretch of a host's box, from `start`, `size` long: a VM's share (`vm`), the
    spare that nothing uses (`kind` spare) or the free room (`kind` free).

    `state` says what a VM does in the picture: running; incoming (an HA VM that
    arrives from `peer`, a failed host); moved (an HA VM of a failed host, gone to
    `peer`); stopped (a preemptible VM stopped to make room); down (on a failed host,
    with nowhere to go)."""

    start: float
    size: float
    kind: str
    vm: str | None = None
    state: str = "running"
    peer: str | None = None

    @property
    def end(self) -> float:
        return self.start + self.size


@dataclass(frozen=True)
class Bar:
    """One resource of one hypervisor: its capacity and what fills it. The running
    segments and the free room tile [0, capacity]; stopped VMs lie beyond it, since
    they take no room. `reserve` is the spare kept for failover, from
    `reserve_start` (where the VMs that are not preemptible end)."""

    host: str
    resource: str
    capacity: float
    segments: tuple[Segment, ...]
    reserve: float = 0.0
    reserve_start: float = 0.0
    failed: bool = False

    def used(self, *kinds: str) -> float:
        return sum(s.size for s in self.segments
                   if s.vm is not None and s.state in ("running", "incoming")
                   and (not kinds or s.kind in kinds))

    def room(self, kind: str) -> float:
        """The spare nothing uses (`spare`), or the free room past it (`free`)."""
        return sum(s.size for s in self.segments if s.kind == kind)


@dataclass(frozen=True)
class Fate:
    """What a failure set does to one VM: it `moves` to `target`, is `stopped` to make
    room on `host`, or stays `down` with its failed `host`."""

    vm: str
    kind: str
    host: str
    fate: str
    target: str | None = None


@dataclass(frozen=True)
class FailureSet:
    key: str
    failed: tuple[str, ...]
    planned: bool
    fates: tuple[Fate, ...]
    bars: tuple[Bar, ...]

    def moves(self) -> dict[str, str]:
        return {f.vm: f.target for f in self.fates if f.fate == "moves"}

    def count(self, fate: str) -> int:
        return sum(1 for f in self.fates if f.fate == fate)


@dataclass(frozen=True)
class Report:
    cluster: str
    version: Any
    capacity: tuple[Bar, ...]
    failure: FailureSet | None
    incident: Incident | None
    events_read: int


# -- the VDM ------------------------------------------------------------------------

def _vdm_parts(vdm: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The VDM's hosts, VMs and homes, checked enough to draw them."""
    if not isinstance(vdm, dict) or not all(isinstance(vdm.get(k), dict)
                                            for k in ("hosts", "vms", "home")):
        raise ReportError("vdm: not a VDM with hosts, vms and home (yasco_vdm); plan one "
                          "with playbooks/plan.yml")
    hosts, vms, home = vdm["hosts"], vdm["vms"], vdm["home"]
    if not hosts:
        raise ReportError("vdm: no hypervisors in hosts; plan with playbooks/plan.yml")
    for name, host in sorted(home.items()):
        if name not in vms:
            raise ReportError(f"vdm: {name} has a home but no entry in vms; plan again")
        if host not in hosts:
            raise ReportError(f"vdm: {name}'s home {host} is not in hosts; plan again")
    return hosts, vms, home


def _kind(entry: dict[str, Any]) -> str:
    kind = entry.get("kind")
    return kind if kind in VM_KINDS else "plain"


def _in_bar_order(names: list[str], vms: dict[str, Any]) -> list[str]:
    """HA VMs, then plain, then preemptible (which sit in the spare), each by name."""
    return sorted(names, key=lambda n: (VM_KINDS.index(_kind(vms[n])), n))


def _stack(names: list[str], vms: dict[str, Any], resource: str, start: float = 0.0,
           state: str = "running", peers: dict[str, str] | None = None) -> list[Segment]:
    segments = []
    for name in names:
        used = size(vms[name])[resource]
        segments.append(Segment(start, used, _kind(vms[name]), name, state,
                                (peers or {}).get(name)))
        start += used
    return segments


def _room(segments: list[Segment], capacity: float, start: float, kind: str = "free"
          ) -> list[Segment]:
    """The free room from `start` to `capacity`, if any."""
    return [Segment(start, capacity - start, kind)] if capacity - start > 1e-9 else []


def capacity_bars(vdm: dict[str, Any]) -> list[Bar]:
    """Per hypervisor and resource: its home VMs, HA then plain then preemptible; the
    spare nothing uses; the free room. The spare (`reserve`) starts where the VMs
    that are not preemptible end: preemptible VMs run inside it, since a failure
    stops them to make room, so only the part they leave is drawn as spare."""
    hosts, vms, home = _vdm_parts(vdm)
    reserves = vdm.get("reserve") or {}
    bars = []
    for host in sorted(hosts):
        mine = _in_bar_order([n for n, h in home.items() if h == host], vms)
        for resource in RESOURCES:
            capacity = size(hosts[host])[resource]
            segments = _stack(mine, vms, resource)
            firm = sum(s.size for s in segments if s.kind != "preemptible")
            end = segments[-1].end if segments else 0.0
            reserve = size(reserves.get(host) or {})[resource]
            spare_end = min(firm + reserve, capacity)
            if spare_end > end + 1e-9:
                segments.append(Segment(end, spare_end - end, "spare"))
                end = spare_end
            segments += _room(segments, capacity, end)
            bars.append(Bar(host, resource, capacity, tuple(segments), reserve, firm))
    return bars


def default_failure_set(vdm: dict[str, Any]) -> list[str] | None:
    """The first planned failure of one host that moves a VM; else the first planned
    failure of one host; None when the VDM plans none."""
    singles = sorted(k for k in (vdm.get("failover") or {}) if "," not in k)
    for key in singles:
        if vdm["failover"][key]:
            return [key]
    return [singles[0]] if singles else None


def failure_set(vdm: dict[str, Any], failed: list[str]) -> FailureSet:
    """What the failure of the hosts `failed` does, as the evacuation reads the VDM
    (vdm_document.failover_for): every VM of theirs moves or stays down, preemptible
    VMs stop on survivors; and every host's bars afterwards."""
    hosts, vms, home = _vdm_parts(vdm)
    failed = sorted(set(failed))
    if not failed:
        raise ReportError("failed: name at least one hypervisor")
    unknown = [h for h in failed if h not in hosts]
    if unknown:
        raise ReportError(f"failed: {', '.join(unknown)} is not a hypervisor of this VDM "
                          f"(it has {', '.join(sorted(hosts))})")
    plan = failover_for(vdm, failed)
    targets, stopped = plan["targets"], set(plan["preempt"])
    fates = []
    for name in _in_bar_order([n for n, h in home.items() if h in failed], vms):
        target = targets.get(name)
        fates.append(Fate(name, _kind(vms[name]), home[name],
                          "moves" if target else "down", target))
    fates += [Fate(name, _kind(vms[name]), home[name], "stopped")
              for name in sorted(stopped, key=lambda n: (home.get(n, ""), n)) if name in home]
    incoming: dict[str, list[str]] = {}
    for name, target in targets.items():
        incoming.setdefault(target, []).append(name)
    bars = []
    for host in sorted(hosts):
        mine = _in_bar_order([n for n, h in home.items() if h == host], vms)
        for resource in RESOURCES:
            capacity = size(hosts[host])[resource]
            if host in failed:
                segments = []
                for segment in _stack(mine, vms, resource):
                    target = targets.get(segment.vm)
                    segments.append(Segment(segment.start, segment.size, segment.kind,
                                            segment.vm, "moved" if target else "down",
                                            target))
                end = segments[-1].end if segments else 0.0
                bars.append(Bar(host, resource, capacity,
                                tuple(segments + _room(segments, capacity, end)),
                                failed=True))
                continue
            staying = [n for n in mine if n not in stopped]
            arriving = sorted(incoming.get(host, []))
            segments = _stack([n for n in staying if _kind(vms[n]) != "preemptible"], vms,
                              resource)
            end = segments[-1].end if segments else 0.0
            segments += _stack(arriving, vms, resource, end, "incoming",
                               {n: home[n] for n in arriving})
            end = segments[-1].end if segments else 0.0
            segments += _stack([n for n in staying if _kind(vms[n]) == "preemptible"], vms,
                               resource, end)
            end = segments[-1].end if segments else 0.0
            segments += _room(segments, capacity, end)
            # Stopped VMs take no room: they are drawn past the capacity.
            segments += _stack([n for n in mine if n in stopped], vms, resource,
                               max(capacity, segments[-1].end if segments else 0.0),
                               "stopped")
            bars.append(Bar(host, resource, capacity, tuple(segments)))
    return FailureSet(plan["failed"], tuple(failed), bool(plan["planned"]), tuple(fates),
                      tuple(bars))


def unit(resource: str, bars: tuple[Bar, ...] | list[Bar]) -> tuple[float, str]:
    """How amounts of `resource` read best in `bars`: their divisor and unit. Memory
    in GiB, unless the largest host has less than 4 GiB."""
    if resource != "memory_mb":
        return 1.0, "vCPUs"
    largest = max((b.capacity for b in bars if b.resource == resource), default=0.0)
    return (1024.0, "GiB") if largest >= 4096 else (1.0, "MiB")


# -- the whole report ---------------------------------------------------------------

def failed_hosts(failed: Any) -> list[str] | None:
    """The `failed` option as host names: a list, or a comma-separated string."""
    if failed is None:
        return None
    if isinstance(failed, str):
        failed = failed.split(",")
    if not isinstance(failed, (list, tuple)):
        raise ReportError(f"failed: a list of hypervisors, got {failed!r}")
    names = [str(h).strip() for h in failed if str(h).strip()]
    return names or None


def build(vdm: dict[str, Any], events: list[dict[str, Any]], failed: Any = None,
          cluster: str = "yasco") -> Report:
    """Everything the report shows. `failed` chooses the failure set (by default
    default_failure_set's)."""
    capacity = capacity_bars(vdm)
    chosen = failed_hosts(failed)
    if chosen is None:
        chosen = default_failure_set(vdm)
    return Report(cluster, vdm.get("version"), tuple(capacity),
                  failure_set(vdm, chosen) if chosen else None,
                  latest_incident(events or []), len(events or []))
