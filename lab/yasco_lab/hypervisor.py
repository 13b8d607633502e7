"""A lab hypervisor: libvirtd + QEMU, an etcd member and sshd inside one node.

Each host sees its own /etc/libvirt, /var/lib/libvirt, /var/log/libvirt, /etc/ceph,
/root and /root/.ssh (bind mounts of its directory under the lab's state dir, kept across
a crash like a disk) and a fresh /run and /tmp on every boot, like a reboot.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path

from ansible_collections.yasco.cluster.plugins.module_utils.agent import agent_restart
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access

from . import credentials, etcd, pki, prometheus, watchdog
from .ceph import client_conf, secret_key
from .errors import LabError
from .layout import (CEPH_HYPERVISOR_CLIENT, CEPH_POOL, CEPH_SECRET_UUID, CLUSTER_NAME,
                     HostLayout, ceph_hypervisor_keyring_path, ceph_keyring_path,
                     known_hosts_path, ssh_key_path)
from .node import Node

# (directory under the host's root, where the host sees it)
_PRIVATE_DIRS = [
    ("etc-libvirt", "/etc/libvirt"),
    ("var-lib-libvirt", "/var/lib/libvirt"),
    ("var-cache-libvirt", "/var/cache/libvirt"),
    ("log", "/var/log/libvirt"),
    ("etc-ceph", "/etc/ceph"),
    # A home of its own, as a machine has: an SSH login to the host runs none of the
    # controller's shell start-up files, nor waits on their locks.
    ("root-home", "/root"),
    ("root-ssh", "/root/.ssh"),
]

# The guests run at a lower CPU priority than everything else of the lab (etcd, Ceph,
# libvirtd, the agents, the controller), as a real hypervisor reserves CPU for its
# own services (yasco_reserved): the machine's few cores are shared by every host,
# and emulated guests booting would otherwise starve the control plane whose speed
# the lab tests. libvirt runs the QEMU it finds at the usual path, so the host's
# view of that path is a wrapper that starts the real one under nice.
_QEMU = "/usr/bin/qemu-system-x86_64"
# QEMU finds its firmware and modules from its binary's path (../share, ../lib), so
# the real binary sits in a tree that leads there.
_QEMU_TREE = "/run/yasco-lab-qemu"
_QEMU_REAL = f"{_QEMU_TREE}/bin/qemu-system-x86_64"
_GUEST_NICE = 10
_QEMU_WRAPPER = f"""#!/bin/sh
exec nice -n {_GUEST_NICE} {_QEMU_REAL} "$@"
"""

# The agent runs from this checkout with the lab's Python, as the role
# yasco.cluster.agent runs it from its installed copy.
_REPO = Path(__file__).resolve().parents[2]

_HOST_UUID_NAMESPACE = uuid.UUID("0c1f6a52-5e0e-4d55-b6a4-9b6e1c0a7a10")


def prepare(host: HostLayout, cluster_fsid: str) -> None:
    """Write the host's configuration, once, before its first boot."""
    for sub, dummy in _PRIVATE_DIRS:
        (host.root / sub).mkdir(parents=True, exist_ok=True)
    (host.root / "log" / "qemu").mkdir(exist_ok=True)  # domain logs and serial consoles
    _write_libvirt_conf(host)
    _write_ceph_conf(host, cluster_fsid)
    _write_ssh_conf(host)


def _write_libvirt_conf(host: HostLayout) -> None:
    etc = host.root / "etc-libvirt"
    # Two libvirtds with one host UUID refuse to migrate to each other ("same host").
    host_uuid = uuid.uuid5(_HOST_UUID_NAMESPACE, host.name)
    (etc / "libvirtd.conf").write_text(f"""host_uuid = "{host_uuid}"
unix_sock_group = "root"
unix_sock_rw_perms = "0770"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
""")
    # The lab runs QEMU as root without cgroups or a private /dev: the host is already
    # a namespace of its own, and the machine may not delegate cgroups to it.
    (etc / "qemu.conf").write_text(f"""user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
migration_address = "{host.address}"
migration_host = "{host.address}"
stdio_handler = "file"
# Live migrations run over TLS only, each end checking the other's certificate.
migrate_tls_x509_cert_dir = "/etc/libvirt/pki/qemu"
migrate_tls_x509_verify = 1
migrate_tls_force = 1
""")
    _install_migration_certificates(host, etc / "pki" / "qemu")
    (etc / "virtlogd.conf").write_text('log_outputs = "3:file:/var/log/libvirt/virtlogd.log"\n')


def _install_migration_certificates(host: HostLayout, directory: Path) -> None:
    """QEMU's TLS files, by the names it looks for: the host's certificate serves
    incoming migrations and identifies it on outgoing ones."""
    directory.mkdir(parents=True, exist_ok=True)
    mine = credentials.qemu_certificate(host)
    for source, name in ((credentials.qemu_ca().cert, "ca-cert.pem"),
                         (mine.cert, "server-cert.pem"), (mine.key, "server-key.pem"),
                         (mine.cert, "client-cert.pem"), (mine.key, "client-key.pem")):
        if name.endswith("key.pem"):
            pki.write_private(directory / name, source.read_text())
        else:
            shutil.copyfile(source, directory / name)


def _write_ceph_conf(host: HostLayout, fsid: str) -> None:
    etc = host.root / "etc-ceph"
    keyring = etc / f"ceph.client.{CEPH_HYPERVISOR_CLIENT}.keyring"
    pki.write_private(keyring, ceph_hypervisor_keyring_path().read_text())
    # The agent's own user: its storage probe, and its restarts in place.
    agent = agent_restart.ceph_user(host.name)
    pki.write_private(etc / f"ceph.client.{agent}.keyring",
                      ceph_keyring_path(agent).read_text())
    (etc / "ceph.conf").write_text(client_conf(fsid, f"/etc/ceph/{keyring.name}",
                                               give_up=False))


def _write_ssh_conf(host: HostLayout) -> None:
    dot_ssh = host.root / "root-ssh"
    dot_ssh.chmod(0o700)
    public = ssh_key_path().with_suffix(".pub").read_text()
    (dot_ssh / "authorized_keys").write_text(public)
    (dot_ssh / "authorized_keys").chmod(0o600)
    # Hypervisors reach each other with the lab key, as for peer-to-peer migration.
    shutil.copyfile(ssh_key_path(), dot_ssh / "id_ed25519")
    (dot_ssh / "id_ed25519").chmod(0o600)
    shutil.copyfile(known_hosts_path(), dot_ssh / "known_hosts")
    (host.root / "sshd_config").write_text(f"""ListenAddress {host.address}
HostKey {host.ssh_host_key}
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile /root/.ssh/authorized_keys
Subsystem sftp /usr/lib/openssh/sftp-server
""")


def boot(node: Node, host: HostLayout, cluster: list[HostLayout], agent: bool = True) -> None:
    """Mount the host's private directories and start its services (not waiting); its
    agent too unless `agent` is False (`up` starts the agents once etcd's
    authentication is on: an agent refuses an etcd without it)."""
    mounts = "\n".join(f"mkdir -p {target} && mount --bind {host.root / sub} {target}"
                       for sub, target in _PRIVATE_DIRS)
    # The agent runs from this checkout; one under /tmp, /run or /root (a CI clone) would be
    # hidden by the fresh ones, so it is set aside first and put back on top.
    stash, keep, restore = host.root / "checkout", "", ""
    if any(_REPO.is_relative_to(hidden) for hidden in ("/tmp", "/run", "/root")):
        keep = f"mkdir -p {stash} && mount --bind {_REPO} {stash}"
        restore = f"mkdir -p {_REPO} && mount --bind {stash} {_REPO}"
    wrapper = host.root / "qemu-system-x86_64"
    wrapper.write_text(_QEMU_WRAPPER)
    wrapper.chmod(0o755)
    # Every boot is a new boot to what runs on the host, as on a machine of its own:
    # its agent registers the boot id, and a return home tells a reboot from a host
    # that was only cut off.
    boot_id = host.root / "boot_id"
    boot_id.write_text(f"{uuid.uuid4()}\n")
    node.run("sh", "-ec", f"""
        {keep}
        mount -t tmpfs -o mode=0755 tmpfs /run
        mount -t tmpfs -o mode=1777 tmpfs /tmp
        mkdir -p /run/sshd /run/lock
        mkfifo -m 0600 {watchdog.WATCHDOG_PATH}
        {mounts}
        {restore}
        mkdir -p {_QEMU_TREE}/bin
        ln -s /usr/share {_QEMU_TREE}/share
        ln -s /usr/lib {_QEMU_TREE}/lib
        touch {_QEMU_REAL}
        mount --bind {_QEMU} {_QEMU_REAL}
        mount --bind {wrapper} {_QEMU}
        mount --bind {boot_id} /proc/sys/kernel/random/boot_id
    """)
    logs = host.root / "log"
    node.start_daemon(*etcd.member_command(host, cluster), log=logs / "etcd.log")
    node.start_daemon("virtlogd", log=logs / "virtlogd.out")
    node.start_daemon("libvirtd", log=logs / "libvirtd.out")
    node.start_daemon("/usr/sbin/sshd", "-D", "-e", "-f", str(host.root / "sshd_config"),
                      log=logs / "sshd.log")
    if agent:
        start_agent(node, host, cluster)


# Longer than the product's 5 s: an etcd election on this two-core machine, loaded by
# the test run, can outlast 5 - 1.5 s and make a healthy agent self-fence.
AGENT_TTL = 8.0
AGENT_MARGIN = 1.5
# Below the product's 30 s, to keep the lab's tests short; above a probe's interval
# and timeout twice over, so that one slow answer on this loaded machine fences nothing.
AGENT_STORAGE_GRACE = 15.0
# How long a graceful stop may take before SIGKILL, as the role's TimeoutStopSec gives
# it: the HA guests' shutdown (3 s here), 20 s, and with shutdown_policy migrate the
# migrations' wait (the lab's tests set up to 150 s).
AGENT_STOP_TIMEOUT = 200


def agent_config_path(host: HostLayout) -> Path:
    return host.root / "agent.yml"


def agent_log_path(host: HostLayout) -> Path:
    return host.root / "log" / "agent.log"


def _agent_command(host: HostLayout) -> list[str]:
    return ["env", f"YASCO_AGENT_LIB={_REPO / 'collections'}", sys.executable,
            str(_REPO / "roles" / "agent" / "files" / "yasco_agent.py"),
            "--config", str(agent_config_path(host))]


def agent_service_commands(host: HostLayout) -> dict[str, str]:
    """Shell commands that start and stop the host's agent when run on the host (over
    SSH), as `systemctl start|stop yasco-agent` does on a real one: the lab has no
    systemd. A stop is graceful (SIGTERM): the agent marks maintenance first."""
    command = _agent_command(host)
    # The script and its configuration, to the end of the command line: whichever
    # interpreter path started it (the venv's python or python3.11).
    agent = shlex.quote(" " + shlex.join(command[3:]) + "$")
    log = shlex.quote(str(agent_log_path(host)))
    return {"start": f"setsid -f {shlex.join(command)} >> {log} 2>&1 < /dev/null",
            # Then SIGKILL once systemd's TimeoutStopSec would be over, and say so.
            "stop": f"pkill -TERM -f {agent}; t=0; "
                    f"while pgrep -f {agent} >/dev/null; do "
                    f"if [ $t -ge {AGENT_STOP_TIMEOUT * 5} ]; then "
                    f"echo 'yasco-agent did not stop within {AGENT_STOP_TIMEOUT} s: killed;"
                    f" its log ends:' >&2; tail -n 30 {log} >&2; "
                    f"pkill -KILL -f {agent}; exit 1; fi; "
                    "t=$((t + 1)); sleep 0.2; done",
            # A crash of the agent's, as systemd would restart it after.
            "kill": f"pkill -KILL -f {agent}; "
                    f"while pgrep -f {agent} >/dev/null; do sleep 0.1; done"}


def start_agent(node: Node, host: HostLayout, cluster: list[HostLayout], *,
                with_watchdog: bool = False, storage_probe: bool = True, **settings) -> None:
    """Write the host's agent configuration and start the agent (not waiting); with
    the host's emulated hardware watchdog armed if asked. The lab's agents run without
    it unless a test asks: a lab host reset whenever its agent stalls on this loaded
    machine would make every test a watchdog test. Without `storage_probe`, the agent
    is as it was before it had one, and restarts nothing in place (a benchmark's
    baseline); `settings` of its configuration go over the lab's."""
    agent = agent_restart.ceph_user(host.name)
    others = [h.etcd_client_url for h in cluster if h.name != host.name]
    user = credentials.EtcdUser(etcd_access.agent_role(host.name))
    config = {"host": host.name, "cluster": CLUSTER_NAME, "ttl": AGENT_TTL,
              "margin": AGENT_MARGIN, "address": host.address, "ceph_addrs": [host.address],
              # The canaries ignore ACPI: failing over on a poweroff powers them off.
              "shutdown_timeout": 3,
              "metrics_listen": prometheus.agent_listen(host),
              "ceph_conf": "/etc/ceph/ceph.conf" if storage_probe else "",
              "ceph_client": agent, "ceph_keyring": f"/etc/ceph/ceph.client.{agent}.keyring",
              "ceph_pool": CEPH_POOL,
              "storage_grace": AGENT_STORAGE_GRACE,
              **user.options([host.etcd_client_url, *others])}
    config.update(settings)
    if with_watchdog:
        config.update(watchdog_device=watchdog.WATCHDOG_PATH,
                      watchdog_timeout=watchdog.TIMEOUT)
    # It holds the agent's etcd password.
    pki.write_private(agent_config_path(host), json.dumps(config, indent=2) + "\n")
    node.start_daemon(*_agent_command(host), log=agent_log_path(host))


def wait_ready(node: Node, host: HostLayout, timeout: float) -> None:
    """Wait for libvirtd and sshd of `host`, then make sure its Ceph secret is defined."""
    deadline = time.monotonic() + timeout
    while not _libvirtd_answers(node):
        if node.run("pidof", "libvirtd", check=False).returncode != 0:
            raise LabError(f"{host.name}: libvirtd exited: {_last_error(host)}")
        if time.monotonic() > deadline:
            raise LabError(f"{host.name}: libvirtd did not start within {timeout:.0f} s; "
                           f"see {host.root / 'log' / 'libvirtd.log'}")
        time.sleep(0.2)
    while not _port_open(host.address, 22):
        if time.monotonic() > deadline:
            raise LabError(f"{host.name}: sshd did not start within {timeout:.0f} s; "
                           f"see {host.root / 'log' / 'sshd.log'}")
        time.sleep(0.2)
    define_ceph_secret(node, host)


def _last_error(host: HostLayout) -> str:
    log = host.root / "log" / "libvirtd.log"
    errors = [line for line in log.read_text(errors="replace").splitlines() if " error : " in line]
    return (errors[-1].split(" : ", 2)[-1] if errors else "no error logged") + f" (see {log})"


def _libvirtd_answers(node: Node) -> bool:
    return node.run("virsh", "-c", "qemu:///system", "version", check=False,
                    timeout=30).returncode == 0


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def define_ceph_secret(node: Node, host: HostLayout) -> None:
    """libvirt holds the hypervisor's cephx key as a secret, never in domain XML."""
    run_dir = host.root / "etc-libvirt"
    xml = run_dir / "ceph-secret.xml"
    xml.write_text(f"""<secret ephemeral='no' private='yes'>
  <uuid>{CEPH_SECRET_UUID}</uuid>
  <usage type='ceph'><name>client.{CEPH_HYPERVISOR_CLIENT} secret</name></usage>
</secret>
""")
    key_file = run_dir / "ceph-secret.key"
    pki.write_private(key_file, secret_key(ceph_hypervisor_keyring_path()))
    try:
        node.run("virsh", "-q", "secret-define", "/etc/libvirt/ceph-secret.xml")
        node.run("virsh", "-q", "secret-set-value", CEPH_SECRET_UUID,
                 "--file", "/etc/libvirt/ceph-secret.key")
    finally:
        key_file.unlink()
