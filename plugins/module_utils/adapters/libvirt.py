# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt adapter: connections, errors, a domain's state and kind, and its life
cycle (define, start, stop, kill, undefine).

Modules call this and nothing else of libvirt, with `libvirt_xml` for the domain XML
of a VM spec and `libvirt_migration` for live migration. Every libvirt failure leaves
here as a LibvirtAdapterError whose message names the URI or domain and says what to do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
import traceback
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlsplit

try:
    from ansible.module_utils.basic import env_fallback
except ImportError:  # the host agent runs this adapter where Ansible is not installed
    env_fallback = None

try:
    import libvirt
except ImportError:
    libvirt = None
    LIBVIRT_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    LIBVIRT_IMPORT_ERROR = None

LIBVIRT_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "uri": {"type": "str", "default": "qemu:///system",
            "fallback": (env_fallback, ["YASCO_LIBVIRT_URI"])},
    "connect_timeout": {"type": "float", "default": 10.0},
}

# Ports a remote libvirt URI's transport connects to, for a quick reachability probe:
# libvirt itself has no connect timeout, and an SSH connection to a dead host waits
# for the kernel's TCP timeout, minutes.
_TRANSPORT_PORTS = {"ssh": 22, "libssh": 22, "libssh2": 22, "tcp": 16509, "tls": 16514}

STATES = {0: "nostate", 1: "running", 2: "blocked", 3: "paused", 4: "shutdown",
          5: "shutoff", 6: "crashed", 7: "pmsuspended"}


class LibvirtAdapterError(Exception):
    """A libvirt operation failed; the message is for the operator."""


def _probe(uri: str, timeout: float) -> None:
    parts = urlsplit(uri)
    transport = parts.scheme.partition("+")[2]
    if not parts.hostname or transport not in _TRANSPORT_PORTS:
        return
    port = parts.port or _TRANSPORT_PORTS[transport]
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as err:
        raise LibvirtAdapterError(
            f"libvirt at {uri}: {parts.hostname}:{port} unreachable within {timeout:g} s "
            f"({err}); check the host is up and the URI is right") from err


def connect(uri: str, connect_timeout: float = 10.0):
    """An open libvirt connection to `uri`."""
    if libvirt is None:
        raise LibvirtAdapterError("the Python library libvirt-python is not installed")
    _probe(uri, connect_timeout)
    # libvirt prints every error to stderr as well as raising it: keep only the raise.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as err:
        raise LibvirtAdapterError(f"libvirt at {uri}: cannot connect: "
                                  f"{err.get_error_message()}; check the URI") from err
    if conn is None:
        raise LibvirtAdapterError(f"libvirt at {uri}: cannot connect")
    return conn


class Connections:
    """Open connections by URI, each opened when first asked for and all closed
    together: what a batch of domains on the same hosts shares."""

    def __init__(self, connect_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.opened: dict[str, Any] = {}

    def get(self, uri: str):
        if uri not in self.opened:
            self.opened[uri] = connect(uri, self.connect_timeout)
        return self.opened[uri]

    def close(self) -> None:
        for conn in self.opened.values():
            with contextlib.suppress(libvirt.libvirtError):
                conn.close()
        self.opened.clear()

    def __enter__(self) -> Connections:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connections(params: dict[str, Any], session: Connections | None = None
                ) -> contextlib.AbstractContextManager:
    """`session` when a batch shares one (left open), else new Connections for the
    options of LIBVIRT_ARGUMENT_SPEC, closed when done."""
    if session is not None:
        return contextlib.nullcontext(session)
    return Connections(params["connect_timeout"])


def find_domain(conn, name: str):
    """The domain called `name` on `conn`, or None."""
    try:
        return conn.lookupByName(name)
    except libvirt.libvirtError as err:
        if err.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise LibvirtAdapterError(f"domain {name}: {err.get_error_message()}") from err


def domain_state(dom) -> str:
    return "undefined" if dom is None else STATES.get(dom.state()[0], "unknown")


# The namespace of YASCO's element in a domain's <metadata>: <yasco:vm kind="ha"/>.
# The host agent reads the kind there, from libvirt alone, when it must self-fence
# with etcd out of reach.
METADATA_NS = "https://yasco.dev/xmlns/libvirt/vm/1"
METADATA_PREFIX = "yasco"
ET.register_namespace(METADATA_PREFIX, METADATA_NS)
VM_KINDS = ("ha", "plain", "preemptible")


def set_live_kind(dom, kind: str | None) -> None:
    """Change a running domain's kind at once: a redefinition applies at its next
    start, but the self-fence must go by the new kind now."""
    xml = None if kind is None else f'<vm kind="{kind}"/>'
    try:
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, xml, METADATA_PREFIX,
                        METADATA_NS, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    except libvirt.libvirtError as err:
        raise LibvirtAdapterError(f"domain {dom.name()}: cannot set its kind: "
                                  f"{err.get_error_message()}") from err


def domain_kind(dom) -> str | None:
    """The VM kind (ha, plain, preemptible) a domain was defined with, or None."""
    try:
        xml = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NS)
    except libvirt.libvirtError:  # no such metadata
        return None
    try:
        return ET.fromstring(xml).get("kind")
    except ET.ParseError:
        return None


# -- life cycle -------------------------------------------------------------------

def call(what: str, fn, *args):
    """`fn(*args)`, a libvirt error raised as a LibvirtAdapterError naming `what`."""
    try:
        return fn(*args)
    except libvirt.libvirtError as err:
        raise LibvirtAdapterError(f"{what}: {err.get_error_message()}") from err


def define(conn, xml: str, name: str):
    return call(f"domain {name}: define", conn.defineXML, xml)


def start(dom) -> None:
    if dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
        call(f"domain {dom.name()}: resume", dom.resume)
    else:
        call(f"domain {dom.name()}: start", dom.create)


def destroy(dom) -> None:
    call(f"domain {dom.name()}: destroy", dom.destroy)


# Where the local QEMU driver (qemu:///system) keeps each running domain's QEMU pid.
QEMU_RUN_DIR = "/run/libvirt/qemu"


def kill_now(dom, run_dir: str = QEMU_RUN_DIR) -> None:
    """Power a domain of this machine's qemu:///system off at once: SIGKILL to its
    QEMU, then libvirt's destroy, which cleans up. libvirt's destroy alone sends
    SIGTERM first and waits up to 10 s for QEMU to exit, which a QEMU whose disk I/O
    hangs (its host cut off from Ceph) spends draining that I/O: a self-fence must not
    wait on it. The pid is checked against QEMU's command line (`-name guest=NAME`)
    first, so a stale pid file kills nothing else."""
    name, killed = dom.name(), False
    try:
        with open(f"{run_dir}/{name}.pid", encoding="ascii") as handle:
            pid = int(handle.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
        if f"guest={name}".encode() in (a.split(b",", 1)[0] for a in argv):
            os.kill(pid, signal.SIGKILL)
            killed = True
    except (OSError, ValueError):
        pass  # gone already, or not local: destroy does it, the slow way
    try:
        dom.destroy()
    except libvirt.libvirtError as err:
        # libvirt may have seen QEMU die and cleaned up first.
        if not killed or err.get_error_code() != libvirt.VIR_ERR_OPERATION_INVALID:
            raise


def undefine(dom) -> None:
    """Undefine, with its managed save image, snapshot metadata and (UEFI) NVRAM."""
    flags = (libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
             | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA)
    try:
        dom.undefineFlags(flags | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    except libvirt.libvirtError:
        # Drivers without NVRAM support reject the flag; without it the call is exact.
        call(f"domain {dom.name()}: undefine", dom.undefineFlags, flags)


def shutdown(dom, timeout: float, destroy_after: bool = False) -> bool:
    """Ask the guest to power off (ACPI) and wait until it has. A guest still running
    after `timeout` is destroyed when `destroy_after`, and otherwise an error; whether
    it was destroyed."""
    call(f"domain {dom.name()}: shutdown", dom.shutdown)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not dom.isActive():
            return False
        time.sleep(0.2)
    if destroy_after:
        if dom.isActive():
            destroy(dom)
        return True
    raise LibvirtAdapterError(
        f"domain {dom.name()}: still running {timeout:g} s after an ACPI shutdown request; "
        "its guest may ignore ACPI: use state=destroyed, or destroy_after_timeout, to "
        "power it off")


def set_autostart(dom, autostart: bool) -> bool:
    """Set autostart; whether it changed."""
    if bool(dom.autostart()) == autostart:
        return False
    call(f"domain {dom.name()}: autostart", dom.setAutostart, int(autostart))
    return True


def xml_of(dom, inactive: bool = False) -> str:
    flags = libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0
    return call(f"domain {dom.name()}: read XML", dom.XMLDesc, flags)
