# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planted instances: clusters built around a valid VDM, so a plan is known to exist.

The tests and the benchmark (benchmarks/vdm.py) use them to ask whether the planner
finds a plan whenever one exists. A VDM is constructed first, VM by VM, each at a
random home with a random failover chain, kept only when every invariant of docs/vdm.md
still holds (its own bookkeeping, not the planner's); construction stops when the hosts'
homes plus spare reach the wanted fill. The inventory is then derived from that map,
and host names, VM names and the order of both are shuffled, so a planner cannot read
the answer from the order it is given. The planted map is returned too: the independent
checker accepting it is the proof that the instance is feasible.

`overloaded` turns a planted instance into one that is infeasible by construction: it
adds HA VMs until the demand that the failure of the largest host leaves on the others
exceeds what they have, while all hosts together still have enough.

Pure Python, no I/O and no Ansible.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass

# Host memory (MB) of a mixed fleet; VM flavours (vCPUs, memory MB).
HOST_MEMORY = (65536, 98304, 131072, 196608, 262144)
FLAVOURS = ((1, 512), (1, 1024), (1, 2048), (2, 2048), (2, 4096), (4, 4096), (4, 8192))
CPU_RATIO = 4.0
_RESOURCES = ("vcpus", "memory_mb")


@dataclass
class Planted:
    """An inventory (`hostvars`, `settings` as load_problem takes them) and the VDM it
    was derived from (`vdm`: home, failover, preempt), which holds every invariant."""

    hostvars: dict
    settings: dict
    vdm: dict
    fill: float  # the hosts' homes plus spare over their capacity, memory

    @property
    def vms(self) -> dict:
        return self.settings["yasco_vms"]


class _Construction:
    """Loads of a VDM under construction: home demand per host and, per failure set,
    what arrives on each survivor. Each host keeps `spare` for arrivals and the rest
    for its firm (non-preemptible) VMs, so a map that respects both is valid."""

    def __init__(self, cap: dict[str, dict[str, float]], spare: dict[str, dict[str, float]],
                 sets: list[frozenset[str]]) -> None:
        self.cap = cap
        self.spare = spare
        self.sets = sets
        self.sets_with = {h: [s for s in sets if h in s] for h in cap}
        self.all = {h: Counter() for h in cap}
        self.firm = {h: Counter() for h in cap}
        self.arriving = {s: {h: Counter() for h in cap} for s in sets}
        self.home_labels = {h: Counter() for h in cap}
        self.firm_labels = {h: Counter() for h in cap}
        self.arriving_labels = {s: {h: Counter() for h in cap} for s in sets}
        self.home: dict[str, str] = {}
        self.targets: dict[str, dict[frozenset[str], str]] = {}

    def peak(self, host: str, resource: str = "memory_mb") -> float:
        return max((self.arriving[s][host][resource] for s in self.sets), default=0)

    def targets_of(self, home: str, chain: list[str]) -> dict[frozenset[str], str] | None:
        out = {}
        for failed in self.sets_with[home]:
            target = next((t for t in chain if t not in failed), None)
            if target is None:
                return None
            out[failed] = target
        return out

    def fits(self, size: dict, labels: frozenset[str], kind: str, home: str,
             targets: dict[frozenset[str], str]) -> bool:
        if any(self.all[home][r] + size[r] > self.cap[home][r] for r in _RESOURCES):
            return False
        if any(self.home_labels[home][label] for label in labels):
            return False
        if kind == "preemptible":
            return True
        if any(self.firm[home][r] + size[r] > self.cap[home][r] - self.spare[home][r]
               for r in _RESOURCES):
            return False
        if any(self.arriving_labels[s][home][label] for s in self.sets for label in labels):
            return False
        for failed, t in targets.items():
            if any(self.arriving[failed][t][r] + size[r] > self.spare[t][r]
                   for r in _RESOURCES):
                return False
            if any(self.firm_labels[t][label] or self.arriving_labels[failed][t][label]
                   for label in labels):
                return False
        return True

    def add(self, name: str, size: dict, labels: frozenset[str], kind: str, home: str,
            targets: dict[frozenset[str], str]) -> None:
        self.home[name] = home
        self.all[home].update(size)
        self.home_labels[home].update(labels)
        if kind == "preemptible":
            return
        self.firm[home].update(size)
        self.firm_labels[home].update(labels)
        self.targets[name] = targets
        for failed, t in targets.items():
            self.arriving[failed][t].update(size)
            self.arriving_labels[failed][t].update(labels)


def _failure_sets(names: list[str], x: int, racks: dict[str, str]) -> list[frozenset[str]]:
    sets = {frozenset(c) for k in range(1, x + 1) for c in itertools.combinations(names, k)}
    for rack in set(racks.values()):
        sets.add(frozenset(h for h in names if racks[h] == rack))
    return sorted(sets, key=lambda s: (len(s), sorted(s)))


def _chain(rng: random.Random, names: list[str], home: str, first: str, x: int,
           racks: dict[str, str]) -> list[str]:
    """`first`, then X - 1 random hosts other than the home; with racks, one more
    outside the home's rack unless the chain has one."""
    others = [h for h in names if h not in (home, first)]
    chain = [first] + rng.sample(others, x - 1)
    if racks and all(racks[h] == racks[home] for h in chain):
        chain.append(rng.choice([h for h in others if racks[h] != racks[home]]))
    return chain


def _vm_spec(size: dict, kind: str, labels: frozenset[str]) -> dict:
    spec = {**size}
    if kind == "ha":
        spec["ha"] = True
    elif kind == "preemptible":
        spec["preemptible"] = True
    if labels:
        spec["anti_affinity"] = sorted(labels)
    return spec


def planted(seed: int, hosts: int, x: int = 1, *, fill: float | None = None,
            racks: int = 0, ha: tuple[float, float] = (0.6, 1.0), preemptible: float = 0.5,
            anti_affinity: float = 0.1, reserved: int = 2, uniform: bool = False,
            scale: float = 1.0) -> Planted:
    """A cluster of `hosts` hypervisors of mixed memory (64 to 256 GB times `scale`;
    all alike when `uniform`), `reserved` of them with reserved memory, in `racks`
    failure domains when given, built around a valid VDM tolerating `x` failures.

    Each host keeps spare memory in proportion to what the largest failure set takes
    from the others (half to one and a half times it). HA VMs go home on each host up
    to a random share `ha` of the rest, each sent to every other host in turn as its
    first failover target (the rest of its chain random), so every failure set fills
    the spare of every survivor about evenly; a share `anti_affinity` of them is in
    anti-affinity groups of up to three. Plain VMs then fill every host's homes to
    `fill` (drawn from 0.85 to 0.98 when not given), and preemptible VMs a share
    `preemptible` of its spare.
    """
    rng = random.Random(seed)
    fill = rng.uniform(0.85, 0.98) if fill is None else fill
    names = [f"h{i:02d}" for i in range(hosts)]
    hostvars, cap, spare, ha_share = {}, {}, {}, {}
    lost = max(x, -(-hosts // racks) if racks else 0)
    memory0 = rng.choice(HOST_MEMORY)
    cores0 = int(scale * memory0) // 4096
    for i, h in enumerate(names):
        memory = int(scale * (memory0 if uniform else rng.choice(HOST_MEMORY)))
        # Cores grow with memory (a 256 GB host has 64 to 128): memory binds, as usual.
        cores = cores0 if uniform else max(2, int(memory / 4096 * rng.uniform(1, 2)))
        hv = {"yasco_capacity": {"vcpus": cores, "memory_mb": memory}}
        held = 0
        if i < reserved:
            held = rng.choice((4096, 8192, 16384))
            hv["yasco_reserved"] = {"memory_mb": held}
        if racks:
            hv["yasco_failure_domain"] = f"rack{i % racks}"
        hostvars[h] = hv
        cap[h] = {"vcpus": cores * CPU_RATIO, "memory_mb": memory - held}
        # Spare in proportion to what the largest failure set takes from the others.
        share = min(0.45, (1 if uniform else rng.uniform(0.5, 1.5)) * lost / (hosts - lost))
        spare[h] = {r: share * cap[h][r] for r in _RESOURCES}
        ha_share[h] = 0.6 if uniform else rng.uniform(*ha)
    rack_of = {h: hostvars[h]["yasco_failure_domain"] for h in names} if racks else {}
    state = _Construction(cap, spare, _failure_sets(names, x, rack_of))
    vms: dict[str, dict] = {}
    groups: dict[str, int] = {}

    def draw(kind: str, home: str, first: str | None) -> bool:
        vcpus, memory = rng.choice(FLAVOURS)
        size = {"vcpus": vcpus, "memory_mb": memory}
        labels: frozenset[str] = frozenset()
        if kind == "ha" and rng.random() < anti_affinity:
            open_groups = [g for g, n in groups.items() if n < 3]
            group = rng.choice(open_groups) if open_groups and rng.random() < 0.7 \
                else f"app{len(groups)}"
            labels = frozenset([group])
        targets: dict[frozenset[str], str] = {}
        if kind == "ha":
            targets = state.targets_of(home, _chain(rng, names, home, first, x, rack_of)) or {}
        if not state.fits(size, labels, kind, home, targets):
            return False
        name = f"vm{len(vms):04d}"
        state.add(name, size, labels, kind, home, targets)
        for label in labels:
            groups[label] = groups.get(label, 0) + 1
        vms[name] = _vm_spec(size, kind, labels)
        return True

    memory = "memory_mb"
    # HA VMs: round after round, every host sends one more VM to every other host (its
    # first failover target), until its share of HA homes is reached or nothing fits:
    # every failure set then fills the spare of every survivor about evenly.
    pairs = [(h, t) for h in names for t in names if h != t]
    live = {pair: 0 for pair in pairs}
    while live:
        rng.shuffle(pairs)
        for h, t in pairs:
            if (h, t) not in live:
                continue
            if state.firm[h][memory] >= ha_share[h] * (cap[h][memory] - spare[h][memory]):
                del live[(h, t)]
            elif draw("ha", h, t):
                live[(h, t)] = 0
            else:
                live[(h, t)] += 1
                if live[(h, t)] >= 8:
                    del live[(h, t)]
    # Plain VMs fill each home to `fill`, preemptible VMs a share of the spare.
    for kind, full in (("plain", lambda h: state.firm[h][memory]
                        >= fill * (cap[h][memory] - spare[h][memory])),
                       ("preemptible", lambda h: state.all[h][memory] - state.firm[h][memory]
                        >= preemptible * spare[h][memory])):
        for h in names:
            missed = 0
            while missed < 8 and not full(h):
                missed = 0 if draw(kind, h, None) else missed + 1
    used = sum(state.firm[h][memory] + state.peak(h) for h in names)
    return _shuffled(rng, hostvars, vms, state, x, bool(racks),
                     used / sum(c[memory] for c in cap.values()))


def _shuffled(rng: random.Random, hostvars: dict, vms: dict, state: _Construction, x: int,
              racks: bool, fill: float) -> Planted:
    host_names = rng.sample(range(100, 1000), len(hostvars))
    host_map = {h: f"hv{n}" for h, n in zip(sorted(hostvars), host_names)}
    vm_names = rng.sample(range(10000, 100000), len(vms))
    vm_map = {v: f"vm{n}" for v, n in zip(sorted(vms), vm_names)}
    host_order = list(hostvars)
    rng.shuffle(host_order)
    vm_order = list(vms)
    rng.shuffle(vm_order)
    failover: dict[str, dict[str, str]] = {",".join(sorted(host_map[h] for h in s)): {}
                                           for s in state.sets}
    for name, targets in state.targets.items():
        for failed, t in targets.items():
            key = ",".join(sorted(host_map[h] for h in failed))
            failover[key][vm_map[name]] = host_map[t]
    # Stopping every preemptible VM on a host that receives VMs is always allowed.
    preempt = {}
    for failed in state.sets:
        key = ",".join(sorted(host_map[h] for h in failed))
        receiving = set(failover[key].values())
        stopped = sorted(vm_map[n] for n, h in state.home.items()
                         if vms[n].get("preemptible") and host_map[h] in receiving)
        if stopped:
            preempt[key] = stopped
    settings = {"yasco_failures_to_tolerate": x, "yasco_cpu_allocation_ratio": CPU_RATIO,
                "yasco_vms": {vm_map[v]: vms[v] for v in vm_order}}
    if racks:
        settings["yasco_failure_domains_to_tolerate"] = 1
    vdm = {"home": {vm_map[n]: host_map[h] for n, h in state.home.items()},
           "failover": failover, "preempt": preempt}
    return Planted({host_map[h]: hostvars[h] for h in host_order}, settings, vdm, fill)


def overloaded(instance: Planted, seed: int) -> tuple[Planted, str]:
    """`instance` made infeasible: plain VMs made HA until the plain ones could all
    park on its largest host, then HA VMs added until the failure of that host leaves
    more HA demand than the others have, in memory (while all hosts together still
    have enough). Returns the instance and that host's name."""
    rng = random.Random(seed)
    usable = {h: hv["yasco_capacity"]["memory_mb"]
              - hv.get("yasco_reserved", {}).get("memory_mb", 0)
              for h, hv in instance.hostvars.items()}
    largest = max(usable, key=lambda h: (usable[h], h))
    vms = {name: dict(spec) for name, spec in instance.vms.items()}
    plain = [s for s in vms.values() if not s.get("ha") and not s.get("preemptible")]
    biggest = max(memory for dummy, memory in FLAVOURS)
    while sum(s["memory_mb"] for s in plain) > usable[largest] - biggest:
        plain.pop()["ha"] = True
    ha = sum(s["memory_mb"] for s in vms.values() if s.get("ha"))
    survivors = sum(usable.values()) - usable[largest]
    i = 0
    while ha <= survivors:
        memory = rng.choice([m for dummy, m in FLAVOURS])
        vms[f"extra{i:03d}"] = {"vcpus": 1, "memory_mb": memory, "ha": True}
        ha += memory
        i += 1
    settings = {**instance.settings, "yasco_vms": vms}
    return Planted(instance.hostvars, settings, {}, instance.fill), largest
