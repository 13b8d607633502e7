# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The QEMU guest agent, through libvirt: is it there, does it answer, and freezing
and thawing the guest's filesystems around a snapshot.

A guest without the agent's channel is told apart from one whose agent does not
answer (not installed, not started, or the OS still booting): the first can never
answer, the second may.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_xml import (
    has_guest_agent_channel)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.module_run import ReadOnlyRun

try:
    import libvirt_qemu
except ImportError:  # part of libvirt-python; only missing where libvirt is
    libvirt_qemu = None


def agent_state(dom, timeout: int = 2) -> str:
    """`ready`, `not_answering`, `no_channel` or `not_running`."""
    if not dom.isActive():
        return "not_running"
    if not has_guest_agent_channel(ET.fromstring(dom.XMLDesc(0))):
        return "no_channel"
    try:
        libvirt_qemu.qemuAgentCommand(dom, json.dumps({"execute": "guest-ping"}), timeout, 0)
    except lv.libvirt.libvirtError:
        return "not_answering"
    return "ready"


def freeze(dom) -> int:
    """Freeze every filesystem of the guest; how many were frozen."""
    try:
        return int(dom.fsFreeze() or 0)
    except lv.libvirt.libvirtError as err:
        raise lv.LibvirtAdapterError(f"domain {dom.name()}: freeze failed: "
                                     f"{err.get_error_message()}") from err


def thaw(dom) -> None:
    """Thaw the guest's filesystems. A guest stays frozen until this succeeds, so it is
    tried again before giving up."""
    last: Exception | None = None
    for dummy in range(3):
        try:
            dom.fsThaw()
            return
        except lv.libvirt.libvirtError as err:
            last = err
    raise lv.LibvirtAdapterError(
        f"domain {dom.name()}: THAW FAILED, its filesystems may still be frozen: "
        f"{last.get_error_message()}; run 'virsh domfsthaw {dom.name()}' on its host")


def describe(dom, guest_agent: bool) -> dict[str, Any]:
    """A domain's state and, when asked, its guest agent's."""
    out: dict[str, Any] = {"name": dom.name(), "state": lv.domain_state(dom)}
    if guest_agent:
        out["guest_agent"] = agent_state(dom)
    return out


class DomainInfo(ReadOnlyRun):
    """One run of the libvirt_domain_info module: read, change nothing."""

    def run(self) -> dict[str, Any]:
        p = self.params
        wanted = p["domains"] or [{"name": p["name"], "uri": p["uri"]}]
        found = []
        with lv.Connections(p["connect_timeout"]) as connections:
            for entry in wanted:
                if not entry.get("name"):
                    raise lv.LibvirtAdapterError(f"domains: every element needs a name, got "
                                                 f"{entry!r}")
                uri = entry.get("uri") or p["uri"]
                dom = lv.find_domain(connections.get(uri), entry["name"])
                if dom is None:
                    found.append({"name": entry["name"], "uri": uri, "state": "undefined",
                                  **({"guest_agent": "not_running"} if p["guest_agent"]
                                     else {})})
                else:
                    found.append({**describe(dom, p["guest_agent"]), "uri": uri})
        result: dict[str, Any] = {"changed": False, "domains": found}
        if p["guest_agent"]:
            result["no_agent"] = [d["name"] for d in found if d["guest_agent"] == "no_channel"]
            result["not_ready"] = [d["name"] for d in found
                                   if d["guest_agent"] in ("not_answering", "not_running")]
        return result
