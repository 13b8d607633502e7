"""The storage side of the lab: RBD images in the VM pool, seen from the controller.

Reading a canary's disk here, not through the guest, is what proves that its
writes were acknowledged by Ceph and survived whatever happened to its host.
"""

from __future__ import annotations

from contextlib import contextmanager
from collections.abc import Iterator

import rados
import rbd

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import ceph

from .canary import RECORD_SIZE, RING_RECORDS, Record, parse_records
from .layout import CEPH_POOL, ceph_conf_path


@contextmanager
def pool(client: str = "admin", keyring: str | None = None) -> Iterator[rados.Ioctx]:
    """An I/O context on the VM pool as `client` (cephx)."""
    conf = {"keyring": keyring} if keyring else {}
    cluster = rados.Rados(conffile=str(ceph_conf_path()), name=f"client.{client}", conf=conf)
    cluster.connect(timeout=10)
    try:
        ioctx = cluster.open_ioctx(CEPH_POOL)
        try:
            yield ioctx
        finally:
            ioctx.close()
    finally:
        cluster.shutdown()


def blocklist() -> dict[str, str]:
    """Ceph's blocklist as the lab's admin sees it: address -> expiry."""
    with ceph.Cluster(str(ceph_conf_path()), "admin", None, 10) as cluster:
        return cluster.blocklist()


def create_image(name: str, size_mb: int = 16) -> None:
    """A fresh image (an old one of that name is removed first)."""
    with pool() as ioctx:
        if name in rbd.RBD().list(ioctx):
            rbd.RBD().remove(ioctx, name)
        rbd.RBD().create(ioctx, name, size_mb << 20)


def remove_image(name: str) -> bool:
    """Remove the image; False if a client still watches it (e.g. a crashed QEMU, until
    Ceph's watch timeout expires)."""
    with pool() as ioctx:
        try:
            rbd.RBD().remove(ioctx, name)
        except rbd.ImageNotFound:
            pass
        except rbd.ImageBusy:
            return False
    return True


def canary_records(name: str) -> list[Record]:
    """Every record the canary VM on image `name` has written, in sequence order."""
    with pool() as ioctx, rbd.Image(ioctx, name, read_only=True) as image:
        return parse_records(image.read(0, RECORD_SIZE * RING_RECORDS))
