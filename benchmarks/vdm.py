"""Benchmark the VDM planner against vSphere-style slots and Ganeti-style N+1.

    make bench-vdm                       # or: .venv/bin/python benchmarks/vdm.py [--quick]

For each family the VM stream grows, in its fixed random order, until a method
declares it infeasible (found by bisection, assuming that admitting fewer VMs never
fails when more succeed). Reported per method:

  admitted   VMs of the stream admitted
  %ideal     HA load over the issue's ideal bound, (K - X)/K of capacity, with plain
             VMs counted at their size (no spare needed); the worst resource
  %cap       the same load over the capacity bound: for every failure set S, HA VMs
             and what plain VMs cannot park on S must fit in the hosts outside S. The
             ideal bound is out of reach when the hosts that can fail are larger than
             average; this one is not
  (capacity bound)  the most VMs of the stream that the capacity bound admits: no
             method can admit more
  plan s     median wall time of planning the admitted set (3 runs)
  moved      plan 80 % of the admitted set, add 10 % more VMs and re-plan: the share
             of the planned VMs whose home changes. The baselines admit VMs one by
             one and never move one, so theirs is 0 by construction

Then the scale target: 200 hosts x 5,000 VMs with X = 2, planned and re-planned.
Every plan of the planner is re-checked by the independent checker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))

from vdm_baselines import ganeti_n1, vsphere_slots  # noqa: E402
from vdm_families import Family, families, large  # noqa: E402

from ansible_collections.yasco.cluster.plugins.module_utils.vdm_check import check  # noqa: E402
from ansible_collections.yasco.cluster.plugins.module_utils.vdm_model import (  # noqa: E402
    Problem, load_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.vdm_planner import (  # noqa: E402
    Plan, VdmInfeasible, plan)

RESOURCES = ("vcpus", "memory_mb")


def yasco(problem: Problem) -> bool:
    try:
        _checked(problem, plan(problem))
    except VdmInfeasible:
        return False
    return True


METHODS = {"YASCO": yasco, "vSphere slots": vsphere_slots, "Ganeti N+1": ganeti_n1}


def _checked(problem: Problem, result: Plan) -> Plan:
    violations = check(problem, {"home": result.home, "failover": result.failover,
                                 "preempt": result.preempt})
    if violations:
        raise SystemExit(f"planner bug, the checker found: {violations[:5]}")
    return result


def admitted(family: Family, method) -> int:
    lo, hi = 0, len(family.stream)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if method(load_problem(*family.inventory(mid))):
            lo = mid
        else:
            hi = mid - 1
    return lo


def loads(problem: Problem, resource: str) -> tuple[float, float]:
    firm = [vm for vm in problem.vms.values() if not vm.preemptible]
    return (sum(vm.demand(resource) for vm in firm if vm.ha),
            sum(vm.demand(resource) for vm in firm if not vm.ha))


def percent_ideal(problem: Problem) -> float:
    k = len(problem.hosts)
    largest = max((len(s) for s in problem.failure_sets), default=0)
    ideal = (k - largest) / k
    out = 0.0
    for r in RESOURCES:
        ha, plain = loads(problem, r)
        out = max(out, (ha / ideal + plain) / sum(getattr(h, r) for h in problem.hosts.values()))
    return 100 * out


def percent_capacity(problem: Problem) -> float:
    out = 0.0
    for r in RESOURCES:
        ha, plain = loads(problem, r)
        total = sum(getattr(h, r) for h in problem.hosts.values())
        for failed in problem.failure_sets:
            lost = sum(getattr(problem.hosts[h], r) for h in failed)
            out = max(out, (ha + max(0.0, plain - lost)) / (total - lost))
    return 100 * out


def timed(fn, repeat: int = 3) -> float:
    times = []
    for dummy in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def moved_share(family: Family, n: int) -> float:
    """Plan `n` VMs, add 10 % more and re-plan: the share of VMs whose home changes."""
    base = n
    n = int(n * 1.1)
    before = plan(load_problem(*family.inventory(base)))
    problem = load_problem(*family.inventory(n))
    after = _checked(problem, replan(problem, before))
    return 100 * len(after.moved) / max(base, 1)


def replan(problem: Problem, before: Plan) -> Plan:
    return plan(problem, previous_home=before.home, previous_failover=before.failover)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: list) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def run_families(quick: bool) -> None:
    header = ["family", "hosts", "method", "admitted", "%ideal", "%cap", "plan s", "moved"]
    rows = []
    for family in families(scale=1 if quick else 2):
        for name, method in METHODS.items():
            n = admitted(family, method)
            problem = load_problem(*family.inventory(n))
            seconds = timed(lambda method=method, problem=problem: method(problem))
            moved = f"{moved_share(family, int(n * 0.8)):.1f}%" if name == "YASCO" else "0"
            rows.append([family.name, len(family.hostvars), name, n,
                         f"{percent_ideal(problem):.1f}", f"{percent_capacity(problem):.1f}",
                         f"{seconds:.3f}", moved])
            print(f"  {family.name}: {name} admits {n}", file=sys.stderr, flush=True)
        n = admitted(family, lambda p: percent_capacity(p) <= 100 + 1e-9)
        rows.append([family.name, len(family.hostvars), "(capacity bound)", n, "", "", "",
                     ""])
    print(table(rows, header))


def run_large(hosts: int, vms: int) -> None:
    family = large(hosts, vms)
    start = time.perf_counter()
    problem = load_problem(*family.inventory(vms))
    validate = time.perf_counter() - start
    seconds = timed(lambda: plan(problem))
    start = time.perf_counter()
    result = _checked(problem, plan(problem))
    checking = time.perf_counter() - start - seconds
    base = load_problem(*family.inventory(int(vms / 1.1)))  # then 10 % more
    before = plan(base)
    replanning = timed(lambda: replan(problem, before), repeat=1)
    after = _checked(problem, replan(problem, before))
    rows = [[family.name, f"{validate:.1f}", f"{seconds:.1f}", f"{checking:.1f}",
             f"{replanning:.1f}", f"{100 * len(after.moved) / len(base.vms):.2f}%",
             f"{percent_capacity(problem):.1f}"]]
    print(table(rows, ["instance", "validate s", "plan s", "check s", "re-plan s",
                       "moved on +10%", "%cap"]))
    del result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="12-host families and a 50-host scale case (a minute)")
    args = parser.parse_args()
    run_families(args.quick)
    print()
    if args.quick:
        run_large(50, 1250)
    else:
        run_large(200, 5000)


if __name__ == "__main__":
    main()
