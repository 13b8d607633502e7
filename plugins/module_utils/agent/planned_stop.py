# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host agent's planned stop (docs/agent.md): an agent stopped on purpose (its
host rebooting or powering off, or the agent alone) marks its host in maintenance and
revokes its lease, so that the HA watcher sees no failure. `shutdown_policy` says what
becomes of the HA VMs: kept here for the host's return, shut down cleanly and failed
over, or live-migrated away first. If etcd cannot be told, the agent self-fences.

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import logging
import subprocess
import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import EtcdError
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none, to_json)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.self_fence import SelfFence
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events

LOG = logging.getLogger("yasco-agent")

# Where the host's shutdown says whether it reboots or powers off, when systemd cannot
# be asked (the lab writes it; so can an operator's script): `reboot` or `poweroff`.
SHUTDOWN_INTENT_FILE = "/run/yasco-agent/shutdown"


def shutdown_intent(intent_file: str = SHUTDOWN_INTENT_FILE) -> str | None:
    """`reboot` or `poweroff` when the host is going down, as the intent file or
    systemd's queued jobs say; None when only the agent stops."""
    try:
        with open(intent_file, encoding="ascii") as handle:
            said = handle.read().strip()
        if said in ("reboot", "poweroff"):
            return said
    except OSError:
        pass
    try:
        jobs = subprocess.run(["systemctl", "list-jobs", "--no-legend", "--plain"],
                              capture_output=True, text=True, timeout=2, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if "reboot.target" in jobs or "kexec.target" in jobs:
        return "reboot"
    if "poweroff.target" in jobs or "halt.target" in jobs:
        return "poweroff"
    return None


class PlannedStop(SelfFence):
    """`stop()`, and the maintenance marker and registration it writes."""

    # SHUTDOWN_INTENT_FILE, or a test's own file in its place.
    intent_file = SHUTDOWN_INTENT_FILE

    def _mark(self, etcd: EtcdClient, reason: str, **more: Any) -> bool:
        """The agent's own maintenance marker, created only if absent: a drain's or an
        operator's says more, and must outlive this stop and the next start. Whether
        this wrote it."""
        return etcd.put_if(self.keys["maintenance"], to_json({
            "since": cluster_events.timestamp(), "by": "agent", "reason": reason, **more}),
            mod_revision=0).succeeded

    def _say_stopped(self, etcd: EtcdClient, reason: str | None) -> None:
        """Write into this host's registration that its agent stopped cleanly, before
        the lease goes, or with `reason` None take that back (a stop whose revoke
        failed): a host in maintenance whose lease goes without it went down uncleanly
        (etcd_keys.died_in_maintenance), and its VMs fail over. The next registration
        writes the record afresh, without it."""
        known = etcd.get(self.keys["registered"])
        facts = json_or_none(known.value) if known is not None else None
        if not isinstance(facts, dict) or (reason is None and "stopped" not in facts):
            return
        facts = {k: v for k, v in facts.items() if k not in ("stopped", "stop_reason")}
        if reason is not None:
            facts.update(stopped=cluster_events.timestamp(), stop_reason=reason)
        etcd.put_if(self.keys["registered"], to_json(facts), mod_revision=known.mod_revision)

    def _mark_off(self, etcd: EtcdClient, off: list[str]) -> None:
        """Add to the agent's own marker the HA VMs now off for sure: the reconciler
        starts those elsewhere even once this host's lease is gone."""
        marker = etcd.get(self.keys["maintenance"])
        if marker is not None and by_agent(marker.value):
            etcd.put_if(self.keys["maintenance"], to_json({
                **(json_or_none(marker.value) or {}), "off": off}),
                mod_revision=marker.mod_revision)

    def _active_vms(self) -> dict[str, str]:
        """The VMs running here (domains of a kind YASCO gave them): name -> kind."""
        conn = lv.connect(self.config.libvirt_uri)
        try:
            kinds = {d.name(): lv.domain_kind(d) for d in conn.listAllDomains(
                lv.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}
        finally:
            conn.close()
        return {name: kind for name, kind in kinds.items() if kind}

    def migrate_away(self, etcd: EtcdClient, reason: str) -> None:
        """`shutdown_policy: migrate`: a marker of the agent's own that asks for a drain
        (`migrate: true`), on which the HA watcher live-migrates every VM off this host,
        as `drain.yml` does; then wait, the lease still renewed, until no VM runs here
        or `migrate_timeout` has passed. The HA VMs still here then fail over, as on a
        poweroff. A host in maintenance already (drained, or an operator's marker) has
        had its VMs moved, or kept on purpose: nothing is asked."""
        if not self._mark(etcd, f"{reason}: its VMs migrate away", migrate=True):
            LOG.info("in maintenance already: no migration asked")
            return
        LOG.warning("asked the HA watcher to migrate this host's VMs away (shutdown_policy "
                    "migrate); waiting up to %g s", self.config.migrate_timeout)
        deadline = self.clock() + self.config.migrate_timeout
        left = self._active_vms()
        while left and self.clock() < deadline:
            time.sleep(0.5)
            left = self._active_vms()
        if not left:
            LOG.info("every VM migrated away")
            return
        LOG.error("still here after %g s: %s", self.config.migrate_timeout,
                  ", ".join(sorted(left)))
        if "ha" in left.values():
            self._mark_off(etcd, self.shut_down_ha_domains())

    def shut_down_ha_domains(self) -> list[str]:
        """Ask every running HA guest to shut down, and power off those still running
        after `shutdown_timeout`; the names of those now off."""
        conn = lv.connect(self.config.libvirt_uri)
        try:
            ha = [d for d in conn.listAllDomains(lv.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
                  if lv.domain_kind(d) == "ha"]
            for dom in ha:
                try:
                    dom.shutdown()
                except lv.libvirt.libvirtError as err:
                    LOG.warning("%s: shutdown: %s", dom.name(), err.get_error_message())
            LOG.warning("shutting down HA domains for their failover: %s",
                        ", ".join(d.name() for d in ha) or "none")
            deadline = self.clock() + self.config.shutdown_timeout
            while self.clock() < deadline and any(_is_active(d) for d in ha):
                time.sleep(0.2)
            forced = []
            for dom in ha:
                if _is_active(dom):
                    try:
                        dom.destroy()
                        forced.append(dom.name())
                    except lv.libvirt.libvirtError as err:
                        LOG.warning("%s: destroy: %s", dom.name(), err.get_error_message())
            if forced:
                LOG.warning("powered off after %.0f s: %s", self.config.shutdown_timeout,
                            ", ".join(forced))
            return sorted(d.name() for d in ha if not _is_active(d))
        finally:
            conn.close()

    def stop(self) -> None:
        """A planned stop: mark the host in maintenance, then revoke the lease, so
        that the HA watcher sees no failure. If etcd cannot be told, self-fence: the
        lease will expire with nobody renewing it.

        When the host powers off (or always, with `shutdown_policy: failover`), its HA
        guests are shut down first, cleanly, while the lease is still renewed: the
        marker keeps the host from being a target and from counting as failed, so the
        HA watcher's reconciler starts each of them elsewhere as soon as it is off.
        With `migrate`, the host's VMs are live-migrated away first (`migrate_away`).
        Otherwise (a reboot, or the agent alone stopping) they stay recorded here and
        start again here once the host is back."""
        intent = shutdown_intent(self.intent_file)
        policy = self.config.shutdown_policy
        failover = policy == "failover" or (policy == "conditional" and intent == "poweroff")
        migrate = policy == "migrate" and intent is not None
        reason = {"reboot": "host rebooting", "poweroff": "host powering off"}.get(
            intent or "", "agent stopped")
        etcd = self._client()
        if failover or migrate:
            try:
                if migrate:
                    self.migrate_away(etcd, reason)
                else:
                    self._mark(etcd, f"{reason}: its HA VMs fail over")
                    self._mark_off(etcd, self.shut_down_ha_domains())
            except EtcdError as err:
                LOG.error("cannot mark maintenance to move the HA VMs away (%s): they stay "
                          "here", err)
            except (lv.LibvirtAdapterError, lv.libvirt.libvirtError) as err:
                LOG.error("cannot move the HA domains away: %s", err)
        self.leaving.set()
        try:
            with self.lock:
                lease, self.lease = self.lease, 0  # no more keepalives or fences
            # Created only if absent: a drain's or an operator's marker says more,
            # and must outlive this stop and the next start.
            self._mark(etcd, reason)
            if lease:  # not after a self-fence: its VMs are the evacuation's
                self._say_stopped(etcd, reason)
                etcd.revoke_lease(lease)
            self.stopped_cleanly = True
            LOG.info("stopped (%s, shutdown_policy %s): maintenance marker written, lease "
                     "revoked", reason, policy)
        except EtcdError as err:
            LOG.critical("cannot mark maintenance before stopping (%s): self-fencing", err)
            try:  # the lease expires unrevoked: not a clean stop, as far as it can say
                self._say_stopped(etcd, None)
            except EtcdError:
                pass
            try:
                self.self_fence(lv.connect(self.config.libvirt_uri), first=True)
                self.stopped_cleanly = True
            except (lv.LibvirtAdapterError, lv.libvirt.libvirtError) as fence_err:
                LOG.critical("SELF-FENCE FAILED: %s", fence_err)
        finally:
            etcd.close()
            if self.stopped_cleanly and self.watchdog is not None:
                self.watchdog.disarm()
                LOG.info("watchdog disarmed")
            self.stopping.set()


def _is_active(dom) -> bool:
    try:
        return bool(dom.isActive())
    except lv.libvirt.libvirtError:
        return False


def by_agent(value: str) -> bool:
    """Whether a maintenance marker's value is the agent's own, which its planned stop
    wrote and its next registration clears."""
    data = json_or_none(value)
    return isinstance(data, dict) and data.get("by") == "agent"
