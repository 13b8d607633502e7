"""The lab's certificate authorities and credentials, made at `up` with openssl.

Three CAs, so that a certificate admits its holder where it belongs and nowhere else
(credentials.py issues them):

- `ca`, etcd's clients' CA: each member's server certificate `etcd-<host>` (also
  the client certificate etcd's own JSON gateway presents to its gRPC server), and
  one client certificate per etcd user: `yasco-agent-<host>`, `yasco-controller`,
  `yasco-watcher`, `yasco-reader` and `root`. They carry no common name: while
  authentication is on, etcd's gateway refuses a client certificate with one (it
  would be ignored, not used as the user). The certificate admits the client; the
  user's password says who it is;
- `etcd-peer-ca`, etcd's peers' CA: each member's peer certificate
  `etcd-peer-<host>`, all with the one common name members accept from each other
  (`--peer-cert-allowed-cn`). No client certificate opens the peer port, where
  authentication does not apply;
- `qemu-ca`, the QEMU migration CA: each hypervisor's certificate `qemu-<host>`,
  server and client, so that a live migration runs over TLS that both ends verify,
  and nothing of etcd's opens a migration port.

Private keys and passwords are written 0600 and never printed. `up` makes them
afresh; `down` removes them with the rest of the lab.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import LabError

DAYS = 30


@dataclass(frozen=True)
class Certificate:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


def openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                            timeout=60, check=False)
    if result.returncode != 0:
        raise LabError(f"openssl {args[0]} failed in {cwd}: {result.stderr.strip()[-300:]}")


def make_ca(directory: Path, name: str, days: int = DAYS) -> Certificate:
    """A self-signed CA, `<name>.crt` and `<name>.key` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    with _private_umask():
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", str(days),
                "-subj", f"/O=yasco/CN={name}",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return Certificate(directory / f"{name}.crt", directory / f"{name}.key")


def issue(directory: Path, name: str, ca: Certificate, *, subject: str,
          usage: str = "clientAuth", addresses: tuple[str, ...] = (),
          days: int = DAYS) -> Certificate:
    """A certificate signed by `ca`, `<name>.crt` and `<name>.key` in `directory`:
    `usage` is its extended key usage, `addresses` the IPs it names (for a server).
    A negative `days` makes one that has already expired."""
    extensions = [f"extendedKeyUsage={usage}", "basicConstraints=critical,CA:FALSE"]
    if addresses:
        extensions.append("subjectAltName=" + ",".join(f"IP:{a}" for a in addresses))
    (directory / f"{name}.ext").write_text("\n".join(extensions) + "\n")
    with _private_umask():
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
                cwd=directory)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca.cert),
                "-CAkey", str(ca.key), "-CAcreateserial", "-out", f"{name}.crt",
                "-days", str(days), "-extfile", f"{name}.ext", cwd=directory)
    (directory / f"{name}.csr").unlink()
    (directory / f"{name}.ext").unlink()
    return Certificate(directory / f"{name}.crt", directory / f"{name}.key")


def client_subject(user: str) -> str:
    """A client certificate's subject: no CN (see the module's docstring)."""
    return f"/O=yasco/OU={user}"


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner alone from the first byte."""
    with _private_umask():
        path.write_text(text)
    path.chmod(0o600)  # a file that existed keeps its mode through write_text


def new_password(path: Path) -> str:
    """A random password, written to `path` (0600)."""
    password = secrets.token_urlsafe(24)
    write_private(path, password + "\n")
    return password


def read_password(path: Path) -> str:
    return path.read_text().strip()


class _private_umask:
    """Files made inside are readable by their owner alone, from the start."""

    def __enter__(self) -> None:
        self.old = os.umask(0o077)

    def __exit__(self, *exc: object) -> None:
        os.umask(self.old)
