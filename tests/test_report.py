"""The cluster report as an operator gets it: yasco.cluster.cluster_report run by
ansible-playbook on a VDM the real planner made and a history with an incident, the
files it writes read back, and the page looked at in a headless browser."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess

import numpy as np
import pytest
from matplotlib.image import imread

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.planner import vdm_document
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import load_problem
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import plan
from tests.ansible_run import local_play, run_playbook
from tests.unit.plugins.module_utils.report_sample import HOSTS, VMS

# The colours of HA, plain and preemptible VMs in the pictures.
KIND_COLOURS = {"ha": (0x00, 0x72, 0xB2), "plain": (0x00, 0x9E, 0x73),
                "preemptible": (0xE6, 0x9F, 0x00)}
T0 = 1_790_000_000.0


AGENT_MARKUP = "<script>alert(1)</script>"


def planned_vdm() -> dict:
    problem = load_problem(HOSTS, {"yasco_vms": VMS})
    vdm = vdm_document.build(problem, plan(problem), None)
    # What the pictures must show: hv1's failure moves HA VMs and preempts one.
    assert vdm["failover"]["hv1"] and vdm["preempt"].get("hv1")
    return vdm


def incident(vdm: dict) -> list[dict]:
    """The failure of hv1 as the evacuation and the return home record it, after an
    unrelated event."""
    home, targets = vdm["home"], vdm["failover"]["hv1"]
    stopped = vdm["preempt"].get("hv1", [])
    timed = [(-600, "started", {"vm": "web1", "host": home["web1"], "by": "provision"}),
             (0, "fenced", {"host": "hv1", "by": "evacuate"}),
             # What a hypervisor's agent writes in the history is its word: markup there
             # is shown as text.
             (0.01, "self-fenced", {"host": "hv1", "by": AGENT_MARKUP})]
    timed += [(0.02, "preempted", {"vm": n, "host": home[n], "by": "evacuate"}) for n in stopped]
    timed += [(0.05, "evacuated", {"vm": n, "host": t, "by": "evacuate"})
              for n, t in sorted(targets.items())]
    timed += [(250 + i, "migrated", {"vm": n, "host": "hv1", "by": "return_home"})
              for i, n in enumerate(sorted(targets))]
    timed += [(262, "unfenced", {"host": "hv1", "by": "return_home"})]
    timed += [(262.1, "started", {"vm": n, "host": home[n], "by": "return_home"}) for n in stopped]
    return [{"key": f"/yasco/lab/history/{int((T0 + s) * 1e9)}",
             **cluster_events.event(kind, at=T0 + s, **fields)} for s, kind, fields in timed]


def rgb(path_or_bytes) -> np.ndarray:
    image = imread(io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes)
                   else path_or_bytes)
    return (image[..., :3] * 255).round().astype(int)


def colours_near(pixels: np.ndarray, colour: tuple[int, int, int], within: int = 0) -> int:
    return int((np.abs(pixels - np.array(colour)).max(axis=-1) <= within).sum())


def distinct_colours(pixels: np.ndarray) -> int:
    return len(np.unique(pixels.reshape(-1, 3), axis=0))


@pytest.fixture(name="written", scope="module")
def fixture_written(tmp_path_factory):
    """One ansible-playbook run: a preview, a write as a module of its own, a rewrite
    in the controller's process, another failure set, and an unknown host."""
    tmp = tmp_path_factory.mktemp("report")
    vdm = planned_vdm()
    report = {"vdm": vdm, "events": incident(vdm), "cluster": "lab", "dest": str(tmp / "out")}
    code, results = run_playbook(local_play(
        {"name": "preview", "yasco.cluster.cluster_report": report, "check_mode": True},
        {"name": "write", "yasco.cluster.cluster_report": report,
         "vars": {"yasco_run_on_controller": False}},
        {"name": "rewrite", "yasco.cluster.cluster_report": report},
        {"name": "another failure", "yasco.cluster.cluster_report": {
            **report, "failed": "hv3,hv2", "dest": str(tmp / "other")}},
        {"name": "unknown host", "yasco.cluster.cluster_report": {
            **report, "failed": ["hv9"], "dest": str(tmp / "none")}, "ignore_errors": True},
    ), tmp_path=tmp, timeout=120)
    assert code == 0, results
    return tmp, vdm, dict(zip(["preview", "write", "rewrite", "other", "unknown"], results))


def test_check_mode_writes_nothing_and_a_rewrite_of_the_same_input_changes_nothing(written):
    tmp, vdm, results = written
    assert results["preview"]["changed"] is True
    assert results["write"]["changed"] is True
    assert results["rewrite"]["changed"] is False, results["rewrite"]
    assert results["write"]["html"] == str(tmp / "out" / "report.html")
    assert results["write"]["png"] == str(tmp / "out" / "report.png")
    assert results["write"]["failure_set"] == "hv1"
    assert results["write"]["incident"] == {
        "failed": ["hv1"], "ended": True, "events": len(incident(vdm)) - 1,
        "seconds": pytest.approx(262.1), "started": incident(vdm)[1]["at"]}
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["report.html", "report.png"]
    assert not (tmp / "none").exists()
    assert results["unknown"]["failed"] is True
    assert "hv9 is not a hypervisor of this VDM" in results["unknown"]["msg"]
    assert results["other"]["failure_set"] == "hv2,hv3"


def test_the_png_holds_every_picture_in_the_kinds_colours(written):
    tmp = written[0]
    pixels = rgb(str(tmp / "out" / "report.png"))
    height, width = pixels.shape[:2]
    assert width == 1200 and height > 1000
    assert distinct_colours(pixels) > 200
    for kind, colour in KIND_COLOURS.items():
        assert colours_near(pixels, colour) > 500, kind
    # The failure set's picture of other hosts is another picture.
    assert (tmp / "other" / "report.png").read_bytes() != (tmp / "out" / "report.png").read_bytes()


def test_the_page_embeds_its_pictures_and_names_every_host_and_vm(written):
    tmp, vdm, dummy = written
    page = (tmp / "out" / "report.html").read_text()
    assert "<script" not in page and 'src="http' not in page and "href=" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(embedded) == 3  # capacity, failure, timeline
    for data in embedded:
        pixels = rgb(base64.b64decode(data))
        assert pixels.shape[1] == 1200 and distinct_colours(pixels) > 50
    text = re.sub(r"<[^>]+>", " ", page)
    for name in [*vdm["hosts"], *vdm["vms"]]:
        assert re.search(rf"\b{name}\b", text), name
    assert "VDM version 1" in text and "YASCO cluster lab" in text
    assert "If hv1 fails" in text and "Latest incident" in text


def test_the_page_reads_in_a_browser(written, tmp_path):
    tmp = written[0]
    browser = shutil.which("chromium")
    assert browser, "chromium is not installed: scripts/bootstrap installs it"
    shot = tmp_path / "screenshot.png"
    done = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={shot}", "--window-size=1400,1800",
         (tmp / "out" / "report.html").as_uri()],
        capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    pixels = rgb(str(shot))
    assert pixels.shape[:2] == (1800, 1400)
    assert distinct_colours(pixels) > 200
    # The pictures are on screen (scaled a little to the page's width): every kind's
    # colour shows, not a blank or broken image.
    for kind, colour in KIND_COLOURS.items():
        assert colours_near(pixels, colour, within=12) > 300, kind
