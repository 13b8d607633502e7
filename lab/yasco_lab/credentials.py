"""Who is who in the lab: its CAs, certificates and etcd users, made at `up`.

etcd runs TLS on client and peer ports. Its client port requires a certificate of
the clients' CA (`ca`), its peer port one of the peers' CA (`peer_ca`) that carries
PEER_CN; QEMU's migrations are TLS with certificates of a third CA (`qemu_ca`); pki.py
says why. Authentication is on, with the users and roles of
plugins/module_utils/adapters/etcd_access.py: one agent user per hypervisor, the watcher, the
controller (the playbooks), a reader (the inventory plugin and status) and root.
Every user has a client certificate of its own and a password in a 0600 file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient

from . import pki
from .layout import HostLayout, pki_dir

# The etcd clients' CA keeps the name every inventory and doc of the lab gives it
# (yasco_etcd_ca_cert, $pki/ca.crt).
CA_NAME = "ca"
PEER_CA_NAME = "etcd-peer-ca"
QEMU_CA_NAME = "qemu-ca"
# The common name of every member's peer certificate, and the only one a member
# accepts from another (--peer-cert-allowed-cn).
PEER_CN = "yasco-etcd-peer"
ROOT_USER = "root"


@dataclass(frozen=True)
class EtcdUser:
    """An etcd user of the lab and the files that make its credentials."""

    name: str

    @property
    def certificate(self) -> pki.Certificate:
        directory = pki_dir() / "etcd-clients"
        return pki.Certificate(directory / f"{self.name}.crt", directory / f"{self.name}.key")

    @property
    def password_file(self) -> Path:
        return passwords_dir() / self.name

    def password(self) -> str:
        return pki.read_password(self.password_file)

    def credentials(self) -> dict[str, Any]:
        """Who it is to etcd, as the modules and EtcdClient name the options."""
        return {"ca_cert": str(ca().cert), "client_cert": str(self.certificate.cert),
                "client_key": str(self.certificate.key), "username": self.name,
                "password": self.password()}

    def options(self, endpoints: list[str]) -> dict[str, Any]:
        """The connection options, `endpoints` with the credentials."""
        return {"endpoints": list(endpoints), **self.credentials()}


def passwords_dir() -> Path:
    return pki_dir() / "etcd-passwords"


def etcd_passwords() -> dict[str, str]:
    """Every etcd user the lab made, and its password."""
    return {path.name: pki.read_password(path) for path in passwords_dir().iterdir()}


def ca() -> pki.Certificate:
    """The CA of etcd's clients: the members' server certificates, the users'."""
    return _authority(CA_NAME)


def peer_ca() -> pki.Certificate:
    """The CA of etcd's peers: the members' peer certificates alone."""
    return _authority(PEER_CA_NAME)


def qemu_ca() -> pki.Certificate:
    """The CA of QEMU's migrations: the hypervisors' migration certificates alone."""
    return _authority(QEMU_CA_NAME)


def _authority(name: str) -> pki.Certificate:
    return pki.Certificate(pki_dir() / f"{name}.crt", pki_dir() / f"{name}.key")


def etcd_member(host: HostLayout) -> pki.Certificate:
    """The member's server certificate, which its clients see."""
    return pki.Certificate(pki_dir() / f"etcd-{host.name}.crt",
                           pki_dir() / f"etcd-{host.name}.key")


def etcd_peer(host: HostLayout) -> pki.Certificate:
    """The member's peer certificate, which the other members see."""
    return pki.Certificate(pki_dir() / f"etcd-peer-{host.name}.crt",
                           pki_dir() / f"etcd-peer-{host.name}.key")


def qemu_certificate(host: HostLayout) -> pki.Certificate:
    return pki.Certificate(pki_dir() / f"qemu-{host.name}.crt",
                           pki_dir() / f"qemu-{host.name}.key")


def make(hosts: list[HostLayout], users: list[str]) -> None:
    """The three CAs, each host's etcd server, etcd peer and QEMU certificates, and
    each etcd user's client certificate and password."""
    clients = pki.make_ca(pki_dir(), CA_NAME)
    peers = pki.make_ca(pki_dir(), PEER_CA_NAME)
    migrations = pki.make_ca(pki_dir(), QEMU_CA_NAME)
    for host in hosts:
        # The gateway of each member is a client of its gRPC server with this certificate.
        pki.issue(pki_dir(), etcd_member(host).cert.stem, clients,
                  subject=f"/O=yasco/CN=etcd member {host.name}",
                  usage="serverAuth,clientAuth", addresses=(host.address, "127.0.0.1"))
        # Each member serves and dials the others with it; they check the CN and
        # that it names the address the connection comes from.
        pki.issue(pki_dir(), etcd_peer(host).cert.stem, peers,
                  subject=f"/O=yasco/OU=etcd member {host.name}/CN={PEER_CN}",
                  usage="serverAuth,clientAuth", addresses=(host.address,))
        # The destination of a migration checks the source's certificate, and back.
        pki.issue(pki_dir(), qemu_certificate(host).cert.stem, migrations,
                  subject=f"/O=yasco/CN=qemu {host.name}", usage="serverAuth,clientAuth",
                  addresses=(host.address,))
    for name in [ROOT_USER, *users]:
        user = EtcdUser(name)
        user.certificate.cert.parent.mkdir(parents=True, exist_ok=True)
        user.password_file.parent.mkdir(parents=True, exist_ok=True)
        pki.issue(user.certificate.cert.parent, name, clients,
                  subject=pki.client_subject(name))
        pki.new_password(user.password_file)


def etcd_client(endpoints: list[str], user: str = ROOT_USER) -> EtcdClient:
    """A client of the lab's etcd as `user`: root, by default, for the lab's tests and
    benchmarks, which look at and stage anything."""
    return EtcdClient(list(endpoints), **EtcdUser(user).credentials())
