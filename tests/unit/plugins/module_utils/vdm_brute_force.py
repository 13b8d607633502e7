"""A second opinion on the VDM planner for tiny clusters: every map tried, by a search
that shares no code with the planner, its model or its checker.

It reads the inventory as written (hostvars and yasco_* settings: capacities, failure
domains, VMs with sizes, kinds, anti-affinity labels, allowed hosts and pins), derives
the failure sets from yasco_failures_to_tolerate and the domains itself, and answers
whether any map holds every invariant of docs/vdm.md, with one such map as the
witness (`find_map`). `violations` judges a map against the same invariants, written
out again from the docs: the tests hold the planner's plans to it, and the planner's
own checker (vdm_check) to the witnesses.

Why the search may stop every preemptible VM of a host that receives VMs: the
invariants allow it and it only frees room, so a map exists exactly when one with
that choice does. Why each HA VM's failover targets are searched one VM at a time:
nesting ties together only the targets of one VM, so the targets that satisfy it are
listed once per home and allowed hosts, and the search over VMs checks capacity and
anti-affinity as it goes. VMs with the same settings are interchangeable, so their
choices are taken in order (a map with them in another order is the same map).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

RESOURCES = ("vcpus", "memory_mb")


def set_key(failed) -> str:
    """A failure set as the VDM writes it: host names sorted, joined by commas."""
    return ",".join(sorted(failed))


@dataclass(frozen=True)
class Guest:
    name: str
    need: tuple[int, ...]
    ha: bool
    preemptible: bool
    labels: frozenset[str]
    allowed: tuple[str, ...]
    pin: str | None

    @property
    def firm(self) -> bool:
        return not self.preemptible

    def shape(self) -> tuple:
        """Everything but the name: VMs of one shape are interchangeable."""
        return (self.need, self.ha, self.preemptible, tuple(sorted(self.labels)),
                self.allowed, self.pin or "")


# What the brute force reads of the inventory; anything else would be misread.
HOST_KEYS = {"yasco_capacity", "yasco_failure_domain"}
VM_KEYS = {"vcpus", "memory_mb", "ha", "preemptible", "anti_affinity", "hosts", "home"}
SETTINGS = {"yasco_vms", "yasco_failures_to_tolerate", "yasco_failure_domains_to_tolerate"}


class Cluster:
    """The inventory read for the brute force: what each host holds (its capacity as
    written: no reservation, no CPU allocation ratio), the VMs, and the failure sets
    to tolerate."""

    def __init__(self, hostvars: dict, settings: dict) -> None:
        unread = (set(settings) - SETTINGS).union(
            *(set(hv) - HOST_KEYS for hv in hostvars.values()),
            *(set(hv["yasco_capacity"]) - set(RESOURCES) for hv in hostvars.values()),
            *(set(vm) - VM_KEYS for vm in settings.get("yasco_vms", {}).values()))
        assert not unread, f"the brute force does not read {sorted(unread)}"
        self.hosts = sorted(hostvars)
        self.cap = {h: tuple(hostvars[h]["yasco_capacity"][r] for r in RESOURCES)
                    for h in self.hosts}
        x = settings.get("yasco_failures_to_tolerate", 1)
        sets = {frozenset(c) for k in range(1, x + 1)
                for c in itertools.combinations(self.hosts, k)}
        if settings.get("yasco_failure_domains_to_tolerate"):
            racks: dict[str, set[str]] = {}
            for h in self.hosts:
                racks.setdefault(hostvars[h]["yasco_failure_domain"], set()).add(h)
            sets |= {frozenset(members) for members in racks.values()}
        self.failure_sets = sorted(sets, key=lambda s: (len(s), sorted(s)))
        self.guests = []
        for name, spec in sorted(settings.get("yasco_vms", {}).items()):
            allowed = tuple(sorted(set(spec.get("hosts", self.hosts)) & set(self.hosts)))
            self.guests.append(Guest(
                name, tuple(spec[r] for r in RESOURCES), bool(spec.get("ha")),
                bool(spec.get("preemptible")), frozenset(spec.get("anti_affinity", [])),
                allowed, spec.get("home")))
        self.by_name = {g.name: g for g in self.guests}


def _fits(*amounts: tuple[int, ...], cap: tuple[int, ...]) -> bool:
    return all(sum(a[i] for a in amounts) <= cap[i] for i in range(len(cap)))


def _plus(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x + y for x, y in zip(a, b))


def _minus(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x - y for x, y in zip(a, b))


def nested(targets: dict[frozenset, str]) -> bool:
    """Whether one VM's targets (failure set -> host) keep nesting: under a larger
    set, a VM whose target survives it goes there still."""
    return all(targets[larger] == t for smaller, t in targets.items()
               for larger in targets if smaller < larger and t not in larger)


def target_choices(cluster: Cluster, guest: Guest, home: str) -> list[dict]:
    """Every way an HA VM at home on `home` may fail over: a survivor it is allowed
    on under each failure set holding its home, nesting kept."""
    sets = [s for s in cluster.failure_sets if home in s]
    options = [[t for t in guest.allowed if t not in s] for s in sets]
    choices = []
    for picked in itertools.product(*options):
        targets = dict(zip(sets, picked))
        if nested(targets):
            choices.append(targets)
    return choices


class _Search:
    """The depth-first search over the VMs' homes and targets."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        zero = tuple(0 for dummy in RESOURCES)
        self.home_used = {h: zero for h in cluster.hosts}
        self.home_labels = {h: [] for h in cluster.hosts}
        self.firm_used = {h: zero for h in cluster.hosts}
        self.firm_labels = {h: [] for h in cluster.hosts}
        self.arriving: dict[tuple[frozenset, str], tuple[int, ...]] = {}
        self.arriving_labels: dict[tuple[frozenset, str], list[str]] = {}
        self.zero = zero
        # Fewest choices first, then largest, so that the search fails early; VMs of
        # one shape together (their choices are the same).
        choices = {g.name: self._choices(g) for g in cluster.guests}
        self.order = sorted(cluster.guests, key=lambda g: (
            len(choices[g.name]), not g.ha, tuple(-n for n in g.need), g.shape(), g.name))
        self.choices = [choices[g.name] for g in self.order]
        self.chosen: list[tuple[str, dict]] = []
        # What the VMs from the i-th on need: all of them, and the HA ones alone; and
        # how many of those HA ones hold each anti-affinity label.
        self.left_all = [zero] * (len(self.order) + 1)
        self.left_ha = [zero] * (len(self.order) + 1)
        self.left_labels: list[dict[str, int]] = [{} for dummy in range(len(self.order) + 1)]
        for i in reversed(range(len(self.order))):
            g = self.order[i]
            self.left_all[i] = _plus(self.left_all[i + 1], g.need)
            self.left_ha[i] = _plus(self.left_ha[i + 1], g.need if g.ha else zero)
            self.left_labels[i] = dict(self.left_labels[i + 1])
            for label in g.labels if g.ha else ():
                self.left_labels[i][label] = self.left_labels[i].get(label, 0) + 1

    def _choices(self, guest: Guest) -> list[tuple[str, dict]]:
        homes = [guest.pin] if guest.pin else list(guest.allowed)
        out = []
        for h in homes:
            if not _fits(guest.need, cap=self.c.cap[h]):
                continue
            if not guest.ha:
                out.append((h, {}))
                continue
            for targets in target_choices(self.c, guest, h):
                if all(_fits(guest.need, cap=self.c.cap[t]) for t in targets.values()):
                    out.append((h, targets))
        return out

    def _can(self, g: Guest, home: str, targets: dict) -> bool:
        c = self.c
        if not _fits(self.home_used[home], g.need, cap=c.cap[home]):
            return False
        if g.labels & set(self.home_labels[home]):
            return False
        if g.firm:  # it stays on its home under every failure set that spares it
            for (failed, t), load in self.arriving.items():
                if t != home:
                    continue
                if not _fits(self.firm_used[home], g.need, load, cap=c.cap[home]):
                    return False
                if g.labels & set(self.arriving_labels[(failed, t)]):
                    return False
        for failed, t in targets.items():
            load = self.arriving.get((failed, t), self.zero)
            if not _fits(self.firm_used[t], load, g.need, cap=c.cap[t]):
                return False
            if g.labels & (set(self.firm_labels[t])
                           | set(self.arriving_labels.get((failed, t), []))):
                return False
        return True

    def _put(self, g: Guest, home: str, targets: dict, sign: int) -> None:
        step = _plus if sign > 0 else _minus
        self.home_used[home] = step(self.home_used[home], g.need)
        labels = sorted(g.labels)
        if sign > 0:
            self.home_labels[home] += labels
        else:
            for label in labels:
                self.home_labels[home].remove(label)
        if g.firm:
            self.firm_used[home] = step(self.firm_used[home], g.need)
            if sign > 0:
                self.firm_labels[home] += labels
            else:
                for label in labels:
                    self.firm_labels[home].remove(label)
        for failed, t in targets.items():
            key = (failed, t)
            self.arriving[key] = step(self.arriving.get(key, self.zero), g.need)
            if sign > 0:
                self.arriving_labels.setdefault(key, []).extend(labels)
            else:
                for label in labels:
                    self.arriving_labels[key].remove(label)

    def _room_left(self, i: int) -> bool:
        """Whether the VMs from the i-th on could still fit by the totals alone: all of
        them on all hosts, and under each failure set the HA ones on the survivors
        (where they run at home or arrive), those that share a label each on its own
        survivor that holds no VM with it yet. A bound only: it never drops a map."""
        c = self.c
        free = self.zero
        for h in c.hosts:
            free = _plus(free, _minus(c.cap[h], self.home_used[h]))
        if not _fits(self.left_all[i], cap=free):
            return False
        for failed in c.failure_sets:
            free = self.zero
            survivors = [t for t in c.hosts if t not in failed]
            for t in survivors:
                taken = _plus(self.firm_used[t], self.arriving.get((failed, t), self.zero))
                free = _plus(free, _minus(c.cap[t], taken))
            if not _fits(self.left_ha[i], cap=free):
                return False
            for label, count in self.left_labels[i].items():
                clear = [t for t in survivors if label not in self.firm_labels[t]
                         and label not in self.arriving_labels.get((failed, t), [])]
                if count > len(clear):
                    return False
        return True

    def _each_has_a_choice(self, i: int) -> bool:
        """Whether each VM from the i-th on still has a home and targets that fit
        beside those chosen: a VM with none ends this branch at once, not after
        every choice of the VMs before it has been tried."""
        return all(any(self._can(g, home, targets) for home, targets in self.choices[j])
                   for j, g in enumerate(self.order[i:], i))

    def run(self, i: int = 0, start: int = 0) -> bool:
        if i == len(self.order):
            return True
        if not self._room_left(i):
            return False
        g = self.order[i]
        choices = self.choices[i]
        for k in range(start, len(choices)):
            home, targets = choices[k]
            if not self._can(g, home, targets):
                continue
            self._put(g, home, targets, +1)
            self.chosen.append((home, targets))
            same = i + 1 < len(self.order) and self.order[i + 1].shape() == g.shape()
            if self._each_has_a_choice(i + 1) and self.run(i + 1, k if same else 0):
                return True
            self.chosen.pop()
            self._put(g, home, targets, -1)
        return False


def find_map(cluster: Cluster) -> dict | None:
    """A map that holds every invariant, or None when no map does (every one tried)."""
    search = _Search(cluster)
    if not search.run():
        return None
    home = {g.name: h for g, (h, dummy) in zip(search.order, search.chosen)}
    failover = {set_key(s): {} for s in cluster.failure_sets}
    for g, (dummy, targets) in zip(search.order, search.chosen):
        for failed, t in targets.items():
            failover[set_key(failed)][g.name] = t
    return {"home": home, "failover": failover,
            "preempt": stop_preemptible(cluster, home, failover)}


def stop_preemptible(cluster: Cluster, home: dict, failover: dict) -> dict:
    """Per failure set, the preemptible VMs at home on the hosts that receive VMs."""
    preempt = {}
    for failed in cluster.failure_sets:
        receiving = set(failover.get(set_key(failed), {}).values())
        preempt[set_key(failed)] = sorted(
            g.name for g in cluster.guests
            if g.preemptible and home.get(g.name) in receiving)
    return preempt


def violations(cluster: Cluster, vdm: dict) -> list[str]:
    """Every way `vdm` breaks an invariant of docs/vdm.md, in words; [] when none."""
    out: list[str] = []
    home, failover, preempt = vdm["home"], vdm["failover"], vdm.get("preempt", {})
    guests = cluster.by_name

    def crowded(host: str, names: list[str], where: str) -> None:
        used = tuple(0 for dummy in RESOURCES)
        for n in names:
            used = _plus(used, guests[n].need)
        if not _fits(used, cap=cluster.cap[host]):
            out.append(f"{where}: {host} holds {used}, more than {cluster.cap[host]}")
        seen: dict[str, str] = {}
        for n in sorted(names):
            for label in sorted(guests[n].labels):
                if label in seen:
                    out.append(f"{where}: {seen[label]} and {n} share {label!r} on {host}")
                seen[label] = n

    if set(home) != set(guests):
        out.append(f"homes for {sorted(set(home))}, VMs {sorted(guests)}")
        return out
    for n, h in home.items():
        g = guests[n]
        if h not in g.allowed or g.pin not in (None, h):
            out.append(f"{n}: home {h} is not allowed")
    for h in cluster.hosts:
        crowded(h, [n for n, at in home.items() if at == h], "at home")
    planned = {set_key(s) for s in cluster.failure_sets}
    for key in sorted(set(failover) - planned):
        out.append(f"failover for {key}, which is no failure set to tolerate")
    for failed in cluster.failure_sets:
        key = set_key(failed)
        moves = failover.get(key, {})
        stopped = set(preempt.get(key, []))
        displaced = {n for n, h in home.items() if h in failed and guests[n].ha}
        if set(moves) != displaced:
            out.append(f"failure of {key}: moves {sorted(moves)}, HA VMs there "
                       f"{sorted(displaced)}")
        for n in stopped:
            if not guests[n].preemptible or home[n] in failed:
                out.append(f"failure of {key}: stops {n}")
        for n, t in moves.items():
            if t in failed or t not in guests[n].allowed:
                out.append(f"failure of {key}: {n} goes to {t}")
        for h in cluster.hosts:
            if h in failed:
                continue
            running = [n for n, at in home.items() if at == h and n not in stopped]
            running += [n for n, t in moves.items() if t == h]
            crowded(h, running, f"failure of {key}")
    for smaller in cluster.failure_sets:
        for larger in cluster.failure_sets:
            if not smaller < larger:
                continue
            for n, t in failover.get(set_key(smaller), {}).items():
                if t not in larger and failover.get(set_key(larger), {}).get(n) != t:
                    out.append(f"nesting: {n} goes to {t} under {set_key(smaller)} but "
                               f"not under {set_key(larger)}")
    return out
