"""Benchmark recovery on the lab: from a fault to the HA canary writing again, for the
faults the HA reconciler handles and for a host crash, with the reconciler and the
agents' restarts in place; with the reconciler alone (agents that restart nothing in
place, `restart_in_place: 0`), for the faults the agents act on; and, the baseline,
with the watcher as it was before the reconciler (`yasco_reconcile_interval: 0`: host
failures only) and agents without their storage probe or restarts in place.

    make bench-recovery    # or: .venv/bin/python benchmarks/recovery.py [--runs 5]

Brings the lab up if it is not, provisions three HA canary VMs (one homed on each
hypervisor) and runs the HA watcher (scripts/watch). Faults, each run on the next
canary or host in turn:
- guest panic: an NMI into a canary, whose kernel panics on it; libvirt resets the
  guest in place (on_crash restart, through its pvpanic device), with or without
  the watcher;
- VM killed: SIGKILL to a canary's QEMU, its host alive (as the OOM killer does);
- failed start: the same, on a host that can no longer start VMs (its libvirt
  secret for Ceph removed), so the restart in place fails and the VM is relocated;
  these two run in the second mode too;
- clean reboot: `yasco-lab reboot` of the canary's host;
- host crash: `yasco-lab crash` of the canary's host, booted again afterwards;
- cut from Ceph: `yasco-lab partition --from ceph` of the canary's host, etcd still
  answering, healed afterwards; the baseline's agents run without their storage probe
  (as they were before it), for every fault of its mode.
Each time is from the fault to the canary's first write from its new copy (read on
its RBD disk); beside it, for the reconciler's runs, from the fault to that copy's
QEMU starting (libvirt's log on the host it runs on): what YASCO takes, the rest being
the guest's boot. That boot is measured alone too, in the same run: the canary booted
in a bare QEMU beside the lab, to its first write on a local disk. The baseline's runs
that never recover are given up after --give-up seconds and reported as "never"; the VM
is then started by hand (`recover_vm.yml`, as an operator would) before the next run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys  # noqa: E402
from failover import clean_up, playbook  # noqa: E402
from provision import lab_inventory, lab_status  # noqa: E402
from yasco_lab import canary, hypervisor, layout, storage  # noqa: E402
from yasco_lab import lab as lab_verbs  # noqa: E402
from yasco_lab.credentials import etcd_client  # noqa: E402
from yasco_lab.errors import LabError  # noqa: E402
from yasco_lab.waiting import wait_until as wait  # noqa: E402

FAULTS = ("guest panic", "VM killed", "failed start", "clean reboot", "host crash",
          "cut from Ceph")
# The faults the agents' restarts in place act on: run with the reconciler alone too.
IN_PLACE = ("VM killed", "failed start")
# Seconds within which the agents and the reconciler count a VM's restarts (one is
# allowed): each run is a VM's first failure in its window, so a canary waits out
# WINDOW from its last recovery (its last restart) before its next fault.
WINDOW = 20
# Each mode: the watcher's settings, the agents' (lab.restart_agent), and its faults.
MODES = {
    "reconciler": ({}, {"storage_probe": True, "restart_window": WINDOW}, FAULTS),
    "no agent restarts": ({}, {"storage_probe": True, "restart_in_place": 0}, IN_PLACE),
    "baseline": ({"yasco_reconcile_interval": 0},
                 {"storage_probe": False, "restart_in_place": 0}, FAULTS),
}
HOSTS = ("hv1", "hv2", "hv3")


def where_running(name: str) -> str | None:
    for host in HOSTS:
        try:
            done = lab_verbs.run_on_host(host, "virsh", "-q", "domstate", name)
        except LabError:
            continue  # down
        if done.returncode == 0 and done.stdout.strip() == "running":
            return host
    return None


def writing_again(name: str, last, give_up: float) -> float | None:
    """When the canary first wrote from a new copy, or None if not within give_up."""
    found: list[float] = []

    def new_copy() -> bool:
        new = [r for r in storage.canary_records(name)
               if r.writer != last.writer and r.seq > last.seq]
        if new:
            found.append(min(r.timestamp for r in new))
        return bool(new)

    try:
        wait(f"{name} writing again", new_copy, give_up, every=1)
    except LabError:
        return None
    return found[0]


def qemu_started(name: str) -> float | None:
    """When the QEMU of the copy of `name` that runs now started, from libvirt's log on
    its host (the lab's hosts share this machine's clock)."""
    host = where_running(name)
    if host is None:
        return None
    found = lab_verbs.run_on_host(host, "sh", "-c",
                                  f"grep 'starting up' /var/log/libvirt/qemu/{name}.log "
                                  "| tail -1").stdout
    try:  # 2026-11-29 10:02:23.123+0000: starting up libvirt version ...
        at = datetime.datetime.strptime(found[:23], "%Y-%m-%d %H:%M:%S.%f")
    except ValueError:
        return None
    return at.replace(tzinfo=datetime.timezone.utc).timestamp()


def guest_boot(runs: int) -> list[float | None]:
    """Seconds from a bare QEMU's start to the canary's first write on a local disk,
    beside the lab: the guest's share of each recovery."""
    image = canary.build(layout.canary_dir())
    took: list[float | None] = []
    with tempfile.TemporaryDirectory(prefix="yasco-boot-") as scratch:
        disk = Path(scratch) / "disk"
        disk.write_bytes(b"\0" * canary.RECORD_SIZE * canary.RING_RECORDS)
        for dummy in range(runs):
            took.append(canary.seconds_to_output(canary.qemu_argv(image, disk=disk),
                                                 "yasco-canary: wrote", 60))
    return took


def one_run(fault: str, name: str, give_up: float) -> tuple[float | None, float | None]:
    host = where_running(name)
    if host is None:
        raise SystemExit(f"{name} runs nowhere before the {fault} run")
    last = storage.canary_records(name)[-1]
    if fault == "failed start":
        lab_verbs.ceph_secret(host, present=False)
    started = time.time()
    try:
        if fault == "guest panic":
            panicked = lab_verbs.run_on_host(host, "virsh", "inject-nmi", name)
            if panicked.returncode != 0:
                raise SystemExit(f"virsh inject-nmi {name}: {panicked.stderr.strip()}")
        elif fault in ("VM killed", "failed start"):
            lab_verbs.kill_qemu(name)
        elif fault == "clean reboot":
            subprocess.run([str(BIN / "yasco-lab"), "reboot", host], check=True,
                           capture_output=True)
        elif fault == "cut from Ceph":
            subprocess.run([str(BIN / "yasco-lab"), "partition", host, "--from", "ceph"],
                           check=True, capture_output=True)
        else:
            subprocess.run([str(BIN / "yasco-lab"), "crash", host], check=True,
                           capture_output=True)
        at = writing_again(name, last, give_up)
    finally:
        if fault == "failed start":
            lab_verbs.ceph_secret(host, present=True)
        if fault == "host crash":
            subprocess.run([str(BIN / "yasco-lab"), "boot", host], check=True,
                           capture_output=True)
        if fault == "cut from Ceph":
            subprocess.run([str(BIN / "yasco-lab"), "heal", host], check=True,
                           capture_output=True)
    if at is None:
        return None, None
    qemu = qemu_started(name)
    return at - started, None if qemu is None or qemu < started else qemu - started


def settle(inv: Path, names: list[str], homes: dict[str, str]) -> None:
    """Every canary home, running and writing, before the next run: as an operator
    would, start what runs nowhere (the baseline leaves a killed VM down) and send
    what runs elsewhere home (a relocated VM stays where it was started)."""
    def home() -> bool:
        return all(where_running(n) == homes[n] for n in names)

    try:
        wait("canaries home", home, 60, every=2)
    except LabError:
        for name in names:
            if where_running(name) is None:
                record, revision = current_record(name)
                steps = [{"action": "relocate", "vm": name, "from": homes[name],
                          "to": homes[name], "hosts": [], "preempt": [],
                          "record": record, "revision": revision,
                          "reason": "started by hand"}]
                playbook("recover_vm", inv, "-e", json.dumps({"yasco_recover": steps}))
        for name in names:
            if where_running(name) != homes[name]:
                playbook("return_home", inv, "-e", f"yasco_host={homes[name]}")
        wait("canaries home", home, 240, every=2)
    last = {n: latest_seq(n) for n in names}
    wait("canaries writing", lambda: all(latest_seq(n) > last[n] + 2 for n in names), 300,
         every=1)


def restart_agents(settings: dict) -> None:
    """Restart every agent with `settings` (lab.restart_agent's: with its storage probe
    or without it, the baseline), and wait until each has registered again saying
    which."""
    on = settings["storage_probe"]
    for host in HOSTS:
        lab_verbs.restart_agent(host, **settings)

    def registered() -> bool:
        with etcd_client(lab_status()["etcd_endpoints"]) as etcd:
            keys = [etcd.get(etcd_keys.alive_key(h, cluster=layout.CLUSTER_NAME))
                    for h in HOSTS]
        return all(k is not None and (k.json().get("storage") is not None) is on
                   for k in keys)

    wait("agents registered again", registered, 60, every=1)


def latest_seq(name: str) -> int:
    """The canary's last sequence number on its disk; -1 before its first write."""
    found = storage.canary_records(name)
    return found[-1].seq if found else -1


def current_record(name: str) -> tuple[dict, int]:
    """The VM's record and its revision, which a step must name (0: none)."""
    with etcd_client(lab_status()["etcd_endpoints"]) as etcd:
        kv = etcd.get(etcd_keys.vm_key(name, cluster=layout.CLUSTER_NAME))
        return (kv.json(), kv.mod_revision) if kv else ({}, 0)


def watch(inv: Path, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([str(ROOT / "scripts" / "watch")], cwd=ROOT,
                            env={**os.environ, "INV": str(inv)}, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(8)
    return proc


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each fault")
    parser.add_argument("--baseline-runs", type=int, default=1,
                        help="runs of each fault without the reconciler")
    parser.add_argument("--give-up", type=float, default=90.0)
    parser.add_argument("--faults", default=",".join(FAULTS))
    args = parser.parse_args()
    faults = [f.strip() for f in args.faults.split(",")]
    lab = lab_status()
    names = [f"rc{i}" for i in range(3)]
    homes = {name: HOSTS[i] for i, name in enumerate(names)}
    results: dict[str, dict[str, list[float | None]]] = {
        m: {f: [] for f in faults} for m in MODES}
    # From the fault to the new copy's QEMU starting, the reconciler's runs.
    qemu: dict[str, list[float | None]] = {f: [] for f in faults}
    with tempfile.TemporaryDirectory(prefix="yasco-recovery-") as scratch:
        inv = lab_inventory(lab, Path(scratch) / "inventory",
                            {n: {"ha": True, "home": homes[n]} for n in names}, 8192)
        playbook("plan", inv)
        playbook("provision", inv)
        recovered: dict[str, float] = {}  # monotonic: when each canary last came back
        try:
            settle(inv, names, homes)
            for mode, (settings, agents, its_faults) in MODES.items():
                # Restarts counted within WINDOW only: each run is a first failure.
                (inv / "group_vars" / "all" / "bench.yml").write_text(yaml.safe_dump(
                    {"yasco_recovery": {"window": WINDOW}, **settings}))
                restart_agents(agents)
                watcher = watch(inv, Path(scratch) / f"{mode.replace(' ', '-')}.log")
                try:
                    runs = args.baseline_runs if mode == "baseline" else args.runs
                    for fault in (f for f in faults if f in its_faults):
                        for index in range(runs):
                            name = names[index % len(names)]
                            time.sleep(max(0.0, recovered.get(name, 0) + WINDOW + 1
                                           - time.monotonic()))
                            took, vm_started = one_run(fault, name, args.give_up)
                            recovered[name] = time.monotonic()
                            results[mode][fault].append(took)
                            if mode == "reconciler":
                                qemu[fault].append(vm_started)
                            print(f"{mode}: {fault} of {name}: "
                                  f"{'never' if took is None else f'{took:.1f} s'}",
                                  flush=True)
                            settle(inv, names, homes)
                finally:
                    stop(watcher)
            boots = guest_boot(args.runs)
        finally:
            restart_agents({"storage_probe": True})
            clean_up(inv, names)
    print(f"\nSeconds from the fault to the HA canary writing again from a new copy, median "
          f"(min-max) of {args.runs} runs with the reconciler and the agents' restarts in "
          f"place, {args.runs} with the reconciler alone (agents restart nothing), and "
          f"{args.baseline_runs} without either (the watcher before the reconciler: host "
          f"failures only), 'never' when nothing within {args.give_up:g} s; and, for the "
          f"reconciler's runs, from the fault to the new copy's QEMU starting, the rest "
          f"being the guest's boot; agent ttl {hypervisor.AGENT_TTL:g} s, TCG guests on a "
          f"2-core machine.")
    columns = {"VM started": qemu, **{mode: results[mode] for mode in MODES}}
    print(f"{'fault':<14} " + " ".join(f"{name:>22}" for name in columns))
    for fault in faults:
        print(f"{fault:<14} " + " ".join(f"{spread(column[fault]):>22}"
                                         for column in columns.values()))
    print(f"\nThe canary's boot alone, from a bare QEMU's start to its first write, beside "
          f"the lab: {spread(boots)} s ({len(boots)} boots).")


def spread(values: list[float | None]) -> str:
    done = [v for v in values if v is not None]
    if not done:
        return "never" if values else "-"
    text = f"{statistics.median(done):.1f} ({min(done):.1f}-{max(done):.1f})"
    return text + (f", {len(values) - len(done)} never" if len(done) < len(values) else "")


if __name__ == "__main__":
    try:
        main()
    except LabError as err:
        sys.exit(f"recovery: {err}")
