# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Ceph adapter: cluster connections, RBD images and storage fencing.

It imports nothing of Ansible (the host agent uses it on hypervisors); the modules'
shared options are in ceph_module.py. Built on Debian's `rados` and `rbd` bindings (they are not on PyPI). Every failure
leaves here as a CephError whose message names the cluster, pool, image or address
and says what to do.

Fencing, and why it is safe: a blocklist entry makes every OSD reject the listed
client, so a QEMU on a host that is cut off but still running can no longer write to
its disks. An OSD enforces it once it has the OSD map that carries the entry, and an
OSD catches up to the map epoch a request carries before it serves the request. So
once the fencer's own client has that map, its lock break, and every request of a
QEMU started afterwards (which connects with the newest map), reach OSDs that
enforce the fence: whatever the fenced client wrote before is ordered before them,
and nothing it sends after is served. This is the epoch barrier CephFS relies on, and
it needs no right to command the OSDs: the fencer may blocklist and use the VM pool,
nothing more.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import math
import re
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator

try:
    import rados
    import rbd
except ImportError:
    rados = rbd = None
    CEPH_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    CEPH_IMPORT_ERROR = None
CEPH_REQUIREMENT = "rados and rbd (Debian: python3-rados, python3-rbd)"


# Ceph 16 blocklists one address per entry; an entry for IP:0/0 covers every client
# on that IP. Ranges (Ceph 17) are expanded into addresses up to this many.
MAX_RANGE_ADDRESSES = 256
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


class CephError(Exception):
    """A Ceph operation failed; the message is for the operator."""


def parse_size(value: Any, what: str = "size") -> int:
    """Bytes from an integer (bytes) or a string such as 10G, 512M or 1.5T (binary)."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.I)
        if not match:
            raise CephError(f"{what}: {value!r} is not a size; write it like 10G, 512M or "
                            "a number of bytes")
        size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size <= 0:
        raise CephError(f"{what}: must be positive, got {value!r}")
    return size


class Cluster:
    """A connection to one Ceph cluster, as one client."""

    def __init__(self, conf: str, client: str, keyring: str | None, timeout: float) -> None:
        if rados is None:
            raise CephError("the Ceph Python bindings are not installed (Debian: "
                            "python3-rados python3-rbd)")
        self.where = f"Ceph cluster of {conf} as client.{client}"
        seconds = str(max(1, math.ceil(timeout)))  # some of these take whole seconds only
        options = {"rados_mon_op_timeout": seconds, "rados_osd_op_timeout": seconds,
                   "client_mount_timeout": seconds}
        if keyring:
            options["keyring"] = keyring
        try:
            self.rados = rados.Rados(conffile=conf, name=f"client.{client}", conf=options)
            self.rados.connect(timeout=int(max(timeout, 1)))
        except rados.Error as err:
            raise CephError(f"{self.where}: cannot connect ({err}); check the conf file, "
                            "the keyring and that the monitors are up") from err
        self.timeout = timeout

    def close(self) -> None:
        self.rados.shutdown()

    def fencing(self) -> None:
        """Images opened from now on break locks without blocklisting their owners
        (librbd's default, a map change per lock): for a caller that has blocklisted
        them already, and has the map that carries the entries."""
        self.rados.conf_set("rbd_blocklist_on_break_lock", "false")

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- monitor commands --------------------------------------------------------

    def mon(self, prefix: str, **args: Any) -> Any:
        command = json.dumps({"prefix": prefix, "format": "json", **args})
        try:
            code, out, status = self.rados.mon_command(command, b"", timeout=int(self.timeout))
        except rados.Error as err:
            raise CephError(f"{self.where}: '{prefix}' failed: {err}") from err
        if code == -errno.EACCES:
            raise CephError(f"{self.where}: '{prefix}' refused: the user lacks the capability; "
                            "use a user that has it (fencing: yasco_ceph_fence_client, see "
                            "docs/security.md)")
        if code != 0:
            raise CephError(f"{self.where}: '{prefix}' failed: {status.strip()} ({code})")
        values = _json_values(out.decode() if isinstance(out, bytes) else out)
        return values[0] if len(values) == 1 else (values or None)

    def open_pool(self, pool: str):
        try:
            if not self.rados.pool_exists(pool):
                raise CephError(f"pool {pool} does not exist in the {self.where}: create it "
                                "or fix the pool name")
            return self.rados.open_ioctx(pool)
        except rados.Error as err:
            raise CephError(f"pool {pool}: {err}") from err

    # -- fencing -----------------------------------------------------------------

    def blocklist(self) -> dict[str, str]:
        """Current blocklist entries: address -> expiry."""
        listed = self.mon("osd blocklist ls") or []
        # Ceph 16 prints the entries and then the (empty) range entries: two arrays.
        entries = [e for part in listed for e in (part if isinstance(part, list) else [part])]
        return {e["addr"]: e.get("until", "") for e in entries if isinstance(e, dict)}

    def blocklist_add(self, address: str, expire: float) -> None:
        self.mon("osd blocklist", blocklistop="add", addr=address, expire=float(expire))

    def blocklist_add_all(self, addresses: list[str], expire: float) -> None:
        """Blocklist every address, the commands sent together: the monitors then
        commit them in one OSD map, where one after the other would each wait for a
        map (up to paxos_propose_interval, 1 s by default)."""
        with ThreadPoolExecutor(max_workers=min(8, len(addresses) or 1)) as pool:
            for done in [pool.submit(self.blocklist_add, a, expire) for a in addresses]:
                done.result()

    def blocklist_remove(self, address: str) -> None:
        self.mon("osd blocklist", blocklistop="rm", addr=address)

    def wait_for_latest_map(self) -> None:
        """Return once this client has the newest OSD map, and with it every blocklist
        entry added before (the module's docstring says why that is the fence)."""
        try:
            self.rados.wait_for_latest_osdmap()
        except rados.Error as err:
            raise CephError(f"{self.where}: the newest OSD map did not arrive ({err}): the "
                            "fence is not known to be in effect; check the monitors, then "
                            "run again") from err

    # -- images ------------------------------------------------------------------

    @contextmanager
    def opened(self, pool: str, name: str, what: str = "image") -> Iterator[tuple[Any, Any]]:
        """The pool's I/O context and the image (None if it does not exist), both closed
        afterwards; an RBD failure becomes a CephError naming `what` and the image."""
        ioctx = self.open_pool(pool)
        image = None
        try:
            image = self.image(ioctx, name)
            yield ioctx, image
        except rbd.Error as err:
            raise CephError(f"{what} {pool}/{name}: {err}") from err
        finally:
            if image is not None:
                image.close()  # a no-op on a handle closed already
            ioctx.close()

    def image(self, ioctx, name: str, read_only: bool = False):
        try:
            return rbd.Image(ioctx, name, read_only=read_only)
        except rbd.ImageNotFound:
            return None
        except rbd.Error as err:
            raise CephError(f"image {ioctx.get_pool_name()}/{name}: {err}") from err


def _json_values(text: str) -> list[Any]:
    """Every JSON value in `text`: some Ceph 16 commands print more than one."""
    decoder = json.JSONDecoder()
    values, index = [], 0
    while index < len(text):
        if text[index].isspace():
            index += 1
            continue
        value, index = decoder.raw_decode(text, index)
        values.append(value)
    return values


def connect(params: dict[str, Any]) -> Cluster:
    """A connection from the options of ceph_module.CEPH_ARGUMENT_SPEC."""
    return Cluster(params["conf"], params["client"], params.get("keyring"),
                   params["ceph_timeout"])


def connected(params: dict[str, Any], session: Cluster | None
              ) -> contextlib.AbstractContextManager:
    """`session` when a batch shares one (left open for the next item), else a new
    connection from `params`, closed when done."""
    return contextlib.nullcontext(session) if session is not None else connect(params)


def split_image(spec: str, what: str = "image") -> tuple[str, str, str | None]:
    """`pool/name[@snap]` as (pool, name, snap)."""
    match = re.fullmatch(r"([^/@\s]+)/([^/@\s]+)(?:@([^/@\s]+))?", spec or "")
    if not match:
        raise CephError(f"{what}: {spec!r} is not pool/image (or pool/image@snapshot)")
    return match.group(1), match.group(2), match.group(3)


def host_addresses(value: Any, where: str) -> list[str]:
    """A host's Ceph client addresses as an inventory declares them (yasco_ceph_addrs):
    a non-empty list of plain IP addresses, each written as Python writes it. A fence
    of the host blocklists every one of them, so a range or a client instance (an
    address with a '/') is refused; a ValueError names `where` and what is wrong."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: must be a list of IP addresses, got {value!r}")
    if not value:
        raise ValueError(f"{where}: is empty; list the IP addresses the host reaches Ceph "
                         "from")
    addresses = []
    for index, address in enumerate(value):
        if isinstance(address, str) and "/" in address:
            raise ValueError(f"{where}[{index}]: {address!r} is not a plain IP address: list "
                             "the host's own addresses one by one, never a range (a fence "
                             "of the host blocklists each address listed)")
        try:
            addresses.append(str(ipaddress.ip_address(address.strip())))
        except (AttributeError, ValueError):
            raise ValueError(f"{where}[{index}]: {address!r} is not an IP address") from None
    return list(dict.fromkeys(addresses))


def fence_addresses(targets: list[str]) -> list[str]:
    """Blocklist entries for client addresses (ip:port/nonce), hosts (ip) and CIDR
    ranges: a host is ip:0/0, which Ceph matches against every client on that IP."""
    out: list[str] = []
    for target in targets:
        text = str(target).strip()
        if re.fullmatch(r"[^/\s]+:\d+/\d+", text):  # one client: 10.0.0.1:0/123456
            out.append(text)
            continue
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError as err:
            raise CephError(f"fence address {text!r}: not a client address (ip:port/nonce), "
                            "an IP address or a CIDR range") from err
        if network.num_addresses > MAX_RANGE_ADDRESSES:
            raise CephError(f"fence address {text}: {network.num_addresses} addresses; Ceph 16 "
                            f"blocklists one address per entry, so at most "
                            f"{MAX_RANGE_ADDRESSES}: fence a narrower range")
        hosts = [network.network_address] if network.num_addresses == 1 else list(network.hosts())
        for address in hosts:
            host = f"[{address}]" if address.version == 6 else str(address)
            out.append(f"{host}:0/0")
    return list(dict.fromkeys(out))


def image_locks(image) -> list[dict[str, str]]:
    """Who holds the image: exclusive-lock owners and advisory lockers."""
    locks = []
    if image.features() & rbd.RBD_FEATURE_EXCLUSIVE_LOCK:
        locks = [{"kind": "exclusive", "owner": owner["owner"], "mode": str(owner["mode"])}
                 for owner in image.lock_get_owners()]
    lockers = image.list_lockers() or {}
    for client, cookie, address in lockers.get("lockers", []):
        locks.append({"kind": "advisory", "owner": client, "cookie": cookie,
                      "address": address})
    return locks


def lock_address(lock: dict[str, str]) -> str:
    """The client address (ip:port/nonce) that holds a lock from image_locks."""
    return lock["owner"] if lock["kind"] == "exclusive" else lock["address"]


def blocklisted(address: str, entries) -> bool:
    """Whether blocklist `entries` cover the client `address`: the client itself, or
    its whole IP (ip:0/0), as the OSDs match them."""
    host = address.rsplit(":", 1)[0]
    return address in entries or f"{host}:0/0" in entries


def break_locks(image, locks: list[dict[str, str]]) -> None:
    """Break the locks. With rbd_blocklist_on_break_lock off (Cluster.fencing), librbd
    does not blocklist each owner again: the caller has blocklisted them all."""
    for lock in locks:
        try:
            if lock["kind"] == "exclusive":
                image.lock_break(rbd.RBD_LOCK_MODE_EXCLUSIVE, lock["owner"])
            else:
                image.break_lock(lock["owner"], lock["cookie"])
        except rbd.ImageNotFound:
            # ENOENT: the lock is gone already (its blocklisted owner lost it): the
            # same outcome as breaking it.
            continue


def watchers(image, ourselves: int | None = None) -> list[dict[str, Any]]:
    """Clients with the image open, but for `ourselves` (this connection's instance id:
    opening an image to look at it registers a watch too)."""
    return [{"address": w["addr"], "id": w["id"], "cookie": w["cookie"]}
            for w in image.watchers_list() if w["id"] != ourselves]
