"""The lab's Ceph cluster: one monitor and one memstore OSD in their own node.

memstore keeps objects in RAM, so the cluster starts in seconds and needs no disk;
it lives in its own network namespace so that partitioning a hypervisor also cuts
it off from storage. cephx is on, as in production, with a user per role
(CEPH_CAPS). Only the lab itself uses client.admin, to build the cluster.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

from ansible_collections.yasco.cluster.plugins.module_utils.agent import agent_restart

from . import pki
from .errors import LabError
from .layout import (CEPH_FENCE_CLIENT, CEPH_HYPERVISOR_CLIENT, CEPH_MON_PORT, CEPH_POOL,
                     CEPH_PROVISION_CLIENT, HostLayout, ceph_address,
                     ceph_admin_keyring_path, ceph_conf_path, ceph_dir, ceph_keyring_path)
from .node import Node

MEMSTORE_BYTES = 1 << 30

# What each cephx user may do. The hypervisors' QEMU and the provisioning read the
# maps and use images in the VM pool, nothing more: `mon 'profile rbd'` would also let
# them blocklist (a whole host's address, even), which only the fencer may. So a
# hypervisor cannot take over the disk lock of a client that died holding it; the
# evacuation's fencer breaks such locks, after blocklisting the dead client's host.
# Each host's agent has a user of its own, which may blocklist its own host's client
# instances, one at a time, and nothing else (agent_restart.ceph_caps): it restarts
# in place a VM whose QEMU died there.
_RBD_POOL = f"profile rbd pool={CEPH_POOL}"
CEPH_CAPS = {
    CEPH_HYPERVISOR_CLIENT: ("mon", "allow r", "osd", _RBD_POOL),
    CEPH_PROVISION_CLIENT: ("mon", "allow r", "osd", _RBD_POOL),
    # Blocklist entries (add, rm, ls), and breaking the fenced clients' image locks.
    CEPH_FENCE_CLIENT: ("mon", 'allow r, allow command "osd blocklist", '
                               'allow command "osd blocklist ls"', "osd", _RBD_POOL),
}
PG_NUM = 8


def agent_users(hosts: list[HostLayout]) -> dict[str, tuple[str, ...]]:
    """Each host's agent's cephx user and its caps."""
    return {agent_restart.ceph_user(h.name): agent_restart.ceph_caps([h.address], CEPH_POOL)
            for h in hosts}


def mon_host() -> str:
    return f"[v2:{ceph_address()}:3300,v1:{ceph_address()}:{CEPH_MON_PORT}]"


def client_conf(fsid: str, keyring: Path | str, give_up: bool = True) -> str:
    """ceph.conf for a client: the controller, whose tools give up when the cluster is
    out of reach (`give_up`), or a hypervisor with its own keyring, whose QEMUs must
    not: an I/O that gives up after a few seconds fails in the guest (EIO; a
    filesystem turns read-only), while one that waits carries on once a partition
    heals. What stops a fenced host's writes is its blocklist entry, not a timeout."""
    timeouts = """# Clients give up quickly when the cluster is unreachable (a partitioned host).
client_mount_timeout = 10
rados_mon_op_timeout = 10
rados_osd_op_timeout = 10
""" if give_up else ""
    return f"""[global]
fsid = {fsid}
mon_host = {mon_host()}
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
keyring = {keyring}
{timeouts}"""


def _daemon_conf(fsid: str, root: Path) -> str:
    return f"""[global]
fsid = {fsid}
mon_host = {mon_host()}
public_network = {ceph_address()}/32
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
ms_bind_ipv4 = true
ms_bind_ipv6 = false
run_dir = {root}/run
log_file = {root}/log/$name.log
admin_socket = {root}/run/$cluster-$name.asok
# One OSD: single-replica pools are intended, not a warning.
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = {PG_NUM}
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
# The monitor's store shares this machine's disk; only warn when it is really full.
mon_data_avail_warn = 2
mon_data_avail_crit = 1

[mon]
mon_data = {root}/mon/$cluster-$id
mon_initial_members = a
# A fence's blocklist entry waits for the monitor's next OSD map, proposed up to
# this long after the last commit (1 s by default): a fence is worth the extra maps.
paxos_propose_interval = 0.2

[osd]
osd_objectstore = memstore
memstore_device_bytes = {MEMSTORE_BYTES}
osd_data = {root}/osd/$cluster-$id
keyring = {root}/osd/$cluster-$id/keyring
"""


class CephBootstrap:
    """Creates the cluster inside `node` and writes the controller's and hypervisors' keys."""

    def __init__(self, node: Node, hosts: list[HostLayout]) -> None:
        self.node = node
        self.hosts = hosts
        self.root = ceph_dir()
        # The file must be named ceph.conf: Ceph takes the cluster name from it.
        self.daemon_conf = self.root / "daemon" / "ceph.conf"
        self.fsid = str(uuid.uuid4())

    def run(self) -> str:
        """Bootstrap and return the fsid."""
        for sub in ("run", "log", "mon", "osd/ceph-0", "daemon"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.daemon_conf.write_text(_daemon_conf(self.fsid, self.root))
        ceph_conf_path().write_text(client_conf(self.fsid, ceph_admin_keyring_path()))
        self._make_monitor()
        self._make_osd()
        self._make_pool_and_users()
        return self.fsid

    def _tool(self, *args: str) -> str:
        result = subprocess.run(list(args), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LabError(f"ceph bootstrap: `{' '.join(args)}` failed: {result.stderr.strip()}")
        return result.stdout

    def _make_monitor(self) -> None:
        mon_keyring = self.root / "mon.keyring"
        admin = ceph_admin_keyring_path()
        self._tool("ceph-authtool", "--create-keyring", str(mon_keyring), "--gen-key",
                   "-n", "mon.", "--cap", "mon", "allow *")
        self._tool("ceph-authtool", "--create-keyring", str(admin), "--gen-key",
                   "-n", "client.admin", "--cap", "mon", "allow *", "--cap", "osd", "allow *",
                   "--cap", "mgr", "allow *", "--cap", "mds", "allow *")
        self._tool("ceph-authtool", str(mon_keyring), "--import-keyring", str(admin))
        monmap = self.root / "monmap"
        self._tool("monmaptool", "--create", "--fsid", self.fsid,
                   "--addv", "a", mon_host(), str(monmap))
        # Daemon-side steps run inside the node: they check that public_network is local.
        self.node.run("ceph-mon", "-c", str(self.daemon_conf), "--mkfs", "-i", "a",
                      "--monmap", str(monmap), "--keyring", str(mon_keyring))
        self.node.start_daemon("ceph-mon", "-f", "-c", str(self.daemon_conf), "-i", "a",
                               log=self.root / "log" / "mon.a.out")
        self.wait_ready(timeout=30)

    def _make_osd(self) -> None:
        osd_uuid = str(uuid.uuid4())
        osd_id = self.ceph("osd", "create", osd_uuid).strip()
        if osd_id != "0":
            raise LabError(f"ceph bootstrap: expected OSD id 0, got {osd_id!r}")
        self.node.run("ceph-osd", "-c", str(self.daemon_conf), "-i", "0", "--mkfs", "--mkkey",
                      "--osd-uuid", osd_uuid, "--no-mon-config")
        self.ceph("auth", "add", "osd.0", "osd", "allow *", "mon", "allow profile osd",
                  "-i", str(self.root / "osd" / "ceph-0" / "keyring"))
        self.node.start_daemon("ceph-osd", "-f", "-c", str(self.daemon_conf), "-i", "0",
                               log=self.root / "log" / "osd.0.out")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stat = json.loads(self.ceph("osd", "stat", "--format", "json"))
            if stat.get("num_up_osds") == 1 and stat.get("num_in_osds") == 1:
                return
            time.sleep(0.5)
        raise LabError(f"ceph: the OSD did not come up within 60 s; see {self.root}/log")

    def _make_pool_and_users(self) -> None:
        self.ceph("osd", "pool", "create", CEPH_POOL, str(PG_NUM))
        self.ceph("osd", "pool", "set", CEPH_POOL, "size", "1", "--yes-i-really-mean-it")
        self._tool("rbd", "-c", str(ceph_conf_path()), "pool", "init", CEPH_POOL)
        for client, caps in {**CEPH_CAPS, **agent_users(self.hosts)}.items():
            pki.write_private(ceph_keyring_path(client),
                              self.ceph("auth", "get-or-create", f"client.{client}", *caps))

    def ceph(self, *args: str, timeout: float = 30) -> str:
        return ceph_cli(*args, timeout=timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                ceph_cli("mon", "stat", timeout=5)
                return
            except LabError as err:
                last = str(err)
                time.sleep(0.5)
        raise LabError(f"ceph: the monitor did not answer within {timeout:.0f} s: {last}")


def ceph_cli(*args: str, timeout: float = 30) -> str:
    """Run the `ceph` CLI as client.admin from the controller."""
    try:
        result = subprocess.run(["ceph", "-c", str(ceph_conf_path()),
                                 "--connect-timeout", str(int(timeout)), *args],
                                capture_output=True, text=True, timeout=timeout + 5,
                                check=False)
    except subprocess.TimeoutExpired as err:
        raise LabError(f"`ceph {' '.join(args)}` timed out") from err
    if result.returncode != 0:
        raise LabError(f"`ceph {' '.join(args)}` failed: {result.stderr.strip()[-300:]}")
    return result.stdout


def secret_key(keyring: Path) -> str:
    """The base64 cephx key from a keyring file."""
    for line in keyring.read_text().splitlines():
        name, dummy, value = line.partition("=")
        if name.strip() == "key":
            return value.strip()
    raise LabError(f"no key in {keyring}")


def health() -> dict:
    return json.loads(ceph_cli("health", "--format", "json", timeout=10))
