"""Who is who in the lab: its certificates and etcd users, made at `up`.

etcd runs TLS on client and peer ports, requires a client certificate from the lab's
CA, and has authentication on, with the users and roles of
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

CA_NAME = "ca"
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
    return pki.Certificate(pki_dir() / f"{CA_NAME}.crt", pki_dir() / f"{CA_NAME}.key")


def etcd_member(host: HostLayout) -> pki.Certificate:
    return pki.Certificate(pki_dir() / f"etcd-{host.name}.crt",
                           pki_dir() / f"etcd-{host.name}.key")


def qemu_certificate(host: HostLayout) -> pki.Certificate:
    return pki.Certificate(pki_dir() / f"qemu-{host.name}.crt",
                           pki_dir() / f"qemu-{host.name}.key")


def make(hosts: list[HostLayout], users: list[str]) -> None:
    """The CA, each host's etcd member and QEMU certificates, and each etcd user's
    client certificate and password."""
    authority = pki.make_ca(pki_dir(), CA_NAME)
    for host in hosts:
        # The gateway of each member is a client of its gRPC server with this certificate.
        pki.issue(pki_dir(), f"etcd-{host.name}", authority,
                  subject=f"/O=yasco/CN=etcd member {host.name}",
                  usage="serverAuth,clientAuth", addresses=(host.address, "127.0.0.1"))
        # The destination of a migration checks the source's certificate, and back.
        pki.issue(pki_dir(), f"qemu-{host.name}", authority,
                  subject=f"/O=yasco/CN=qemu {host.name}", usage="serverAuth,clientAuth",
                  addresses=(host.address,))
    for name in [ROOT_USER, *users]:
        user = EtcdUser(name)
        user.certificate.cert.parent.mkdir(parents=True, exist_ok=True)
        user.password_file.parent.mkdir(parents=True, exist_ok=True)
        pki.issue(user.certificate.cert.parent, name, authority,
                  subject=pki.client_subject(name))
        pki.new_password(user.password_file)


def etcd_client(endpoints: list[str], user: str = ROOT_USER) -> EtcdClient:
    """A client of the lab's etcd as `user`: root, by default, for the lab's tests and
    benchmarks, which look at and stage anything."""
    return EtcdClient(list(endpoints), **EtcdUser(user).credentials())
