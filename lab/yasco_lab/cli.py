"""`yasco-lab`: the command line of the lab."""

from __future__ import annotations

import argparse
import json
import sys

from . import chaos, lab
from .errors import LabError


def _print_status(info: dict) -> None:
    if not info["up"]:
        print("the lab is not up: run `yasco-lab up`")
        return
    print(f"{'host':<6} {'address':<14} {'state':<12} {'etcd':<12} libvirt URI")
    for h in info["hosts"]:
        print(f"{h['name']:<6} {h['address']:<14} {h['state']:<12} {h['etcd']:<12} "
              f"{h['libvirt_uri']}")
    ceph = info["ceph"]
    print(f"ceph   {ceph['address']:<14} {ceph['health']:<12} pool {ceph['pool']}, "
          f"conf {ceph['conf']}")
    if info.get("prometheus"):
        print(f"metrics at {info['prometheus']} (Prometheus: agents, HA watcher, alerts)")
    print(f"guests run under {info['virt_type']}; inventory {info['inventory']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="yasco-lab",
        description="A real etcd + Ceph + libvirt/QEMU cluster of hypervisors on this machine.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    p_up = verbs.add_parser("up", help="create the lab and write inventories/lab/")
    p_up.add_argument("--hosts", type=int, default=3, metavar="N",
                      help="number of hypervisors (default 3)")
    verbs.add_parser("down", help="stop everything and remove the lab")
    p_status = verbs.add_parser("status", help="show hosts, etcd and Ceph")
    p_status.add_argument("--json", action="store_true", help="machine-readable output")
    for verb, text in (("crash", "power loss: SIGKILL every process of HOST"),
                       ("boot", "start a crashed HOST again, like a reboot"),
                       ("reboot", "a clean reboot of HOST: agent stopped, guests shut "
                                  "down, host restarted"),
                       ("shutdown", "a clean poweroff of HOST: agent stopped, guests shut "
                                    "down, host off"),
                       ("partition", "cut HOST's network; everything on it keeps running"),
                       ("heal", "restore HOST's network")):
        p_verb = verbs.add_parser(verb, help=text)
        p_verb.add_argument("host", metavar="HOST")
        if verb == "partition":
            p_verb.add_argument("--from", dest="only", choices=lab.PARTITIONS,
                                default="all", help="cut everything (all, the default), "
                                "only Ceph's monitors and OSDs (ceph): etcd answers, or "
                                "only the other hosts and their etcd members (etcd): Ceph "
                                "answers")
    p_chaos = verbs.add_parser("chaos", help="a fresh lab with canaries and two HA "
                               "watchers, then seeded random faults, judged by "
                               "invariants (docs/lab.md)")
    p_chaos.add_argument("--seed", type=int, help="the schedule's seed (default: random, "
                         "printed)")
    p_chaos.add_argument("--episodes", type=int, default=12, metavar="N",
                         help="fault episodes to draw (default 12)")
    p_chaos.add_argument("--schedule", metavar="FILE",
                         help="replay the schedule a run saved (its JSON)")
    p_chaos.add_argument("--converge", type=float, default=180.0, metavar="SECONDS",
                         help="how long the cluster may take to converge after each "
                              "episode (default 180)")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress shows up in logs as it happens
    try:
        lab.require_root()
        if args.verb == "up":
            lab.up(args.hosts)
            _print_status(lab.status())
        elif args.verb == "down":
            lab.down()
        elif args.verb == "status":
            info = lab.status()
            if args.json:
                print(json.dumps(info, indent=2))
            else:
                _print_status(info)
        elif args.verb == "chaos":
            return chaos.main(args.seed, args.episodes, args.schedule, args.converge)
        elif args.verb == "partition":
            lab.partition(args.host, args.only)
            print(f"{args.host}: partition from {args.only} done")
        else:
            getattr(lab, args.verb)(args.host)
            print(f"{args.host}: {args.verb} done")
    except (LabError, chaos.ChaosError) as err:
        print(f"yasco-lab: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("yasco-lab: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
