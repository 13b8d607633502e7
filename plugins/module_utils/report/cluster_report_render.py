# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report's pictures, drawn with matplotlib from cluster_report's data: the
hypervisors' capacity, a failure set, the latest incident's timeline; each as PNG
bytes, and all of them stacked into one.

matplotlib is imported here and nowhere else, so the rest of the collection runs
without it. Figures are drawn on Agg canvases of their own, never through pyplot's
global state, and the PNGs carry no date and no software version: the same report
gives the same bytes.
"""

from __future__ import annotations

import io
import math
import traceback
from typing import Any

try:
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.image import imsave
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import NullLocator
except ImportError:  # reported by the module through missing_required_lib
    MATPLOTLIB_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    MATPLOTLIB_IMPORT_ERROR = None

from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report import (
    RESOURCES, Bar, FailureSet, Incident, Report, Segment, unit)

WIDTH = 12.0  # inches: every picture is as wide, so they stack into one
DPI = 100
BAR_HEIGHT = 0.62  # of a row
ROW_INCHES = 0.55
# Okabe and Ito's palette, which colour-blind readers tell apart.
COLOURS = {"ha": "#0072B2", "plain": "#009E73", "preemptible": "#E69F00",
           "spare": "#CC79A7", "free": "#F2F2F2", "failed": "#D55E00", "ink": "#222222",
           "grid": "#DDDDDD"}
NAMES = {"ha": "HA VM", "plain": "plain VM", "preemptible": "preemptible VM",
         "spare": "spare kept for failover", "free": "free"}
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


def _blend(colour: str, towards: str = "#FFFFFF", share: float = 0.6) -> tuple:
    """`colour` mixed with `towards`: a pale version that stays opaque."""
    one, two = (np.array([int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)])
                for c in (colour, towards))
    return tuple(one * (1 - share) + two * share)


def _ink_on(face: Any) -> str:
    """Black or white, whichever reads on `face`."""
    if isinstance(face, str):
        face = tuple(int(face[i:i + 2], 16) / 255 for i in (1, 3, 5))
    luminance = 0.2126 * face[0] + 0.7152 * face[1] + 0.0722 * face[2]
    return "#000000" if luminance > 0.45 else "#FFFFFF"


class _Picture:
    """A figure of WIDTH inches and `height`, with fixed margins (in inches), so
    that where things land is known before it is drawn: labels are measured against
    the segments they must fit."""

    def __init__(self, height: float) -> None:
        self.height = height
        self.figure = Figure(figsize=(WIDTH, height), dpi=DPI, facecolor="white")
        self.canvas = FigureCanvasAgg(self.figure)
        self.renderer = self.canvas.get_renderer()

    def axes(self, left: float, bottom: float, width: float, height: float):
        return self.figure.add_axes((left / WIDTH, bottom / self.height, width / WIDTH,
                                     height / self.height))

    def title(self, text: str, subtitle: str = "") -> None:
        self.figure.text(0.25 / WIDTH, 1 - 0.3 / self.height, text, fontsize=14,
                         fontweight="bold", color=COLOURS["ink"], va="center")
        if subtitle:
            self.figure.text(0.25 / WIDTH, 1 - 0.58 / self.height, subtitle, fontsize=10,
                             color="#444444", va="center")

    def legend(self, handles: list, top: float, columns: int) -> None:
        self.figure.legend(handles=handles, loc="upper left", frameon=False,
                           bbox_to_anchor=(0.2 / WIDTH, 1 - top / self.height),
                           ncol=columns, fontsize=9, handlelength=1.8, columnspacing=1.6)

    def pixels(self) -> np.ndarray:
        self.canvas.draw()
        return np.asarray(self.canvas.buffer_rgba()).copy()

    def fits(self, text, room: float) -> bool:
        return text.get_window_extent(self.renderer).width <= room

    def widest(self, labels: list[str], fontsize: float) -> float:
        """The width, in inches, of the widest of `labels` (bold, to be safe)."""
        widest = 0.0
        for label in labels:
            drawn = self.figure.text(0, 0, label, fontsize=fontsize, fontweight="bold")
            widest = max(widest, drawn.get_window_extent(self.renderer).width / DPI)
            drawn.remove()
        return widest


def _px(ax, x: float) -> float:
    return float(ax.transData.transform((x, 0))[0])


def _label(picture: _Picture, ax, segment: Segment, divisor: float, y: float,
           candidates: list[str], colour: str) -> None:
    """The first of `candidates` that fits inside the segment, or none."""
    room = _px(ax, segment.end / divisor) - _px(ax, segment.start / divisor) - 6
    for text in candidates:
        drawn = ax.text((segment.start + segment.size / 2) / divisor, y, text, ha="center",
                        va="center", fontsize=8.5, color=colour, zorder=5, clip_on=True)
        if picture.fits(drawn, room):
            return
        drawn.remove()


def _segment_style(segment: Segment, failed: bool) -> dict[str, Any]:
    if segment.kind == "spare":
        return {"facecolor": _blend(COLOURS["spare"], share=0.85), "hatch": "///",
                "edgecolor": COLOURS["spare"], "linewidth": 0}
    if segment.kind == "free":
        return {"facecolor": COLOURS["free"], "edgecolor": "none"}
    colour = COLOURS[segment.kind]
    if failed or segment.state in ("moved", "down"):
        return {"facecolor": _blend(colour, share=0.65), "edgecolor": "white",
                "linewidth": 1, **({"hatch": "xx"} if segment.state == "down" else {})}
    if segment.state == "stopped":
        return {"facecolor": "white", "edgecolor": colour, "linewidth": 1.2,
                "linestyle": (0, (3, 2)), "hatch": "xxx"}
    if segment.state == "incoming":
        return {"facecolor": colour, "edgecolor": "black", "linewidth": 2.2}
    return {"facecolor": colour, "edgecolor": "white", "linewidth": 1}


def _segment_labels(segment: Segment) -> list[str]:
    """What a segment says, longest first; the first that fits is drawn."""
    name = segment.vm or ""
    if segment.kind == "spare":
        return ["spare"]
    if segment.state == "moved":
        return [f"{name} → {segment.peer}", name]
    if segment.state == "down":
        return [f"{name}: down", name]
    if segment.state == "incoming":
        return [f"{name} ← {segment.peer}", name]
    if segment.state == "stopped":
        return [f"{name}: stopped", name]
    return [name] if name else []


def _host_label(box: Bar) -> str:
    return f"{box.host}\nfailed" if box.failed else box.host


def _bars_panel(picture: _Picture, ax, bars: list[Bar], divisor: float, label: str
                ) -> None:
    h = BAR_HEIGHT
    right = max(max(b.capacity, b.segments[-1].end if b.segments else 0) for b in bars)
    ax.set_xlim(0, right / divisor * 1.02 or 1)
    ax.set_ylim(len(bars) - 0.4, -0.6)
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([_host_label(b) for b in bars], fontsize=10)
    for tick, box in zip(ax.get_yticklabels(), bars):
        if box.failed:
            tick.set_color(COLOURS["failed"])
            tick.set_fontweight("bold")
    ax.set_title(label, fontsize=10, loc="left", color=COLOURS["ink"])
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=9)
    ax.xaxis.grid(True, color=COLOURS["grid"], linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    for y, box in enumerate(bars):
        for segment in box.segments:
            style = _segment_style(segment, box.failed)
            ax.add_patch(Rectangle((segment.start / divisor, y - h / 2),
                                   segment.size / divisor, h, zorder=2, **style))
            face = style["facecolor"]
            _label(picture, ax, segment, divisor, y, _segment_labels(segment),
                   "#5A2A48" if segment.kind == "spare" else
                   _ink_on(face) if face not in ("white", "none") else COLOURS["ink"])
        # The box: the host's capacity.
        ax.add_patch(Rectangle((0, y - h / 2), box.capacity / divisor, h, fill=False,
                               edgecolor=COLOURS["failed"] if box.failed else COLOURS["ink"],
                               linewidth=1.3, linestyle="--" if box.failed else "-",
                               zorder=4))
        if box.reserve > 0:
            ax.add_patch(Rectangle((box.reserve_start / divisor, y - h / 2 - 0.07),
                                   box.reserve / divisor, h + 0.14, fill=False,
                                   edgecolor=COLOURS["spare"], linewidth=1.6,
                                   linestyle=(0, (4, 2)), zorder=4))


def _arrows(ax, bars: list[Bar], divisor: float) -> None:
    """From each HA VM of a failed host to where it arrives."""
    h = BAR_HEIGHT
    rows = {b.host: y for y, b in enumerate(bars)}
    arriving = {s.vm: (s, rows[b.host]) for b in bars for s in b.segments
                if s.state == "incoming"}
    for box in bars:
        for segment in box.segments:
            if segment.state != "moved" or segment.vm not in arriving:
                continue
            target, y_target = arriving[segment.vm]
            y_source = rows[box.host]
            down = y_target > y_source  # the y axis runs downwards
            ax.annotate("", xy=((target.start + target.size / 2) / divisor,
                                y_target + (-h / 2 if down else h / 2)),
                        xytext=((segment.start + segment.size / 2) / divisor,
                                y_source + (h / 2 if down else -h / 2)),
                        arrowprops={"arrowstyle": "-|>", "color": COLOURS["ink"],
                                    "linewidth": 1.4, "alpha": 0.85,
                                    "connectionstyle": "arc3,rad=-0.15",
                                    "shrinkA": 1, "shrinkB": 1},
                        zorder=6)


def _bars_picture(bars: list[Bar], title: str, subtitle: str, handles: list,
                  arrows: bool = False) -> np.ndarray:
    hosts = sorted({b.host for b in bars}, key=[b.host for b in bars].index)
    columns = len(handles)
    legend_rows = 1
    top = 0.8 + 0.25 * legend_rows + 0.3
    height = top + len(hosts) * ROW_INCHES + 0.55
    picture = _Picture(height)
    picture.title(title, subtitle)
    picture.legend(handles, 0.75, columns)
    left = 0.4 + picture.widest([_host_label(b) for b in bars], 10)
    gap, right = 0.45, 0.3
    width = (WIDTH - left - gap - right) / len(RESOURCES)
    for index, resource in enumerate(RESOURCES):
        ax = picture.axes(left + index * (width + gap), 0.45, width,
                          height - top - 0.45)
        mine = [b for b in bars if b.resource == resource]
        divisor, name = unit(resource, bars)
        _bars_panel(picture, ax, mine, divisor,
                    f"memory ({name})" if resource == "memory_mb" else name)
        if index:
            ax.set_yticklabels([])
        if arrows:
            _arrows(ax, mine, divisor)
    return picture.pixels()


def _kind_handles(*extra: tuple) -> list:
    handles = [Patch(facecolor=COLOURS[k], edgecolor="white", label=NAMES[k])
               for k in ("ha", "plain", "preemptible")]
    for style, label in extra:
        handles.append(Patch(label=label, **style))
    return handles


def capacity_picture(report: Report) -> np.ndarray:
    bars = list(report.capacity)
    spare = {"facecolor": _blend(COLOURS["spare"], share=0.85), "hatch": "///",
             "edgecolor": COLOURS["spare"], "linewidth": 1.4, "linestyle": (0, (4, 2))}
    return _bars_picture(
        bars, f"Capacity of cluster {report.cluster}",
        "Each hypervisor's box: its home VMs; the spare it keeps for failover (dashed "
        "box), where preemptible VMs run; what is free.",
        _kind_handles((spare, NAMES["spare"]),
                      ({"facecolor": COLOURS["free"], "edgecolor": "#BBBBBB"}, NAMES["free"])))


def failure_picture(report: Report) -> np.ndarray:
    failure = report.failure
    return _bars_picture(
        list(failure.bars), f"If {' and '.join(failure.failed)} "
        f"{'fails' if len(failure.failed) == 1 else 'fail'}"
        f"{'' if failure.planned else ' (beyond the plan: best effort)'}",
        _failure_summary(failure),
        _kind_handles(
            ({"facecolor": COLOURS["ha"], "edgecolor": "black", "linewidth": 2},
             "arrives from a failed host"),
            ({"facecolor": "white", "edgecolor": COLOURS["preemptible"], "hatch": "xxx",
              "linestyle": (0, (3, 2))}, "stopped to make room"),
            ({"facecolor": _blend(COLOURS["plain"], share=0.65), "edgecolor": "white",
              "hatch": "xx"}, "down until its host returns")),
        arrows=True)


def _vms(count: int, what: str, one: str, more: str) -> str:
    return f"{count} {what}VM{' ' + one if count == 1 else 's ' + more}"


def _failure_summary(failure: FailureSet) -> str:
    parts = [_vms(failure.count("moves"), "HA ", "starts", "start") + " elsewhere",
             _vms(failure.count("stopped"), "preemptible ", "stops", "stop") + " to make room",
             _vms(failure.count("down"), "", "stays down until its host returns",
                  "stay down until their host returns")]
    return "; ".join(parts) + ". Stopped VMs are drawn past the box: they take no room."


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
    picture = _Picture(height)
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


def _point_labels(picture: _Picture, ax, incident: Incident) -> None:
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
            x = _px(ax, point.seconds)
            limit = (_px(ax, points[index + 1].seconds) - 8 if index + 1 < len(points)
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


def _header(report: Report) -> np.ndarray:
    picture = _Picture(0.7)
    picture.figure.text(0.25 / WIDTH, 0.5, f"YASCO cluster {report.cluster}: VDM version "
                        f"{report.version}", fontsize=16, fontweight="bold", va="center",
                        color=COLOURS["ink"])
    return picture.pixels()


def png(pixels: np.ndarray) -> bytes:
    """RGBA pixels as PNG, with no text chunks (matplotlib's version would be one)."""
    out = io.BytesIO()
    imsave(out, pixels, format="png", dpi=DPI, metadata={"Software": None})
    return out.getvalue()


def pictures(report: Report) -> dict[str, bytes]:
    """Each picture the report has (`capacity`; `failure` when a failure set is
    shown; `timeline` when there was an incident) as PNG, and `report`: all of
    them, under a header naming the cluster, in one PNG."""
    drawn = {"capacity": capacity_picture(report)}
    if report.failure is not None:
        drawn["failure"] = failure_picture(report)
    if report.incident is not None:
        drawn["timeline"] = timeline_picture(report)
    parts = [_header(report), *drawn.values()]
    width = max(p.shape[1] for p in parts)
    white = np.full((1, 1, 4), 255, dtype=np.uint8)
    stacked = np.concatenate([np.concatenate(
        [p, np.broadcast_to(white, (p.shape[0], width - p.shape[1], 4))], axis=1)
        for p in parts], axis=0)
    result = {name: png(pixels) for name, pixels in drawn.items()}
    result["report"] = png(stacked)
    return result
