# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt adapter: connections, domain XML from a VM spec, and domain life cycle.

Modules call this and nothing else of libvirt. Every libvirt failure leaves here as a
LibvirtAdapterError whose message names the URI or domain and says what to do.

Idempotence rests on `domain_summary`: libvirt expands every definition (addresses,
controllers, machine versions, generated MACs), so two definitions are compared by the
settings YASCO manages, never by their XML text.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# What libvirt does when a guest's kernel panics (a domain's `on_crash`); the first is
# the default.
ON_CRASH = ("restart", "destroy")

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

# The virtio-serial port the QEMU guest agent (qemu-guest-agent) listens on.
GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"

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


# -- XML ------------------------------------------------------------------------

def _sub(parent: ET.Element, tag: str, text: Any = None, **attrs: Any) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: str(v) for k, v in attrs.items() if v is not None})
    if text is not None:
        element.text = str(text)
    return element


def _disk(devices: ET.Element, disk: dict[str, Any], index: int, machine: str) -> None:
    device = disk.get("device", "disk")
    # CD-ROMs cannot be virtio: IDE on the default i440fx machine, SATA on q35.
    cdrom_bus = "sata" if "q35" in machine else "ide"
    bus = disk.get("bus") or (cdrom_bus if device == "cdrom" else "virtio")
    prefix = {"virtio": "vd", "ide": "hd"}.get(bus, "sd")
    target = disk.get("target") or f"{prefix}{chr(ord('a') + index)}"
    if disk.get("rbd"):
        element = _sub(devices, "disk", type="network", device=device)
        _sub(element, "driver", name="qemu", type="raw", cache=disk.get("cache", "none"),
             discard=disk.get("discard"))
        source = _sub(element, "source", protocol="rbd", name=disk["rbd"])
        for monitor in disk.get("monitors", []):
            host, dummy, port = str(monitor).rpartition(":")
            _sub(source, "host", name=host or port, port=port if host else None)
        if disk.get("auth_user"):
            auth = _sub(element, "auth", username=disk["auth_user"])
            _sub(auth, "secret", type="ceph", uuid=disk["secret_uuid"])
    else:
        element = _sub(devices, "disk", type="file", device=device)
        _sub(element, "driver", name="qemu", type=disk.get("format", "raw"))
        _sub(element, "source", file=disk["file"])
    _sub(element, "target", dev=target, bus=bus)
    if disk.get("readonly") or device == "cdrom":
        _sub(element, "readonly")


# The namespace of YASCO's element in a domain's <metadata>: <yasco:vm kind="ha"/>.
# The host agent reads the kind there, from libvirt alone, when it must self-fence
# with etcd out of reach.
METADATA_NS = "https://yasco.dev/xmlns/libvirt/vm/1"
METADATA_PREFIX = "yasco"
ET.register_namespace(METADATA_PREFIX, METADATA_NS)
VM_KINDS = ("ha", "plain", "preemptible")


def render_domain_xml(name: str, spec: dict[str, Any]) -> str:
    """Domain XML for a VM spec (see the libvirt_domain module's `spec` option)."""
    domain = ET.Element("domain", type=spec.get("domain_type", "kvm"))
    _sub(domain, "name", name)
    _sub(domain, "memory", int(spec["memory_mb"]), unit="MiB")
    _sub(domain, "vcpu", int(spec["vcpus"]))
    if spec.get("kind"):
        metadata = _sub(domain, "metadata")
        _sub(metadata, f"{{{METADATA_NS}}}vm", kind=spec["kind"])
    os_element = _sub(domain, "os")
    _sub(os_element, "type", "hvm", arch="x86_64", machine=spec.get("machine", "pc"))
    for key in ("kernel", "initrd", "cmdline"):
        if spec.get(key):
            _sub(os_element, key, spec[key])
    if not spec.get("kernel"):
        _sub(os_element, "boot", dev="hd")
    features = _sub(domain, "features")
    _sub(features, "acpi")
    _sub(domain, "on_poweroff", "destroy")
    _sub(domain, "on_reboot", "restart")
    # A guest kernel that panics tells QEMU through the pvpanic device (below), and
    # libvirt then resets it in the same QEMU process, which keeps its disks' locks
    # (back within a boot, with no fence and no other host involved), or powers it off.
    _sub(domain, "on_crash", spec.get("on_crash") or ON_CRASH[0])
    devices = _sub(domain, "devices")
    for index, disk in enumerate(spec.get("disks", [])):
        _disk(devices, disk, index, spec.get("machine") or "pc")
    for nic in spec.get("nics", []):
        kind = "network" if nic.get("network") else "bridge"
        element = _sub(devices, "interface", type=kind)
        _sub(element, "source", **{kind: nic.get(kind)})
        if nic.get("mac"):
            _sub(element, "mac", address=nic["mac"])
        _sub(element, "model", type=nic.get("model", "virtio"))
    if spec.get("serial_log"):
        serial = _sub(devices, "serial", type="file")
        _sub(serial, "source", path=spec["serial_log"], append="on")
        _sub(serial, "target", port=0)
    else:
        serial = _sub(devices, "serial", type="pty")
        _sub(serial, "target", port=0)
    if spec.get("guest_agent"):
        channel = _sub(devices, "channel", type="unix")
        _sub(channel, "target", type="virtio", name=GUEST_AGENT_CHANNEL)
    _sub(devices, "panic", model="isa")  # pvpanic, ACPI QEMU0001
    if spec.get("watchdog"):
        # Reset in place by QEMU once the guest's watchdog daemon stops petting it.
        _sub(devices, "watchdog", model="i6300esb", action="reset")
    _sub(devices, "memballoon", model="none")
    ET.indent(domain)
    return ET.tostring(domain, encoding="unicode") + "\n"


def _parse(xml: str, what: str) -> ET.Element:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as err:
        raise LibvirtAdapterError(f"{what}: not valid XML: {err}") from err
    if root.tag != "domain":
        raise LibvirtAdapterError(f"{what}: the root element is <{root.tag}>, not <domain>")
    return root


def _memory_mb(element: ET.Element | None) -> int | None:
    if element is None or element.text is None:
        return None
    factor = {"b": 1 / 1048576, "bytes": 1 / 1048576, "KiB": 1 / 1024, "k": 1 / 1024,
              "MiB": 1, "M": 1, "GiB": 1024, "G": 1024}.get(element.get("unit", "KiB"), 1 / 1024)
    return int(round(int(element.text) * factor))


def domain_summary(xml: str, what: str = "domain XML") -> dict[str, Any]:
    """The settings YASCO manages, read from any domain XML, to compare definitions."""
    root = _parse(xml, what)
    os_element = root.find("os")

    def os_text(tag: str) -> str | None:
        found = os_element.find(tag) if os_element is not None else None
        return found.text if found is not None else None

    disks = []
    for disk in root.findall("devices/disk"):
        source = disk.find("source")
        driver = disk.find("driver")
        auth = disk.find("auth")
        target = disk.find("target")
        disks.append({
            "device": disk.get("device", "disk"),
            "source": (source.get("name") or source.get("file")) if source is not None else None,
            "monitors": sorted(
                f"{h.get('name')}:{h.get('port')}" if h.get("port") else h.get("name")
                for h in (source.findall("host") if source is not None else [])),
            "auth_user": auth.get("username") if auth is not None else None,
            "secret_uuid": (auth.find("secret").get("uuid")
                            if auth is not None and auth.find("secret") is not None else None),
            "cache": driver.get("cache") if driver is not None else None,
            "target": target.get("dev") if target is not None else None,
            "readonly": disk.find("readonly") is not None,
        })
    nics = []
    for nic in root.findall("devices/interface"):
        source = nic.find("source")
        mac = nic.find("mac")
        model = nic.find("model")
        nics.append({
            "type": nic.get("type"),
            "source": (source.get("network") or source.get("bridge")
                       if source is not None else None),
            "mac": mac.get("address") if mac is not None else None,
            "model": model.get("type") if model is not None else None,
        })
    serials = [{"type": s.get("type"),
                "path": s.find("source").get("path") if s.find("source") is not None else None}
               for s in root.findall("devices/serial")]
    vcpu = root.find("vcpu")
    return {
        "name": root.findtext("name"),
        "domain_type": root.get("type"),
        "vcpus": int(vcpu.text) if vcpu is not None and vcpu.text else None,
        "memory_mb": _memory_mb(root.find("memory")),
        "kernel": os_text("kernel"),
        "initrd": os_text("initrd"),
        "cmdline": os_text("cmdline"),
        "disks": disks,
        "nics": nics,
        "serials": serials,
        "kind": _kind(root),
        "guest_agent": has_guest_agent_channel(root),
        "on_crash": (root.findtext("on_crash") or "destroy").strip(),  # libvirt's default
        # Ours alone: libvirt adds an itco watchdog to every q35 domain by itself.
        "watchdog": any(w.get("model") == "i6300esb" for w in root.findall("devices/watchdog")),
    }


def has_guest_agent_channel(root: ET.Element) -> bool:
    """Whether a domain's XML has the QEMU guest agent's channel."""
    return any(target.get("name") == GUEST_AGENT_CHANNEL
               for target in root.findall("devices/channel/target"))


def _kind(root: ET.Element) -> str | None:
    element = root.find(f"metadata/{{{METADATA_NS}}}vm")
    return element.get("kind") if element is not None else None


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


def differences(desired: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """`desired` with what libvirt fills in when left out (generated MACs) taken from
    `current`, so that only real differences remain."""
    desired = {**desired, "nics": [dict(n) for n in desired["nics"]]}
    for mine, theirs in zip(desired["nics"], current["nics"], strict=False):
        if mine["mac"] is None:
            mine["mac"] = theirs["mac"]
    return desired


def with_uuid(xml: str, uuid: str) -> str:
    """`xml` carrying `uuid`, so that defining it updates the existing domain."""
    root = _parse(xml, "domain XML")
    element = root.find("uuid")
    if element is None:
        element = ET.Element("uuid")
        root.insert(1, element)
    element.text = uuid
    return ET.tostring(root, encoding="unicode")


def keep_macs(xml: str, current_xml: str) -> str:
    """`xml` with the current MAC of each NIC that gives none, so a redefinition does
    not change a guest's network identity."""
    root = _parse(xml, "domain XML")
    current = [nic.find("mac") for nic in _parse(current_xml, "domain XML").findall(
        "devices/interface")]
    for nic, mac in zip(root.findall("devices/interface"), current, strict=False):
        if nic.find("mac") is None and mac is not None:
            nic.insert(1, ET.Element("mac", address=mac.get("address")))
    return ET.tostring(root, encoding="unicode")


# -- life cycle -------------------------------------------------------------------

def _call(what: str, fn, *args):
    try:
        return fn(*args)
    except libvirt.libvirtError as err:
        raise LibvirtAdapterError(f"{what}: {err.get_error_message()}") from err


def define(conn, xml: str, name: str):
    return _call(f"domain {name}: define", conn.defineXML, xml)


def start(dom) -> None:
    if dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
        _call(f"domain {dom.name()}: resume", dom.resume)
    else:
        _call(f"domain {dom.name()}: start", dom.create)


def destroy(dom) -> None:
    _call(f"domain {dom.name()}: destroy", dom.destroy)


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
        _call(f"domain {dom.name()}: undefine", dom.undefineFlags, flags)


def shutdown(dom, timeout: float, destroy_after: bool = False) -> bool:
    """Ask the guest to power off (ACPI) and wait until it has. A guest still running
    after `timeout` is destroyed when `destroy_after`, and otherwise an error; whether
    it was destroyed."""
    _call(f"domain {dom.name()}: shutdown", dom.shutdown)
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
    _call(f"domain {dom.name()}: autostart", dom.setAutostart, int(autostart))
    return True


# A live migration that fails while the source keeps running is tried once more:
# libvirt has aborted it cleanly, and a stream can break on a loaded host (on the lab,
# QEMU 7.2 once reported an I/O error on its TLS channel, with several at once).
MIGRATION_ATTEMPTS = 2


# QEMU's own maximum pause of a guest at a migration's switch-over, in milliseconds.
QEMU_MAX_DOWNTIME = 300


@dataclass(frozen=True)
class MigrationPolicy:
    """How a live migration runs: the module's `migration` option, which playbooks take
    from the inventory's `yasco_migration`. The defaults are QEMU's own behaviour."""

    bandwidth: int = 0  # MiB/s at most; 0: as fast as the network goes
    max_downtime: int = 0  # ms the guest may pause at the switch-over; 0: QEMU's 300 ms
    # Slow the guest's vCPUs down while its memory changes faster than it is sent, so
    # that a busy guest converges (QEMU's auto-converge).
    auto_converge: bool = False
    compressed: bool = False  # resend only what changed in pages sent already (XBZRLE)
    # A migration still running after this many seconds switches to post-copy: the
    # guest runs on the target at once and fetches the pages it still lacks from the
    # source. It always ends, but a failure of either host or of the network during
    # it loses the guest's memory (its disks are safe, on Ceph): never by default.
    post_copy_after: float | None = None

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> MigrationPolicy:
        given = {k: v for k, v in (options or {}).items() if v is not None}
        return cls(**given)

    def flags(self) -> int:
        flags = 0
        if self.auto_converge:
            flags |= libvirt.VIR_MIGRATE_AUTO_CONVERGE
        if self.compressed:
            flags |= libvirt.VIR_MIGRATE_COMPRESSED
        if self.post_copy_after is not None:
            flags |= libvirt.VIR_MIGRATE_POSTCOPY
        return flags

    def params(self) -> dict[str, Any]:
        if not self.bandwidth:
            return {}
        # The cap holds in both phases: libvirt sets post-copy's apart (MiB/s too).
        params = {libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: self.bandwidth}
        if self.post_copy_after is not None:
            params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY] = self.bandwidth
        return params


def migrate_live(dom, target_conn, timeout: float, tls: bool = True,
                 policy: MigrationPolicy | None = None) -> tuple[Any, dict[str, Any]]:
    """Live-migrate `dom` to `target_conn`, persistent there and undefined here, over
    QEMU's TLS unless `tls` is false, as `policy` says; abort the job if it has not
    finished within `timeout` (a migration switched to post-copy cannot be aborted: it
    is waited for). A failed attempt is retried once while the domain still runs here
    and nowhere on the target. Returns the domain on the target and the migration's
    figures (`migration_stats`)."""
    policy = policy or MigrationPolicy()
    flags = (libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
             | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE | policy.flags())
    if tls:
        flags |= libvirt.VIR_MIGRATE_TLS
    # Set each time: QEMU keeps the last value given, from an earlier attempt say.
    _call(f"domain {dom.name()}: set the migration's maximum downtime",
          dom.migrateSetMaxDowntime, policy.max_downtime or QEMU_MAX_DOWNTIME, 0)
    deadline = time.monotonic() + timeout
    failures: list[str] = []
    for dummy in range(MIGRATION_ATTEMPTS):
        started = time.monotonic()
        outcome = _migrate_once(dom, target_conn, flags, policy,
                                max(1.0, deadline - time.monotonic()))
        if "domain" in outcome:
            figures = migration_stats(outcome["domain"])
            # After post-copy libvirt keeps no figures on the target: the time is ours.
            figures.setdefault("total_ms", round((time.monotonic() - started) * 1000))
            if policy.auto_converge:
                figures["throttle_percent"] = outcome.get("throttle", 0)
            return outcome["domain"], {**figures, "post_copy": "post_copy" in outcome}
        failures.append(outcome["error"].get_error_message())
        if not (_active(dom) and find_domain(target_conn, dom.name()) is None
                and time.monotonic() < deadline):
            break
    raise LibvirtAdapterError(f"domain {dom.name()}: live migration failed: "
                              + "; then: ".join(failures))


def _migrate_once(dom, target_conn, flags: int, policy: MigrationPolicy,
                  timeout: float) -> dict[str, Any]:
    """One migration: {'domain': the domain on the target} or {'error': libvirtError};
    raises when it did not finish within `timeout` (it is aborted)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["domain"] = dom.migrate3(target_conn, policy.params(), flags)
        except libvirt.libvirtError as err:
            outcome["error"] = err

    def wait(seconds: float) -> None:
        """Join the worker for up to `seconds`, noting auto-converge's throttle as it
        goes: libvirt keeps it only while the job runs."""
        until = time.monotonic() + seconds
        while worker.is_alive() and time.monotonic() < until:
            worker.join(min(1.0, max(0.0, until - time.monotonic())))
            if policy.auto_converge and worker.is_alive():
                try:
                    throttle = dom.jobStats().get("auto_converge_throttle", 0)
                except libvirt.libvirtError:
                    continue
                outcome["throttle"] = max(outcome.get("throttle", 0), throttle)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout
    if policy.post_copy_after is not None and policy.post_copy_after < timeout:
        wait(policy.post_copy_after)
        # Asked again each second until QEMU takes it: it refuses while the migration
        # is still being set up, and an ended one needs nothing.
        while worker.is_alive() and time.monotonic() < deadline:
            try:
                dom.migrateStartPostCopy(0)
            except libvirt.libvirtError:
                wait(1.0)
                continue
            # No abort from here on: the guest runs on the target already.
            outcome["post_copy"] = True
            worker.join()
            return outcome
    wait(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        try:
            dom.abortJob()
        except libvirt.libvirtError:
            pass
        worker.join(30)
        if "domain" in outcome:
            return outcome  # it ended as it was being cancelled: moved after all
        raise LibvirtAdapterError(
            f"domain {dom.name()}: live migration did not finish within {timeout:g} s and "
            + ("was cancelled; the domain still runs on the source" if "error" in outcome
               else "libvirt has not said how its cancellation ended: check which host "
                    "runs the domain"))
    return outcome


# What a completed migration's statistics say, by the names a module returns.
MIGRATION_STATS = {"time_elapsed": "total_ms", "downtime": "downtime_ms",
                   "memory_processed": "memory_bytes", "memory_iteration": "iterations"}


def migration_stats(dom) -> dict[str, Any]:
    """The last completed migration of `dom`, read on the target: its total time and the
    guest's pause (ms), the memory sent and QEMU's passes over it; {} when libvirt
    kept none."""
    try:
        stats = dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    except libvirt.libvirtError:
        return {}
    return {name: stats[key] for key, name in MIGRATION_STATS.items() if key in stats}


def _active(dom) -> bool:
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError:
        return False


def xml_of(dom, inactive: bool = False) -> str:
    flags = libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0
    return _call(f"domain {dom.name()}: read XML", dom.XMLDesc, flags)
