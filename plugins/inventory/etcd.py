# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster as etcd sees it, as an inventory: which hypervisors are alive, failed
or in maintenance, and where each VM's record says it runs.

It reads the keys of plugins/module_utils/adapters/etcd_keys.py at one revision and needs
nothing but its configuration file and the environment, so it runs as an AWX
inventory source as it runs from the command line.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: etcd
short_description: Hypervisors and VM records of a YASCO cluster, from etcd
version_added: 0.1.0
description:
  - Builds an inventory from the state a YASCO cluster keeps in etcd (the layout is in
    the collection's C(docs/etcd-schema.md)), read at one revision.
  - Every registered hypervisor (C(hosts/<host>/registered)) is in group
    C(yasco_hypervisors), and in one or more of its children
    C(yasco_hypervisors_alive) (its agent's C(alive) key exists),
    C(yasco_hypervisors_maintenance) (it has a C(maintenance) marker) and
    C(yasco_hypervisors_failed) (neither). A host in maintenance whose agent runs is
    in both C(yasco_hypervisors_alive) and C(yasco_hypervisors_maintenance).
  - Each hypervisor gets the variables C(yasco_registered), C(yasco_alive) and
    C(yasco_maintenance) (the records, each only when its key exists) and
    C(yasco_running_domains) (the names under C(hosts/<host>/domains/), sorted).
  - Every VM with a record (C(vms/<vm>)) is a host in group C(yasco_vm_records), with
    the variables C(yasco_vm_record) (the record) and C(yasco_running_on) (the
    record's C(host)), and in group C(yasco_running_on_<host>).
  - Records are JSON; a record that is not JSON is kept as its text, with a warning
    naming the key. Keys a hypervisor has without being registered are left out, with
    a warning.
  - The configuration file's name must end in C(.etcd.yml) or C(.etcd.yaml).
author:
  - YASCO developers (@yasco)
options:
  plugin:
    description: Says that the file is for this plugin.
    type: str
    required: true
    choices: [yasco.cluster.etcd]
  cluster:
    description:
      - The cluster's name, which names its keys (C(/yasco/<cluster>/)).
    type: str
    default: yasco
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - yasco.cluster.etcd
  - yasco.cluster.etcd.plugins
notes:
  - Liveness changes by the second. Leave O(cache) off for anything that decides on
    failover; it is for inventories of large clusters read often.
  - Plays for hypervisors should name C(yasco_hypervisors) (or a child group) and plays
    for VMs C(yasco_vm_records), since both kinds of hosts are in C(all).
seealso:
  - plugin: yasco.cluster.etcd
    plugin_type: lookup
  - module: yasco.cluster.etcd_key
"""

EXAMPLES = r"""
# cluster.etcd.yml: the cluster named yasco, on a three-member etcd with TLS
plugin: yasco.cluster.etcd
endpoints:
  - https://10.0.0.1:2379
  - https://10.0.0.2:2379
  - https://10.0.0.3:2379
ca_cert: /etc/yasco/etcd-ca.pem
client_cert: /etc/yasco/etcd-client.pem
client_key: /etc/yasco/etcd-client-key.pem
---
# lab.etcd.yml: endpoints from YASCO_ETCD_ENDPOINTS, groups by the agent's version
plugin: yasco.cluster.etcd
cluster: lab
keyed_groups:
  - key: yasco_alive.agent_version | default('none')
    prefix: agent
compose:
  ansible_host: yasco_alive.address | default(inventory_hostname)
"""

import json
from typing import Any

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.display import Display

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import (
    CONNECTION_OPTIONS, connect)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)

display = Display()

HYPERVISORS = "yasco_hypervisors"
ALIVE = "yasco_hypervisors_alive"
FAILED = "yasco_hypervisors_failed"
MAINTENANCE = "yasco_hypervisors_maintenance"
VM_RECORDS = "yasco_vm_records"
RUNNING_ON = "yasco_running_on_"
SUFFIXES = (".etcd.yml", ".etcd.yaml")


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):

    NAME = "yasco.cluster.etcd"

    def verify_file(self, path: str) -> bool:
        # Ansible reports a file this refuses as one this plugin could not verify.
        return super().verify_file(path) and path.endswith(SUFFIXES)

    def parse(self, inventory, loader, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache)
        try:
            self._read_config_data(path)
            cluster = self.get_option("cluster")
            prefixes = (etcd_keys.hosts_prefix(cluster=cluster),
                        etcd_keys.vms_prefix(cluster=cluster))
        except (AnsibleError, ValueError) as err:
            raise AnsibleParserError(f"{path}: {err}") from err

        cache_key = self.get_cache_key(path)
        read_cache = self.get_option("cache") and cache
        write_cache = self.get_option("cache") and not cache
        keys = None
        if read_cache:
            try:
                keys = self._cache[cache_key]
            except KeyError:
                write_cache = True
        if keys is None:
            keys = self._read(path, prefixes)
        if write_cache:
            self._cache[cache_key] = keys
        self._populate(cluster, keys)

    def _read(self, path: str, prefixes: tuple[str, ...]) -> list[list[str]]:
        """Every [key, value] of the cluster's hosts and VMs, read at one revision."""
        params = {name: self.get_option(name) for name in CONNECTION_OPTIONS}
        try:
            with connect(params) as etcd:
                found = etcd.get_prefixes(prefixes)
        except EtcdError as err:
            raise AnsibleParserError(f"{path}: {err}") from err
        return [[kv.key, kv.value] for prefix in prefixes for kv in found[prefix]]

    def _populate(self, cluster: str, keys: list[list[str]]) -> None:
        hypervisors: dict[str, dict[str, Any]] = {}
        vms: dict[str, Any] = {}
        for key, value in keys:
            parsed = etcd_keys.parse_key(key, cluster=cluster)
            if parsed is None:
                continue
            if parsed.kind in etcd_keys.HOST_RECORDS:
                hypervisors.setdefault(parsed.host, {})[parsed.kind] = _record(key, value)
            elif parsed.kind == "domain":
                hypervisors.setdefault(parsed.host, {}).setdefault("domains", []).append(parsed.vm)
            elif parsed.kind == "vm":
                vms[parsed.vm] = _record(key, value)

        for group in (HYPERVISORS, ALIVE, FAILED, MAINTENANCE, VM_RECORDS):
            self.inventory.add_group(group)
        for child in (ALIVE, FAILED, MAINTENANCE):
            self.inventory.add_child(HYPERVISORS, child)

        for host, records in sorted(hypervisors.items()):
            if "registered" not in records:
                display.warning(f"yasco.cluster.etcd: {host} has "
                                f"{', '.join(sorted(records))} under "
                                f"{etcd_keys.host_prefix(host, cluster=cluster)} but is not "
                                f"registered: left out of the inventory")
                continue
            self.inventory.add_host(host, group=HYPERVISORS)
            variables = {"yasco_registered": records["registered"],
                         "yasco_running_domains": sorted(records.get("domains", []))}
            for kind in ("alive", "maintenance"):
                if kind in records:
                    variables[f"yasco_{kind}"] = records[kind]
            if "alive" in records:
                self.inventory.add_host(host, group=ALIVE)
            if "maintenance" in records:
                self.inventory.add_host(host, group=MAINTENANCE)
            if "alive" not in records and "maintenance" not in records:
                self.inventory.add_host(host, group=FAILED)
            self._set_host(host, variables)

        for vm, record in sorted(vms.items()):
            self.inventory.add_host(vm, group=VM_RECORDS)
            variables = {"yasco_vm_record": record}
            running_on = record.get("host") if isinstance(record, dict) else None
            if isinstance(running_on, str) and running_on:
                variables["yasco_running_on"] = running_on
                group = self._sanitize_group_name(f"{RUNNING_ON}{running_on}")
                self.inventory.add_group(group)
                self.inventory.add_host(vm, group=group)
            self._set_host(vm, variables)

    def _set_host(self, host: str, variables: dict[str, Any]) -> None:
        for name, value in variables.items():
            self.inventory.set_variable(host, name, value)
        strict = self.get_option("strict")
        hostvars = self.inventory.get_host(host).get_vars()
        self._set_composite_vars(self.get_option("compose"), hostvars, host, strict=strict)
        self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host,
                                          strict=strict)
        self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host,
                                       strict=strict)


def _record(key: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        display.warning(f"yasco.cluster.etcd: {key} holds no JSON; its text is used as it is")
        return value
