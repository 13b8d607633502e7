# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Domain XML: written from a VM spec, read back for the settings YASCO manages, and
merged with what libvirt keeps of a domain when it is redefined.

Idempotence rests on `domain_summary`: libvirt expands every definition (addresses,
controllers, machine versions, generated MACs), so two definitions are compared by the
settings YASCO manages, never by their XML text. Nothing here calls libvirt.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt import (
    METADATA_NS, LibvirtAdapterError)

# What libvirt does when a guest's kernel panics (a domain's `on_crash`); the first is
# the default.
ON_CRASH = ("restart", "destroy")

# The virtio-serial port the QEMU guest agent (qemu-guest-agent) listens on.
GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"


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
