"""The lab's PKI (lab/yasco_lab/pki.py, credentials.py) and its etcd member's flags
(etcd.py), on a real member started by the lab's own command line, with the lab's own
roles and users, on a loopback address instead of the lab's bridge (nothing else of
the lab runs). Three CAs: etcd's clients', etcd's peers' and QEMU's. Each certificate
opens the port it is for and no other: no client certificate, nor the member's own
server certificate, opens the peer port, where raft applies what comes in without
authentication, and of the peers' CA only the members' common name does. The lab's
clients need no lab-only switch: its etcd has TLS and users."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from yasco_lab import credentials, hypervisor, layout, pki
from yasco_lab import etcd as lab_etcd

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access

# A loopback subnet of its own: hv1's member listens on 127.213.0.11, as on 10.213.0.11
# in the lab, without its bridge and namespaces.
SUBNET = ipaddress.ip_network("127.213.0.0/24")


@pytest.fixture(name="member", scope="module")
def fixture_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[layout.HostLayout]:
    """hv1's etcd member of a one-host lab, as `yasco-lab up` makes its PKI, starts it
    and turns authentication on; the lab's files under a directory of the test's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(layout, "SUBNET", SUBNET)
        patch.setenv("YASCO_LAB_DIR", str(tmp_path_factory.mktemp("lab")))
        host = layout.HostLayout("hv1")
        credentials.make([host], lab_etcd.users([host]))
        log = layout.state_dir() / "etcd.log"
        with log.open("w") as output:
            process = subprocess.Popen(lab_etcd.member_command(host, [host]), stdout=output,
                                       stderr=subprocess.STDOUT)
        try:
            lab_etcd.wait_healthy([host], 30)
            lab_etcd.enable_access([host])
            yield host
        finally:
            process.terminate()
            process.wait(timeout=30)


def answer(address: str, port: int, ca: Path, certificate: pki.Certificate,
           source: str | None = None) -> str:
    """What a TLS client that checks the server against `ca` and presents
    `certificate` gets for a request to `address`:`port`, from `source` (the address the
    member checks against the certificate's): the status line, or why none."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(certificate.cert), str(certificate.key))
    try:
        with socket.create_connection((address, port), timeout=10,
                                      source_address=(source or address, 0)) as raw, \
                context.wrap_socket(raw, server_hostname=address) as tls:
            tls.sendall(b"GET /version HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n")
            line = tls.recv(64).split(b"\r\n")[0].decode()
    except (ssl.SSLError, OSError) as err:
        return f"refused: {err}"
    return line or "refused: closed"


def verifies(certificate: Path, ca: Path) -> bool:
    done = subprocess.run(["openssl", "verify", "-CAfile", str(ca), str(certificate)],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.returncode == 0


def common_names(certificate: Path) -> list[str]:
    loaded = x509.load_pem_x509_certificate(certificate.read_bytes())
    return [str(attribute.value)
            for attribute in loaded.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


@pytest.mark.usefixtures("secure_only")
def test_the_labs_clients_use_its_etcd_without_the_lab_switch(member):
    key = f"/yasco/{layout.CLUSTER_NAME}/vdm/version"
    with credentials.etcd_client([member.etcd_client_url]) as root:
        root.put(key, "1")
    reader = etcd_access.READER_ROLE
    with credentials.etcd_client([member.etcd_client_url], reader) as client:
        assert client.get(key).value == "1"


def test_three_cas_each_signing_its_own_certificates_alone(member):
    clients, peers, migrations = (credentials.ca().cert, credentials.peer_ca().cert,
                                  credentials.qemu_ca().cert)
    assert len({path.read_text() for path in (clients, peers, migrations)}) == 3
    signed_by = {
        clients: [credentials.etcd_member(member).cert,
                  credentials.EtcdUser(credentials.ROOT_USER).certificate.cert,
                  credentials.EtcdUser(etcd_access.agent_role("hv1")).certificate.cert],
        peers: [credentials.etcd_peer(member).cert],
        migrations: [credentials.qemu_certificate(member).cert],
    }
    for ca, certificates in signed_by.items():
        for certificate in certificates:
            assert [verifies(certificate, other) for other in signed_by] == [
                other == ca for other in signed_by], (certificate, ca)


def test_peer_certificates_carry_the_allowed_name_and_client_certificates_none(member):
    assert common_names(credentials.etcd_peer(member).cert) == [credentials.PEER_CN]
    assert common_names(credentials.EtcdUser(credentials.ROOT_USER).certificate.cert) == []
    for user in lab_etcd.users([member]):
        assert common_names(credentials.EtcdUser(user).certificate.cert) == [], user


def test_the_peer_port_admits_the_members_certificate_and_nothing_of_the_clients_ca(
        member, tmp_path):
    address, port = member.address, layout.ETCD_PEER_PORT
    peers = credentials.peer_ca().cert
    assert answer(address, port, peers, credentials.etcd_peer(member)).startswith("HTTP/1.1 ")
    root = credentials.EtcdUser(credentials.ROOT_USER).certificate
    assert answer(address, port, peers, root).startswith("refused")
    assert answer(address, port, peers, credentials.etcd_member(member)).startswith("refused")
    # Of the peers' CA, the members' common name alone: another is refused, the same
    # name on a certificate made alike is not.
    intruder = pki.issue(tmp_path, "intruder", credentials.peer_ca(),
                         subject="/O=yasco/CN=intruder", usage="serverAuth,clientAuth",
                         addresses=(address,))
    alike = pki.issue(tmp_path, "alike", credentials.peer_ca(),
                      subject=f"/O=yasco/CN={credentials.PEER_CN}",
                      usage="serverAuth,clientAuth", addresses=(address,))
    assert answer(address, port, peers, intruder).startswith("refused")
    assert answer(address, port, peers, alike).startswith("HTTP/1.1 ")


def test_the_client_port_admits_a_clients_certificate_and_no_peers(member):
    address, port = member.address, layout.ETCD_CLIENT_PORT
    clients = credentials.ca().cert
    root = credentials.EtcdUser(credentials.ROOT_USER).certificate
    assert answer(address, port, clients, root, "127.0.0.1").startswith("HTTP/1.1 200")
    assert answer(address, port, clients, credentials.etcd_peer(member)).startswith("refused")


def test_qemu_trusts_the_migration_ca_alone(member, tmp_path):
    hypervisor._install_migration_certificates(member, tmp_path)  # pylint: disable=protected-access
    assert (tmp_path / "ca-cert.pem").read_text() == credentials.qemu_ca().cert.read_text()
    assert verifies(tmp_path / "server-cert.pem", tmp_path / "ca-cert.pem")
    assert not verifies(credentials.etcd_peer(member).cert, tmp_path / "ca-cert.pem")
    assert not verifies(credentials.EtcdUser(credentials.ROOT_USER).certificate.cert,
                        tmp_path / "ca-cert.pem")
