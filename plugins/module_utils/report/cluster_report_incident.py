# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The latest incident, found in the cluster's history for the report: the host
failure that started it, the hosts that failed before all were back, and what
followed, as rows of events in time.

Plain data, no I/O and no plotting: cluster_report.py puts it in the report,
cluster_report_timeline.py draws it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

# Host events that start an incident: the evacuation's fence of a failed host, and a
# host agent's own fence when it lost etcd (recorded once it is back, at the time it
# fenced, so it may sort before the evacuation's).
FAILURE_KINDS = ("fenced", "self-fenced")
# The event that ends a host's failure: the return home lifts its fence.
RETURN_KIND = "unfenced"


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
