"""playbooks/report.yml against a real etcd: it reads the cluster's history as the
read-only playbooks do and writes the report beside the inventory, or where told."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.planner import vdm_document
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import load_problem
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import plan

from .conftest import BIN, ROOT, ansible_env

HOSTS = {f"hv{i}": {"yasco_capacity": {"vcpus": 4, "memory_mb": 1024},
                    "yasco_reserved": {"vcpus": 0, "memory_mb": 128}} for i in (1, 2, 3)}
# The lab demo's VMs, each of 128 MiB and one vCPU.
VMS = {"web1": {"ha": True, "priority": 10}, "web2": {"ha": True, "priority": 10},
       "db1": {"ha": True, "priority": 20}, "tools1": {}, "tools2": {},
       "batch1": {"preemptible": True}, "batch2": {"preemptible": True}}
T0 = 1_790_000_000.0


def planned_vdm() -> dict:
    problem = load_problem(HOSTS, {"yasco_vms": VMS, "yasco_vm_defaults": {
        "memory_mb": 128, "vcpus": 1}})
    return vdm_document.build(problem, plan(problem), None)


def inventory(directory: Path, etcd, cluster: str, vdm: dict) -> Path:
    """An inventory of three hypervisors, none of them reachable: the report reads
    etcd alone."""
    directory.mkdir()
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"yasco_cluster_name": cluster, "yasco_etcd_endpoints": [etcd.url],
                 "yasco_vdm": vdm},
        "children": {"yasco_hypervisors": {"hosts": {
            h: {"yasco_libvirt_uri": f"qemu+ssh://root@{h}.invalid/system"}
            for h in HOSTS}}}}}))
    return path


def record(etcd, cluster: str, vdm: dict) -> list[str]:
    """hv1's failure and return home, after an unrelated event, as the playbooks
    record them; the keys written."""
    targets = vdm["failover"]["hv1"]
    timed = [(-300, "started", {"vm": "tools1", "host": vdm["home"]["tools1"],
                                "by": "provision"}),
             (0, "fenced", {"host": "hv1", "by": "evacuate"}),
             *[(0.1, "evacuated", {"vm": n, "host": t, "by": "evacuate"})
               for n, t in sorted(targets.items())],
             *[(60 + i, "migrated", {"vm": n, "host": "hv1", "by": "return_home"})
               for i, n in enumerate(sorted(targets))],
             (70, "unfenced", {"host": "hv1", "by": "return_home"})]
    with etcd.client() as client:
        return [cluster_events.append(client, cluster_events.event(kind, at=T0 + s, **fields),
                                      cluster=cluster) for s, kind, fields in timed]


def report(hosts: Path, *extra: str) -> tuple[int, dict[str, dict], str]:
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(hosts), str(ROOT / "playbooks" / "report.yml"),
         *extra], cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=120,
        check=False)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    tasks = json.loads(done.stdout)["plays"][0]["tasks"]
    return done.returncode, {t["task"]["name"]: t["hosts"]["localhost"] for t in tasks}, output


def test_the_report_shows_the_incident_in_etcd_and_lands_beside_the_inventory(etcd, tmp_path):
    cluster = f"report{uuid.uuid4().hex[:8]}"
    vdm = planned_vdm()
    keys = record(etcd, cluster, vdm)
    hosts = inventory(tmp_path / "inventory", etcd, cluster, vdm)
    code, results, output = report(hosts, "-e", "yasco_report_failed=hv3")
    assert code == 0, output
    written = results["Draw the capacity, a failure and the latest incident"]
    folder = tmp_path / "inventory" / "report"
    assert written["html"] == str(folder / "report.html")
    assert written["failure_set"] == "hv3"
    assert written["incident"]["failed"] == ["hv1"] and written["incident"]["ended"]
    assert written["incident"]["events"] == len(keys) - 1  # not the earlier start
    said = results["Say where the report is"]["msg"]
    assert f"page: {folder / 'report.html'}" in said and f"picture: {folder / 'report.png'}" in said
    assert (folder / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (folder / "report.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    assert f"YASCO cluster {cluster}" in text and "If hv3 fails" in text
    assert "Latest incident: hv1 failed at" in text
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 3
    # Read again with nothing new in etcd: the same report, nothing changed.
    code, results, output = report(hosts, "-e", "yasco_report_failed=hv3")
    assert code == 0 and not results[
        "Draw the capacity, a failure and the latest incident"]["changed"], output


def test_a_history_without_failure_draws_no_timeline(etcd, tmp_path):
    cluster = f"report{uuid.uuid4().hex[:8]}"
    vdm = planned_vdm()
    hosts = inventory(tmp_path / "inventory", etcd, cluster, vdm)
    where = tmp_path / "elsewhere"
    code, results, output = report(hosts, "-e", json.dumps(
        {"yasco_report_dir": str(where), "yasco_report_failed": ["hv2", "hv1"]}))
    assert code == 0, output
    written = results["Draw the capacity, a failure and the latest incident"]
    assert written["incident"] is None and written["failure_set"] == "hv1,hv2"
    page = (where / "report.html").read_text()
    assert "The cluster's history is empty: no timeline to draw." in page
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 2
    assert not (tmp_path / "inventory" / "report").exists()
