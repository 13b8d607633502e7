"""The lab's etcd cluster: one member per hypervisor, as when etcd runs on each node.

A member's data directory lives with its host's disk, so a crashed host's member
rejoins with its data on `boot`, and a partitioned member loses quorum alone. Client
and peer ports speak TLS and require a certificate, each from a CA of its own: the
client port the clients' CA, the peer port the peers' CA and the members' common name
(credentials.py). Authentication is on, with YASCO's roles.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access

from . import credentials
from .errors import LabError
from .layout import CLUSTER_NAME, HostLayout

ETCDCTL = "/usr/bin/etcdctl"

# Lab network latency is sub-millisecond; these keep failure detection quick while
# leaving room for a loaded 2-core machine (election timeout 10x the heartbeat).
HEARTBEAT_MS = 100
ELECTION_TIMEOUT_MS = 1000

# Housekeeping, as docs/production.md sets it: the agents rewrite their liveness keys
# twice a second, and etcd keeps every revision until it is compacted. History older
# than five minutes goes (a watcher that was cut off for longer reads everything
# again), and the quota, etcd's default, is written out to be seen.
COMPACTION_RETENTION = "5m"
QUOTA_BYTES = 2 * 1024 ** 3


def housekeeping_flags(retention: str = COMPACTION_RETENTION,
                       quota_bytes: int = QUOTA_BYTES) -> list[str]:
    """The etcd flags that keep its database bounded."""
    return ["--auto-compaction-mode", "periodic", "--auto-compaction-retention", retention,
            "--quota-backend-bytes", str(quota_bytes)]


def member_command(host: HostLayout, cluster: list[HostLayout]) -> list[str]:
    """The etcd command line of `host`'s member. On a restart with existing data, etcd
    ignores the --initial-* flags and rejoins with the identity it has on disk."""
    initial = ",".join(f"{h.name}={h.etcd_peer_url}" for h in cluster)
    member, peer = credentials.etcd_member(host), credentials.etcd_peer(host)
    return [
        "etcd",
        "--name", host.name,
        "--data-dir", str(host.root / "etcd"),
        "--listen-client-urls", host.etcd_client_url,
        "--advertise-client-urls", host.etcd_client_url,
        "--listen-peer-urls", host.etcd_peer_url,
        "--initial-advertise-peer-urls", host.etcd_peer_url,
        "--initial-cluster", initial,
        "--initial-cluster-token", f"yasco-{CLUSTER_NAME}",
        "--initial-cluster-state", "new",
        "--heartbeat-interval", str(HEARTBEAT_MS),
        "--election-timeout", str(ELECTION_TIMEOUT_MS),
        "--logger", "zap",
        "--cert-file", str(member.cert), "--key-file", str(member.key),
        "--client-cert-auth", "--trusted-ca-file", str(credentials.ca().cert),
        # As docs/production.md sets them: the peer port admits a certificate of the
        # peers' CA carrying the members' common name, never a client's, since raft
        # applies what comes in there without authentication.
        "--peer-cert-file", str(peer.cert), "--peer-key-file", str(peer.key),
        "--peer-client-cert-auth", "--peer-trusted-ca-file", str(credentials.peer_ca().cert),
        "--peer-cert-allowed-cn", credentials.PEER_CN,
        *housekeeping_flags(),
    ]


def tls_context() -> ssl.SSLContext:
    """What the lab's own requests to etcd present: root's client certificate."""
    context = ssl.create_default_context(cafile=str(credentials.ca().cert))
    root = credentials.EtcdUser(credentials.ROOT_USER).certificate
    context.load_cert_chain(str(root.cert), str(root.key))
    return context


def endpoint_health(client_url: str, timeout: float = 1.0) -> bool:
    """True when the member at `client_url` answers /health with health true."""
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=timeout,
                                    context=tls_context()) as reply:
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


def users(hosts: list[HostLayout]) -> list[str]:
    """The etcd users of a lab of `hosts`, besides root."""
    return list(etcd_access.roles([h.name for h in hosts], CLUSTER_NAME))


def enable_access(hosts: list[HostLayout]) -> None:
    """Create YASCO's roles and users, each with its password, then turn
    authentication on: from then on every request needs a user."""
    passwords = {user: credentials.EtcdUser(user).password()
                 for user in [credentials.ROOT_USER, *users(hosts)]}
    secrets = list(passwords.values())
    _etcdctl(hosts, "user", "add", f"root:{passwords['root']}", "--interactive=false",
             secrets=secrets)
    _etcdctl(hosts, "user", "grant-role", "root", "root")
    for command in etcd_access.etcdctl_commands([h.name for h in hosts], CLUSTER_NAME,
                                                passwords):
        _etcdctl(hosts, *command, secrets=secrets)
    _etcdctl(hosts, "auth", "enable")


def _etcdctl(hosts: list[HostLayout], *args: str, secrets: list[str] | None = None) -> None:
    """etcdctl as root's certificate (before authentication is on, no user is needed).
    The passwords among `args`, `secrets`, never reach an error message."""
    root = credentials.EtcdUser(credentials.ROOT_USER).certificate
    command = [ETCDCTL, "--endpoints", ",".join(h.etcd_client_url for h in hosts),
               "--cacert", str(credentials.ca().cert), "--cert", str(root.cert),
               "--key", str(root.key), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False,
                          env={**os.environ, "ETCDCTL_API": "3"})
    if done.returncode != 0:
        shown = " ".join(args)
        output = (done.stderr or done.stdout).strip()[-300:]
        for secret in secrets or []:
            shown, output = shown.replace(secret, "********"), output.replace(secret, "********")
        raise LabError(f"etcd: `etcdctl {shown}` failed: {output}")
