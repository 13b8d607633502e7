# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host agent's configuration (/etc/yasco/agent.yml, docs/agent.md): its
settings, their defaults and their validation, done once at the start, so that a bad
setting is refused by name before the agent touches etcd or libvirt.

Imports nothing of Ansible: the agent runs it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys, metrics
from ansible_collections.yasco.cluster.plugins.module_utils.agent.storage_probe import (
    PROBE_EVERY, PROBE_TIMEOUT)

# What a stop of the host may do with its HA VMs (planned_stop.py, docs/agent.md).
SHUTDOWN_POLICIES = ("conditional", "freeze", "failover", "migrate")
# The least margin, in seconds, between the self-fence and the lease's earliest
# expiry: the fencer's 50 ms period, the kills of every HA domain here and a loaded
# host's scheduling all come out of it (the lab's test lets them take half a second),
# and the hardware watchdog's reset comes half of it before the expiry.
MIN_MARGIN = 1.0


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
        if self.margin < MIN_MARGIN:
            raise ConfigError(f"{where}: margin {self.margin} must be at least {MIN_MARGIN:g} s, "
                              "with ttl over twice that: the self-fence needs that long to "
                              "destroy the HA domains before the lease can expire")
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
            self.metrics_listen = self._metrics_on_own_address(where)

    def _metrics_on_own_address(self, where: str) -> str:
        """`metrics_listen` with its address: `:port` is that port on the host's own
        address (`address`), not on every one; the server runs in the process that
        fences, and has no business on a tenant or storage network."""
        try:
            address, port = metrics.parse_listen(self.metrics_listen, f"{where}: metrics_listen")
        except metrics.MetricsError as err:
            raise ConfigError(str(err)) from err
        if address:
            return self.metrics_listen
        if not self.address:
            raise ConfigError(f"{where}: metrics_listen {self.metrics_listen!r} serves on the "
                              "host's own address, and address is empty: set address, or "
                              f"give metrics_listen one (0.0.0.0:{port} for every address)")
        return f"[{self.address}]:{port}" if ":" in self.address else f"{self.address}:{port}"


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
