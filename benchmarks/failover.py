"""Benchmark failover on the lab: how long from a hypervisor crash to its HA VMs
running, and writing, on their planned targets.

    make bench-failover    # or: .venv/bin/python benchmarks/failover.py [--vms 12] [--runs 3]

Brings the lab up if it is not, provisions N HA canary VMs spread over its three
hypervisors, and runs the HA watcher (scripts/watch). Each run crashes one hypervisor
(in turn) and prints its timeline, then boots it again and times the watcher's
return home (playbooks/return_home.yml), with each live migration's guest pause.
The runs take turns between the two ways the playbooks can run this collection's
tasks: in the controller's process (the default) and, the baseline, as modules
(`yasco_run_on_controller: false`); the tables give both side by side, and the
ratio. The lease's TTL is the floor no design with these settings can beat: it has
to expire before anything can react, so the failover table also gives each phase
from the expiry.

Phases, all from the crash:
- lease expired: the host's liveness key is gone from etcd (this script watches it);
- event: the watcher emits host_down (its log);
- fenced: the evacuation has recorded the fence (`fences/<host>`, written once the
  fencer holds the OSD map with the blocklist, with the claims);
- running: the VM's domain runs on its target (its agent publishes it in etcd);
- writing: the canary's first write from its new copy (on its RBD disk).
"""

from __future__ import annotations

import argparse
import datetime
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
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (  # noqa: E402
    EtcdClient)
from provision import lab_inventory, lab_status  # noqa: E402
from yasco_lab import canary, hypervisor, layout, storage  # noqa: E402
from yasco_lab.credentials import etcd_client  # noqa: E402
from yasco_lab.errors import LabError  # noqa: E402
from yasco_lab.waiting import wait_until as wait  # noqa: E402

CLUSTER = layout.CLUSTER_NAME


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env,
                          check=False)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done


def playbook(name: str, inventory: Path, *extra: str) -> None:
    run(str(BIN / "ansible-playbook"), "-i", str(inventory), f"playbooks/{name}.yml", *extra)


def inventory(lab: dict, count: int, where: Path) -> tuple[Path, list[str]]:
    names = [f"fo{i:02d}" for i in range(count)]
    vms = {name: {"ha": True, "home": f"hv{i % 3 + 1}"} for i, name in enumerate(names)}
    return lab_inventory(lab, where, vms, 8192), names


def watcher_event_time(log: Path, host: str, since: float,
                       kind: str = "host_down") -> float | None:
    for line in log.read_text(errors="replace").splitlines():
        if f"{kind}: {host}" in line:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            at = stamp.replace(tzinfo=datetime.timezone.utc).timestamp()
            if at >= since:
                return at
    return None


def one_run(etcd: EtcdClient, lab: dict, inv: Path, vdm: dict, host: str,
            log: Path) -> dict[str, float]:
    moving = sorted(n for n, h in vdm["home"].items() if h == host)
    targets = vdm["failover"][host]
    last_seq = {n: storage.canary_records(n)[-1] for n in moving}
    subprocess.run([str(BIN / "yasco-lab"), "crash", host], check=True, capture_output=True)
    crashed = time.time()
    wait("lease expiry", lambda: etcd.get(etcd_keys.alive_key(host, cluster=CLUSTER)) is None,
         30)
    expired = time.time()
    running: dict[str, float] = {}
    fenced: list[float] = []

    # One read a poll, of every key watched: the benchmark must not load the
    # machine whose speed it measures.
    fence = etcd_keys.fence_key(host, cluster=CLUSTER)
    prefixes = [fence] + sorted(
        {etcd_keys.domains_prefix(targets[name], cluster=CLUSTER) for name in moving})

    def all_running() -> bool:
        now = time.time()
        values = {kv.key: kv.value for kvs in etcd.get_prefixes(prefixes).values()
                  for kv in kvs}
        if not fenced and fence in values:
            fenced.append(now)
        for name in moving:
            value = values.get(etcd_keys.domain_key(targets[name], name, cluster=CLUSTER))
            if name not in running and value is not None and '"running"' in value:
                running[name] = now
        return len(running) == len(moving)

    wait("HA VMs running", all_running, 180, every=0.1)
    writing: dict[str, float] = {}

    def all_writing() -> bool:
        for name in moving:
            if name not in writing:
                new = [r for r in storage.canary_records(name) if r.writer != last_seq[name].writer
                       and r.seq > last_seq[name].seq]
                if new:
                    writing[name] = min(r.timestamp for r in new)
        return len(writing) == len(moving)

    wait("canaries writing", all_writing, 300, every=1)
    event = watcher_event_time(log, host, crashed - 1)
    return {"lease expired": expired - crashed,
            "event": (event - crashed) if event else float("nan"),
            "fenced": fenced[0] - crashed,
            "first running": min(running.values()) - crashed,
            "all running": max(running.values()) - crashed,
            "all writing": max(writing.values()) - crashed,
            "vms": len(moving)}


def return_home(etcd: EtcdClient, vdm: dict, host: str, log: Path) -> dict[str, float]:
    """Boot the crashed host and time what the watcher's return home does: from the
    boot, its agent registered, host_stable (after the hold-down), each VM recorded
    home; and each live migration's guest pause, the longest gap between the canary's
    records around it (one every `canary.WRITE_INTERVAL` or so)."""
    moving = sorted(n for n, h in vdm["home"].items() if h == host)
    # From the boot command's start: it returns once the host's services run, which
    # takes longer when its etcd member must first find the cluster's new leader.
    booted = time.time()
    subprocess.run([str(BIN / "yasco-lab"), "boot", host], check=True, capture_output=True)
    wait("agent registered", lambda: etcd.get(etcd_keys.alive_key(host, cluster=CLUSTER))
         is not None, 120)
    registered = time.time()
    home: dict[str, float] = {}
    prefix = etcd_keys.vms_prefix(cluster=CLUSTER)

    def all_home() -> bool:
        now = time.time()
        for kv in etcd.get_prefix(prefix):
            name = kv.key.rsplit("/", 1)[-1]
            done = kv.json() == {"host": host, "state": "running"}
            if name in moving and name not in home and done:
                home[name] = now
        return len(home) == len(moving)

    wait("VMs home", all_home, 600, every=0.2)
    stable = watcher_event_time(log, host, booted, kind="host_stable")
    pauses = []
    for name in moving:
        stamps = [r.timestamp for r in storage.canary_records(name)
                  if registered - 5 <= r.timestamp <= home[name] + 5]
        pauses.append(max((b - a for a, b in zip(stamps, stamps[1:])), default=float("nan")))
    return {"registered": registered - booted,
            "host_stable": (stable - booted) if stable else float("nan"),
            "first home": min(home.values()) - booted,
            "all home": max(home.values()) - booted,
            "pause median": statistics.median(pauses),
            "pause max": max(pauses)}


# Where the watcher's playbooks run this collection's tasks: in the controller's
# process (the default), and as modules, the baseline (yasco_run_on_controller).
MODES = {"in process": True, "as modules": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--vms", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3, help="runs of each mode")
    args = parser.parse_args()
    lab = lab_status()
    rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    returns: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="yasco-failover-") as scratch:
        inv, names = inventory(lab, args.vms, Path(scratch) / "inventory")
        playbook("plan", inv)
        playbook("provision", inv)
        vdm = yaml.safe_load((inv / "group_vars" / "all" / "yasco_vdm.yml").read_text())[
            "yasco_vdm"]
        hold_down = vdm_hold_down(inv)
        wait("canaries writing", lambda: all(len(storage.canary_records(n)) >= 2
                                             for n in names), 600, every=2)
        log = Path(scratch) / "watcher.log"
        watcher = subprocess.Popen([str(ROOT / "scripts" / "watch")], cwd=ROOT,
                                   env={**os.environ, "INV": str(inv)},
                                   stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                   start_new_session=True)
        time.sleep(8)
        try:
            with etcd_client(lab["etcd_endpoints"]) as etcd:
                # The modes take turns, so that both see the same machine.
                for index in range(args.runs * len(MODES)):
                    mode = list(MODES)[index % len(MODES)]
                    # Each playbook the watcher starts reads the inventory afresh.
                    (inv / "group_vars" / "all" / "run_mode.yml").write_text(
                        yaml.safe_dump({"yasco_run_on_controller": MODES[mode]}))
                    host = f"hv{index % 3 + 1}"
                    row = one_run(etcd, lab, inv, vdm, host, log)
                    rows[mode].append(row)
                    print(f"run {index + 1} ({mode}): crash {host}: " + ", ".join(
                        f"{k} {v:.1f}" if k != "vms" else f"{v} VMs" for k, v in row.items()),
                        flush=True)
                    back = return_home(etcd, vdm, host, log)
                    returns[mode].append(back)
                    print(f"run {index + 1} ({mode}): boot {host}: " + ", ".join(
                        f"{k} {v:.1f}" for k, v in back.items()), flush=True)
        finally:
            # Cleaning up must not hide why a run stopped: boot what is down, and
            # report a removal that fails instead of raising.
            os.killpg(watcher.pid, signal.SIGTERM)
            watcher.wait(timeout=30)
            clean_up(inv, names)
    first, baseline = MODES
    print(f"\n{args.vms} HA canary VMs on 3 lab hypervisors, one crashed per run; seconds "
          f"from the crash, median (min-max) of {args.runs} runs each, tasks run {first} "
          f"and, the baseline, {baseline}, taking turns; agent lease ttl "
          f"{hypervisor.AGENT_TTL:g} s. After expiry: the median from the lease's expiry, "
          "when YASCO can first act (when the crashed host ran etcd's leader, the "
          "election renews every lease first).")
    print(f"{'phase':<14} {first:>17} {baseline:>17} {'ratio':>6}  "
          f"{'after expiry':>16}")
    for phase in [k for k in rows[first][0] if k != "vms"]:
        after = [statistics.median(r[phase] - r["lease expired"] for r in rows[m])
                 for m in MODES]
        print(f"{phase:<14} {spread(rows[first], phase):>17} "
              f"{spread(rows[baseline], phase):>17} {ratio(rows, phase):>6}  "
              f"{after[0]:>7.1f} / {after[1]:<7.1f}")

    print(f"\nReturn home, seconds from the boot, median (min-max) of {args.runs} runs "
          f"each (the watcher's hold-down is {hold_down:g} s); pause: a canary's "
          "longest gap between writes around its live migration (about "
          f"{canary.WRITE_INTERVAL:g} s without one)")
    print(f"{'phase':<14} {first:>17} {baseline:>17} {'ratio':>6}")
    for phase in returns[first][0]:
        print(f"{phase:<14} {spread(returns[first], phase):>17} "
              f"{spread(returns[baseline], phase):>17} {ratio(returns, phase):>6}")


def clean_up(inv: Path, names: list[str]) -> None:
    """Heal or boot every lab host that is not running, and remove the benchmark's VMs;
    a removal that fails is reported, not raised, so that it hides no earlier error."""
    for host in lab_status()["hosts"]:
        if host["state"] != "running":
            subprocess.run([str(BIN / "yasco-lab"),
                            "heal" if host["state"] == "partitioned" else "boot",
                            host["name"]], check=False, capture_output=True)
    for name in names:
        done = run(str(BIN / "ansible-playbook"), "-i", str(inv), "playbooks/remove_vm.yml",
                   "-e", f"vm={name}", "-e", f"delete_disk={name}", check=False)
        if done.returncode != 0:
            print(f"could not remove {name}: remove it with playbooks/remove_vm.yml",
                  file=sys.stderr)


def spread(rows: list[dict[str, float]], phase: str) -> str:
    values = [row[phase] for row in rows]
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def ratio(rows: dict[str, list[dict[str, float]]], phase: str) -> str:
    first, baseline = (statistics.median(r[phase] for r in rows[m]) for m in MODES)
    return f"{first / baseline:.2f}" if baseline else "-"


def vdm_hold_down(inv: Path) -> float:
    settings = yaml.safe_load((inv / "group_vars" / "all" / "lab.yml").read_text())
    return float(settings.get("yasco_return_hold_down", 60))


if __name__ == "__main__":
    try:
        main()
    except LabError as err:  # the lab did not get where a run waited for it
        sys.exit(f"failover: {err}")
