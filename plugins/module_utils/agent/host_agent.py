# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hypervisor agent: a liveness key under an etcd lease, the host's domains
published under the same lease, and a self-fence that destroys the host's HA domains
before the lease can have expired anywhere.

The agent's parts, each a class of its own module that shares the state of
agent_state.AgentState, put together here as `Agent`. Five threads, each with its own
connections, so that none waits on another:
- heartbeat (liveness.py): grants the lease, registers the liveness key, renews it
  every `keepalive` seconds, and registers again (new lease) once etcd answers after
  a loss; it never starts VMs;
- fencer (self_fence.py): watches the deadline on the monotonic clock and talks to
  libvirt only; why its self-fence is safe is said there;
- publisher (domain_watch.py): keeps hosts/<host>/domains/ equal to what libvirt runs,
  woken by libvirt domain events and every `reconcile` seconds;
- restarter (domain_watch.py): restarts in place an HA VM whose domain stopped for a
  failure, when its record and requested state say it must run here (agent_restart.py);
- storage_prober (storage_watch.py): reaches Ceph every PROBE_EVERY seconds
  (storage_probe.py).
With `metrics_listen`, one more thread serves the metrics (adapters/metrics.py), with
a bound on its connections and a deadline on each.
Its configuration is agent_config.py's, its planned stop planned_stop.py's.

Imports nothing of Ansible: it runs on hypervisors from the collection's
module_utils, started by roles/agent/files/yasco_agent.py, which the role
yasco.cluster.agent installs.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import hw_watchdog, metrics
from ansible_collections.yasco.cluster.plugins.module_utils.agent import storage_probe
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_state import VERSION
from ansible_collections.yasco.cluster.plugins.module_utils.agent.domain_watch import (
    DomainWatch, start_libvirt_event_loop)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.liveness import Liveness
from ansible_collections.yasco.cluster.plugins.module_utils.agent.planned_stop import PlannedStop
from ansible_collections.yasco.cluster.plugins.module_utils.agent.self_fence import (
    SelfFence, notify_systemd)

LOG = logging.getLogger("yasco-agent")


class Agent(Liveness, DomainWatch, PlannedStop, SelfFence):
    """One host's agent; `run()` until `stop()`. The planned stop comes before the
    fencer, whose self-fence it falls back on."""

    def open_watchdog(self) -> None:
        """Open the configured watchdog device; without it the agent runs on its
        self-fence alone, and says so."""
        if not self.config.watchdog_device:
            return
        try:
            self.watchdog = hw_watchdog.Watchdog(self.config.watchdog_device,
                                                 self.config.watchdog_timeout)
        except hw_watchdog.WatchdogError as err:
            LOG.critical("NO HARDWARE WATCHDOG: %s; a hung agent is caught by the storage "
                         "fence alone", err)
            return
        LOG.info("watchdog %s armed: %s s, petted while the lease is surely valid",
                 self.watchdog.path, self.watchdog.timeout)

    def serve_metrics(self) -> None:
        """Serve metrics when configured; without them the agent runs all the same."""
        if not self.config.metrics_listen:
            return
        try:
            metrics.serve(self.config.metrics_listen, self.metric_families,
                          "agent: metrics_listen")
        except metrics.MetricsError as err:
            LOG.error("NO METRICS: %s", err)
            return
        LOG.info("metrics at http://%s/metrics", self.config.metrics_listen)

    def metric_families(self) -> list[metrics.Family]:
        """What the agent knows now, as Prometheus metric families."""
        host = self.config.host
        # Copies and nothing more under the lock, which the fencer takes every 50 ms:
        # a scrape must never delay a self-fence. `domains` is replaced, never changed
        # in place, so it is read without.
        with self.lock:
            held = bool(self.lease)
            age = self.clock() - self.last_ok
            frozen, fences, destroyed = self.frozen, self.fence_count, self.fenced_domains
            restarted = self.restarted
        domains = metrics.gauge("agent_domains", "Domains running here, by kind and state.")
        for (kind, state), count in sorted(collections.Counter(self.domains.values()).items()):
            domains.add(count, host=host, kind=kind, state=state)
        watchdog = self.watchdog.timeout if self.watchdog and self.watchdog.fd >= 0 else 0
        return [
            metrics.gauge("agent_info", "The agent's version.", 1, host=host, version=VERSION),
            metrics.gauge("agent_start_time_seconds", "When the agent started (Unix time).",
                          self.started, host=host),
            metrics.gauge("agent_lease_held", "1 while the agent holds its etcd lease.",
                          int(held), host=host),
            metrics.gauge("agent_keepalive_age_seconds", "Seconds since the last etcd "
                          "keepalive that succeeded; the agent self-fences at ttl - margin.",
                          age, host=host),
            metrics.gauge("agent_lease_ttl_seconds", "The agent's lease TTL.",
                          self.config.ttl, host=host),
            metrics.gauge("agent_self_fence_after_seconds", "Keepalive age at which the "
                          "agent self-fences (ttl - margin).",
                          self.config.ttl - self.config.margin, host=host),
            metrics.counter("agent_self_fences", "Self-fences since the agent started.",
                            fences, host=host),
            metrics.counter("agent_self_fenced_domains", "HA domains the self-fences "
                            "destroyed since the agent started.", destroyed, host=host),
            metrics.counter("agent_restarts_in_place", "HA VMs the agent restarted in place "
                            "since it started (restart_in_place).", restarted, host=host),
            metrics.gauge("agent_ha_frozen", "1 while HA is disarmed in freeze mode: losing "
                          "etcd destroys no HA VM here.", int(frozen), host=host),
            metrics.gauge("agent_etcd_full", "1 while etcd refuses the agent's writes "
                          "(NOSPACE).", int(self.no_space), host=host),
            metrics.gauge("agent_storage_lost", "1 while Ceph has been out of reach here for "
                          "storage_grace or more (the storage probe; 0 when none runs).",
                          int(self.storage_state() == storage_probe.LOST), host=host),
            metrics.gauge("agent_watchdog_timeout_seconds", "The armed hardware watchdog's "
                          "timeout, 0 when none is armed.", watchdog, host=host),
            domains,
        ]

    def run(self) -> None:
        self.open_watchdog()
        self.serve_metrics()
        start_libvirt_event_loop()
        threads = [threading.Thread(target=target, name=target.__name__, daemon=True)
                   for target in (self.heartbeat, self.fencer, self.publisher,
                                  *([self.storage_prober] if self.config.ceph_conf else []),
                                  *([self.restarter] if self.in_place else []))]
        for thread in threads:
            thread.start()
        notify_systemd("READY=1")
        self.stopping.wait()
        deadline = time.monotonic() + self.config.ttl  # for all of them, not each
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.watchdog is not None and self.watchdog.fd >= 0:
            # Still counting: a lease may stand with HA VMs here unfenced.
            LOG.critical("watchdog left armed: it resets this host in %s s unless the "
                         "agent is back by then", self.watchdog.timeout)
            self.watchdog.close()
