"""Instance families for the VDM benchmark: hosts, settings and a VM stream each.

Every family is generated from a fixed seed, so every method sees the same VMs in
the same order, and a run is repeatable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Typical flavours: (vCPUs, memory MB).
SIZES = [(1, 2048), (2, 4096), (2, 8192), (4, 8192), (4, 16384), (8, 16384), (8, 32768),
         (16, 65536)]
HOST_KINDS = {"small": (48, 196608), "medium": (64, 262144), "large": (96, 524288)}


@dataclass
class Family:
    name: str
    hostvars: dict
    settings: dict
    stream: list[tuple[str, dict]]  # VMs in the order they are admitted

    def inventory(self, n: int) -> tuple[dict, dict]:
        return self.hostvars, {**self.settings, "yasco_vms": dict(self.stream[:n])}


def _hosts(kinds: list[str], domains: int = 0, size: float = 1) -> dict:
    hostvars = {}
    for i, kind in enumerate(kinds):
        vcpus, memory = (int(size * amount) for amount in HOST_KINDS[kind])
        hv = {"yasco_capacity": {"vcpus": vcpus, "memory_mb": memory},
              "yasco_reserved": {"vcpus": 2, "memory_mb": 4096}}
        if domains:
            hv["yasco_failure_domain"] = f"rack-{i % domains}"
        hostvars[f"hv{i:03d}"] = hv
    return hostvars


def _stream(rng: random.Random, count: int, *, ha: float = 1.0, preemptible: float = 0.0,
            groups: int = 0) -> list[tuple[str, dict]]:
    stream = []
    for i in range(count):
        vcpus, memory = rng.choice(SIZES)
        spec = {"vcpus": vcpus, "memory_mb": memory}
        draw = rng.random()
        if draw < ha:
            spec["ha"] = True
        elif draw < ha + preemptible:
            spec["preemptible"] = True
        if groups and spec.get("ha"):
            spec["anti_affinity"] = [f"app{rng.randrange(groups)}"]
        stream.append((f"vm{i:05d}", spec))
    return stream


def families(scale: int = 1) -> list[Family]:
    """The benchmark's families; `scale` multiplies the number of hosts."""
    rng = random.Random(20261121)
    k = 12 * scale
    hetero = [("small", "medium", "large")[i % 3] for i in range(k)]
    one = {"yasco_failures_to_tolerate": 1}
    two = {"yasco_failures_to_tolerate": 2}
    n = 60 * k  # more VMs than any method admits
    return [
        Family("homogeneous, X=1", _hosts(["medium"] * k), one, _stream(rng, n)),
        Family("heterogeneous, X=1", _hosts(hetero), one, _stream(rng, n)),
        Family("heterogeneous, X=2", _hosts(hetero), two, _stream(rng, n)),
        Family("anti-affinity heavy, X=1", _hosts(hetero), one,
               _stream(rng, n, groups=k * 2)),
        Family("failure domains (4 racks), X=1", _hosts(hetero, domains=4),
               {**one, "yasco_failure_domains_to_tolerate": 1}, _stream(rng, n)),
        Family("mixed HA/plain/preemptible, X=2", _hosts(hetero), two,
               _stream(rng, n, ha=0.6, preemptible=0.15)),
    ]


def large(hosts: int = 200, vms: int = 5000) -> Family:
    """The scale target: `hosts` heterogeneous hosts twice the usual size (so 25 VMs a
    host are about 85 % of what X = 2 allows), `vms` VMs, 70 % of them HA."""
    rng = random.Random(5000)
    kinds = [("small", "medium", "large")[i % 3] for i in range(hosts)]
    return Family(f"{hosts} hosts x {vms} VMs, X=2", _hosts(kinds, size=2.5),
                  {"yasco_failures_to_tolerate": 2}, _stream(rng, vms, ha=0.7))
