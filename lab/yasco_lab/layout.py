"""Where the lab lives: its addresses, names and directories, in one place."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

# A private /24 used only by the lab's bridge; the controller (this machine's
# root network namespace) is .1, Ceph is .2 and hypervisor hvN is .(10 + N).
SUBNET = ipaddress.ip_network(os.environ.get("YASCO_LAB_SUBNET", "10.213.0.0/24"))
BRIDGE = "yasco-br0"
PREFIX_LEN = SUBNET.prefixlen
MAX_HOSTS = 9
CLUSTER_NAME = "lab"
CEPH_POOL = "yasco"
# cephx users, one per role (ceph.py gives each its capabilities).
CEPH_HYPERVISOR_CLIENT = "hypervisor"
CEPH_PROVISION_CLIENT = "yasco-provision"
CEPH_FENCE_CLIENT = "yasco-fence"
# Fixed so that every hypervisor's libvirt secret and every domain XML agree.
CEPH_SECRET_UUID = "5b3f0a6e-7a1c-4e0b-9d53-1f2ad0c0ffee"
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
CEPH_MON_PORT = 6789

HOST_NAME_RE = re.compile(r"^hv[1-9]$")


def state_dir() -> Path:
    """The lab's working directory: disks, configs, logs and the state file."""
    return Path(os.environ.get("YASCO_LAB_DIR", "/var/lib/yasco-lab"))


def repo_root() -> Path:
    """The checkout this package is installed from (editable install)."""
    return Path(__file__).resolve().parents[2]


def inventory_dir() -> Path:
    return Path(os.environ.get("YASCO_LAB_INVENTORY", repo_root() / "inventories" / "lab"))


def controller_address() -> str:
    return str(SUBNET.network_address + 1)


def ceph_address() -> str:
    return str(SUBNET.network_address + 2)


def veth_name(node: str) -> str:
    """The controller-side end of a node's link to the bridge."""
    return f"yasco-{node}"


def host_names(count: int) -> list[str]:
    return [f"hv{i}" for i in range(1, count + 1)]


@dataclass(frozen=True)
class HostLayout:
    """Names, address and directories of one hypervisor."""

    name: str

    @property
    def index(self) -> int:
        return int(self.name[2:])

    @property
    def address(self) -> str:
        return str(SUBNET.network_address + 10 + self.index)

    @property
    def veth(self) -> str:
        # Partitioning the host takes this end of its link down.
        return veth_name(self.name)

    @property
    def root(self) -> Path:
        """Everything that survives a crash, like the host's disk."""
        return state_dir() / "hosts" / self.name

    @property
    def run(self) -> Path:
        """Host runtime files the lab itself keeps (pid of the host's init, logs of boot)."""
        return self.root / "run"

    @property
    def ssh_host_key(self) -> Path:
        return ssh_dir() / "hosts" / f"{self.name}_ed25519"

    @property
    def etcd_client_url(self) -> str:
        return f"https://{self.address}:{ETCD_CLIENT_PORT}"

    @property
    def etcd_peer_url(self) -> str:
        return f"https://{self.address}:{ETCD_PEER_PORT}"

    def libvirt_uri(self) -> str:
        """A URI that reaches this host's libvirtd from the controller, over SSH.

        The libssh transport verifies the host key against the lab's known_hosts, where
        the plain ssh transport could only skip the check or trust ~/.ssh/known_hosts.
        """
        return (f"qemu+libssh://root@{self.address}/system?keyfile={ssh_key_path()}"
                f"&known_hosts={known_hosts_path()}&known_hosts_verify=normal")


def ssh_dir() -> Path:
    """The lab's SSH identity and host keys; kept across `down` so known_hosts stays valid."""
    return state_dir() / "ssh"


def ssh_key_path() -> Path:
    return ssh_dir() / "id_ed25519"


def known_hosts_path() -> Path:
    return ssh_dir() / "known_hosts"


def ceph_dir() -> Path:
    return state_dir() / "ceph"


def ceph_conf_path() -> Path:
    """The controller's Ceph configuration (client.admin)."""
    return ceph_dir() / "ceph.conf"


def ceph_keyring_path(client: str) -> Path:
    """The keyring of cephx user client.`client` (0600)."""
    return ceph_dir() / f"ceph.client.{client}.keyring"


def ceph_admin_keyring_path() -> Path:
    return ceph_keyring_path("admin")


def ceph_hypervisor_keyring_path() -> Path:
    return ceph_keyring_path(CEPH_HYPERVISOR_CLIENT)


def pki_dir() -> Path:
    """The lab's CAs, certificates, keys and etcd passwords (credentials.py)."""
    return state_dir() / "pki"


def canary_dir() -> Path:
    """Built canary kernel and initramfs; kept across `down` as a build cache."""
    return state_dir() / "canary"


def state_file() -> Path:
    return state_dir() / "state.json"
