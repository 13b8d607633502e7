# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host agent's threads share: its lease and the time of the last keepalive
that succeeded, the self-fences and guest crashes not yet in the history, the disarm
flag as last read, the storage probe's findings, the HA domains that stopped for a
failure; all of it under one lock. `AgentState` holds it for the agent's parts
(liveness, self_fence, storage_watch, domain_watch, planned_stop), which
host_agent.Agent puts together.

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys, hw_watchdog
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.agent import (
    agent_restart, storage_probe)
from ansible_collections.yasco.cluster.plugins.module_utils.agent.agent_config import AgentConfig
from ansible_collections.yasco.cluster.plugins.module_utils.agent.storage_probe import (
    PROBE_TIMEOUT)

# What the liveness key and the metrics say of the agent's version.
VERSION = "0.2.0"


class AgentState:
    """The state the agent's threads share, and their etcd client.

    State, under `lock`: `lease` (0 when none is held) and `last_ok`, the monotonic
    send time of the last keepalive (or grant) that succeeded. Only the fencer gives
    a lease up, and only after destroying the HA domains; `disconnected` then stays
    true (and any HA domain started meanwhile is destroyed too) until a new
    registration.
    """

    def __init__(self, config: AgentConfig, *, clock=time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.keys = {"alive": etcd_keys.alive_key(config.host, cluster=config.cluster),
                     "registered": etcd_keys.registered_key(config.host,
                                                            cluster=config.cluster),
                     "maintenance": etcd_keys.maintenance_key(config.host,
                                                              cluster=config.cluster),
                     "domains": etcd_keys.domains_prefix(config.host, cluster=config.cluster),
                     "disarmed": etcd_keys.disarmed_key(cluster=config.cluster),
                     "frozen": etcd_keys.frozen_key(config.host, cluster=config.cluster)}
        self.stopping = threading.Event()
        self.leaving = threading.Event()  # a planned stop: register no more
        self.wake_publisher = threading.Event()
        self.lock = threading.Lock()
        self.lease = 0
        # Until the first registration, the deadline counts from the start: an earlier
        # run's lease may still stand, renewed at the latest just before it.
        self.last_ok = clock()
        self.unregistered = True
        self.disconnected = False
        self.fences: list[dict[str, Any]] = []  # self-fences not yet in the history
        self.crashes: list[dict[str, Any]] = []  # guest crashes not yet in the history
        self.given_up = 0  # the lease of the last self-fence, until it is surely gone
        self.started = time.time()
        # HA disarmed in freeze mode (playbooks/disarm.yml), as last read: nothing would
        # start this host's HA VMs elsewhere, so losing etcd destroys none of them.
        self.frozen = False
        self.said_frozen = 0  # the lease the agent said it is frozen under, if it did
        self.flag_read = 0.0
        self.no_space = False  # etcd's last answer to the rewrite: its database is full
        self.watchdog: hw_watchdog.Watchdog | None = None
        self.stopped_cleanly = False  # a planned stop that left no HA VM at risk
        # What the metrics show beyond the state above: self-fences since the start and
        # the HA domains they destroyed, and the domains as the publisher last read
        # them (name -> (kind, state)).
        self.fence_count = 0
        self.fenced_domains = 0
        self.domains: dict[str, tuple[str, str]] = {}
        # The storage probe's findings: when it last reached Ceph (the start until
        # then); whether this host alone is cut off from it, for the fencer to act on;
        # the time of a self-fence for that, until a probe has reached Ceph since, for
        # the heartbeat not to register before; and the verdict last logged.
        self.storage_ok_at = clock()
        self.registered_at = 0.0
        self.storage_fence = False
        self.storage_fenced_at = 0.0
        self.storage_said = storage_probe.OK
        # The HA domains that stopped for a failure, (name, why), for the restarter;
        # and how many it restarted.
        self.stopped: queue.Queue = queue.Queue()
        self.restarted = 0
        self.in_place = agent_restart.InPlace(
            config.host, config.cluster, config.ceph_addrs or [config.address],
            {"conf": config.ceph_conf, "client": config.ceph_client,
             "keyring": config.ceph_keyring or None, "ceph_timeout": PROBE_TIMEOUT},
            agent_restart.Budget(config.restart_in_place, config.restart_window),
            clock) if config.ceph_conf and config.restart_in_place else None

    def _client(self) -> EtcdClient:
        c = self.config
        # One request may try every endpoint in turn: a second each is enough for a
        # loaded etcd, and short against the self-fence deadline.
        return EtcdClient(c.endpoints, ca_cert=c.ca_cert, client_cert=c.client_cert,
                          client_key=c.client_key, username=c.username, password=c.password,
                          timeout=min(1.0, c.ttl / 5))

    def check_etcd_settings(self) -> None:
        """Raise the EtcdError every client of the agent would, before any thread
        starts: an etcd over plain http or without a user is refused (adapters/etcd.py),
        and the agent exits saying why rather than each thread failing on its own."""
        self._client().close()
