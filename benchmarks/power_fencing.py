"""Benchmark power fencing on the lab: a hypervisor whose agent hangs (SIGSTOP: no
self-fence) and whose network is cut at once, so that its HA guest keeps running
there, with the evacuation powering it off through its BMC (`yasco_power_fence:
require`: the real fence_ipmilan against the lab's IPMI BMC) and, the baseline, with
the Ceph fence alone (`none`, as before power fencing).

    make bench-power-fencing    # or: .venv/bin/python benchmarks/power_fencing.py [--runs 3]

Brings the lab up if it is not, provisions three HA canary VMs (one homed on each
hypervisor) and runs the HA watcher (scripts/watch). Each run takes the next canary's
host down that way and measures, from the fault:
- the canary's first write from its new copy (read on its RBD disk);
- how long before that write its old host was off (the BMC's power-off, from the
  lab BMC's log); without power fencing the old host is still on, its guest running
  with its disk blocklisted, until someone resets it.
The host is then booted (the baseline's is reset first, as an operator would) and
the canary comes home before the next run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys  # noqa: E402
from failover import clean_up, playbook  # noqa: E402
from provision import lab_inventory, lab_status  # noqa: E402
from recovery import (  # noqa: E402
    BIN, HOSTS, settle, spread, stop, watch, where_running, writing_again)
from yasco_lab import bmc, hypervisor, layout, storage  # noqa: E402
from yasco_lab import lab as lab_verbs  # noqa: E402
from yasco_lab.credentials import etcd_client  # noqa: E402
from yasco_lab.errors import LabError  # noqa: E402

MODES = {"BMC power fencing": "require", "Ceph fence only": "none"}


def yasco_lab(*args: str) -> None:
    subprocess.run([str(BIN / "yasco-lab"), *args], check=True, capture_output=True)


def one_run(name: str, give_up: float) -> tuple[float | None, float | None]:
    """(seconds to the new copy's first write, seconds the old host was off before
    it); None where it did not happen."""
    host = where_running(name)
    if host is None:
        raise SystemExit(f"{name} runs nowhere before the run")
    last = storage.canary_records(name)[-1]
    with etcd_client(lab_status()["etcd_endpoints"]) as etcd:
        agent = etcd.get_json(etcd_keys.alive_key(host, cluster=layout.CLUSTER_NAME))
    actions = len(bmc.actions())
    started = time.time()
    lab_verbs.run_on_host(host, "kill", "-STOP", str(agent["pid"]))
    yasco_lab("partition", host)
    try:
        wrote = writing_again(name, last, give_up)
    finally:
        if lab_verbs.is_powered(host):  # the baseline's: hung and cut off, reset it
            yasco_lab("crash", host)
        yasco_lab("boot", host)
    off = [a["at"] for a in bmc.actions()[actions:] if a["host"] == host
           and a["action"] == "off" and not a["error"]]
    return (None if wrote is None else wrote - started,
            None if wrote is None or not off else wrote - off[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each mode")
    parser.add_argument("--give-up", type=float, default=120.0)
    args = parser.parse_args()
    lab = lab_status()
    names = [f"pf{i}" for i in range(3)]
    homes = {name: HOSTS[i] for i, name in enumerate(names)}
    results: dict[str, list[tuple[float | None, float | None]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="yasco-power-fencing-") as scratch:
        inv = lab_inventory(lab, Path(scratch) / "inventory",
                            {n: {"ha": True, "home": homes[n]} for n in names}, 8192)
        playbook("plan", inv)
        playbook("provision", inv)
        try:
            settle(inv, names, homes)
            for mode, policy in MODES.items():
                (inv / "group_vars" / "all" / "bench.yml").write_text(yaml.safe_dump(
                    {"yasco_power_fence": policy}))
                watcher = watch(inv, Path(scratch) / f"{policy}.log")
                try:
                    for index in range(args.runs):
                        name = names[index % len(names)]
                        took, off_before = one_run(name, args.give_up)
                        results[mode].append((took, off_before))
                        print(f"{mode}: {name}: writing again after "
                              f"{'never' if took is None else f'{took:.1f} s'}, host off "
                              + ("never" if off_before is None
                                 else f"{off_before:.1f} s before"), flush=True)
                        settle(inv, names, homes)
                finally:
                    stop(watcher)
        finally:
            clean_up(inv, names)
    print(f"\nA hypervisor whose agent hangs and whose network is cut: median (min-max) "
          f"of {args.runs} runs each, in seconds from the fault; agent ttl "
          f"{hypervisor.AGENT_TTL:g} s, TCG guests on a 2-core machine.")
    print(f"{'':<44} {'BMC power fencing':>20} {'Ceph fence only':>20}")
    rows = (("HA canary writing again from a new copy", 0),
            ("its old host off before that write, by", 1))
    for label, column in rows:
        cells = []
        for mode in MODES:
            values = [r[column] for r in results[mode]]
            cells.append("still on" if values and all(v is None for v in values)
                         else spread(values))
        print(f"{label:<44} {cells[0]:>20} {cells[1]:>20}")


if __name__ == "__main__":
    try:
        main()
    except LabError as err:
        sys.exit(f"power_fencing: {err}")
