# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report as one self-contained HTML page: the pictures embedded as data URIs,
each with a table of what it shows, under a header naming the cluster, the VDM's
version and when the page was written. No I/O: cluster_report_write.py writes it.
"""

from __future__ import annotations

import base64
import html
import re

from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report import (
    RESOURCES, Bar, FailureSet, Report, unit)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report_incident import (
    Incident)

# The one part of the page that changes with every writing: compare pages without it.
WRITTEN = re.compile(r'<time class="written"[^>]*>[^<]*</time>')
STYLE = """
body { font-family: "DejaVu Sans", Verdana, sans-serif; color: #222; margin: 0 auto;
       max-width: 1240px; padding: 16px 24px 40px; background: #fff; }
header { border-bottom: 2px solid #0072B2; margin-bottom: 12px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 0 0 6px; }
section { border-top: 1px solid #ddd; margin-top: 22px; padding-top: 14px; }
header + section { border-top: none; margin-top: 0; padding-top: 0; }
p { margin: 4px 0 10px; line-height: 1.4; }
.meta { color: #555; }
img { width: 100%; height: auto; display: block; margin: 8px 0; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 9px; text-align: right; }
th { background: #f2f2f2; }
td.name, th.name { text-align: left; }
.failed { color: #D55E00; font-weight: bold; }
.none { color: #555; font-style: italic; }
"""
FATES = {"moves": "starts on {target}", "stopped": "stopped on {host} to make room",
         "down": "down until {host} returns"}


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _amount(value: float) -> str:
    return f"{round(value, 1):g}"


def _image(images: dict[str, bytes], name: str, alt: str) -> str:
    data = base64.b64encode(images[name]).decode("ascii")
    return f'<img id="{name}-picture" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _host_table(bars: tuple[Bar, ...]) -> str:
    columns = ("capacity", "HA", "plain", "preemptible", "spare", "free")
    head = "".join(f'<th colspan="{len(columns)}">{_e(unit(r, bars)[1])}</th>'
                   for r in RESOURCES)
    rows = []
    for host in dict.fromkeys(b.host for b in bars):
        cells = []
        for resource in RESOURCES:
            box = next(b for b in bars if b.host == host and b.resource == resource)
            divisor = unit(resource, bars)[0]
            cells += [_amount(v / divisor) for v in (
                box.capacity, box.used("ha"), box.used("plain"), box.used("preemptible"),
                box.reserve, box.room("free"))]
        rows.append(f'<tr><td class="name">{_e(host)}</td>'
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<table id="hosts"><tr><th class="name" rowspan="2">hypervisor</th>'
            f"{head}</tr><tr>"
            + "".join(f"<th>{c}</th>" for c in columns) * len(RESOURCES) + "</tr>"
            + "".join(rows) + "</table>")


def _vm_table(bars: tuple[Bar, ...]) -> str:
    """Every VM: its kind, home and size."""
    sizes: dict[str, dict[str, float]] = {}
    where: dict[str, tuple[str, str]] = {}
    for box in bars:
        for segment in box.segments:
            if segment.vm:
                sizes.setdefault(segment.vm, {})[box.resource] = segment.size
                where[segment.vm] = (segment.kind, box.host)
    divisor, memory = unit("memory_mb", bars)
    rows = "".join(
        f'<tr><td class="name">{_e(name)}</td><td class="name">{_e(where[name][0])}</td>'
        f'<td class="name">{_e(where[name][1])}</td>'
        f"<td>{_amount(sizes[name].get('memory_mb', 0) / divisor)}</td>"
        f"<td>{_amount(sizes[name].get('vcpus', 0))}</td></tr>"
        for name in sorted(sizes, key=lambda n: (where[n][1], n)))
    return ('<table id="vms"><tr><th class="name">VM</th><th class="name">kind</th>'
            f'<th class="name">home</th><th>{_e(memory)}</th><th>vCPUs</th></tr>'
            f"{rows}</table>")


def _failure_section(failure: FailureSet | None, images: dict[str, bytes]) -> str:
    if failure is None:
        return ('<section id="failure"><h2>A failure</h2><p class="none">The VDM plans no '
                "failure (<code>yasco_failures_to_tolerate</code> is 0): nothing to show."
                "</p></section>")
    names = " and ".join(failure.failed)
    planned = ("planned by the VDM" if failure.planned else
               "beyond what the VDM plans: the evacuation's best effort")
    rows = "".join(
        f'<tr><td class="name">{_e(f.vm)}</td><td class="name">{_e(f.kind)}</td>'
        f'<td class="name">{_e(f.host)}</td><td class="name">'
        f"{_e(FATES[f.fate].format(target=f.target, host=f.host))}</td></tr>"
        for f in failure.fates)
    table = ('<table id="moves"><tr><th class="name">VM</th><th class="name">kind</th>'
             '<th class="name">home</th><th class="name">when it fails</th></tr>'
             f"{rows}</table>" if rows else
             '<p class="none">No VM has its home there: nothing moves.</p>')
    return ('<section id="failure">'
            f"{_image(images, 'failure', f'What happens if {names} fails')}"
            f"<p><b>If {_e(names)} {'fails' if len(failure.failed) == 1 else 'fail'}</b> "
            f"(failure set <code>{_e(failure.key)}</code>, {planned}): its HA VMs start on "
            "the hosts the arrows point to, in the spare kept for them; preemptible VMs stop "
            "where that room is needed; its other VMs stay down until it returns. Choose "
            "another with <code>-e yasco_report_failed=hv2</code>.</p>"
            f"{table}</section>")


def _incident_section(incident: Incident | None, events_read: int,
                      images: dict[str, bytes]) -> str:
    if incident is None:
        read = (f"No host failure in the last {events_read} events of the cluster's history"
                if events_read else "The cluster's history is empty")
        return ('<section id="incident"><h2>Latest incident</h2><p class="none">'
                f"{read}: no timeline to draw.</p></section>")
    rows = "".join(
        f"<tr><td>{p.seconds:.1f}</td><td class=\"name\">{_e(p.at)}</td>"
        f'<td class="name">{_e(p.kind)}</td><td class="name">{_e(p.host or "-")}</td>'
        f'<td class="name">{_e(p.vm or "-")}</td><td class="name">{_e(p.by or "-")}</td></tr>'
        for p in sorted(incident.points, key=lambda p: (p.seconds, p.key)))
    state = ("It ended when the return home brought every failed host back."
             if incident.ended else "It is not over: a failed host is not back yet.")
    return ('<section id="incident">'
            f"{_image(images, 'timeline', 'The latest incident, event by event')}"
            f"<p><b>Latest incident: {_e(', '.join(incident.failed))} failed</b> at "
            f"{_e(incident.started)}. {state} Every event that followed, in seconds since "
            "the first failure as the history records it (a fence, some seconds after the "
            "host stopped answering).</p>"
            '<table id="events"><tr><th>seconds</th><th class="name">at</th>'
            '<th class="name">event</th><th class="name">hypervisor</th>'
            '<th class="name">VM</th><th class="name">by</th></tr>'
            f"{rows}</table></section>")


def page(report: Report, images: dict[str, bytes], written_at: str) -> str:
    """The page, with `images` (cluster_report_render.pictures) embedded."""
    hosts = list(dict.fromkeys(b.host for b in report.capacity))
    vms = {s.vm for b in report.capacity for s in b.segments if s.vm}
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>YASCO cluster {_e(report.cluster)}: report</title>"
        f"<style>{STYLE}</style></head><body>\n"
        f"<header><h1>YASCO cluster {_e(report.cluster)}</h1>"
        f'<p class="meta">VDM version {_e(report.version)}; {len(hosts)} hypervisors, '
        f'{len(vms)} VMs; written <time class="written">{_e(written_at)}</time></p>'
        "</header>\n"
        '<section id="capacity">'
        f"{_image(images, 'capacity', 'Capacity of every hypervisor')}"
        "<p><b>Capacity.</b> Each hypervisor is a box of memory and vCPUs: its home VMs "
        "(HA, plain and preemptible), the spare it keeps so that the HA VMs of failed hosts "
        "have room (dashed, the VDM's <code>reserve</code>), and what is free. Preemptible "
        "VMs run inside the spare: a failure stops them to make room. The tables have the "
        "same in numbers.</p>"
        f"{_host_table(report.capacity)}{_vm_table(report.capacity)}</section>\n"
        f"{_failure_section(report.failure, images)}\n"
        f"{_incident_section(report.incident, report.events_read, images)}\n"
        "</body></html>\n")
