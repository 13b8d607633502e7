"""What lab tests of playbooks share: an inventory of the lab with a set of VMs, the
playbooks run against it, and where the VMs run by libvirt and by etcd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import libvirt
import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from yasco_lab.credentials import etcd_client
from yasco_lab import etcd as lab_etcd
from yasco_lab import layout, prometheus, storage
from yasco_lab.chaos import stop_watchers, writer_runs

from ..ansible_run import ROOT, run_playbook


def playbook(name: str, inventory: Path, *args: str, **extra_vars):
    return run_playbook(ROOT / "playbooks" / f"{name}.yml", str(inventory), *args,
                        extra_vars=extra_vars or None)


def make_inventory(lab: dict, inventory: Path, vms: dict) -> Path:
    """The lab's inventory at `inventory`, with `vms` as yasco_vms."""
    (inventory / "group_vars" / "all").mkdir(parents=True)
    source = Path(lab["inventory"])
    shutil.copy(source / "hosts.yml", inventory / "hosts.yml")
    shutil.copy(source / "group_vars" / "all" / "lab.yml", inventory / "group_vars" / "all")
    (inventory / "group_vars" / "all" / "vms.yml").write_text(yaml.safe_dump({"yasco_vms": vms}))
    return inventory


def vdm_of(inventory: Path) -> dict:
    return yaml.safe_load((inventory / "group_vars" / "all" / "yasco_vdm.yml").read_text())[
        "yasco_vdm"]


# A live migration's two halves: the paused copy on the target before the switch, and
# on the source after it. QEMU hands the disk over between them; neither runs the guest.
_MIGRATION_PAUSES = {libvirt.VIR_DOMAIN_PAUSED_MIGRATION, libvirt.VIR_DOMAIN_PAUSED_POSTCOPY,
                     libvirt.VIR_DOMAIN_PAUSED_STARTING_UP}


def _runs_guest(dom) -> bool:
    state, reason = dom.state()
    return state == libvirt.VIR_DOMAIN_RUNNING or (
        state == libvirt.VIR_DOMAIN_PAUSED and reason not in _MIGRATION_PAUSES)


def running(lab) -> dict[str, list[str]]:
    """VM name -> hosts whose libvirt runs it (hosts that do not answer left out); a
    copy paused for a live migration does not count."""
    out: dict[str, list[str]] = {}
    for host in lab["hosts"]:
        try:  # probes the host first: a dead one fails within the second
            conn = lv.connect(host["libvirt_uri"], 1.0)
        except lv.LibvirtAdapterError:
            continue
        try:
            for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                try:
                    if _runs_guest(dom):
                        out.setdefault(dom.name(), []).append(host["name"])
                except libvirt.libvirtError:
                    pass  # gone between the listing and the question: it runs nowhere

        finally:
            conn.close()
    return out


def records(lab) -> dict[str, dict]:
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        return {kv.key.rsplit("/", 1)[-1]: json.loads(kv.value)
                for kv in etcd.get_prefix(etcd_keys.vms_prefix(cluster=layout.CLUSTER_NAME))}


# Every event a lab's run writes, and more.
HISTORY_READ = 100_000


def history(lab, kind: str, vms=None) -> list[dict]:
    """The events of `kind` (for `vms` when given) in the lab cluster's history,
    oldest first, with the agents' events the HA watcher has not copied in yet."""
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        events = cluster_events.recent(etcd, HISTORY_READ, cluster=layout.CLUSTER_NAME)
    return [e for e in events if e["kind"] == kind and (vms is None or e.get("vm") in vms)]


def wait_for(what: str, condition, timeout: float, every: float = 0.05, check=None):
    """Poll `condition` until it is true and return it; `check()`, an invariant, runs
    at every poll."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check is not None:
            check()
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s")


def etcd_leader(lab) -> str:
    """The hypervisor whose etcd member leads, from the members' own status."""
    for host in lab["hosts"]:
        request = urllib.request.Request(f"{host['etcd_client_url']}/v3/maintenance/status",
                                         data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=5,
                                    context=lab_etcd.tls_context()) as reply:
            status = json.load(reply)
        if status["leader"] == status["header"]["member_id"]:
            return host["name"]
    raise AssertionError("no etcd leader")


def start_watcher(inventory: Path, log: Path, index: int = 0, *args: str
                  ) -> subprocess.Popen:
    """Watcher number `index`, serving its metrics where the lab's Prometheus scrapes
    that number; `args` go to ansible-rulebook."""
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([str(ROOT / "scripts" / "watch"), *args], cwd=ROOT, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "INV": str(inventory),
                                 "METRICS": prometheus.watcher_listen(index)})


def wait_until_one_leads(lab: dict, watchers: list[subprocess.Popen]) -> None:
    """Until one of `watchers` holds the watchers' leader key, which names it by host
    and process id (scripts/watch execs ansible-rulebook), and every one runs."""
    key = etcd_keys.watchers_leader_key(cluster=layout.CLUSTER_NAME)
    ours = tuple(f"-{proc.pid}" for proc in watchers)

    def leading() -> bool:
        assert all(proc.poll() is None for proc in watchers), "a watcher exited"
        with etcd_client(lab["etcd_endpoints"]) as etcd:
            leader = etcd.get_json(key) or {}
        return str(leader.get("watcher", "")).endswith(ours)

    wait_for("one of the watchers to lead", leading, 60, every=0.5)


def stop_watcher(proc: subprocess.Popen) -> None:
    stop_watchers([proc], timeout=20)


def writers(name: str) -> list[tuple[str, int, int]]:
    """The canary's writers in disk order: (writer, first seq, last seq)."""
    return writer_runs(storage.canary_records(name))
