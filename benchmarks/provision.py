"""Benchmark provisioning on the lab: playbooks/provision.yml against a naive loop.

    make bench-provision            # or: .venv/bin/python benchmarks/provision.py [--vms N]

Brings the lab up if it is not, and plans N canary VMs (default 30: two thirds HA,
the rest plain and preemptible) on its three hypervisors, with capacities raised so
they fit. Each method provisions them from nothing, then runs again with nothing to
change; the VMs are removed in between. Wall times exclude guest boot: a run ends
when every domain is started, not when its guest is up. Medians of --runs runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys  # noqa: E402
from yasco_lab.credentials import etcd_client  # noqa: E402


def lab_status() -> dict:
    done = subprocess.run([str(BIN / "yasco-lab"), "status", "--json"], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0 or not json.loads(done.stdout or "{}").get("up"):
        subprocess.run([str(BIN / "yasco-lab"), "up"], check=True)
        done = subprocess.run([str(BIN / "yasco-lab"), "status", "--json"],
                              capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def lab_inventory(lab: dict, where: Path, vms: dict, memory_mb: int,
                  vm_defaults: dict | None = None) -> Path:
    """The lab's inventory at `where` with `vms` (and `vm_defaults`), its hypervisors'
    memory raised to `memory_mb` so that they all fit."""
    source = Path(lab["inventory"])
    (where / "group_vars" / "all").mkdir(parents=True)
    hosts = yaml.safe_load((source / "hosts.yml").read_text())
    for hv in hosts["all"]["children"]["yasco_hypervisors"]["hosts"].values():
        hv["yasco_capacity"] = {"vcpus": 64, "memory_mb": memory_mb}
    (where / "hosts.yml").write_text(yaml.safe_dump(hosts))
    shutil.copy(source / "group_vars" / "all" / "lab.yml", where / "group_vars" / "all")
    settings = {"yasco_vms": vms, **({"yasco_vm_defaults": vm_defaults} if vm_defaults else {})}
    (where / "group_vars" / "all" / "vms.yml").write_text(yaml.safe_dump(settings))
    return where


def inventory(lab: dict, count: int, where: Path) -> tuple[Path, list[str]]:
    names = [f"bench{i:02d}" for i in range(count)]
    vms = {}
    for i, name in enumerate(names):
        vms[name] = {"ha": True} if i % 3 < 2 else ({} if i % 6 == 2 else {"preemptible": True})
    # No kernel and a blank disk: the guest stops in firmware at once, so the figures
    # measure provisioning, not TCG guests booting on two cores.
    defaults = {"memory_mb": 64, "vcpus": 1, "disk_gb": 1}
    return lab_inventory(lab, where, vms, 16384, defaults), names


def ansible_playbook(playbook: Path, inv: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), str(playbook)],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{playbook.name} failed:\n{done.stdout[-3000:]}")
    return seconds


def remove_all(lab: dict, names: list[str]) -> None:
    """Destroy and undefine the VMs, drop their records and disks, straight through the
    services (faster than a playbook per VM, and not what is measured)."""
    import libvirt
    import rbd
    from yasco_lab import storage
    for host in lab["hosts"]:
        conn = libvirt.open(host["libvirt_uri"])
        for dom in conn.listAllDomains():
            if dom.name() in names:
                if dom.isActive():
                    dom.destroy()
                dom.undefine()
        conn.close()
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        for name in names:
            etcd.delete(etcd_keys.vm_key(name, cluster="lab"))
    with storage.pool() as ioctx:
        for name in names:
            for attempt in range(60):
                try:
                    rbd.RBD().remove(ioctx, name)
                    break
                except rbd.ImageNotFound:
                    break
                except rbd.ImageBusy:
                    time.sleep(1)  # the destroyed QEMU's watch lingers a moment
                    del attempt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--vms", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    lab = lab_status()
    methods = {"playbooks/provision.yml": ROOT / "playbooks" / "provision.yml",
               "naive loop, one task per VM": ROOT / "benchmarks" / "naive_provision.yml"}
    with tempfile.TemporaryDirectory(prefix="yasco-bench-") as scratch:
        inv, names = inventory(lab, args.vms, Path(scratch) / "inventory")
        ansible_playbook(ROOT / "playbooks" / "plan.yml", inv)
        rows = []
        for label, playbook in methods.items():
            fresh, rerun = [], []
            for dummy in range(args.runs):
                remove_all(lab, names)
                fresh.append(ansible_playbook(playbook, inv))
                rerun.append(ansible_playbook(playbook, inv))
            remove_all(lab, names)
            rows.append((label, statistics.median(fresh), statistics.median(rerun)))
    base = rows[1]
    print(f"{args.vms} VMs on 3 lab hypervisors, median of {args.runs} runs, guest boot excluded")
    print(f"{'method':<30}  {'provision s':>11}  {'no-change rerun s':>17}")
    for label, fresh, rerun in rows:
        print(f"{label:<30}  {fresh:>11.1f}  {rerun:>17.1f}")
    print(f"{'ratio (naive / ours)':<30}  {base[1] / rows[0][1]:>11.2f}  "
          f"{base[2] / rows[0][2]:>17.2f}")


if __name__ == "__main__":
    main()
