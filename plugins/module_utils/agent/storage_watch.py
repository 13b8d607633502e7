# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host agent's watch over its storage (docs/agent.md): the storage_prober thread
reaches Ceph every PROBE_EVERY seconds (storage_probe.py), and the heartbeat acts on
what it found: once Ceph has been out of reach here for `storage_grace` while another
host's liveness value says it reaches it, the fencer self-fences as if the lease were
lost, and the host registers again only once a probe has reached Ceph since. A Ceph
that no host reaches is Ceph's outage: nothing is fenced.

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import logging
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import EtcdError
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import json_or_none
from ansible_collections.yasco.cluster.plugins.module_utils.agent import storage_probe
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_state import AgentState
from ansible_collections.yasco.cluster.plugins.module_utils.agent.storage_probe import (
    PROBE_EVERY, PROBE_TIMEOUT)

LOG = logging.getLogger("yasco-agent")


class StorageWatch(AgentState):
    """The storage probe's thread, and the storage fence it decides."""

    def storage_state(self) -> str | None:
        """What the liveness key says of this host's storage: None when not probed,
        storage_probe.LOST once Ceph has been out of reach for `storage_grace`."""
        if not self.config.ceph_conf:
            return None
        with self.lock:
            lost_for = self.clock() - self.storage_ok_at
        return storage_probe.LOST if lost_for >= self.config.storage_grace \
            else storage_probe.REACHED

    def check_storage(self, etcd: EtcdClient) -> None:
        """Act on the storage probe's findings (storage_probe.verdict): once Ceph has
        been out of reach here for `storage_grace` while another host's liveness value
        says it reaches it, have the fencer self-fence, as if the lease were lost; the
        lease is then revoked and the HA watcher evacuates the host. Reads the other
        hosts only then."""
        if not self.config.ceph_conf:
            return
        with self.lock:
            # Counted from the registration at the earliest: a host back from a
            # partition has its probe's answer within seconds, and must not fence
            # itself again for the time it was cut off.
            lost_for = self.clock() - max(self.storage_ok_at, self.registered_at)
            frozen = self.frozen
        others: list[Any] = []
        if lost_for >= self.config.storage_grace:
            try:
                others = self._others_storage(etcd)
            except EtcdError as err:
                # Unknown is not evidence: without it, this could be Ceph's outage.
                if self.storage_said != storage_probe.OUTAGE:
                    LOG.error("cannot read the other hosts' liveness: %s", err)
        said = storage_probe.verdict(lost_for, self.config.storage_grace, others, frozen)
        if said == storage_probe.FENCE:
            with self.lock:
                self.storage_fence = True
        elif said == storage_probe.OUTAGE and self.storage_said != said:
            LOG.critical("CEPH OUT OF REACH for %.0f s, and %s: NOT self-fencing; the "
                         "guests here wait on their disks until Ceph answers", lost_for,
                         "HA is frozen" if frozen else
                         "no other host that probes it reaches it either (a Ceph outage)")
        self.storage_said = said

    def _others_storage(self, etcd: EtcdClient) -> list[Any]:
        """What the other hosts' liveness keys say of their storage."""
        found = []
        for kv in etcd.get_prefix(etcd_keys.hosts_prefix(cluster=self.config.cluster)):
            parsed = etcd_keys.parse_key(kv.key, cluster=self.config.cluster)
            if parsed and parsed.kind == "alive" and parsed.host != self.config.host:
                found.append((json_or_none(kv.value) or {}).get("storage"))
        return found

    def storage_awaited(self) -> bool:
        """Whether to wait before registering: the host self-fenced because it alone
        was cut off from Ceph, and no probe has reached Ceph since (a host that had
        registered again would be given its VMs back)."""
        with self.lock:
            return bool(self.storage_fenced_at) and self.storage_ok_at <= \
                self.storage_fenced_at

    def storage_prober(self) -> None:
        """Probe Ceph every PROBE_EVERY seconds; only `storage_ok_at` comes out of it,
        so a probe that hangs counts as out of reach."""
        c = self.config
        try:
            probe = storage_probe.Probe(c.ceph_conf, c.ceph_client, c.ceph_pool,
                                        PROBE_TIMEOUT, c.ceph_keyring)
        except storage_probe.ProbeError as err:
            LOG.critical("NO STORAGE PROBE: %s", err)
            return
        failing = False
        while not self.stopping.is_set():
            started = self.clock()
            if probe.reached():
                with self.lock:
                    if failing:
                        LOG.warning("Ceph reached again after %.0f s",
                                    self.clock() - self.storage_ok_at)
                    self.storage_ok_at = self.clock()
                failing = False
            elif not failing:
                LOG.error("Ceph not reached: %s", probe.last_error)
                failing = True
            self.stopping.wait(max(0.0, started + PROBE_EVERY - self.clock()))
        probe.close()
