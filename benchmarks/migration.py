"""Benchmark the live-migration policy on the lab: a canary guest whose memory keeps
changing (`yasco.dirty=MB` on its kernel command line: MB of RAM rewritten over and
over), live-migrated back and forth between two hypervisors over a bandwidth-capped
link, with QEMU's defaults (the baseline) and with each policy `yasco_migration` can
set (docs/ha.md, "Live migration").

    make bench-migration    # or: .venv/bin/python benchmarks/migration.py [--runs 3]

Each run migrates the guest with the adapter the playbooks use
(yasco.cluster.libvirt_domain's), the modes taking turns, and reads libvirt's figures
of the completed job on the target: total time, the guest's pause at the switch-over,
memory sent, QEMU's passes over it and auto-converge's throttle. A migration that has
not ended by the completion timeout is cancelled, the guest still running where it
was. The canary's disk must show one writer throughout: checked at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import (  # noqa: E402
    libvirt as lv, libvirt_migration)
from provision import lab_status  # noqa: E402
from yasco_lab import storage  # noqa: E402
from yasco_lab.domain import canary_domain_xml, remove_everywhere  # noqa: E402
from yasco_lab.errors import LabError  # noqa: E402

# Each mode's policy; the first is the baseline. All share --bandwidth.
MODES = {
    "QEMU defaults": {},
    "auto-converge": {"auto_converge": True},
    "auto-converge + XBZRLE": {"auto_converge": True, "compressed": True},
    "post-copy after 5 s": {"post_copy_after": 5.0},
}


def canary_xml(lab: dict, name: str, dirty_mb: int, memory_mb: int) -> str:
    boot = lab["canary"]
    return canary_domain_xml(name, kernel=boot["kernel"], initrd=boot["initrd"],
                             cmdline=f"{boot['cmdline']} yasco.dirty={dirty_mb}",
                             virt_type=lab["virt_type"], memory_mb=memory_mb)


def wait_writing(name: str, at_least: int, give_up: float = 120.0) -> None:
    deadline = time.monotonic() + give_up
    while len(storage.canary_records(name)) < at_least:
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} wrote fewer than {at_least} records in {give_up:g} s")
        time.sleep(1)


def one_run(conns: dict, name: str, here: str, there: str, policy: dict,
            bandwidth: int, timeout: float) -> dict:
    """One migration from `here` to `there`: libvirt's figures, or {'error': why}."""
    dom = conns[here].lookupByName(name)
    rules = libvirt_migration.MigrationPolicy.from_options({**policy, "bandwidth": bandwidth})
    started = time.monotonic()
    try:
        dummy, figures = libvirt_migration.migrate_live(dom, conns[there], timeout, tls=True,
                                                        policy=rules)
    except lv.LibvirtAdapterError as err:
        return {"error": str(err), "wall_s": time.monotonic() - started}
    return {**figures, "wall_s": time.monotonic() - started}


def cell(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=3, help="migrations per mode")
    parser.add_argument("--bandwidth", type=int, default=8, help="MiB/s, every mode")
    parser.add_argument("--dirty", type=int, default=48, help="MB the guest keeps rewriting")
    parser.add_argument("--memory", type=int, default=160, help="the guest's MB")
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="completion timeout: cancelled after it")
    args = parser.parse_args()
    lab = lab_status()
    uris = {h["name"]: h["libvirt_uri"] for h in lab["hosts"]}
    name = f"bench-migration-{uuid.uuid4().hex[:6]}"
    storage.create_image(name)
    conns = {h: lv.connect(uris[h], 10.0) for h in ("hv1", "hv2")}
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    try:
        dom = lv.define(conns["hv1"], canary_xml(lab, name, args.dirty, args.memory), name)
        lv.start(dom)
        wait_writing(name, 5)
        time.sleep(5)  # the dirtying loop is well under way
        where = "hv1"
        for run in range(args.runs):
            for mode, policy in MODES.items():
                there = "hv2" if where == "hv1" else "hv1"
                outcome = one_run(conns, name, where, there, policy, args.bandwidth,
                                  args.timeout)
                if "error" not in outcome:
                    where = there
                results[mode].append(outcome)
                print(f"run {run + 1} {mode}: " + (
                    f"cancelled or failed after {outcome['wall_s']:.1f} s: {outcome['error']}"
                    if "error" in outcome else
                    f"{outcome['total_ms'] / 1000:.1f} s, paused "
                    f"{outcome.get('downtime_ms', '?')} ms, "
                    f"{outcome.get('memory_bytes', 0) / 2**20:.0f} MiB sent, "
                    f"{outcome.get('iterations', '?')} passes, throttle "
                    f"{outcome.get('throttle_percent', 0)} %"
                    + (", post-copy" if outcome["post_copy"] else "")), flush=True)
                time.sleep(2)
        records = storage.canary_records(name)
        writers = [r.writer for r in records]
        one_writer = len(set(writers)) == 1
    finally:
        remove_everywhere(conns.values(), name)
        storage.remove_image(name)

    print(f"\nA {args.memory} MB guest rewriting {args.dirty} MB of its memory without "
          f"pause, live-migrated {args.runs} times per mode between two lab hypervisors "
          f"over QEMU's TLS capped at {args.bandwidth} MiB/s, cancelled after "
          f"{args.timeout:g} s; median (min-max); TCG guests on a 2-core machine.")
    print(f"{'':<28}" + "".join(f"{mode:>26}" for mode in MODES))
    # libvirt keeps no figures of a migration that went post-copy but its time ("-").
    rows = (("total time (s)", "total_ms", 1 / 1000, 1),
            ("guest paused (ms)", "downtime_ms", 1, 0),
            ("memory sent (MiB)", "memory_bytes", 1 / 2**20, 0),
            ("most vCPU throttle (%)", "throttle_percent", 1, 0))
    done = {mode: [r for r in runs if "error" not in r] for mode, runs in results.items()}
    print(f"{'ended (of runs)':<28}" + "".join(
        f"{f'{len(done[m])}/{len(results[m])}':>26}" for m in MODES))
    for label, key, scale, digits in rows:
        print(f"{label:<28}" + "".join(f"{cell([r[key] * scale for r in done[m] if key in r], digits=digits):>26}"
                                       for m in MODES))
    print(f"{'went post-copy':<28}" + "".join(
        f"{sum(r['post_copy'] for r in done[m]):>26}" for m in MODES))
    base = [r["total_ms"] for r in results["QEMU defaults"] if "error" not in r]
    for mode in list(MODES)[1:]:
        done = [r["total_ms"] for r in results[mode] if "error" not in r]
        if base and done:
            print(f"total time, {mode} / QEMU defaults: "
                  f"{statistics.median(done) / statistics.median(base):.2f}")
    print(f"one writer on the canary's disk throughout: {'yes' if one_writer else 'NO'}")
    if not one_writer:
        sys.exit(1)


if __name__ == "__main__":
    try:
        main()
    except LabError as err:
        sys.exit(f"migration: {err}")
