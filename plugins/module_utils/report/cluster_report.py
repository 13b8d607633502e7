# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cluster report shows, worked out from the VDM and the cluster's history:
which VMs fill each hypervisor's capacity, what one failure set does to it, and the
latest incident as rows of events in time.

Plain data, no I/O and no plotting: cluster_report_render.py draws it,
cluster_report_html.py lays out the page, cluster_report_write.py writes the files.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_document import failover_for

# The resources drawn, in the order of the pictures' panels.
RESOURCES = ("memory_mb", "vcpus")
VM_KINDS = ("ha", "plain", "preemptible")
# Host events that start an incident: the evacuation's fence of a failed host, and a
# host agent's own fence when it lost etcd (recorded once it is back, at the time it
# fenced, so it may sort before the evacuation's).
FAILURE_KINDS = ("fenced", "self-fenced")
# The event that ends a host's failure: the return home lifts its fence.
RETURN_KIND = "unfenced"


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
class Row:
    """A row of the timeline: a hypervisor's events or a VM's."""

    kind: str  # host, vm, or cluster
    name: str


@dataclass(frozen=True)
class Point:
    """An event on the timeline, `seconds` after the incident's first failure."""

    row: int
    seconds: float
    kind: str
    at: str
    key: str = ""
    host: str | None = None
    vm: str | None = None
    by: str | None = None


@dataclass(frozen=True)
class Incident:
    """The latest host failure and what followed, until the return home that brought
    every failed host back was recorded (`ended`), or until the last event."""

    failed: tuple[str, ...]
    started: str
    ended: bool
    rows: tuple[Row, ...]
    points: tuple[Point, ...]

    @property
    def seconds(self) -> float:
        return max((p.seconds for p in self.points), default=0.0)


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


def _size(entry: dict[str, Any], resource: str) -> float:
    return float(entry.get(resource) or 0)


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
        size = _size(vms[name], resource)
        segments.append(Segment(start, size, _kind(vms[name]), name, state,
                                (peers or {}).get(name)))
        start += size
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
            capacity = _size(hosts[host], resource)
            segments = _stack(mine, vms, resource)
            firm = sum(s.size for s in segments if s.kind != "preemptible")
            end = segments[-1].end if segments else 0.0
            reserve = _size(reserves.get(host) or {}, resource)
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
            capacity = _size(hosts[host], resource)
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


# -- the history --------------------------------------------------------------------

def parse_time(at: Any) -> datetime.datetime | None:
    """An event's `at` as an aware datetime (UTC when it names no zone), or None."""
    if not isinstance(at, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def _in_time_order(events: list[dict[str, Any]]
                   ) -> list[tuple[datetime.datetime, dict[str, Any]]]:
    """Events by their time, then their key (the order they were written); events
    without a readable time are left out."""
    timed = [(parse_time(e.get("at")), e) for e in events if isinstance(e, dict)]
    return sorted(((t, e) for t, e in timed if t is not None),
                  key=lambda te: (te[0], str(te[1].get("key", ""))))


def _row_place(row: Row, index: int, failed: list[str]) -> tuple:
    """Hosts, the failed ones first in the order they failed; VMs as they appear; the
    cluster's own events last."""
    failed_host = row.kind == "host" and row.name in failed
    return (("host", "vm", "cluster").index(row.kind), not failed_host,
            failed.index(row.name) if failed_host else 0, index)


def latest_incident(events: list[dict[str, Any]]) -> Incident | None:
    """The last incident in `events` (cluster_status's, oldest first), or None when
    no host failed in them.

    An incident starts when a host fails while none is down (with what the same run
    recorded just before its fence), takes in the hosts that fail before all are
    back, and ends once every one of them is unfenced, with the events the same run
    (its `by`, the return home) recorded right after: the VMs it started. Until then
    it runs to the last event."""
    timeline = _in_time_order(events)
    down: set[str] = set()
    start = end = None
    for index, (dummy, event) in enumerate(timeline):
        host = event.get("host")
        if event.get("kind") in FAILURE_KINDS and host:
            if not down:
                start, end = index, None
            down.add(host)
        elif event.get("kind") == RETURN_KIND and host in down:
            down.discard(host)
            if not down:
                end = index
    if start is None:
        return None
    # The evacuation that fenced may have recorded other steps (a preemption) first.
    by = timeline[start][1].get("by")
    while (by and start > 0 and timeline[start - 1][1].get("by") == by
           and timeline[start - 1][1].get("kind") not in (*FAILURE_KINDS, RETURN_KIND)):
        start -= 1
    last = len(timeline)
    if end is not None:
        by = timeline[end][1].get("by")
        last = end + 1
        while (by and last < len(timeline) and timeline[last][1].get("by") == by
               and timeline[last][1].get("kind") not in FAILURE_KINDS):
            last += 1
    chosen = timeline[start:last]
    began = chosen[0][0]
    failed: list[str] = []
    rows: list[Row] = []
    points = []
    for moment, event in chosen:
        host, vm = event.get("host") or None, event.get("vm") or None
        if event.get("kind") in FAILURE_KINDS and host and host not in failed:
            failed.append(host)
        # An event of neither a host nor a VM (an operator's note) is the cluster's.
        row = Row("vm", vm) if vm else Row("host", host) if host else Row("cluster", "cluster")
        if row not in rows:
            rows.append(row)
        points.append(Point(rows.index(row), (moment - began).total_seconds(),
                            str(event.get("kind", "")), str(event.get("at")),
                            str(event.get("key", "")), host, vm, event.get("by") or None))
    order = sorted(range(len(rows)), key=lambda i: _row_place(rows[i], i, failed))
    renumber = {old: new for new, old in enumerate(order)}
    points = [Point(renumber[p.row], p.seconds, p.kind, p.at, p.key, p.host, p.vm, p.by)
              for p in points]
    return Incident(tuple(failed), chosen[0][1]["at"], end is not None,
                    tuple(rows[i] for i in order), tuple(points))


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
