# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who may do what in etcd: YASCO's etcd roles, derived from the key layout.

One role per kind of client, each allowed what it needs and no more
(docs/security.md explains why each grant is there):

    yasco-agent-<host>  read and write hosts/<host>/ alone (its events too, under
                        hosts/<host>/events/), read hosts/, fences/<host>, ha/disarmed,
                        vms/ and requested/; nothing of history/
    yasco-watcher       read the cluster; write watchers/ (its leader lease), hosts/
                        (it ends a silent agent's lease, which etcd allows only to
                        whoever may write the keys bound to it, and it takes the
                        agents' events from there) and history/ (where it copies them)
    yasco-controller    read the cluster; write vms/, requested/, fences/, vdm/, ha/,
                        history/
                        and each host's maintenance marker
    yasco-reader        read the cluster

Each role is granted to the user of the same name. Pure Python, no I/O: the lab
applies these with etcdctl, and `etcdctl_commands` prints them for an operator.
"""

from __future__ import annotations

import shlex
from typing import Mapping, NamedTuple

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

AGENT_ROLE_PREFIX = "yasco-agent-"
WATCHER_ROLE = "yasco-watcher"
CONTROLLER_ROLE = "yasco-controller"
READER_ROLE = "yasco-reader"


class Grant(NamedTuple):
    """A permission on one key, or on every key under it when `prefix`."""

    permission: str  # read, write or readwrite, as etcdctl names them
    key: str
    prefix: bool


def agent_role(host: str) -> str:
    return f"{AGENT_ROLE_PREFIX}{host}"


def roles(hosts: list[str], cluster: str = etcd_keys.DEFAULT_CLUSTER) -> dict[str, list[Grant]]:
    """Every role and its grants, for a cluster of `hosts`."""
    everything = Grant("read", etcd_keys.cluster_prefix(cluster), True)
    controller = [everything] + [
        Grant("readwrite", key, True) for key in (
            etcd_keys.vms_prefix(cluster=cluster),
            etcd_keys.requested_prefix(cluster=cluster),
            etcd_keys.fences_prefix(cluster=cluster),
            etcd_keys.history_prefix(cluster=cluster))
    ] + [
        Grant("readwrite", etcd_keys.vdm_version_key(cluster=cluster), False),
        Grant("readwrite", etcd_keys.vdm_ha_key(cluster=cluster), False),
        Grant("readwrite", etcd_keys.disarmed_key(cluster=cluster), False),
    ] + [Grant("readwrite", etcd_keys.maintenance_key(host, cluster=cluster), False)
         for host in hosts]
    result = {
        agent_role(host): [
            Grant("readwrite", etcd_keys.host_prefix(host, cluster=cluster), True),
            # The other hosts' liveness: a host that alone cannot reach Ceph fences
            # itself, one of many does not (module_utils/agent/storage_probe.py).
            Grant("read", etcd_keys.hosts_prefix(cluster=cluster), True),
            Grant("read", etcd_keys.fence_key(host, cluster=cluster), False),
            # Disarmed in freeze mode, it does not self-fence; disarmed, it restarts
            # nothing in place.
            Grant("read", etcd_keys.disarmed_key(cluster=cluster), False),
            # A VM's record and requested state say whether it restarts one in place
            # (module_utils/agent/agent_restart.py).
            Grant("read", etcd_keys.vms_prefix(cluster=cluster), True),
            Grant("read", etcd_keys.requested_prefix(cluster=cluster), True),
            # Nothing of history/: etcd cannot grant create-only, and whoever may write
            # a range may delete it. Its events go under its own prefix (its first
            # grant), and the leading watcher copies them into history/.
        ] for host in hosts}
    result[WATCHER_ROLE] = [
        everything, Grant("readwrite", etcd_keys.watchers_prefix(cluster=cluster), True),
        Grant("readwrite", etcd_keys.hosts_prefix(cluster=cluster), True),
        # The agents' events, checked, each copied once (cluster_events.copy_from_agent).
        Grant("readwrite", etcd_keys.history_prefix(cluster=cluster), True)]
    result[CONTROLLER_ROLE] = controller
    result[READER_ROLE] = [everything]
    return result


def etcdctl_commands(hosts: list[str], cluster: str = etcd_keys.DEFAULT_CLUSTER,
                     passwords: Mapping[str, str] | None = None) -> list[list[str]]:
    """The etcdctl arguments that create each role, its grants and its user: with the
    user's password from `passwords`, else etcdctl asks for it."""
    commands = []
    for role, grants in roles(hosts, cluster).items():
        commands.append(["role", "add", role])
        for grant in grants:
            commands.append(["role", "grant-permission", role,
                             *(["--prefix=true"] if grant.prefix else []),
                             grant.permission, grant.key])
        commands.append(["user", "add", f"{role}:{passwords[role]}", "--interactive=false"]
                        if passwords else ["user", "add", role])
        commands.append(["user", "grant-role", role, role])
    return commands


def as_script(hosts: list[str], cluster: str = etcd_keys.DEFAULT_CLUSTER) -> str:
    """`etcdctl_commands` as shell lines, for docs and operators."""
    return "\n".join(shlex.join(["etcdctl", *command])
                     for command in etcdctl_commands(hosts, cluster))
