"""`make demo` (scripts/demo, lab/yasco_lab/demo.py) as a newcomer runs it: it replaces
the lab, tells the whole story, writes the report and leaves the lab up with its VMs
at home and no watcher behind."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from yasco_lab import lab as lab_verbs
from yasco_lab import layout
from yasco_lab.credentials import etcd_client
from yasco_lab.demo import VMS
from yasco_lab.errors import LabError

from ..ansible_run import ROOT
from .lab_cluster import records

SECTIONS = ["The lab", "Plan", "Provision", "Arm HA", "Kill", "Crash", "Boot", "Summary",
            "Notifications", "Metrics", "Report"]

# First of all (conftest.py): the demo replaces any lab, and the session's comes up
# after it, fresh.
pytestmark = pytest.mark.own_lab


@pytest.fixture(name="demo", scope="module")
def fixture_demo():
    """The demo's output; its lab is taken down afterwards."""
    done = subprocess.run([str(ROOT / "scripts" / "demo")], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, check=False)
    yield done
    try:
        lab_verbs.down(log=lambda _: None)
    except LabError:
        pass


def test_the_demo_tells_each_step_in_order(demo):
    assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-3000:]
    titles = re.findall(r"^== (.*)$", demo.stdout, flags=re.M)
    assert [next(s for s in SECTIONS if t.startswith(s)) for t in titles] == SECTIONS
    assert "Traceback" not in demo.stdout + demo.stderr


def test_an_ha_vm_whose_qemu_is_killed_is_started_again_where_it_was(demo):
    killed = re.search(r"^== Kill (\w+)'s QEMU on (hv\d)$", demo.stdout, flags=re.M)
    vm, host = killed.groups()
    told = demo.stdout[killed.end():demo.stdout.index("\n== Crash")]
    assert f"{vm} started again on {host} by its agent" in told, told
    assert re.search(rf"^ +[\d.]+ s  {vm} writes again on {host} ", told, flags=re.M), told


def test_each_ha_vm_of_the_crashed_host_runs_writes_and_comes_back(demo):
    crashed = re.search(r"^== Crash (hv\d)$", demo.stdout, flags=re.M).group(1)
    plan = re.search(rf"^  if {crashed} fails: (.*)$", demo.stdout, flags=re.M).group(1)
    moving = dict(re.findall(r"(\w+) -> (hv\d)", plan))
    assert moving, plan
    for vm, target in moving.items():
        assert f"{vm} writes again on {target}" in demo.stdout
        row = re.search(rf"^  {vm} +HA +{crashed} +ran on {target} +(.*)$", demo.stdout,
                        flags=re.M)
        running, writing, back, pause = re.findall(r"([\d.]+) s", row.group(1))
        assert float(running) <= float(writing)
        assert float(back) > 0 and float(pause) < 5
    assert f"{crashed} fenced off Ceph" in demo.stdout
    assert f"{crashed}'s fence lifted" in demo.stdout


def test_the_lab_stays_up_with_every_vm_at_home_and_no_watcher_left(demo):
    lab = lab_verbs.status()  # the demo's: the session's is not up yet
    assert lab["up"]
    stored = records(lab)
    assert {name: stored[name]["state"] for name in VMS} == {name: "running" for name in VMS}
    watchers = subprocess.run(["pgrep", "-f", "ansible-rulebook"], capture_output=True,
                              check=False)
    assert watchers.returncode == 1, watchers.stdout
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        assert not etcd.get_prefix(etcd_keys.fences_prefix(cluster=layout.CLUSTER_NAME))


def test_the_report_shows_every_host_and_vm(demo):
    report = Path(re.search(r"^  (\S+report\.html)", demo.stdout, flags=re.M).group(1))
    html = report.read_text()
    assert (report.parent / "report.png").stat().st_size > 10_000
    for name in [*VMS, "hv1", "hv2", "hv3"]:
        assert name in html, name


def test_the_metrics_show_the_failover_and_its_alert(demo):
    crashed = re.search(r"^== Crash (hv\d)$", demo.stdout, flags=re.M).group(1)
    assert f"alert YascoHostDown fired ({crashed})" in demo.stdout
    held = int(re.search(rf"^  {crashed} held no lease for about (\d+) s$", demo.stdout,
                         flags=re.M).group(1))
    down = [int(s) for s in re.findall(r"^  HA VM \w+ ran nowhere for about (\d+) s$",
                                       demo.stdout, flags=re.M)]
    # Down while their host was, never longer, and not for nothing: the samples saw it.
    assert down and all(0 < s < held for s in down), (held, down)
    picture = Path(re.search(r"^  (\S+metrics\.png):", demo.stdout, flags=re.M).group(1))
    assert picture.stat().st_size > 10_000


def test_the_operators_were_told_of_the_evacuation_and_the_return_home(demo):
    crashed = re.search(r"^== Crash (hv\d)$", demo.stdout, flags=re.M).group(1)
    told = re.findall(r"^  \[(\w+)\] (.*)$", demo.stdout, flags=re.M)
    assert [t for t in told if t == ("warning", t[1]) and t[1].startswith(
        f"lab: {crashed} failed; ") and "HA VM(s) started elsewhere" in t[1]], told
    assert [t for t in told if t[1].startswith(f"lab: {crashed} is back; ")], told
    saved = Path(re.search(r"as JSON, with their details: (\S+notifications\.json);",
                           demo.stdout).group(1))
    events = [body["event"] for body in json.loads(saved.read_text())]
    # The killed VM's restart in place, by its host's agent, then the crash's.
    assert events[:2] == ["vm_restarted", "evacuation"] and "return_home" in events, events
    # The webhook was the demo's alone: the lab it leaves up sends nowhere.
    assert not (layout.inventory_dir() / "group_vars" / "all" / "demo_notify.yml").exists()
