# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The latest incident's timeline, drawn with matplotlib on cluster_report_canvas's
canvas from cluster_report_incident's rows and points: one row per hypervisor and
VM, each event a marker of its kind's colour and shape, labelled beside it where
the label fits.
"""

from __future__ import annotations

import math

try:
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator
except ImportError:  # reported by the module: cluster_report_canvas.MATPLOTLIB_IMPORT_ERROR
    pass

from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report import Report
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_canvas import (
    COLOURS, WIDTH, Picture, px)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_incident import (
    Incident)

# Each event kind the collection writes: colour and marker, failures red, recovery green.
EVENT_STYLES = {
    "self-fenced": ("#CC79A7", "X"), "fenced": ("#D55E00", "X"),
    "preempted": ("#E69F00", "v"), "evacuated": ("#0072B2", ">"),
    "stale-destroyed": ("#777777", "x"), "unfenced": ("#009E73", "s"),
    "migrated": ("#000000", "<"), "started": ("#56B4E9", "o"),
}
OTHER_STYLES = [("#8C564B", "D"), ("#BCBD22", "P"), ("#7F7F7F", "d"), ("#17BECF", "h"),
                ("#9467BD", "p"), ("#E377C2", "*")]
# A VM event's host, in its label: where it went, or where it happened.
TOWARDS = ("evacuated", "migrated")


def _event_label(kind: str, host: str | None, vm: str | None) -> list[str]:
    if vm and host:
        return [f"{kind} {'→' if kind in TOWARDS else 'on'} {host}", kind]
    return [kind]


def _time_axis(ax, span: float) -> None:
    """Seconds, linear for a short incident; beyond two minutes logarithmic past 10 s,
    so that the seconds of the evacuation and the minutes of the return home both
    read."""
    if span <= 120:
        ax.set_xlim(-0.04 * max(span, 1), max(span, 1) * 1.06)
        return
    ax.set_xscale("symlog", linthresh=10, linscale=1)
    ticks = [t for t in (0, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                         20000, 50000, 100000) if t <= span * 1.2]
    ax.set_xlim(-0.5, span * 1.25)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())  # symlog's minor ticks crowd the axis


def timeline_picture(report: Report) -> np.ndarray:
    incident: Incident = report.incident
    kinds = list(dict.fromkeys(p.kind for p in incident.points))
    styles = {}
    others = iter(OTHER_STYLES * (len(kinds) // len(OTHER_STYLES) + 1))
    for kind in kinds:
        styles[kind] = EVENT_STYLES.get(kind) or next(others)
    columns = min(len(kinds), 9)
    legend_rows = math.ceil(len(kinds) / columns)
    top = 0.8 + 0.25 * legend_rows + 0.25
    rows = len(incident.rows)
    height = top + max(rows, 2) * 0.36 + 0.75
    picture = Picture(height)
    first = incident.points[0]
    when = first.at.replace("T", " ")[:19]
    state = (f"ended: every failed host back, after {incident.seconds:.0f} s"
             if incident.ended else
             f"not over: {', '.join(incident.failed)} not back yet; the last event "
             f"{incident.seconds:.0f} s after the failure")
    picture.title(f"Latest incident: {', '.join(incident.failed)} failed at {when} UTC",
                  f"The cluster's history, one row per hypervisor and VM; {state}.")
    handles = [Line2D([], [], linestyle="none", marker=styles[k][1], color=styles[k][0],
                      markersize=8, label=k) for k in kinds]
    picture.legend(handles, 0.75, columns)
    left, right = 0.4 + picture.widest([r.name for r in incident.rows], 9.5), 0.35
    ax = picture.axes(left, 0.6, WIDTH - left - right, height - top - 0.6)
    _time_axis(ax, incident.seconds)
    ax.set_ylim(max(rows, 2) - 0.5, -0.5)
    ax.set_yticks(range(rows))
    ax.set_yticklabels([r.name for r in incident.rows], fontsize=9.5)
    for tick, row in zip(ax.get_yticklabels(), incident.rows):
        if row.kind == "host":
            tick.set_fontweight("bold")
            if row.name in incident.failed:
                tick.set_color(COLOURS["failed"])
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=9)
    ax.set_xlabel(f"seconds since the first failure ({first.kind} "
                  f"{first.host or ''}, {when} UTC)", fontsize=9.5)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.xaxis.grid(True, color=COLOURS["grid"], linewidth=0.6)
    ax.set_axisbelow(True)
    for y in range(rows):
        ax.axhline(y, color="#EEEEEE", linewidth=1, zorder=1)
    ax.axvline(0, color=COLOURS["failed"], linewidth=1, linestyle="--", zorder=1)
    if incident.ended:
        ax.axvline(incident.seconds, color=COLOURS["plain"], linewidth=1, linestyle="--",
                   zorder=1)
    for kind in kinds:
        mine = [p for p in incident.points if p.kind == kind]
        ax.scatter([p.seconds for p in mine], [p.row for p in mine], s=70,
                   marker=styles[kind][1], color=styles[kind][0], edgecolors="white",
                   linewidths=0.6, zorder=3)
    _point_labels(picture, ax, incident)
    return picture.pixels()


def _point_labels(picture: Picture, ax, incident: Incident) -> None:
    """Each event's kind (and host) beside it: right of it where that clears the next
    event on its row and the axes' edge, else left of it where that clears the
    previous one and its label; else a shorter label, or none."""
    box = ax.get_window_extent(picture.renderer)
    by_row: dict[int, list] = {}
    for point in sorted(incident.points, key=lambda p: (p.seconds, p.key)):
        by_row.setdefault(point.row, []).append(point)
    for row, points in by_row.items():
        taken = box.x0  # where the row's last label or marker ends
        for index, point in enumerate(points):
            x = px(ax, point.seconds)
            limit = (px(ax, points[index + 1].seconds) - 8 if index + 1 < len(points)
                     else box.x1)
            placed = False
            for text in _event_label(point.kind, point.host, point.vm):
                for side in ("left", "right"):
                    drawn = ax.text(point.seconds, row, f"  {text}  ", fontsize=8,
                                    va="center", ha=side, color="#333333", zorder=4)
                    extent = drawn.get_window_extent(picture.renderer)
                    if (extent.x1 <= limit if side == "left" else extent.x0 >= taken):
                        taken = max(x + 6, extent.x1)
                        placed = True
                        break
                    drawn.remove()
                if placed:
                    break
            if not placed:
                taken = x + 6
