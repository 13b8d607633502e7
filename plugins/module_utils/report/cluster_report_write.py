# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run of the cluster_report module: work out the report (cluster_report.py),
draw it (cluster_report_render.py), lay out the page (cluster_report_html.py), and
write report.html and report.png into a directory.

The files are rewritten only when their content differs from what is there, the
page's time of writing aside: the same VDM and history give the same pictures, byte
for byte, so a rerun changes nothing. Each file is replaced atomically, so a browser
or a web server never reads half a report.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import atomic_file
from ansible_collections.yasco.cluster.plugins.module_utils.report import cluster_report
from ansible_collections.yasco.cluster.plugins.module_utils.report import (
    cluster_report_html as page)
from ansible_collections.yasco.cluster.plugins.module_utils.report import (
    cluster_report_render as render)
from ansible_collections.yasco.cluster.plugins.module_utils.report.cluster_report import ReportError

HTML_FILE = "report.html"
PNG_FILE = "report.png"


def written_at(at: float | None = None) -> str:
    moment = datetime.datetime.fromtimestamp(time.time() if at is None else at,
                                             tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _current(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ReportError(f"cannot read {path}: {err}") from err


def _same_page(current: bytes | None, wanted: str) -> bool:
    if current is None:
        return False
    text = current.decode("utf-8", errors="replace")
    return page.WRITTEN.sub("", text) == page.WRITTEN.sub("", wanted)


def _done(changed: bool, check_mode: bool) -> str:
    if not changed:
        return "unchanged in"
    return "would be written to" if check_mode else "written to"


class ReportRun:
    """One run of the cluster_report module."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        self.params = params
        self.check_mode = check_mode

    def run(self) -> dict[str, Any]:
        p = self.params
        report = cluster_report.build(p["vdm"], p["events"] or [], p["failed"], p["cluster"])
        images = render.pictures(report)
        text = page.page(report, images, written_at())
        dest = os.path.abspath(p["dest"])
        html_path, png_path = os.path.join(dest, HTML_FILE), os.path.join(dest, PNG_FILE)
        if os.path.exists(dest) and not os.path.isdir(dest):
            raise ReportError(f"dest: {dest} is not a directory")
        changed = (_current(png_path) != images["report"]
                   or not _same_page(_current(html_path), text))
        if changed and not self.check_mode:
            try:
                os.makedirs(dest, exist_ok=True)
                atomic_file.replace(png_path, images["report"])
                atomic_file.replace(html_path, text.encode("utf-8"))
            except OSError as err:
                raise ReportError(f"cannot write the report into {dest}: {err}") from err
        incident = report.incident
        failure = report.failure
        return {
            "changed": changed,
            "html": html_path,
            "png": png_path,
            "failure_set": failure.key if failure else None,
            "incident": None if incident is None else {
                "failed": list(incident.failed), "started": incident.started,
                "ended": incident.ended, "seconds": incident.seconds,
                "events": len(incident.points)},
            "msg": (f"report of cluster {report.cluster} (VDM version {report.version}) "
                    f"{_done(changed, self.check_mode)} {html_path} and {png_path}"),
        }
