"""Benchmark the VDM planner against vSphere-style slots and Ganeti-style N+1.

    make bench-vdm                       # or: .venv/bin/python benchmarks/vdm.py [--quick]

For each family the VM stream grows, in its fixed random order, until a method
declares it infeasible (found by bisection, assuming that admitting fewer VMs never
fails when more succeed). The planner is its greedy search alone here ("YASCO
greedy"): the exact search would let each bisection step take up to its time limit;
the planted table below measures the two together. Reported per method:

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

    .venv/bin/python benchmarks/vdm.py --planted [--quick] [--only TEXT]

Planted instances instead (vdm_planted: a valid VDM built first, the inventory derived
from it, names and order shuffled), so every instance has a plan. Per family and size,
for the planner (greedy, then the exact search and the repair within 60 s), the greedy
search alone and the two baselines: solved / total, median and worst seconds. For the
planner also how many plans the exact search and the repair found, and the share of
VMs that move when the instance is planned with 10 % of its VMs left out and
re-planned with all of them (median and worst; and how many re-plans were planned
afresh, keeping no homes in time, or found no plan in their time, if any).

    .venv/bin/python benchmarks/vdm.py --preemptions [--quick]

How many preemptible VMs the plan stops, summed over the failure sets, on planted
instances: the planner as it plans by default (the greedy plan, which balances the
spare) beside `objective="preemptions"` (the exact search started from it, 30 s), the
share it saves, and how long that took (median and worst).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))

from vdm_baselines import ganeti_n1, vsphere_slots  # noqa: E402
from vdm_families import Family, families, large  # noqa: E402

from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_check import (  # noqa: E402
    check)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_inventory import (  # noqa: E402
    load_problem)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_model import (  # noqa: E402
    Plan, Problem, VdmInfeasible, VdmNotFound)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planted import (  # noqa: E402
    Planted, planted)
from ansible_collections.yasco.cluster.plugins.module_utils.planner.vdm_planner import (  # noqa: E402
    plan)

RESOURCES = ("vcpus", "memory_mb")


def greedy(problem: Problem) -> bool:
    """The planner's greedy search alone: the exact search after it would make each
    bisection step of the admission table take up to its time limit."""
    try:
        _checked(problem, plan(problem, exact=False))
    except (VdmInfeasible, VdmNotFound):
        return False
    return True


METHODS = {"YASCO greedy": greedy, "vSphere slots": vsphere_slots, "Ganeti N+1": ganeti_n1}


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
            moved = f"{moved_share(family, int(n * 0.8)):.1f}%" if name == "YASCO greedy" \
                else "0"
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


# Planted families: (name, hosts, planted() options); 24 and 40 hosts at half the host
# size, so that they hold about 1,000 and 2,000 VMs.
PLANTED = [
    ("mixed, X=1", 5, {}), ("mixed, X=1", 8, {}), ("mixed, X=1", 12, {}),
    ("mixed, X=1", 24, {"scale": 0.5}), ("mixed, X=1", 40, {"scale": 0.5}),
    ("mixed, no preemptible, X=1", 6, {"preemptible": 0.0}),
    ("mixed, anti-affinity 30 %, X=1", 8, {"anti_affinity": 0.3}),
    ("mixed, 3 racks, X=1", 9, {"racks": 3}),
    ("mixed, 4 racks, X=1", 24, {"racks": 4, "scale": 0.5}),
    ("mixed, X=2", 5, {"x": 2}), ("mixed, X=2", 8, {"x": 2}), ("mixed, X=2", 12, {"x": 2}),
    ("mixed, X=2", 24, {"x": 2, "scale": 0.5}), ("mixed, X=2", 40, {"x": 2, "scale": 0.5}),
    ("identical hosts, X=1", 8, {"uniform": True}),
    # Filled to the top of the range: where the greedy search misses most.
    ("mixed, 98 % full, X=1", 24, {"fill": 0.98, "scale": 0.5}),
    ("mixed, 98 % full, X=2", 12, {"x": 2, "fill": 0.98}),
    ("mixed, 98 % full, X=2", 18, {"x": 2, "fill": 0.98}),
]
PLANTED_QUICK = [("mixed, X=1", 6, {}), ("mixed, 3 racks, X=1", 9, {"racks": 3}),
                 ("mixed, X=2", 6, {"x": 2}), ("identical hosts, X=1", 6, {"uniform": True})]


def planner(problem: Problem) -> Plan | None:
    """The planner's answer on a planted instance: a plan, or None when it found none
    (an "infeasible" here would be a bug: the planted VDM is a plan)."""
    try:
        return _checked(problem, plan(problem, time_limit=60))
    except VdmNotFound:
        return None
    except VdmInfeasible as err:
        raise SystemExit(f"planner bug, a planted instance called infeasible: {err}") from err


def moved_on_growth(instance: Planted, seed: int) -> tuple[float, str] | str | None:
    """Plan the instance with 10 % of its VMs (drawn at random) left out, then re-plan
    with all of them: the share of the first plan's VMs whose home changes and the
    search that found the re-plan, "not found" when the re-plan found no plan in its
    time, None when the first did not."""
    names = sorted(instance.vms)
    left_out = set(random.Random(seed).sample(names, len(names) // 10))
    fewer = {n: s for n, s in instance.vms.items() if n not in left_out}
    before = planner(load_problem(instance.hostvars, {**instance.settings,
                                                      "yasco_vms": fewer}))
    if before is None:
        return None
    problem = load_problem(instance.hostvars, instance.settings)
    try:
        after = _checked(problem, replan(problem, before))
    except VdmNotFound:
        return "not found"
    return 100 * len(after.moved) / len(fewer), after.method


def run_planted(quick: bool, only: str = "") -> None:
    header = ["family", "hosts", "VMs", "method", "solved", "median s", "worst s",
              "exact/repair", "moved med/worst"]
    rows = []
    count = 3 if quick else 10
    for family, hosts, options in PLANTED_QUICK if quick else PLANTED:
        if only not in f"{family}, {hosts} hosts":
            continue
        instances = [planted(seed, hosts, **options) for seed in range(count)]
        problems = [load_problem(i.hostvars, i.settings) for i in instances]
        assert all(not check(p, i.vdm) for p, i in zip(problems, instances, strict=True))
        vms = statistics.median(len(i.vms) for i in instances)
        methods = {"YASCO": planner, **METHODS}
        for name, method in methods.items():
            solved, times, found = 0, [], Counter()
            for problem in problems:
                start = time.perf_counter()
                answer = method(problem)
                times.append(time.perf_counter() - start)
                solved += bool(answer)
                found[answer.method if isinstance(answer, Plan) else None] += 1
            moved = ""
            if name == "YASCO":
                grown = [moved_on_growth(i, seed) for seed, i in enumerate(instances)]
                replans = [g for g in grown if isinstance(g, tuple)]
                shares = [share for share, dummy in replans]
                moved = (f"{statistics.median(shares):.1f}% / {max(shares):.1f}%"
                         if shares else "-")
                for how in ("binding", "afresh"):
                    if sum(by == how for dummy, by in replans):
                        moved += f", {sum(by == how for dummy, by in replans)} {how}"
                if "not found" in grown:
                    moved += f", {grown.count('not found')} not found"
            rows.append([family, hosts, int(vms), name, f"{solved}/{count}",
                         f"{statistics.median(times):.2f}", f"{max(times):.2f}",
                         f"{found['exact']}/{found['repair']}" if name == "YASCO" else "",
                         moved])
            print(f"  {family}, {hosts} hosts: {name} solves {solved}/{count}",
                  file=sys.stderr, flush=True)
    print(table(rows, header))


# Planted families with preemptible VMs for the preemptions table, as PLANTED.
PREEMPTIONS = [
    ("mixed, X=1", 5, {}), ("mixed, X=1", 8, {}), ("mixed, X=1", 12, {}),
    ("mixed, 3 racks, X=1", 9, {"racks": 3}), ("mixed, X=2", 8, {"x": 2}),
]
PREEMPTIONS_QUICK = [("mixed, X=1", 5, {}), ("mixed, X=2", 6, {"x": 2})]
PREEMPTION_SECONDS = 30


def run_preemptions(quick: bool) -> None:
    header = ["family", "hosts", "VMs", "preemptible", "default", "fewest", "saved",
              "median s", "worst s"]
    rows = []
    count = 3 if quick else 5
    for family, hosts, options in PREEMPTIONS_QUICK if quick else PREEMPTIONS:
        before, after, saved, times, vms, preemptible = [], [], [], [], [], []
        for seed in range(count):
            instance = planted(seed, hosts, **options)
            problem = load_problem(instance.hostvars, instance.settings)
            try:
                default = _checked(problem, plan(problem, time_limit=60))
                start = time.perf_counter()
                fewest = _checked(problem, plan(problem, objective="preemptions",
                                                time_limit=PREEMPTION_SECONDS))
            except (VdmInfeasible, VdmNotFound):
                continue
            times.append(time.perf_counter() - start)
            before.append(default.preemptions)
            after.append(fewest.preemptions)
            saved.append(100 * (1 - after[-1] / before[-1]) if before[-1] else 0.0)
            vms.append(len(problem.vms))
            preemptible.append(sum(vm.preemptible for vm in problem.vms.values()))
        rows.append([family, hosts, int(statistics.median(vms)),
                     int(statistics.median(preemptible)), statistics.median(before),
                     statistics.median(after), f"{statistics.median(saved):.0f}%",
                     f"{statistics.median(times):.1f}", f"{max(times):.1f}"])
        print(f"  {family}, {hosts} hosts: {before} -> {after}", file=sys.stderr, flush=True)
    print(table(rows, header))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="12-host families and a 50-host scale case (a minute)")
    parser.add_argument("--planted", action="store_true",
                        help="planted-feasible families instead: solved / total and times")
    parser.add_argument("--preemptions", action="store_true",
                        help="planted families: preemptions by default and at fewest")
    parser.add_argument("--only", default="", metavar="TEXT",
                        help="planted families: only rows whose name (\"mixed, X=2, 12 "
                        "hosts\") holds TEXT")
    args = parser.parse_args()
    if args.preemptions:
        run_preemptions(args.quick)
        return
    if args.planted:
        run_planted(args.quick, args.only)
        return
    run_families(args.quick)
    print()
    if args.quick:
        run_large(50, 1250)
    else:
        run_large(200, 5000)


if __name__ == "__main__":
    main()
