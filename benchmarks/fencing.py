"""Benchmark the hardware watchdog under the self-fence: a hung agent (SIGSTOP, at a
random moment of its keepalive cycle) and a killed one (SIGKILL), each with the
watchdog armed and, the baseline, without it (the agent as it was before).

    make bench-fencing    # or: .venv/bin/python benchmarks/fencing.py [--runs 100]

Each run starts the agent as an operator runs it (roles/agent/files/yasco_agent.py)
against a real single-member etcd of its own, on libvirt's test driver, with its
watchdog device a FIFO read by the lab's watchdog emulator (lab/yasco_lab/watchdog.py):
the time it fires is when a real one resets the host. The lead is the time from that
reset to the moment the agent's liveness key is seen gone, its lease expired, polled
every 20 ms: a positive lead means nothing could start the host's HA VMs elsewhere
before the host was down. Without the watchdog nothing resets a hung host at all.
The agent's ttl and margin are the product's defaults (5 s, 1.5 s), with the
watchdog's longest timeout (3 s): the design's bound is a lead of at least margin / 2.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "lab"))

# pylint: disable=wrong-import-position
from yasco_lab.watchdog import Watchdog  # noqa: E402

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import (  # noqa: E402
    etcd_errors, etcd_keys)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (  # noqa: E402
    EtcdClient)

TTL, MARGIN, TIMEOUT = 5.0, 1.5, 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_etcd(root: Path) -> tuple[subprocess.Popen, str]:
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        ["/usr/bin/etcd", "--name", "bench", "--data-dir", str(root / "etcd"),
         "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", f"bench={peer}", "--log-level", "error", "--logger", "zap"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    etcd = EtcdClient([client], timeout=1)
    deadline = time.monotonic() + 20
    while True:
        try:
            etcd.get("/probe")
            return process, client
        except Exception:  # pylint: disable=broad-except  # not serving yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            etcd.close()


def one_run(root: Path, endpoint: str, how: int, armed: bool, number: int) -> float | None:
    """The lead of the reset over the lease's expiry, in seconds, or None for a host
    never reset."""
    fifo = root / f"watchdog-{number}"
    os.mkfifo(fifo, 0o600)
    dog, done, fired = Watchdog(str(fifo), TIMEOUT), threading.Event(), []
    threading.Thread(target=lambda: dog.run(stop=done.is_set) and fired.append(
        time.monotonic()), daemon=True).start()
    cluster = f"b{number}"
    config = root / f"agent-{number}.yml"
    config.write_text(json.dumps({
        "host": "hv1", "cluster": cluster, "endpoints": [endpoint], "ttl": TTL,
        "margin": MARGIN, "libvirt_uri": "test:///default", "address": "127.0.0.1",
        **({"watchdog_device": str(fifo), "watchdog_timeout": TIMEOUT} if armed else {})}))
    agent = subprocess.Popen(
        [sys.executable, str(ROOT / "roles" / "agent" / "files" / "yasco_agent.py"),
         "--config", str(config), "--log-level", "WARNING"],
        env={**os.environ, "YASCO_AGENT_LIB": str(ROOT / "collections")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    etcd = EtcdClient([endpoint], timeout=1)
    key = etcd_keys.alive_key("hv1", cluster=cluster)
    try:
        deadline = time.monotonic() + 15
        while etcd.get(key) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the agent did not register")
            time.sleep(0.05)
        time.sleep(1 + random.random())  # anywhere in the keepalive cycle
        agent.send_signal(how)
        while etcd.get(key) is not None:
            time.sleep(0.02)
        expired = time.monotonic()
        time.sleep(TIMEOUT + 0.5 if not fired else 0)  # a reset that comes later still
        return expired - fired[0] if fired else None
    finally:
        done.set()
        agent.send_signal(signal.SIGCONT)
        agent.kill()
        agent.wait()
        etcd.delete_prefix(etcd_keys.cluster_prefix(cluster=cluster))
        etcd.close()


def summary(leads: list[float | None]) -> tuple[str, str, str, str]:
    reset = [lead for lead in leads if lead is not None]
    if not reset:
        return "never", "-", "-", "0 %"
    ahead = sum(lead >= MARGIN / 2 for lead in reset)
    never = len(leads) - len(reset)
    return (f"{len(reset)}/{len(leads)}" + (f" ({never} never)" if never else ""),
            f"{statistics.median(reset):.2f}", f"{min(reset):.2f}",
            f"{100 * ahead / len(leads):.0f} %")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=100,
                        help="runs per fault with the watchdog (default 100)")
    parser.add_argument("--baseline-runs", type=int, default=5,
                        help="runs per fault without it (default 5)")
    args = parser.parse_args()
    # Its own throwaway etcd has neither TLS nor users: the lab-only switch, for this
    # process and the agents it starts.
    os.environ[etcd_errors.ALLOW_INSECURE] = "1"
    root = Path(tempfile.mkdtemp(prefix="yasco-bench-fencing-"))
    process, endpoint = start_etcd(root)
    rows = []
    try:
        number = 0
        for name, how in (("agent hung (SIGSTOP)", signal.SIGSTOP),
                          ("agent killed (SIGKILL)", signal.SIGKILL)):
            for armed, runs in ((True, args.runs), (False, args.baseline_runs)):
                leads = []
                for dummy in range(runs):
                    number += 1
                    leads.append(one_run(root, endpoint, how, armed, number))
                rows.append((name, "watchdog" if armed else "none (before)",
                             *summary(leads)))
                print(f"  {rows[-1][0]}, {rows[-1][1]}: done", file=sys.stderr)
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(root, ignore_errors=True)
    header = ("fault", "layer under the self-fence", "host reset", "median lead s",
              "worst lead s", f"lead >= margin/2 ({MARGIN / 2} s)")
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    print(f"\nttl {TTL} s, margin {MARGIN} s, watchdog timeout {TIMEOUT} s; lead = lease seen "
          "expired - host reset")
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
