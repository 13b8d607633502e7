# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bring one libvirt domain to a declared state: defined as specified, running, shut
down, destroyed or gone, and optionally moved to another host first.

The difference is computed before anything changes, so check mode reports exactly
what a real run does. A domain found active on both source and target is never
touched: that is a VM running twice, for a human to look at.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_migration import (
    MigrationPolicy, migrate_live)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_xml import (
    differences, domain_summary, keep_macs, render_domain_xml, with_uuid)


def _text(summary: dict[str, Any] | None) -> str:
    return "" if summary is None else json.dumps(summary, indent=2, sort_keys=True) + "\n"


class DomainRun:
    """One run of the libvirt_domain module."""

    @staticmethod
    def session(params: dict[str, Any]) -> lv.Connections:
        """What a batch of domains shares: one connection per host."""
        return lv.Connections(params["connect_timeout"])

    def __init__(self, params: dict[str, Any], check_mode: bool,
                 session: lv.Connections | None = None) -> None:
        self.params = params
        self.session = session
        self.name = params["name"]
        self.check_mode = check_mode
        self.changed = False
        self.actions: list[str] = []
        self.diff = {"before": "", "after": ""}
        self.pending_restart = False
        self.migration: dict[str, Any] = {}

    def _do(self, action: str, fn, *args):
        """Record `action`; run it unless in check mode."""
        self.changed = True
        self.actions.append(action)
        return None if self.check_mode else fn(*args)

    def desired_xml(self) -> str | None:
        if self.params.get("xml"):
            return self.params["xml"]
        if self.params.get("spec"):
            return render_domain_xml(self.name, self.params["spec"])
        return None

    def run(self) -> dict[str, Any]:
        with lv.connections(self.params, self.session) as connections:
            return self._run(connections)

    def _run(self, connections: lv.Connections) -> dict[str, Any]:
        conn = connections.get(self.params["uri"])
        uri = self.params["uri"]
        dom = lv.find_domain(conn, self.name)
        if self.params.get("target_uri"):
            target = connections.get(self.params["target_uri"])
            dom = self.move(conn, dom, target)
            conn, uri = target, self.params["target_uri"]
        if self.params["state"] == "absent":
            self.remove(dom)
            dom = None
        else:
            dom = self.ensure_defined(conn, dom)
            self.ensure_state(dom)
        current = lv.find_domain(conn, self.name) if not self.check_mode else dom
        return {
            "changed": self.changed,
            "actions": self.actions,
            "uri": uri,
            "state": self.predicted_state(current),
            "xml": lv.xml_of(current) if current is not None else "",
            "pending_restart": self.pending_restart,
            "migration": self.migration,
            "diff": self.diff,
        }

    def predicted_state(self, dom) -> str:
        if not self.check_mode:
            return lv.domain_state(dom)
        wanted = self.params["state"]
        if wanted == "absent":
            return "undefined"
        if wanted == "running":
            return "running"
        if wanted in ("shutdown", "destroyed"):
            return "shutoff"
        return lv.domain_state(dom) if dom is not None else "shutoff"

    # -- steps ------------------------------------------------------------------

    def move(self, source, dom, target):
        """Make `target` the domain's host; return the domain there (None in check
        mode when it is still to be moved)."""
        if self.params["state"] == "absent":
            raise lv.LibvirtAdapterError("target_uri cannot be combined with state=absent: "
                                         "remove the domain where it is")
        there = lv.find_domain(target, self.name)
        here_active = dom is not None and dom.isActive()
        if here_active and there is not None and there.isActive():
            raise lv.LibvirtAdapterError(
                f"domain {self.name} is running on both {self.params['uri']} and "
                f"{self.params['target_uri']}: refusing to touch either; find out which copy "
                "owns its disks, destroy the other, then run again")
        if dom is None:
            if there is None:
                raise lv.LibvirtAdapterError(
                    f"domain {self.name} is defined on neither {self.params['uri']} nor "
                    f"{self.params['target_uri']}")
            return there  # already moved
        if here_active and self.params["state"] in ("running", "present"):
            if there is not None:
                # A definition left on the target by an earlier life of the VM there
                # (it was evacuated from it, say): not running, and stale beside the
                # copy that runs. libvirt refuses to migrate onto another UUID.
                self._do("undefine stale definition on target", lv.undefine, there)
            migrated = self._do("migrate live", migrate_live, dom, target,
                                self.params["timeout"], self.params["migrate_tls"],
                                MigrationPolicy.from_options(self.params.get("migration")))
            if migrated is None:  # check mode
                return there
            moved, self.migration = migrated
            return moved
        if here_active:
            self.stop(dom)
        if there is not None:
            # The target already holds the definition: the source copy is stale.
            self._do("undefine on source", lv.undefine, dom)
            return there
        xml = lv.xml_of(dom, inactive=True)
        moved = self._do("move definition", self._move_definition, target, xml, dom)
        return moved

    def _move_definition(self, target, xml: str, dom):
        moved = lv.define(target, xml, self.name)
        lv.undefine(dom)
        return moved

    def remove(self, dom) -> None:
        if dom is None:
            return
        self.diff["before"] = _text(domain_summary(lv.xml_of(dom, inactive=True)))
        if dom.isActive():
            self._do("destroy", lv.destroy, dom)
        self._do("undefine", lv.undefine, dom)

    def ensure_defined(self, conn, dom):
        desired_xml = self.desired_xml()
        if dom is None:
            if desired_xml is None:
                raise lv.LibvirtAdapterError(
                    f"domain {self.name} is not defined on {self.params['uri']}: give spec "
                    "or xml to define it")
            summary = domain_summary(desired_xml)
            if summary["name"] != self.name:
                raise lv.LibvirtAdapterError(f"xml names the domain {summary['name']!r}, "
                                             f"not {self.name!r}")
            self.diff["after"] = _text(summary)
            dom = self._do("define", lv.define, conn, desired_xml, self.name)
        elif desired_xml is not None:
            current_xml = lv.xml_of(dom, inactive=True)
            current = domain_summary(current_xml)
            desired = differences(domain_summary(desired_xml), current)
            if desired["name"] != self.name:
                raise lv.LibvirtAdapterError(f"xml names the domain {desired['name']!r}, "
                                             f"not {self.name!r}")
            if desired != current:
                self.diff = {"before": _text(current), "after": _text(desired)}
                xml = with_uuid(keep_macs(desired_xml, current_xml), dom.UUIDString())
                self._do("redefine", lv.define, conn, xml, self.name)
                self.pending_restart = bool(dom.isActive())
                if dom.isActive() and desired["kind"] != lv.domain_kind(dom):
                    self._do("set kind", lv.set_live_kind, dom, desired["kind"])
        if dom is not None and bool(dom.autostart()) != self.params["autostart"]:
            self._do("autostart", lv.set_autostart, dom, self.params["autostart"])
        return dom

    def stop(self, dom) -> None:
        if self.params["state"] == "shutdown":
            destroyed = self._do("shutdown", lv.shutdown, dom, self.params["timeout"],
                                 self.params["destroy_after_timeout"])
            if destroyed:  # the guest ignored the request: say so
                self.actions.append("destroy")
        else:
            self._do("destroy", lv.destroy, dom)

    def ensure_state(self, dom) -> None:
        wanted = self.params["state"]
        if dom is None:  # check mode, not defined yet
            if wanted == "running":
                self._do("start", lambda: None)
            return
        active = dom.isActive()
        paused = active and lv.domain_state(dom) == "paused"
        if wanted == "running" and (not active or paused):
            self._do("start", lv.start, dom)
        elif wanted in ("shutdown", "destroyed") and active:
            self.stop(dom)
