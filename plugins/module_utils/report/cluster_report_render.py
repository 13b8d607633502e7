# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report's pictures, each as PNG bytes, and all of them stacked into one
under a header naming the cluster. The hypervisors' capacity and what a failure set
does to it are drawn here with matplotlib, from cluster_report's data, as bars of
what fills each host; the latest incident's timeline in cluster_report_timeline.py,
on the same canvas (cluster_report_canvas.py).
"""

from __future__ import annotations

from typing import Any

try:
    import numpy as np
    from matplotlib.patches import Patch, Rectangle
except ImportError:  # reported by the module: cluster_report_canvas.MATPLOTLIB_IMPORT_ERROR
    pass

from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report import (
    RESOURCES, Bar, FailureSet, Report, Segment, unit)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_canvas import (
    COLOURS, WIDTH, Picture, png, px, stacked)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_timeline import (
    timeline_picture)

BAR_HEIGHT = 0.62  # of a row
ROW_INCHES = 0.55
NAMES = {"ha": "HA VM", "plain": "plain VM", "preemptible": "preemptible VM",
         "spare": "spare kept for failover", "free": "free"}


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


def _label(picture: Picture, ax, segment: Segment, divisor: float, y: float,
           candidates: list[str], colour: str) -> None:
    """The first of `candidates` that fits inside the segment, or none."""
    room = px(ax, segment.end / divisor) - px(ax, segment.start / divisor) - 6
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


def _bars_panel(picture: Picture, ax, bars: list[Bar], divisor: float, label: str
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
    picture = Picture(height)
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


def _header(report: Report) -> np.ndarray:
    picture = Picture(0.7)
    picture.figure.text(0.25 / WIDTH, 0.5, f"YASCO cluster {report.cluster}: VDM version "
                        f"{report.version}", fontsize=16, fontweight="bold", va="center",
                        color=COLOURS["ink"])
    return picture.pixels()


def pictures(report: Report) -> dict[str, bytes]:
    """Each picture the report has (`capacity`; `failure` when a failure set is
    shown; `timeline` when there was an incident) as PNG, and `report`: all of
    them, under a header naming the cluster, in one PNG."""
    drawn = {"capacity": capacity_picture(report)}
    if report.failure is not None:
        drawn["failure"] = failure_picture(report)
    if report.incident is not None:
        drawn["timeline"] = timeline_picture(report)
    result = {name: png(pixels) for name, pixels in drawn.items()}
    result["report"] = png(stacked([_header(report), *drawn.values()]))
    return result
