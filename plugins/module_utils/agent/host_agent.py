# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hypervisor agent: a liveness key under an etcd lease, the host's domains
published under the same lease, and a self-fence that destroys the host's HA domains
before the lease can have expired anywhere.

Why the self-fence is safe: let t be the time a keepalive that then succeeded was
sent. etcd's leader received it at or after t, so the lease cannot expire before
t + TTL (a new leader only ever extends leases). The fencer destroys every HA domain
at t + TTL - margin unless a later keepalive succeeded, so once the HA watcher can
see the lease gone, the HA domains here are already dead: no VM runs twice.
An agent that starts (or restarts) counts from its start until it registers: its
earlier run's lease, renewed at the latest just before, may still stand, with HA
domains running under it.
Each keepalive also rewrites the liveness key, and counts only once that succeeded
too: the watcher, which sees each rewrite at or after t, may then end a lease whose
key is older than TTL (a new etcd leader renews every lease on election, which
would hide a dead host for seconds), the HA domains here being dead by then too.
The one exception is a full etcd (alarm NOSPACE), which refuses the rewrite but
renews leases: the keepalive counts alone, and the watcher ends no lease while the
alarm stands, so a full database stops changes but destroys no VM.
Under the self-fence, an optional hardware watchdog (hw_watchdog) resets the host when
the agent itself hangs: the fencer pets it only while a reset would still come before
the lease's earliest expiry (`watchdog_may_pet`), and again once nothing here can be
started elsewhere under a lease it holds (self-fenced, frozen, stopping).

Three threads, each with its own connections, so that none waits on another:
- heartbeat: grants the lease, registers the liveness key, renews every TTL/3, and
  registers again (new lease) once etcd answers after a loss; it never starts VMs;
- fencer: watches the deadline on the monotonic clock and talks to libvirt only;
- publisher: keeps hosts/<host>/domains/ equal to what libvirt runs, woken by libvirt
  domain events and every `reconcile` seconds;
- restarter: restarts in place an HA VM whose domain stopped for a failure, when its
  record and requested state say it must run here (agent_restart.py);
- storage_prober: reaches Ceph every PROBE_EVERY seconds (storage_probe.py).

Imports nothing of Ansible: it runs on hypervisors from the collection's
module_utils, started by roles/agent/files/yasco_agent.py, which the role
yasco.cluster.agent installs.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import logging
import os
import queue
import socket
import subprocess
import threading
import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.agent import (
    agent_restart, storage_probe)
from ansible_collections.yasco.cluster.plugins.module_utils.cluster import cluster_events
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import (
    etcd_keys, hw_watchdog, metrics)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (
    EtcdClient, EtcdError, NoSpace)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none, to_json)

VERSION = "0.2.0"
LOG = logging.getLogger("yasco-agent")
# libvirt's details of a VIR_DOMAIN_EVENT_CRASHED lifecycle event.
CRASH_DETAILS = {0: "the guest's kernel panicked (reported through pvpanic)",
                 1: "the guest's kernel panicked and loaded its crash kernel"}
# Guest crashes kept for the history while etcd is out of reach.
CRASHES_KEPT = 100
# And of a VIR_DOMAIN_EVENT_ID_WATCHDOG event: what QEMU did.
WATCHDOG_ACTIONS = {1: "the guest hung: its watchdog expired and it was paused",
                    2: "the guest hung: its watchdog expired and it was reset",
                    3: "the guest hung: its watchdog expired and it was powered off",
                    4: "the guest hung: its watchdog expired and it was shut down",
                    5: "the guest hung: its watchdog expired (debug only)",
                    6: "the guest hung: its watchdog expired and an NMI was injected"}


SHUTDOWN_POLICIES = ("conditional", "freeze", "failover", "migrate")
# How often the agent reads the cluster's disarm flag, in seconds.
FLAG_EVERY = 1.0
# How often the fencer pets systemd's watchdog, in seconds: well within the unit's
# WatchdogSec (agent_watchdog_sec, 10 s by default).
WATCHDOG_EVERY = 1.0
# Where the host's shutdown says whether it reboots or powers off, when systemd cannot
# be asked (the lab writes it; so can an operator's script): `reboot` or `poweroff`.
SHUTDOWN_INTENT_FILE = "/run/yasco-agent/shutdown"
# The storage probe (storage_probe): how often it stats Ceph, and how long one probe
# may take before it counts as not reached, in seconds.
PROBE_EVERY = 2.0
PROBE_TIMEOUT = 5.0
# How often the restarter forgets restarts older than restart_window, in seconds.
FORGET_EVERY = 5.0


class ConfigError(Exception):
    """The configuration is unusable; the message names the field."""


@dataclasses.dataclass
class AgentConfig:
    host: str
    endpoints: list[str]
    cluster: str = etcd_keys.DEFAULT_CLUSTER
    ttl: float = 5.0
    margin: float = 1.5
    libvirt_uri: str = "qemu:///system"
    address: str = ""
    ceph_addrs: list[str] = dataclasses.field(default_factory=list)
    reconcile: float = 10.0
    # Renewals are far more frequent than ttl/3: the self-fence deadline counts from
    # the last renewal that succeeded, and an etcd election on a busy machine can take
    # two seconds, which must fit between that renewal and the deadline.
    keepalive: float = 0.5
    # After a self-fence, how long to wait for the evacuation's fence record before
    # registering again anyway (when no HA watcher runs, say).
    fence_wait: float = 60.0
    # What a stop of the host does with its HA VMs (docs/agent.md): `conditional`
    # fails them over when the host powers off and keeps them for its return when it
    # reboots; `freeze` always keeps them; `failover` always fails them over;
    # `migrate` has the HA watcher drain the host live, and fails over what is left.
    shutdown_policy: str = "conditional"
    # How long HA guests get to shut down before they are powered off, when failing over.
    shutdown_timeout: float = 20.0
    # How long a host's stop waits for its VMs to be migrated away (`migrate`).
    migrate_timeout: float = 120.0
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    username: str | None = None
    password: str | None = None
    # A hardware watchdog (docs/agent.md): the device, empty for none, and its timeout
    # in whole seconds, 0 for the longest that still resets the host in time.
    watchdog_device: str = ""
    watchdog_timeout: int = 0
    # Where to serve Prometheus metrics (docs/observability.md), address:port; empty
    # for none.
    metrics_listen: str = ""
    # The storage probe (docs/agent.md): the ceph.conf of this host's Ceph client, empty
    # for no probe; the client's name (as libvirt's secret holds its key) and the VM
    # pool; and how long Ceph may be out of reach here, while another host reaches
    # it, before the host self-fences so that its HA VMs run elsewhere.
    ceph_conf: str = ""
    ceph_client: str = "admin"
    ceph_pool: str = "rbd"
    storage_grace: float = 30.0
    # The client's keyring, when not the one ceph_conf names. Restarts in place
    # (agent_restart.py) need a client that may blocklist this host's own client
    # instances (docs/security.md).
    ceph_keyring: str = ""
    # Restarts in place of a VM by the agent within restart_window, before the HA
    # watcher's reconciler relocates it; 0 leaves every restart to the reconciler.
    # They need ceph_conf.
    restart_in_place: int = 1
    restart_window: float = 600.0

    @classmethod
    def from_mapping(cls, data: Any, where: str) -> AgentConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping of settings")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: "
                              f"{', '.join(fields)}")
        for name in ("host", "endpoints"):
            if not data.get(name):
                raise ConfigError(f"{where}: {name} is required")
        config = cls(**data)
        config.check(where)
        return config

    def check(self, where: str) -> None:
        if isinstance(self.endpoints, str):
            self.endpoints = [e.strip() for e in self.endpoints.split(",") if e.strip()]
        if self.shutdown_policy not in SHUTDOWN_POLICIES:
            raise ConfigError(f"{where}: shutdown_policy {self.shutdown_policy!r}: must be one "
                              f"of {', '.join(SHUTDOWN_POLICIES)}")
        for name in ("ttl", "margin", "reconcile", "keepalive", "fence_wait",
                     "shutdown_timeout", "migrate_timeout", "storage_grace", "restart_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{where}: {name} must be a positive number of seconds, "
                                  f"got {value!r}")
        if self.ttl < 2:
            raise ConfigError(f"{where}: ttl {self.ttl} is below 2 s; etcd raises a lease "
                              "below 1.5 x its election timeout anyway")
        if self.margin >= self.ttl / 2:
            raise ConfigError(f"{where}: margin {self.margin} must be under half of ttl "
                              f"{self.ttl}, or the agent self-fences between keepalives")
        if self.keepalive > self.ttl / 3:
            raise ConfigError(f"{where}: keepalive {self.keepalive} must be at most a third "
                              f"of ttl {self.ttl}")
        try:
            etcd_keys.alive_key(self.host, cluster=self.cluster)
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from err
        if not isinstance(self.ceph_addrs, list):
            raise ConfigError(f"{where}: ceph_addrs must be a list of addresses")
        longest = int(self.ttl - self.margin)
        if isinstance(self.watchdog_timeout, bool) or not isinstance(
                self.watchdog_timeout, int) or not 0 <= self.watchdog_timeout <= longest:
            raise ConfigError(f"{where}: watchdog_timeout {self.watchdog_timeout!r} must be "
                              f"whole seconds from 1 to {longest} (ttl - margin), or 0 for "
                              f"{longest}: a longer one could reset the host after its "
                              "lease expired")
        self.watchdog_timeout = self.watchdog_timeout or longest
        if self.ceph_conf and self.storage_grace < PROBE_EVERY + PROBE_TIMEOUT:
            raise ConfigError(f"{where}: storage_grace {self.storage_grace} must be at least "
                              f"{PROBE_EVERY + PROBE_TIMEOUT:g} s, a probe's interval and "
                              "timeout, or one slow answer from Ceph fences the host")
        if isinstance(self.restart_in_place, bool) or not isinstance(
                self.restart_in_place, int) or self.restart_in_place < 0:
            raise ConfigError(f"{where}: restart_in_place {self.restart_in_place!r} must be a "
                              "whole number of restarts, 0 for none")
        if self.metrics_listen:
            try:
                metrics.parse_listen(self.metrics_listen, f"{where}: metrics_listen")
            except metrics.MetricsError as err:
                raise ConfigError(str(err)) from err


def watchdog_may_pet(now: float, last_ok: float, ttl: float, margin: float, timeout: float,
                     holding: bool) -> bool:
    """Whether the agent may pet the watchdog at `now`: always when it holds no lease
    its HA VMs could be started elsewhere on (self-fenced, frozen, stopping); otherwise
    only if a reset `timeout` from now still comes `margin / 2` before the lease's
    earliest expiry, `last_ok + ttl`. The self-fence, at `ttl - margin`, comes first
    and then lets petting resume: the watchdog resets the host only when the agent
    hangs."""
    return not holding or now + timeout <= last_ok + ttl - margin / 2


def load_config(path: str) -> AgentConfig:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the configuration: {err.strerror}") from err
    try:
        import yaml  # JSON is YAML too; PyYAML is on every Debian system
        data = yaml.safe_load(text)
    except ImportError:
        data = json.loads(text)
    except Exception as err:  # yaml.YAMLError, without a hard dependency on its name
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    return AgentConfig.from_mapping(data, path)


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


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


class Agent:
    """One host's agent; `run()` until `stop()`.

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
        self.intent_file = SHUTDOWN_INTENT_FILE
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

    # -- heartbeat ----------------------------------------------------------------

    def _alive_value(self) -> dict[str, Any]:
        c = self.config
        return {"address": c.address, "boot_id": _boot_id(), "agent_version": VERSION,
                "started": cluster_events.timestamp(self.started), "pid": os.getpid(),
                "ceph_addrs": c.ceph_addrs or ([c.address] if c.address else []),
                "ttl": c.ttl, "watchdog": self.watchdog.timeout if self.watchdog else None,
                "storage": self.storage_state()}

    def storage_state(self) -> str | None:
        """What the liveness key says of this host's storage: None when not probed,
        storage_probe.LOST once Ceph has been out of reach for `storage_grace`."""
        if not self.config.ceph_conf:
            return None
        with self.lock:
            lost_for = self.clock() - self.storage_ok_at
        return storage_probe.LOST if lost_for >= self.config.storage_grace \
            else storage_probe.REACHED

    def register(self, etcd: EtcdClient) -> None:
        """A new lease and the liveness key under it."""
        sent = self.clock()
        lease = etcd.grant_lease(int(round(self.config.ttl)))
        # What fencing needs once the liveness key is gone: kept, not lease-bound.
        # Written first, without the last clean stop's `stopped`: a registration that
        # fails here is tried again, and a host alive never keeps that word.
        facts = {k: v for k, v in self._alive_value().items()
                 if k in ("address", "ceph_addrs", "boot_id", "agent_version")}
        known = etcd.get(self.keys["registered"])
        if known is None or json_or_none(known.value) != facts:
            etcd.put(self.keys["registered"], to_json(facts))
        etcd.put(self.keys["alive"], to_json(self._alive_value()), lease=lease.id)
        with self.lock:
            self.lease, self.last_ok, self.disconnected = lease.id, sent, False
            self.unregistered, self.storage_fenced_at = False, 0.0
            self.registered_at = self.clock()
        LOG.info("registered %s under lease %x", self.keys["alive"], lease.id)
        marker = etcd.get(self.keys["maintenance"])
        if marker is not None and _by_agent(marker.value):
            # Written by this agent's own graceful stop; an operator's marker stays.
            etcd.delete_if(self.keys["maintenance"], mod_revision=marker.mod_revision)
            LOG.info("cleared the maintenance marker of the last graceful stop")
        with self.lock:
            pending, self.fences = self.fences, []
        for fence in pending:
            cluster_events.append(etcd, cluster_events.event(
                "self-fenced", host=self.config.host, by="agent", details=fence,
                at=fence["at"]), cluster=self.config.cluster)
        self.wake_publisher.set()

    def heartbeat(self) -> None:
        interval = self.config.keepalive
        backoff = self.config.ttl / 3
        etcd = self._client()
        while not self.leaving.is_set():
            with self.lock:
                lease = self.lease
            sent = self.clock()
            try:
                if not lease and self.given_up:
                    self.after_self_fence(etcd)
                if not lease and self.storage_awaited():
                    self.stopping.wait(PROBE_EVERY)
                    continue
                if not lease:
                    self.register(etcd)
                    backoff = self.config.ttl / 3
                elif etcd.keepalive_once(lease) is None:
                    LOG.error("lease %x is gone from etcd: self-fencing now", lease)
                    with self.lock:
                        if self.lease == lease:
                            self.last_ok = self.clock() - self.config.ttl
                    self.stopping.wait(0.1)
                    continue
                else:
                    # The rewrite the watcher times (see the module's docstring): the
                    # deadline moves only once it has succeeded, or etcd is full.
                    self._rewrite_alive(etcd, lease)
                    with self.lock:
                        if self.lease == lease:
                            self.last_ok = max(self.last_ok, sent)
                    if self.clock() >= self.flag_read + FLAG_EVERY:
                        self.read_disarm_flag(etcd, lease)
                    self.check_storage(etcd)
            except EtcdError as err:
                if lease:
                    # Try again soon: the fencer's deadline is ttl - margin away from
                    # the last success, and an election takes about a second.
                    LOG.warning("keepalive failed: %s", err)
                    self.stopping.wait(0.1)
                else:
                    LOG.warning("cannot register (again in %.0f s): %s", backoff, err)
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                continue
            self.stopping.wait(max(0.0, sent + interval - self.clock()))
        etcd.close()

    def _rewrite_alive(self, etcd: EtcdClient, lease: int) -> None:
        """Rewrite the liveness key after a keepalive that succeeded. A database at its
        quota (NOSPACE) refuses the write but renewed the lease all the same, which is
        what the self-fence's safety rests on; the watcher ends no lease for a key it
        sees unwritten while the alarm stands. A full etcd then leaves every VM
        running, instead of every agent destroying its HA VMs at once."""
        try:
            etcd.put(self.keys["alive"], to_json(self._alive_value()), lease=lease)
        except NoSpace as err:
            if not self.no_space:
                LOG.critical("etcd is FULL: %s; the lease is still renewed, so this host's "
                             "HA VMs keep running, but no VM can be started or moved "
                             "until it is fixed", err)
            self.no_space = True
            return
        if self.no_space:
            LOG.warning("etcd accepts writes again: liveness key rewritten")
        self.no_space = False

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

    def read_disarm_flag(self, etcd: EtcdClient, lease: int) -> None:
        """Whether HA is disarmed in freeze mode, as etcd says now; said back under
        `lease` (hosts/<host>/frozen), for disarm.yml to wait for: until the agent has
        read the flag, losing etcd still self-fences here."""
        found = etcd.get(self.keys["disarmed"])
        flag = json_or_none(found.value) if found is not None else None
        frozen = isinstance(flag, dict) and flag.get("mode") == "freeze"
        if frozen != self.frozen:
            LOG.warning("HA %s: %s", "FROZEN" if frozen else "no longer frozen",
                        "losing etcd destroys no HA VM here" if frozen
                        else "the self-fence is armed again")
        with self.lock:
            self.frozen, self.flag_read = frozen, self.clock()
        if frozen and self.said_frozen != lease:
            etcd.put(self.keys["frozen"], to_json({"since": cluster_events.timestamp()}),
                     lease=lease)
            self.said_frozen = lease
        elif not frozen and self.said_frozen:
            etcd.delete(self.keys["frozen"])
            self.said_frozen = 0

    def after_self_fence(self, etcd: EtcdClient) -> None:
        """Look failed until the orchestrator has dealt with the HA VMs this host
        destroyed: end the lease given up (if etcd still holds it, the self-fence was
        a false alarm, but the VMs are down all the same), so that the watcher sees
        the host go and evacuates it; register again once the evacuation has fenced
        the host, or after `fence_wait`. With nothing destroyed there is nothing to
        evacuate: it registers again at once."""
        with self.lock:
            destroyed = any(fence["destroyed"] for fence in self.fences)
        if not destroyed:
            self.given_up = 0
            return
        if etcd.revoke_lease(self.given_up):
            LOG.warning("revoked lease %x, which outlived the self-fence, so that the HA "
                        "watcher evacuates this host's HA VMs", self.given_up)
        fence = etcd_keys.fence_key(self.config.host, cluster=self.config.cluster)
        deadline = self.clock() + self.config.fence_wait
        LOG.warning("waiting up to %.0f s for the evacuation to fence this host before "
                    "registering again", self.config.fence_wait)
        while not _fence_stands(etcd.get(fence)) and self.clock() < deadline:
            if self.leaving.wait(1.0):
                return
        self.given_up = 0

    # -- self-fence ---------------------------------------------------------------

    def fencer(self) -> None:
        conn = None
        petted = float("-inf")
        while not self.stopping.is_set():
            # systemd's watchdog (WatchdogSec=) restarts an agent whose fencer is stuck,
            # in a libvirt call say: the fencer is the thread that must never hang.
            if self.clock() >= petted + WATCHDOG_EVERY:
                notify_systemd("WATCHDOG=1")
                petted = self.clock()
            with self.lock:
                due = (self.lease or self.unregistered) and self.clock() >= \
                    self.last_ok + self.config.ttl - self.config.margin
                enforce = self.disconnected
                if self.storage_fence and self.frozen:
                    self.storage_fence = False  # frozen since: nothing starts them elsewhere
                storage = bool(self.lease) and self.storage_fence and not due
                if due and self.frozen and not enforce:
                    # Frozen: nothing starts these VMs elsewhere, so they keep running;
                    # the lease is given up, and the host registers anew once etcd
                    # answers.
                    LOG.critical("HA FROZEN: no etcd keepalive succeeded for %.1f s; NOT "
                                 "self-fencing (the cluster is disarmed in freeze mode); "
                                 "registering again once etcd answers",
                                 self.config.ttl - self.config.margin)
                    self.lease, due = 0, False
                due = due or storage
            fenced = True
            if due or enforce:
                try:
                    conn = conn or lv.connect(self.config.libvirt_uri)
                    self.self_fence(conn, first=bool(due), storage=storage)
                except (lv.LibvirtAdapterError, lv.libvirt.libvirtError) as err:
                    LOG.critical("SELF-FENCE FAILED, retrying: %s", err)
                    conn, fenced = None, False
            if fenced:
                self.pet_watchdog()
            self.stopping.wait(0.05)

    def pet_watchdog(self) -> None:
        if self.watchdog is None:
            return
        with self.lock:
            may = watchdog_may_pet(self.clock(), self.last_ok, self.config.ttl,
                                   self.config.margin, self.watchdog.timeout,
                                   bool(self.lease or self.unregistered))
        if may:
            try:
                self.watchdog.pet()
            except OSError as err:
                LOG.critical("cannot pet the watchdog %s: %s", self.watchdog.path, err)

    def self_fence(self, conn, first: bool, storage: bool = False) -> None:
        """Destroy every running HA domain; `first` when the deadline just passed, or
        `storage` when this host alone is cut off from Ceph (later calls catch HA
        domains started while still cut off)."""
        destroyed = []
        for dom in conn.listAllDomains(lv.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            if lv.domain_kind(dom) == "ha":
                lv.kill_now(dom)
                destroyed.append(dom.name())
        done = time.time()
        if storage:
            LOG.critical("SELF-FENCE: Ceph out of reach here for %.0f s or more while other "
                         "hosts reach it; destroyed HA domains: %s; at %.3f; registering "
                         "again once Ceph answers", self.config.storage_grace,
                         ", ".join(destroyed) or "none", done)
        elif first or destroyed:
            LOG.critical("SELF-FENCE: no etcd keepalive succeeded for %.1f s (ttl %s - "
                         "margin %s); destroyed HA domains: %s; at %.3f",
                         self.config.ttl - self.config.margin, self.config.ttl,
                         self.config.margin, ", ".join(destroyed) or "none", done)
        with self.lock:
            if storage:
                self.storage_fence, self.storage_fenced_at = False, self.clock()
            if first or destroyed:
                self.fences.append({"at": done, "destroyed": destroyed,
                                    "reason": "storage" if storage else "etcd"})
                self.fence_count += int(first)
                self.fenced_domains += len(destroyed)
                self.domains = {n: d for n, d in self.domains.items() if n not in destroyed}
            if first:
                self.given_up, self.lease, self.disconnected = self.lease, 0, True
                self.unregistered = False

    # -- domains ------------------------------------------------------------------

    def publisher(self) -> None:
        etcd, conn = self._client(), None
        published: dict[str, str] = {}
        lease = 0
        while not self.stopping.is_set():
            self.wake_publisher.wait(self.config.reconcile)
            self.wake_publisher.clear()
            with self.lock:
                current = self.lease
            if not current:
                continue
            try:
                if conn is None:
                    conn = self._watch_domains()
                active = conn.listAllDomains(lv.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
                running = {d.name(): lv.domain_state(d) for d in active}
                self.domains = {d.name(): (lv.domain_kind(d) or "unmanaged", running[d.name()])
                                for d in active}
                if current != lease:  # keys of an older lease: stale, or gone with it
                    published, lease = {}, current
                    for kv in etcd.get_prefix(self.keys["domains"]):
                        if kv.lease != lease:
                            etcd.delete(kv.key)
                for name, state in running.items():
                    if published.get(name) != state:
                        etcd.put(self.keys["domains"] + name, to_json({"state": state}),
                                 lease=lease)
                        published[name] = state
                for name in set(published) - set(running):
                    etcd.delete(self.keys["domains"] + name)
                    del published[name]
                self.record_crashes(etcd)
            except EtcdError as err:
                LOG.warning("publishing domains: %s", err)
                published, lease = {}, 0
            except (lv.LibvirtAdapterError, lv.libvirt.libvirtError) as err:
                LOG.warning("reading domains: %s", err)
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()
        etcd.close()

    def _watch_domains(self) -> WatchedConnection:
        """A libvirt connection whose domain events call back here."""
        watched = WatchedConnection(lv.connect(self.config.libvirt_uri))
        try:
            watched.register(lv.libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self.domain_event)
            watched.register(lv.libvirt.VIR_DOMAIN_EVENT_ID_WATCHDOG, self.watchdog_event)
        except lv.libvirt.libvirtError:
            watched.close()
            raise
        return watched

    def domain_event(self, dummy_conn, dom, event: int, detail: int, dummy_opaque) -> None:
        """libvirt's lifecycle callback: the publisher looks again at once, and a guest
        crash (a panic its kernel reported through the pvpanic device) is noted for
        the history. libvirt resets such a guest in place (on_crash restart) or powers
        it off (on_crash destroy): either way this is the one trace it leaves."""
        if event == lv.libvirt.VIR_DOMAIN_EVENT_CRASHED:
            self._note_crash(dom.name(), CRASH_DETAILS.get(
                detail, f"crashed (libvirt detail {detail})"))
        elif (event == agent_restart.VIR_DOMAIN_EVENT_STOPPED and self.in_place is not None
              and detail in agent_restart.STOP_REASONS):
            self.stopped.put((dom.name(), agent_restart.STOP_REASONS[detail]))
        self.wake_publisher.set()

    def restarter(self) -> None:
        """Restart in place the HA domains that stopped for a failure, while this host
        is fit to run them (agent_restart.py); forget restarts older than the window."""
        etcd = self._client()
        while not self.stopping.is_set():
            try:
                vm, why = self.stopped.get(timeout=FORGET_EVERY)
            except queue.Empty:
                self._forget_restarts(etcd)
                continue
            self.stopping.wait(agent_restart.SETTLE)
            unfit = self.unfit()
            if unfit:
                LOG.info("%s stopped (%s): not restarted here: %s", vm, why, unfit)
                continue
            with self.lock:
                lease = self.lease
            try:
                # A connection per restart: they are rare, and none outlives a failure.
                with contextlib.closing(lv.connect(self.config.libvirt_uri)) as conn:
                    restarted = self.in_place.restart(etcd, conn, vm, why, lease)
            except (EtcdError, lv.LibvirtAdapterError, lv.libvirt.libvirtError) as err:
                LOG.warning("%s stopped (%s): not restarted here: %s", vm, why, err)
                continue
            if restarted:
                with self.lock:
                    self.restarted += 1
                self.wake_publisher.set()
        etcd.close()

    def unfit(self) -> str | None:
        """Why this host may start no VM now (its lease, a self-fence, a stop, Ceph out
        of reach), or None. What etcd says (HA disarmed, the VM's record) is read at
        the restart itself (agent_restart.InPlace.check)."""
        with self.lock:
            if not self.lease or self.disconnected:
                return "no lease held (self-fenced, or not registered)"
            if self.clock() >= self.last_ok + self.config.ttl - self.config.margin:
                return "its lease is about to be given up"
            if self.storage_fence:
                return "cut off from Ceph"
        if self.leaving.is_set():
            return "the agent is stopping"
        if self.storage_state() == storage_probe.LOST:
            return "cut off from Ceph"
        return None

    def _forget_restarts(self, etcd: EtcdClient) -> None:
        for vm in self.in_place.budget.expired(self.clock()):
            try:
                etcd.delete(self.in_place.key(vm))
            except EtcdError as err:  # bound to the lease: gone with it at worst
                LOG.warning("%s: cannot forget its restarts: %s", vm, err)

    def watchdog_event(self, dummy_conn, dom, action: int, dummy_opaque) -> None:
        """libvirt's watchdog callback: the guest's watchdog device expired (a hung
        guest whose watchdog daemon stopped), and QEMU took its action (reset)."""
        self._note_crash(dom.name(), WATCHDOG_ACTIONS.get(
            action, f"the guest's watchdog expired (libvirt action {action})"))
        self.wake_publisher.set()

    def _note_crash(self, vm: str, reason: str) -> None:
        LOG.warning("%s: %s", vm, reason)
        with self.lock:
            # A guest that crashes at every boot, while etcd is out of reach, must not
            # fill the agent's memory: the newest are kept.
            self.crashes = [*self.crashes, {"vm": vm, "at": time.time(),
                                            "reason": reason}][-CRASHES_KEPT:]

    def record_crashes(self, etcd: EtcdClient) -> None:
        """Write the guest crashes noted since the last time to the history."""
        with self.lock:
            pending, self.crashes = self.crashes, []
        try:
            while pending:
                crash = pending[0]
                cluster_events.append(etcd, cluster_events.event(
                    "crashed", host=self.config.host, vm=crash["vm"], by="agent",
                    details={"reason": crash["reason"]}, at=crash["at"]),
                    cluster=self.config.cluster)
                pending.pop(0)
        finally:
            with self.lock:
                self.crashes[:0] = pending  # kept for the next time etcd answers

    # -- life cycle ---------------------------------------------------------------

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
        _start_libvirt_event_loop()
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
        if marker is not None and _by_agent(marker.value):
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


def notify_systemd(state: str) -> bool:
    """Tell systemd `state` (READY=1, WATCHDOG=1) on the socket it gave the service
    (Type=notify); False when it gave none, as outside systemd. Never raises: the
    fencer calls it."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(state.encode(), address)
    except OSError as err:
        LOG.warning("telling systemd %s: %s", state, err)
        return False
    return True


def _is_active(dom) -> bool:
    try:
        return bool(dom.isActive())
    except lv.libvirt.libvirtError:
        return False


def _fence_stands(found) -> bool:
    """Whether a fence record `found` says the host is fenced: one being lifted (a
    return home of an earlier failure under way) is not this failure's fence."""
    return found is not None and etcd_keys.fence_stands(json_or_none(found.value))


def _by_agent(value: str) -> bool:
    data = json_or_none(value)
    return isinstance(data, dict) and data.get("by") == "agent"


class WatchedConnection:
    """A libvirt connection with domain event callbacks, which `close` deregisters
    first: libvirt-python's callback data holds the connection, which would otherwise
    live on, unseen, and call back for every event after."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.callbacks: list[int] = []

    def __getattr__(self, name: str):
        return getattr(self.conn, name)

    def register(self, event_id: int, callback) -> None:
        self.callbacks.append(self.conn.domainEventRegisterAny(None, event_id, callback, None))

    def close(self) -> None:
        for callback in self.callbacks:
            try:
                self.conn.domainEventDeregisterAny(callback)
            except lv.libvirt.libvirtError:
                pass  # a broken connection: closing it ends its callbacks too
        self.callbacks = []
        try:
            self.conn.close()
        except lv.libvirt.libvirtError:
            pass


@functools.cache
def _start_libvirt_event_loop() -> None:
    """libvirt's default event loop, which the publisher's domain events need; once
    per process."""
    lv.libvirt.virEventRegisterDefaultImpl()

    def loop() -> None:
        while True:
            lv.libvirt.virEventRunDefaultImpl()

    threading.Thread(target=loop, name="libvirt-events", daemon=True).start()
