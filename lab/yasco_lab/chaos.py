"""`yasco-lab chaos`: a seeded, replayable nemesis on the lab, judged by invariants
that hold over the whole run, not by one scenario's answer.

A schedule of fault episodes is drawn from a seed (or read from a file written by an
earlier run) and applied one after another to a lab whose HA stack runs: agents, a
leading and a standby watcher, canary VMs of every kind. Each episode injects its
fault, holds it, recovers from it (boot, heal, SIGCONT), then waits for the cluster
to converge. Observers independent of YASCO's own view sample the cluster all along:
libvirt on every host through the lab's own access (so a partitioned host is seen
too), the fences in etcd, and, at each convergence, every canary's records on its
RBD disk. The invariants:

- I1, never two copies: at no sample does a VM run on two hosts that are not fenced
  (a copy on a host whose Ceph clients are blocklisted cannot write; the evacuation
  records the fence only once the blocklist is in place, and before it starts
  anything). This is also what I3, fence before recovery, guarantees for the disks.
- I2, one writer at a time: on every canary's disk the writers never interleave, and
  each copy carries on from the last record the one before wrote.
- I4, convergence: within `converge` seconds of the episode's recovery every VM runs
  exactly once, where etcd records it, no host is fenced, and every canary writes
  again.
- I5, etcd stays bounded: no alarm, and each member's database under DB_LIMIT.

A violation is printed with its episode, the seed, the timeline around it and what
the observers saw; the run exits non-zero. The schedule, the timeline and the
results are saved as JSON, which `--schedule` replays.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

from . import demo, etcd, lab, layout, prometheus, storage
from .credentials import etcd_client
from .errors import LabError
from .hypervisor import AGENT_TTL
from .waiting import wait_until

# Faults on one host, and how each is undone.
HOST_FAULTS = ("crash", "partition", "ceph-cut", "agent-stop", "reboot")
FAULTS = (*HOST_FAULTS, "qemu-kill", "etcd-leader-stop", "overlap")
# A fault in the middle of an operator's or the watcher's work, which `yasco-lab chaos`
# draws too (it runs the watchers it can kill): the leading watcher killed while it
# evacuates a crashed host; a host crashed while another is drained; a host
# partitioned while HA is disarmed in freeze mode.
STORIES = ("leader-kill", "drain-crash", "disarm-partition")
# With them, a host cut off from etcd alone: from the other members, so from quorum.
ALL_FAULTS = (*FAULTS, "etcd-cut", *STORIES)
# How often each is drawn; overlapping faults are the ones no scenario test covers.
WEIGHTS = {"crash": 3, "partition": 3, "ceph-cut": 2, "agent-stop": 2, "reboot": 1,
           "qemu-kill": 2, "etcd-leader-stop": 1, "overlap": 3,
           "etcd-cut": 2, "leader-kill": 2, "drain-crash": 2, "disarm-partition": 1}
# Held for a random time in this range (seconds): below the agents' TTL nothing should
# move; above it the host is evacuated.
HOLD = (4.0, 40.0)
DB_LIMIT = 64 * 1024 ** 2  # bytes of an etcd member's database (I5)
SAMPLE_EVERY = 1.0
RECHECKS = 3  # looks again at a VM seen on two unfenced hosts before calling it I1


class ChaosError(Exception):
    """The run could not be carried out (not a violation); the message says why."""


def draw(seed: int, episodes: int, hosts: list[str], ha_vms: list[str],
         faults: tuple[str, ...] = FAULTS) -> list[dict]:
    """The schedule `seed` gives: `episodes` episodes of `faults` over `hosts` and
    `ha_vms`."""
    rng = random.Random(seed)
    faults = list(faults)
    drawn = []
    for dummy in range(episodes):
        fault = rng.choices(faults, weights=[WEIGHTS[f] for f in faults])[0]
        hold = round(rng.uniform(*HOLD), 1)
        if fault in (*HOST_FAULTS, "etcd-cut"):
            episode = {"fault": fault, "target": rng.choice(hosts), "hold": hold}
        elif fault == "qemu-kill":
            episode = {"fault": fault, "target": rng.choice(ha_vms), "hold": 0}
        elif fault == "etcd-leader-stop":
            episode = {"fault": fault, "target": "leader", "hold": hold}
        elif fault == "leader-kill":  # a crash, the leader killed as it evacuates
            after = round(rng.uniform(AGENT_TTL, AGENT_TTL + 8), 1)
            episode = {"fault": fault, "target": rng.choice(hosts),
                       "hold": max(hold, after + 10), "after": after}
        elif fault == "drain-crash":
            first, second = rng.sample(hosts, 2)
            episode = {"fault": fault, "target": first, "hold": hold,
                       "then": {"fault": "crash", "target": second,
                                "after": round(rng.uniform(1, 10), 1)}}
        elif fault == "disarm-partition":
            episode = {"fault": fault, "target": rng.choice(hosts), "hold": hold}
        else:
            first, second = rng.sample(hosts, 2)
            episode = {"fault": fault, "target": first, "hold": hold,
                       "then": {"fault": rng.choice(HOST_FAULTS[:4]), "target": second,
                                "after": round(rng.uniform(1, hold), 1)},
                       "first": rng.choice(HOST_FAULTS[:4])}
        drawn.append(episode)
    return drawn


# How an episode reads, by its fault; any other reads "FAULT TARGET, held HOLD s".
DESCRIPTIONS = {
    "leader-kill": "crash {target}, the leading watcher killed {after:g} s later, "
                   "held {hold:g} s",
    "drain-crash": "drain {target}, and {then[after]:g} s later crash {then[target]}, "
                   "held {hold:g} s",
    "disarm-partition": "HA disarmed (freeze), partition {target}, held {hold:g} s, "
                        "re-armed",
    "overlap": "{first} {target}, and {then[after]:g} s later {then[fault]} "
               "{then[target]}, held {hold:g} s",
    "qemu-kill": "QEMU of {target} killed",
}


def describe(episode: dict) -> str:
    return DESCRIPTIONS.get(episode["fault"], "{fault} {target}, held {hold:g} s").format(
        **episode)


@dataclass
class Violation:
    invariant: str
    episode: int
    at: float
    what: str
    evidence: Any = None


@dataclass
class Run:
    """What a run saw: the timeline of its own actions and the violations."""
    seed: int | None
    schedule: list[dict]
    timeline: list[tuple[float, str]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    converged: list[float | None] = field(default_factory=list)
    samples: int = 0
    checks: int = 0
    episode: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, what: str) -> None:
        with self.lock:
            self.timeline.append((time.time(), what))
        print(f"  {time.strftime('%H:%M:%S')} {what}", flush=True)

    def violate(self, invariant: str, what: str, evidence: Any = None) -> None:
        with self.lock:
            self.violations.append(Violation(invariant, self.episode, time.time(), what,
                                             evidence))
        print(f"  {time.strftime('%H:%M:%S')} VIOLATION {invariant}: {what}", flush=True)

    def as_json(self) -> dict:
        return {"seed": self.seed, "schedule": self.schedule, "timeline": self.timeline,
                "converged": self.converged, "samples": self.samples, "checks": self.checks,
                "violations": [v.__dict__ for v in self.violations]}


class Nemesis:
    """Applies a schedule to the running lab and judges it. `vms` maps each VM the
    lab runs for YASCO (every one a canary) to its kind: ha, plain or preemptible."""

    def __init__(self, vms: dict[str, str], converge: float = 180.0,
                 watchers: Watchers | None = None):
        self.vms = vms
        self.converge = converge
        self.watchers = watchers  # the ones the stories may kill (STORIES)
        self.log = layout.state_dir() / "chaos" / "playbooks.log"
        self.drains: dict[str, threading.Thread] = {}
        hosts = lab.status()["hosts"]
        self.hosts = [h["name"] for h in hosts]
        self.members = {h["name"]: h["etcd_client_url"] for h in hosts}
        self.endpoints = list(self.members.values())
        self.stopping = threading.Event()

    # -- observers ----------------------------------------------------------------

    def running_on(self, host: str) -> list[str] | None:
        """The VMs libvirt on `host` runs (a copy paused for a migration does not
        count), seen from inside the host: None when it is down."""
        if not lab.is_powered(host):
            return None
        try:
            done = lab.run_on_host(host, sys.executable, "-c", _LIST_RUNNING, timeout=20)
        except (LabError, OSError):
            return None
        if done.returncode != 0:
            return None
        return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]

    def fenced(self) -> set[str] | None:
        try:
            with etcd_client(self.endpoints) as client:
                kvs = client.get_prefix(etcd_keys.fences_prefix(cluster=layout.CLUSTER_NAME))
        except Exception:  # pylint: disable=broad-except  # etcd out of reach: no sample
            return None
        return {kv.key.rsplit("/", 1)[-1] for kv in kvs}

    def copies(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for host in self.hosts:
            for vm in self.running_on(host) or []:
                found.setdefault(vm, []).append(host)
        return found

    def observe(self, run: Run) -> None:
        """I1 at every sample until stopped. Two unfenced copies seen once are looked
        at again, RECHECKS times SAMPLE_EVERY apart: a live migration's switch-over can
        fall between two hosts' listings, and the source's libvirt may record its
        guest paused a moment after the destination's has resumed it; a VM that runs
        twice still does (and its two copies' writes show on its disk, I2)."""
        fences: set[str] = set()

        def fenced_now() -> set[str]:
            found = self.fenced()
            return fences if found is None else found  # etcd not answering: as before

        while not self.stopping.wait(SAMPLE_EVERY):
            seen = self.copies()
            fences = fenced_now()
            twice = {vm: hosts for vm, hosts in seen.items()
                     if vm in self.vms and len(set(hosts) - fences) > 1}
            for dummy in range(RECHECKS):
                if not twice or self.stopping.wait(SAMPLE_EVERY):
                    break
                again = self.copies()
                fences = fenced_now()
                twice = {vm: hosts for vm, hosts in again.items()
                         if vm in twice and len(set(hosts) - fences) > 1}
            with run.lock:
                run.samples += 1
                run.checks += len(self.vms)
            for vm, hosts in twice.items():
                run.violate("I1", f"{vm} RUNS TWICE, on {', '.join(hosts)}, none of them "
                            "fenced but one", {"copies": hosts, "fenced": sorted(fences)})

    # -- invariants checked at convergence ------------------------------------------

    def check_writers(self, run: Run) -> None:
        """I2 on every canary's disk."""
        for vm in sorted(self.vms):
            runs = writer_runs(storage.canary_records(vm))
            run.checks += 1
            writers = [w for w, dummy, dummy2 in runs]
            if len(set(writers)) != len(writers):
                run.violate("I2", f"{vm}: copies' writes interleave on its disk", runs)
            for (dummy, dummy2, last), (dummy3, first, dummy4) in zip(runs, runs[1:]):
                if first != last + 1:
                    run.violate("I2", f"{vm}: a copy did not carry on from the last "
                                f"record ({last} then {first})", runs)

    def converged(self) -> str | None:
        """What still differs from the requested state, or None."""
        seen = self.copies()
        with etcd_client(self.endpoints) as client:
            records = {kv.key.rsplit("/", 1)[-1]: json.loads(kv.value) for kv in
                       client.get_prefix(etcd_keys.vms_prefix(cluster=layout.CLUSTER_NAME))}
            alive = {etcd_keys.parse_key(kv.key, cluster=layout.CLUSTER_NAME).host
                     for kv in client.get_prefix(etcd_keys.hosts_prefix(
                         cluster=layout.CLUSTER_NAME)) if kv.key.endswith("/alive")}
            fences = client.get_prefix(etcd_keys.fences_prefix(cluster=layout.CLUSTER_NAME))
        if set(self.hosts) - alive:
            return f"hosts not registered: {sorted(set(self.hosts) - alive)}"
        if fences:
            return f"hosts still fenced: {sorted(kv.key.rsplit('/', 1)[-1] for kv in fences)}"
        for vm in sorted(self.vms):
            hosts = seen.get(vm, [])
            if len(hosts) != 1:
                return f"{vm} runs on {hosts or 'no host'}"
            if records.get(vm, {}).get("host") != hosts[0] or \
                    records[vm].get("state") != "running":
                return f"{vm} runs on {hosts[0]} but etcd records {records.get(vm)}"
        return None

    def wait_converged(self, run: Run, since: float) -> float | None:
        """I4: seconds from `since` until the cluster converged and every canary wrote
        again, or None (a violation) after `converge` seconds."""
        deadline = since + self.converge
        left = "not looked at yet"
        while time.monotonic() < deadline:
            try:
                left = self.converged()
            except Exception as err:  # pylint: disable=broad-except  # etcd in a hurry
                left = f"cannot read etcd: {err}"
            if left is None:
                break
            time.sleep(2)
        if left is not None:
            run.violate("I4", f"not converged {self.converge:g} s after the recovery: {left}")
            return None
        last = {vm: last_seq(vm) for vm in self.vms}
        stalled = sorted(self.vms)
        while time.monotonic() < deadline:
            stalled = [vm for vm in self.vms if last_seq(vm) <= last[vm] + 1]
            if not stalled:
                return time.monotonic() - since
            time.sleep(2)
        run.violate("I4", f"canaries not writing {self.converge:g} s after the recovery: "
                    f"{sorted(stalled)}", self.stalled_evidence(sorted(stalled)))
        return None

    def stalled_evidence(self, vms: list[str]) -> dict[str, Any]:
        """What tells why a running canary does not write: its record and restarts in
        etcd, the hosts that run it, the last lines of its console and of their agents'
        logs about it, and Ceph's blocklist."""
        seen = self.copies()
        found: dict[str, Any] = {}
        try:
            with etcd_client(self.endpoints) as client:
                for vm in vms:
                    record = client.get(etcd_keys.vm_key(vm, cluster=layout.CLUSTER_NAME))
                    found[vm] = {"record": json.loads(record.value) if record else None,
                                 "restarts": {kv.key: kv.value for kv in client.get_prefix(
                                     etcd_keys.hosts_prefix(cluster=layout.CLUSTER_NAME))
                                     if f"/restarts/{vm}" in kv.key}}
        except Exception as err:  # pylint: disable=broad-except  # evidence, at best
            found["etcd"] = f"cannot read etcd: {err}"
        for vm in vms:
            entry = found.setdefault(vm, {})
            entry["running_on"] = seen.get(vm, [])
            for host in self.hosts:
                root = layout.HostLayout(host).root / "log"
                console = _tail(root / "qemu" / f"{vm}.console", 3)
                agent = [line for line in _tail(root / "agent.log", 400) if vm in line][-6:]
                if console or agent:
                    entry[host] = {"console": console, "agent": agent}
        try:
            found["blocklist"] = storage.blocklist()
        except Exception as err:  # pylint: disable=broad-except
            found["blocklist"] = f"cannot read it: {err}"
        return found

    def check_etcd(self, run: Run) -> None:
        """I5: no alarm, every member's database under DB_LIMIT."""
        with etcd_client(self.endpoints) as client:
            alarms = client.alarms()
        sizes = {url: status["dbSize"] for url, status in
                 ((url, member_status(url)) for url in self.endpoints) if status}
        run.checks += 1 + len(sizes)
        if alarms:
            run.violate("I5", f"etcd alarms: {alarms}")
        for endpoint, size in sizes.items():
            if int(size) > DB_LIMIT:
                run.violate("I5", f"etcd at {endpoint}: database of {size} bytes, over "
                            f"{DB_LIMIT}")

    # -- faults ---------------------------------------------------------------------

    def inject(self, run: Run, fault: str, target: str) -> str:
        """Apply `fault` to `target`; what undoing it takes (for `recover`)."""
        if fault == "crash":
            lab.crash(target)
        elif fault == "partition":
            lab.partition(target)
        elif fault == "ceph-cut":
            lab.partition(target, only="ceph")
        elif fault == "etcd-cut":
            lab.partition(target, only="etcd")
        elif fault == "agent-stop":
            lab.run_on_host(target, "pkill", "-STOP", "-f", "yasco_agent.py")
        elif fault == "reboot":
            lab.reboot(target)
        elif fault == "qemu-kill":
            lab.kill_qemu(target)
        elif fault == "etcd-leader-stop":
            target = self.etcd_leader()
            lab.run_on_host(target, "pkill", "-STOP", "-x", "etcd")
        run.note(f"{fault} {target}")
        return target

    def etcd_leader(self) -> str:
        """The host whose etcd member leads, as the members say."""
        for host, url in self.members.items():
            status = member_status(url)
            if status and status.get("leader") == status["header"]["member_id"]:
                return host
        raise ChaosError("no etcd member says it leads")

    def playbook(self, run: Run, name: str, *extra_vars: str) -> bool:
        """Run playbooks/NAME.yml on the lab's inventory, as an operator would; whether
        it succeeded (a failure is noted, not a violation: the invariants judge)."""
        args = [arg for var in extra_vars for arg in ("-e", var)]
        try:
            demo.playbook(name, *args, log=self.log)
        except demo.DemoError as err:
            run.note(f"{name}.yml {' '.join(extra_vars)} failed: "
                     f"{str(err).splitlines()[-1][:200]}")
            return False
        run.note(f"{name}.yml {' '.join(extra_vars)} done")
        return True

    def story(self, run: Run, episode: dict, undo: list[tuple[str, str]]) -> None:
        """Apply one of STORIES, adding to `undo` what undoing it takes, in order."""
        fault, target = episode["fault"], episode["target"]
        if fault == "leader-kill":
            if self.watchers is None:
                raise ChaosError("leader-kill needs the watchers the nemesis started")
            undo.append(("crash", self.inject(run, "crash", target)))
            time.sleep(episode["after"])
            killed = self.watchers.kill_leader()
            run.note(f"leading watcher killed ({killed})")
            undo.append(("leader-kill", killed))
            time.sleep(max(0.0, episode["hold"] - episode["after"]))
        elif fault == "drain-crash":
            then = episode["then"]
            drain = threading.Thread(target=self.playbook, daemon=True,
                                     args=(run, "drain", f"yasco_host={target}"))
            self.drains[target] = drain
            run.note(f"drain {target}")
            drain.start()
            time.sleep(then["after"])
            undo.append(("crash", self.inject(run, "crash", then["target"])))
            undo.append(("drain", target))  # once the crashed host is back
            time.sleep(max(0.0, episode["hold"] - then["after"]))
        else:  # disarm-partition
            self.playbook(run, "disarm", "yasco_disarm_mode=freeze",
                          "yasco_disarm_reason=nemesis")
            undo.append(("disarm", "HA"))
            undo.insert(0, ("partition", self.inject(run, "partition", target)))
            time.sleep(episode["hold"])

    def recover(self, run: Run, fault: str, target: str) -> None:
        if fault == "leader-kill":
            self.watchers.restart(int(target))
        elif fault == "drain":
            self.drains.pop(target).join(timeout=900)
            self.playbook(run, "undrain", f"yasco_host={target}")
        elif fault == "disarm":
            # Refused while a host is down: the healed one registers again first.
            wait_until("HA re-armed", lambda: self.playbook(
                run, "disarm", "yasco_ha_disarmed=false"), 180, every=5)
        elif fault == "crash":
            lab.boot(target)
        elif fault in ("partition", "ceph-cut", "etcd-cut"):
            lab.heal(target)
        elif fault == "agent-stop":
            lab.run_on_host(target, "pkill", "-CONT", "-f", "yasco_agent.py")
        elif fault == "etcd-leader-stop":
            lab.run_on_host(target, "pkill", "-CONT", "-x", "etcd")
        else:
            return  # over already: a reboot, a killed QEMU
        run.note(f"{fault} {target} undone")

    def episode(self, run: Run, index: int, episode: dict) -> bool:
        """Apply one episode and judge it: whether the cluster converged after it."""
        run.episode = index
        run.note(f"episode {index}: {describe(episode)}")
        undo: list[tuple[str, str]] = []
        try:
            if episode["fault"] in STORIES:
                self.story(run, episode, undo)
            elif episode["fault"] == "overlap":
                undo.append((episode["first"], self.inject(run, episode["first"],
                                                           episode["target"])))
                then = episode["then"]
                time.sleep(then["after"])
                undo.append((then["fault"], self.inject(run, then["fault"], then["target"])))
                time.sleep(max(0.0, episode["hold"] - then["after"]))
            else:
                undo.append((episode["fault"], self.inject(run, episode["fault"],
                                                           episode["target"])))
                time.sleep(episode["hold"])
        finally:
            for fault, target in undo:
                self.recover(run, fault, target)
        recovered = time.monotonic()
        took = self.wait_converged(run, recovered)
        run.converged.append(took)
        run.note(f"episode {index}: converged in {took:.0f} s" if took is not None
                 else f"episode {index}: NOT converged")
        self.check_writers(run)
        self.check_etcd(run)
        return took is not None

    def run(self, schedule: list[dict], seed: int | None = None) -> Run:
        run = Run(seed, schedule)
        observer = threading.Thread(target=self.observe, args=(run,), daemon=True,
                                    name="chaos-observer")
        observer.start()
        try:
            for index, episode in enumerate(schedule, start=1):
                if not self.episode(run, index, episode):
                    run.note(f"stopped after episode {index}: the cluster did not "
                             "converge, so the episodes after it would start from a "
                             "broken one")
                    break
        finally:
            self.stopping.set()
            observer.join(timeout=60)
        return run


# Run inside a host with the lab's Python: the domains that run there, as the HA
# tests count them (tests/lab/lab_cluster.py): running, or paused for any reason but a
# live migration's (its source, or its destination until it resumes), which cannot
# write.
_LIST_RUNNING = """
import libvirt
conn = libvirt.open("qemu:///system")
skip = {libvirt.VIR_DOMAIN_PAUSED_MIGRATION, libvirt.VIR_DOMAIN_PAUSED_POSTCOPY,
        libvirt.VIR_DOMAIN_PAUSED_STARTING_UP}
for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
    try:
        state, reason = dom.state()
    except libvirt.libvirtError:
        continue
    if state == libvirt.VIR_DOMAIN_RUNNING or (
            state == libvirt.VIR_DOMAIN_PAUSED and reason not in skip):
        print(dom.name(), state, reason)
"""


def writer_runs(records) -> list[tuple[str, int, int]]:
    """A canary's writers in disk order: (writer, first seq, last seq)."""
    runs: list[list] = []
    for record in records:
        if runs and runs[-1][0] == record.writer:
            runs[-1][2] = record.seq
        else:
            runs.append([record.writer, record.seq, record.seq])
    return [tuple(r) for r in runs]


def _tail(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def last_seq(vm: str) -> int:
    found = storage.canary_records(vm)
    return found[-1].seq if found else -1


def member_status(url: str) -> dict | None:
    """An etcd member's own status (leader, database size), or None if it does not
    answer within a few seconds."""
    request = urllib.request.Request(f"{url}/v3/maintenance/status", data=b"{}",
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5,
                                    context=etcd.tls_context()) as reply:
            return json.load(reply)
    except (OSError, ValueError):
        return None


def report(run: Run, window: float = 30.0) -> str:
    """The run's violations, each with the timeline around it, for the operator."""
    lines = []
    for v in run.violations:
        lines.append(f"{v.invariant} in episode {v.episode} "
                     f"({describe(run.schedule[v.episode - 1]) if v.episode else '-'}), "
                     f"seed {run.seed}: {v.what}")
        if v.evidence is not None:
            lines.append(f"    seen: {v.evidence}")
        for at, what in run.timeline:
            if abs(at - v.at) <= window:
                lines.append(f"    {time.strftime('%H:%M:%S', time.localtime(at))} {what}")
    return "\n".join(lines)


# What `yasco-lab chaos` provisions: the demo's canaries, of every kind, sized so that
# a host's failure needs the preemptible VMs' room.
VMS = demo.VMS


def kinds(vms: dict[str, dict]) -> dict[str, str]:
    return {name: "ha" if vm.get("ha") else "preemptible" if vm.get("preemptible")
            else "plain" for name, vm in vms.items()}


class Watchers:
    """A leading and a standby HA watcher (scripts/watch), each serving its metrics
    where the lab's Prometheus scrapes its number; the leader can be killed and
    either started again."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.endpoints = [h["etcd_client_url"] for h in lab.status()["hosts"]]
        self.key = etcd_keys.watchers_leader_key(cluster=layout.CLUSTER_NAME)
        self.procs = [self._start(index) for index in range(2)]
        self.wait_leading()

    def _start(self, index: int) -> subprocess.Popen:
        with (self.log_dir / f"watcher{index + 1}.log").open("ab") as out:
            return subprocess.Popen(
                [str(layout.repo_root() / "scripts" / "watch")], cwd=layout.repo_root(),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "METRICS": prometheus.watcher_listen(index)})

    def leader(self) -> str | None:
        """The leading watcher's name (host-pid: scripts/watch execs ansible-rulebook)."""
        with etcd_client(self.endpoints) as client:
            return (client.get_json(self.key) or {}).get("watcher")

    def wait_leading(self) -> None:
        def leading() -> bool:
            if any(w.poll() is not None for w in self.procs):
                raise ChaosError(f"an HA watcher exited; its log is in {self.log_dir}")
            return self.leader() is not None
        wait_until("an HA watcher to lead", leading, 120, every=0.5)

    def kill_leader(self) -> str:
        """SIGKILL the leading watcher with whatever it runs; its number, as a string."""
        name = self.leader() or ""
        for index, proc in enumerate(self.procs):
            if name.endswith(f"-{proc.pid}"):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return str(index)
        raise ChaosError(f"no watcher of this run leads (the leader key says {name!r})")

    def restart(self, index: int) -> None:
        self.procs[index] = self._start(index)

    def stop(self) -> None:
        stop_watchers(self.procs)


def stop_watchers(watchers: list[subprocess.Popen], timeout: float = 30) -> None:
    """SIGTERM each watcher's process group, SIGKILL after `timeout` seconds."""
    for proc in watchers:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def main(seed: int | None, episodes: int, schedule_file: str | None,
         converge: float) -> int:
    """`yasco-lab chaos`: a fresh lab, the canaries provisioned and writing, two
    watchers, the schedule applied and judged. The lab stays up afterwards."""
    if schedule_file:
        saved = json.loads(Path(schedule_file).read_text())
        schedule, seed = saved["schedule"], saved.get("seed")
    else:
        seed = seed if seed is not None else random.SystemRandom().randrange(1, 10 ** 6)
        schedule = None
    logs = layout.state_dir() / "chaos"
    logs.mkdir(parents=True, exist_ok=True)
    print("Bringing a fresh lab up", flush=True)
    if lab.status()["up"]:
        lab.down(log=lambda _: None)
    lab.up(3, log=lambda line: print(f"  {line}", flush=True))
    inventory = Path(lab.status()["inventory"])
    (inventory / "group_vars" / "all" / "chaos.yml").write_text(
        "# The nemesis's VMs (yasco-lab chaos); removed with the lab.\n"
        + yaml.safe_dump({"yasco_vms": VMS}, sort_keys=False))
    for name in ("plan", "provision"):
        try:
            demo.playbook(name, log=logs / "playbooks.log")
        except demo.DemoError as err:
            raise ChaosError(str(err)) from err
    wait_until("every canary writing", lambda: all(
        storage.canary_records(vm) for vm in VMS), 300, every=2)
    hosts = [h["name"] for h in lab.status()["hosts"]]
    ha_vms = sorted(n for n, kind in kinds(VMS).items() if kind == "ha")
    schedule = schedule or draw(seed, episodes, hosts, ha_vms, ALL_FAULTS)
    print(f"Seed {seed}: {len(schedule)} episodes", flush=True)
    for index, episode in enumerate(schedule, start=1):
        print(f"  {index:>2}. {describe(episode)}", flush=True)
    watchers = Watchers(logs)
    try:
        run = Nemesis(kinds(VMS), converge=converge, watchers=watchers).run(schedule, seed)
    finally:
        watchers.stop()
    saved_to = save(run, logs)
    took = [t for t in run.converged if t is not None]
    print(f"\n{len(schedule)} episodes, {run.samples} samples, {run.checks} invariant "
          f"checks, {len(run.violations)} violations; converged in "
          + (f"{min(took):.0f} to {max(took):.0f} s" if took else "-")
          + f". Replay: yasco-lab chaos --schedule {saved_to}")
    if run.violations:
        print(report(run), file=sys.stderr)
        return 1
    return 0


def save(run: Run, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"chaos-{run.seed if run.seed is not None else 'schedule'}-" \
                       f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(run.as_json(), indent=2) + "\n")
    return path
