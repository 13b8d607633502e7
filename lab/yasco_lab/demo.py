"""`make demo`: YASCO's whole promise on the lab, narrated as it happens.

A lab brought up afresh; a VDM planned for a mixed set of canary VMs (HA, plain,
preemptible) and shown; the VMs provisioned and writing; the HA watcher started; an HA
VM's QEMU killed, and its restart in place told live (the dead QEMU's disk lock
broken, started again, writing again); a hypervisor crashed, and the evacuation told
live with the seconds since the crash (lease expired, fenced, preempted, restarted,
writing again); the host booted again and the return home told (each live migration
and its guest pause); then a summary, the notifications the operators got, the metrics
and the cluster report. The lab stays up for exploring.

Everything it tells comes from where an operator would look: etcd (the liveness key,
the VMs' records, the cluster's history), the watcher's log, and the canaries' own
records on their RBD disks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

from . import canary, lab, layout, prometheus, storage
from .inbox import Inbox
from .credentials import etcd_client
from .errors import LabError
from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CLUSTER = layout.CLUSTER_NAME
# The demo's VMs; each is a lab canary that writes numbered records to its RBD disk.
# Sized so that the lab's hosts (896 MB each for VMs) are full enough for a failure
# to need the preemptible VMs' room.
VMS = {
    "web1": {"ha": True, "priority": 10, "memory_mb": 256},
    "web2": {"ha": True, "priority": 10, "memory_mb": 256},
    "db1": {"ha": True, "priority": 20, "memory_mb": 384},
    "tools1": {"memory_mb": 256},
    "tools2": {"memory_mb": 256},
    "batch1": {"preemptible": True, "memory_mb": 384},
    "batch2": {"preemptible": True, "memory_mb": 384},
}
KINDS = {"ha": "HA", "plain": "plain", "preemptible": "preemptible"}
BOOT_TIMEOUT = 240  # canary guests boot under TCG on a loaded 2-core machine


class DemoError(Exception):
    """A step failed; the message says which and where its output is."""


class Clock:
    """Seconds since a moment, as the narration prints them."""

    def __init__(self) -> None:
        self.start = time.time()

    def since(self, at: float | None = None) -> float:
        return (time.time() if at is None else at) - self.start

    def say(self, text: str, at: float | None = None) -> None:
        print(f"  {self.since(at):6.1f} s  {text}", flush=True)


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def playbook(name: str, *extra: str, log: Path) -> str:
    """Run playbooks/NAME.yml on the lab's inventory; its output goes to `log`."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run([str(BIN / "ansible-playbook"), f"playbooks/{name}.yml", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    with log.open("a") as out:
        out.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise DemoError(f"playbooks/{name}.yml failed; its output is in {log}:\n"
                        + (done.stdout + done.stderr)[-2500:])
    return done.stdout


def vdm_of(inventory: Path) -> dict:
    path = inventory / "group_vars" / "all" / "yasco_vdm.yml"
    return yaml.safe_load(path.read_text())["yasco_vdm"]


def show_vdm(vdm: dict) -> None:
    """The plan as an operator reads it: each host's VMs and spare, then each failure."""
    print(f"  VDM version {vdm['version']}: survives any {vdm['failures_to_tolerate']} "
          "hypervisor failure(s)")
    print(f"  {'host':<5} {'capacity':>14} {'spare kept':>14}  home VMs")
    for host, capacity in sorted(vdm["hosts"].items()):
        spare = vdm.get("reserve", {}).get(host, {"vcpus": 0, "memory_mb": 0})
        homed = ", ".join(f"{vm} ({KINDS[vdm['vms'][vm]['kind']]})"
                          for vm, home in sorted(vdm["home"].items()) if home == host)
        print(f"  {host:<5} {capacity['vcpus']:>3} vCPU {capacity['memory_mb']:>5} MB "
              f"{spare['vcpus']:>3} vCPU {spare['memory_mb']:>5} MB  {homed}")
    for failed, moves in sorted(vdm["failover"].items()):
        goes = ", ".join(f"{vm} -> {target}" for vm, target in sorted(moves.items()))
        stops = ", ".join(vdm.get("preempt", {}).get(failed, []))
        print(f"  if {failed} fails: {goes or 'nothing moves'}"
              + (f"; stop {stops} to make room" if stops else ""))


def crash_target(vdm: dict) -> str:
    """The hypervisor whose failure shows the most: HA VMs to move, preemption."""
    return max(sorted(vdm["failover"]), key=lambda failed: (
        len(vdm["failover"][failed]), len(vdm.get("preempt", {}).get(failed, []))))


def last_record(name: str):
    records = storage.canary_records(name)
    return records[-1] if records else None


def wait_writing(names: list[str], clock: Clock) -> None:
    waiting = set(names)

    def all_writing() -> bool:
        for name in sorted(waiting):
            if last_record(name) is not None:
                clock.say(f"{name} is writing to its RBD disk")
                waiting.discard(name)
        return not waiting

    wait_until("every canary writing", all_writing, BOOT_TIMEOUT, every=2)


def start_watcher(etcd, log: Path, clock: Clock) -> subprocess.Popen:
    with log.open("ab") as out:
        watcher = subprocess.Popen([str(ROOT / "scripts" / "watch")], cwd=ROOT,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    leader = etcd_keys.watchers_leader_key(cluster=CLUSTER)
    wait_until("the watcher to lead",
               lambda: etcd.get(leader) is not None or watcher.poll() is not None, 90,
               every=0.5)
    if watcher.poll() is not None:
        raise DemoError(f"the HA watcher exited; its log is {log}")
    clock.say(f"the HA watcher runs (rulebooks/ha.yml), its log {log}")
    return watcher


def stop_watcher(watcher: subprocess.Popen) -> None:
    if watcher.poll() is None:
        os.killpg(watcher.pid, signal.SIGTERM)
        watcher.wait(timeout=30)


def describe(event: dict) -> str:
    """A history event in words."""
    kind, host, vm = event.get("kind"), event.get("host"), event.get("vm")
    texts = {"fenced": f"{host} fenced off Ceph (blocklisted, its locks broken)",
             "preempted": f"{vm} stopped on {host} to make room",
             "evacuated": f"{vm} started on {host}",
             "restarted": f"{vm} started again on {host}" + (
                 " by its agent" if event.get("by") == "agent" else ""),
             "unfenced": f"{host}'s fence lifted",
             "stale-destroyed": f"stale copy of {vm} destroyed on {host}",
             "migrated": f"{vm} live-migrated to {host}",
             "started": f"{vm} started on {host}"}
    return texts.get(kind, f"{kind}: {', '.join(str(v) for v in (host, vm) if v)}")


class History:
    """New events of the cluster's history in etcd, each told once."""

    def __init__(self, etcd) -> None:
        self.etcd = etcd
        self.prefix = etcd_keys.history_prefix(cluster=CLUSTER)
        self.seen = {kv.key for kv in etcd.get_prefix(self.prefix)}

    def new(self) -> list[dict]:
        fresh = []
        for kv in self.etcd.get_prefix(self.prefix):
            if kv.key not in self.seen:
                self.seen.add(kv.key)
                event = json.loads(kv.value)
                # The key is the wall clock in nanoseconds (cluster_events).
                fresh.append({**event, "time": int(kv.key.rsplit("/", 1)[-1]) / 1e9})
        return fresh


def narrate_kill(etcd, vdm: dict, avoid: str, inbox: Inbox) -> None:
    """Kill the QEMU of an HA VM homed away from `avoid` and tell its restart in place
    until it writes again and the operators are told."""
    ha = sorted(vm for vm, entry in vdm["vms"].items() if entry["kind"] == "ha")
    victim = next((vm for vm in ha if vdm["home"][vm] != avoid), ha[0])
    where = vdm["home"][victim]
    section(f"Kill {victim}'s QEMU on {where}")
    before = last_record(victim)
    history = History(etcd)
    clock = Clock()
    lab.kill_qemu(victim)
    clock.say(f"{victim}'s QEMU killed on {where} (SIGKILL, as the OOM killer would)")

    def writing_again() -> bool:
        for event in history.new():
            clock.say(describe(event), at=event["time"])
        record = last_record(victim)
        if record is None or before is None or record.writer == before.writer:
            return False
        clock.say(f"{victim} writes again on {where} (record {record.seq}, after "
                  f"{before.seq})", at=record.timestamp)
        return True

    wait_until(f"{victim} to write again", writing_again, 180, every=0.2)
    # The host's agent restarts it (vm_restarted); the reconciler, when the agent does not.
    wait_until("the restart's notification",
               lambda: {"vm_restarted", "recovery"} & set(inbox.events()), 60, every=0.5)


def narrate_failover(etcd, vdm: dict, host: str, log: Path) -> dict[str, dict]:
    """Crash `host` and tell the evacuation until every moved canary writes again."""
    moving = sorted(vdm["failover"][host])
    stopped = vdm.get("preempt", {}).get(host, [])
    before = {name: last_record(name) for name in moving}
    history = History(etcd)
    clock = Clock()
    lab.crash(host)
    clock.say(f"{host} lost its power (yasco-lab crash {host})")
    alive_key = etcd_keys.alive_key(host, cluster=CLUSTER)
    fates: dict[str, dict] = {name: {} for name in moving}
    expired = False
    writing: set[str] = set()

    def told_everything() -> bool:
        nonlocal expired
        if not expired and etcd.get(alive_key) is None:
            expired = True
            clock.say(f"{host}'s lease expired in etcd: the watcher sees it fail")
        for event in history.new():
            clock.say(describe(event), at=event["time"])
            if event.get("kind") == "evacuated" and event.get("vm") in fates:
                fates[event["vm"]]["running"] = clock.since(event["time"])
        for name in moving:
            if name in writing or "running" not in fates[name]:
                continue
            record = last_record(name)
            old = before[name]
            if record and (old is None or (record.writer != old.writer
                                           and record.seq > old.seq)):
                writing.add(name)
                fates[name]["writing"] = clock.since(record.timestamp)
                clock.say(f"{name} writes again on {vdm['failover'][host][name]} "
                          f"(record {record.seq}, after {old.seq if old else '-'})",
                          at=record.timestamp)
        return len(writing) == len(moving)

    wait_until("the evacuation", told_everything, 300, every=0.2)
    down = [vm for vm, home in vdm["home"].items()
            if home == host and vdm["vms"][vm]["kind"] != "ha"]
    if down or stopped:
        clock.say("stay down until the host is back: " + ", ".join(down + stopped))
    print(f"  (the watcher's log: {log})")
    return fates


def narrate_return(etcd, vdm: dict, host: str) -> dict[str, dict]:
    """Boot `host` and tell the return home until its VMs are home and writing."""
    movers = sorted(vdm["failover"][host])
    history = History(etcd)
    clock = Clock()
    lab.boot(host)
    clock.say(f"{host} booted (yasco-lab boot {host}); the watcher waits out its hold-down")
    alive_key = etcd_keys.alive_key(host, cluster=CLUSTER)
    wait_until(f"{host}'s agent", lambda: etcd.get(alive_key) is not None, 120)
    clock.say(f"{host}'s agent registered in etcd again")
    fates: dict[str, dict] = {name: {} for name in vdm["home"]}

    told: list[dict] = []

    def tell() -> None:
        for event in history.new():
            told.append(event)
            clock.say(describe(event), at=event["time"])
            if event.get("vm") in fates and event.get("kind") in ("migrated", "started"):
                fates[event["vm"]]["home"] = clock.since(event["time"])

    def all_running_at_home() -> bool:
        tell()
        records = {kv.key.rsplit("/", 1)[-1]: kv.json()
                   for kv in etcd.get_prefix(etcd_keys.vms_prefix(cluster=CLUSTER))}
        # The return home ends with the preempted VMs started again, elsewhere too.
        return all(records.get(name) == {"host": home, "state": "running"}
                   for name, home in vdm["home"].items())

    wait_until("the return home", all_running_at_home, 300, every=0.3)

    # The playbook writes its history last, a moment after the VMs are home: wait
    # until its fence lift, the first thing it did, has been told.
    def told_the_lift() -> bool:
        tell()
        return any(e.get("kind") == "unfenced" and e.get("host") == host for e in told)

    wait_until("the return home's history", told_the_lift, 60, every=0.3)
    for name in movers:
        stamps = [r.timestamp for r in storage.canary_records(name)
                  if r.timestamp >= clock.start]
        pause = max((b - a for a, b in zip(stamps, stamps[1:])), default=float("nan"))
        fates[name]["pause"] = pause
        clock.say(f"{name}: its guest paused {pause:.2f} s at most during the migration "
                  f"(its longest gap between records; about {canary.WRITE_INTERVAL:g} s "
                  "without one)")
    return fates


def summary(vdm: dict, host: str, failover: dict, back: dict) -> None:
    section("Summary")
    print(f"  {'VM':<8} {'kind':<12} {'home':<5} {'while ' + host + ' was down':<24} "
          f"{'running':>8} {'writing':>8} {'back':>8} {'pause':>7}")
    for vm, home in sorted(vdm["home"].items()):
        kind = vdm["vms"][vm]["kind"]
        if home == host and vm in failover:
            where = f"ran on {vdm['failover'][host][vm]}"
        elif home == host:
            where = "down (not HA)"
        elif vm in vdm.get("preempt", {}).get(host, []):
            where = "stopped for room"
        else:
            where = "untouched"
        fate = {**failover.get(vm, {}), **back.get(vm, {})}

        def cell(key: str, unit: str = "s") -> str:
            return f"{fate[key]:.1f} {unit}" if key in fate else "-"

        print(f"  {vm:<8} {KINDS[kind]:<12} {home:<5} {where:<24} {cell('running'):>8} "
              f"{cell('writing'):>8} {cell('home'):>8} {cell('pause'):>7}")
    print(f"  running, writing: seconds from the crash, on the planned spare slot; back: "
          f"seconds from {host}'s boot to running at home again; pause: the longest stop "
          "of the guest during its live migration home")


def show_notifications(inbox: Inbox, saved: Path) -> None:
    """What the operators were told: each notification the HA actions sent to the
    demo's webhook (docs/observability.md, yasco_notify_webhooks)."""
    section("Notifications: what the operators were told")
    bodies = [m["body"] for m in list(inbox.received)]
    for body in bodies:
        print(f"  [{body['severity']}] {body['subject']}")
        for line in body.get("lines", []):
            print(f"      {line}")
    saved.write_text(json.dumps(bodies, indent=2) + "\n")
    print(f"  (as JSON, with their details: {saved}; yasco_notify_webhooks and "
          "yasco_notify_mail send them to yours)")


def show_metrics(vdm: dict, host: str, crashed: float, end: float, picture: Path) -> None:
    """What the lab's Prometheus saw from the agents and the watcher, from just before
    the crash to `end`, when the demo stopped its watcher (after that, the alert that
    no watcher leads fires, as it should): the alerts that fired, how long the host
    and each HA VM were down by its samples, and a picture of those series."""
    start = crashed - 10
    alerts = prometheus.query_range('ALERTS{alertstate="firing"}', start, end)
    fired = sorted({(r["metric"]["alertname"],
                     r["metric"].get("host") or r["metric"].get("vm", "")) for r in alerts})
    for name, about in fired:
        print(f"  alert {name} fired ({about})")
    series = {
        f"{host} up": f'yasco_host_up{{host="{host}"}}',
        **{f"{vm} down": f'yasco_ha_vm_down{{vm="{vm}"}}'
           for vm in sorted(vdm["failover"][host])},
        "HA VMs down": "sum(yasco_ha_vm_down)",
        "HA VMs by host": 'sum by (host) (yasco_agent_domains{kind="ha"})'}
    found = {label: prometheus.query_range(expr, start, end) for label, expr in series.items()}

    def seconds(label: str, value: float) -> int:  # samples are a second apart
        return sum(float(v) == value for one in found[label] for dummy, v in one["values"])

    print(f"  {host} held no lease for about {seconds(f'{host} up', 0.0)} s")
    for vm in sorted(vdm["failover"][host]):
        print(f"  HA VM {vm} ran nowhere for about {seconds(f'{vm} down', 1.0)} s")
    _plot(found, host, crashed, start, end, picture)
    print(f"  {picture}: those series over the failover and the return home; "
          f"Prometheus itself at {prometheus.url()}")


def _plot(found: dict[str, list], host: str, crashed: float, start: float, end: float,
          picture: Path) -> None:
    """Three panels on one time axis (seconds from the crash): the host's lease, the HA
    VMs running nowhere, and the HA VMs each host runs, stacked. A host that does not
    answer its scrape runs nothing; a watcher not yet scraped leaves a gap."""
    import matplotlib  # pylint: disable=import-outside-toplevel  # only the demo draws
    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    steps = [start + i for i in range(int(end - start) + 1)]

    def on_steps(one: dict, missing: float = float("nan")) -> list[float]:
        values = {round(float(t)): float(v) for t, v in one["values"]}
        return [values.get(round(t), missing) for t in steps]

    x = [t - crashed for t in steps]
    figure, panels = pyplot.subplots(3, 1, figsize=(10, 7), sharex=True,
                                     gridspec_kw={"height_ratios": [1, 1, 2]})
    for axes, label, colour in ((panels[0], f"{host} up", "tab:blue"),
                                (panels[1], "HA VMs down", "tab:red")):
        for one in found[label]:
            axes.step(x, on_steps(one), where="post", color=colour)
        axes.set_ylabel(label + (" (as the watcher knows)" if "down" in label else ""),
                        fontsize="small")
    by_host = sorted(found["HA VMs by host"], key=lambda one: one["metric"]["host"])
    panels[2].stackplot(x, *[on_steps(one, 0.0) for one in by_host], step="post",
                        labels=[one["metric"]["host"] for one in by_host])
    panels[2].set_ylabel("HA VMs running, by host", fontsize="small")
    panels[2].legend(loc="lower left", fontsize="small")
    panels[2].set_xlabel(f"seconds from {host}'s crash")
    panels[0].set_title(f"{host} crashed at 0 s, as the lab's Prometheus scraped the agents "
                        "and the HA watcher", fontsize="medium")
    panels[0].set_yticks([0, 1])
    for axes in panels:
        axes.grid(alpha=0.3)
        axes.axvline(0, color="black", linewidth=0.8)
    figure.tight_layout()
    figure.savefig(picture, dpi=100)
    pyplot.close(figure)


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    started = time.monotonic()
    try:
        lab.require_root()
        section("The lab: etcd, Ceph and three libvirt/QEMU hypervisors on this machine")
        if lab.status()["up"]:
            print("  taking the previous lab down first")
            lab.down(log=lambda _: None)
        lab.up(3, log=lambda line: print(f"  {line}"))
        info = lab.status()
        inventory = Path(info["inventory"])
        logs = layout.state_dir() / "demo"
        logs.mkdir(parents=True, exist_ok=True)
        playbooks_log = logs / "playbooks.log"
        (inventory / "group_vars" / "all" / "demo.yml").write_text(
            "# The demo's VMs (make demo); removed with the lab.\n"
            + yaml.safe_dump({"yasco_vms": VMS}, sort_keys=False))
        # The HA actions' notifications come here while the demo's watcher runs.
        inbox = Inbox()
        notify_vars = inventory / "group_vars" / "all" / "demo_notify.yml"
        notify_vars.write_text("# The demo's webhook (make demo); removed at its end.\n"
                               + yaml.safe_dump({"yasco_notify_webhooks": [
                                   {"url": inbox.url + "/demo"}]}))

        section("Plan: where every VM lives, and where each HA VM goes on a failure")
        playbook("plan", log=playbooks_log)
        vdm = vdm_of(inventory)
        show_vdm(vdm)

        section("Provision: disks in Ceph, domains in libvirt, records in etcd")
        clock = Clock()
        playbook("provision", log=playbooks_log)
        clock.say(f"{len(VMS)} VMs started at their homes (playbooks/provision.yml)")
        wait_writing(sorted(VMS), clock)

        section("Arm HA")
        host = crash_target(vdm)
        with etcd_client(info["etcd_endpoints"]) as etcd:
            watcher = start_watcher(etcd, logs / "watcher.log", clock)
            try:
                narrate_kill(etcd, vdm, host, inbox)
                if info.get("prometheus"):
                    # The metrics' picture starts from the cluster healthy, as scraped.
                    wait_until("Prometheus to scrape the leading watcher",
                               lambda: prometheus.query("yasco_watcher_leader == 1"), 60)
                    time.sleep(5)
                section(f"Crash {host}")
                crashed = time.time()
                failover = narrate_failover(etcd, vdm, host, logs / "watcher.log")
                section(f"Boot {host}: return home")
                back = narrate_return(etcd, vdm, host)
                # The return home's notification is the last thing it does.
                wait_until("the return home's notification",
                           lambda: "return_home" in inbox.events(), 60, every=0.5)
            finally:
                watched_until = time.time()
                stop_watcher(watcher)
                notify_vars.unlink(missing_ok=True)
        summary(vdm, host, failover, back)
        show_notifications(inbox, logs / "notifications.json")
        inbox.close()
        if info.get("prometheus"):
            section("Metrics: what Prometheus scraped, and the alerts it raised")
            show_metrics(vdm, host, crashed, watched_until, logs / "metrics.png")

        section("Report")
        report_dir = logs / "report"
        playbook("report", "-e", f"yasco_report_dir={report_dir}", "-e",
                 f"yasco_report_failed={host}", log=playbooks_log)
        print(f"  {report_dir / 'report.html'} (and report.png): the hosts as boxes of "
              f"capacity, the VMs and spare in them, {host}'s failure and its timeline")
    except (LabError, DemoError) as err:
        print(f"demo: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("demo: interrupted; the lab is left as it is (yasco-lab down removes it)",
              file=sys.stderr)
        return 130
    print(f"\nThe demo took {time.monotonic() - started:.0f} s. The lab stays up, with the "
          "demo's VMs, for you to explore:")
    print(EXPLORE)
    return 0


EXPLORE = """\
  .venv/bin/ansible-playbook playbooks/status.yml    the cluster as etcd and libvirt see it
  make watch                                         the HA watcher, in the foreground
  .venv/bin/yasco-lab crash hv2 / boot hv2           then see the watcher act
  .venv/bin/yasco-lab status                         hosts, etcd and Ceph at a glance
  .venv/bin/yasco-lab down                           stop everything (or: make lab-down)
The inventory is inventories/lab/ (ansible.cfg points at it); playbook output and the
watcher's log are in /var/lib/yasco-lab/demo/."""


if __name__ == "__main__":
    sys.exit(main())
