"""The lab's etcd cluster: one member per hypervisor, as when etcd runs on each node.

A member's data directory lives with its host's disk, so a crashed host's member
rejoins with its data on `boot`, and a partitioned member loses quorum alone.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from .errors import LabError
from .layout import CLUSTER_NAME, HostLayout

# Lab network latency is sub-millisecond; these keep failure detection quick while
# leaving room for a loaded 2-core machine (election timeout 10x the heartbeat).
HEARTBEAT_MS = 100
ELECTION_TIMEOUT_MS = 1000


def member_command(host: HostLayout, cluster: list[HostLayout]) -> list[str]:
    """The etcd command line of `host`'s member. On a restart with existing data, etcd
    ignores the --initial-* flags and rejoins with the identity it has on disk."""
    initial = ",".join(f"{h.name}={h.etcd_peer_url}" for h in cluster)
    return [
        "etcd",
        "--name", host.name,
        "--data-dir", str(host.root / "etcd"),
        "--listen-client-urls", f"{host.etcd_client_url},http://127.0.0.1:2379",
        "--advertise-client-urls", host.etcd_client_url,
        "--listen-peer-urls", host.etcd_peer_url,
        "--initial-advertise-peer-urls", host.etcd_peer_url,
        "--initial-cluster", initial,
        "--initial-cluster-token", f"yasco-{CLUSTER_NAME}",
        "--initial-cluster-state", "new",
        "--heartbeat-interval", str(HEARTBEAT_MS),
        "--election-timeout", str(ELECTION_TIMEOUT_MS),
        "--logger", "zap",
    ]


def endpoint_health(client_url: str, timeout: float = 1.0) -> bool:
    """True when the member at `client_url` answers /health with health true."""
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=timeout) as reply:
            return json.loads(reply.read()).get("health") == "true"
    except (OSError, ValueError, urllib.error.URLError):
        return False


def wait_healthy(hosts: list[HostLayout], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(hosts)
    while time.monotonic() < deadline:
        pending = [h for h in pending if not endpoint_health(h.etcd_client_url)]
        if not pending:
            return
        time.sleep(0.2)
    names = ", ".join(h.name for h in pending)
    raise LabError(f"etcd members on {names} not healthy within {timeout:.0f} s; "
                   f"see {pending[0].root / 'log' / 'etcd.log'}")
