"""The Ansible inventory `up` writes to inventories/lab/: every later playbook runs on it."""

from __future__ import annotations

import shutil

from pathlib import Path

import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_access

from . import bmc, credentials, hypervisor, prometheus
from .layout import (CEPH_FENCE_CLIENT, CEPH_HYPERVISOR_CLIENT, CEPH_MON_PORT, CEPH_POOL,
                     CEPH_PROVISION_CLIENT, CEPH_SECRET_UUID, CLUSTER_NAME, HostLayout,
                     ceph_address, ceph_conf_path, ceph_keyring_path, inventory_dir,
                     known_hosts_path, ssh_key_path)

# What the lab tells the planner each host offers. The lab's VMs are canaries of
# 128 MiB, so these are small on purpose: a plan must fit the real machine.
HOST_CAPACITY = {"vcpus": 4, "memory_mb": 1024}
HOST_RESERVED = {"vcpus": 0, "memory_mb": 128}
# Settings go in group_vars/all/ (not all.yml): the VDM is planned into the same
# directory, and Ansible reads a group's directory or its .yml file, never both.
HEADER = "# Written by `yasco-lab up`, removed by `yasco-lab down`: do not edit.\n"


def _password(user: credentials.EtcdUser) -> str:
    """The password as a lookup of its 0600 file: the inventory holds no secret."""
    return f"{{{{ lookup('ansible.builtin.file', '{user.password_file}') }}}}"


def _etcd_vars(prefix: str, user: credentials.EtcdUser, *, with_ca: bool = True) -> dict:
    """The inventory variables of one etcd user's credentials, named `prefix`_..."""
    found = {f"{prefix}_ca_cert": str(credentials.ca().cert)} if with_ca else {}
    return {**found, f"{prefix}_client_cert": str(user.certificate.cert),
            f"{prefix}_client_key": str(user.certificate.key),
            f"{prefix}_username": user.name, f"{prefix}_password": _password(user)}


def write(hosts: list[HostLayout], virt_type: str, canary: dict[str, str]) -> Path:
    root = inventory_dir()
    (root / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    inventory = {"all": {"children": {"yasco_hypervisors": {
        "hosts": {h.name: {
            "ansible_host": h.address,
            # Where a fence of the host blocklists: the address its Ceph clients (its
            # QEMUs, its agent, which registers the same: hypervisor.start_agent) use.
            "yasco_ceph_addrs": [h.address],
            "yasco_libvirt_uri": h.libvirt_uri(),
            "yasco_etcd_client_url": h.etcd_client_url,
            "yasco_capacity": dict(HOST_CAPACITY),
            "yasco_reserved": dict(HOST_RESERVED),
            # No systemd in the lab: how drain and undrain stop and start the agent.
            "yasco_agent_start_command": hypervisor.agent_service_commands(h)["start"],
            "yasco_agent_stop_command": hypervisor.agent_service_commands(h)["stop"],
            # The host's BMC (yasco-lab's IPMI emulator): evacuate.yml powers a failed
            # host off through it when yasco_power_fence is require or prefer.
            "yasco_fence_device": bmc.device(h.name),
            # What yasco.cluster.agent gives the host's agent (the lab starts it itself).
            **_etcd_vars("agent", credentials.EtcdUser(etcd_access.agent_role(h.name))),
        } for h in hosts},
        "vars": {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(ssh_key_path()),
            "ansible_ssh_common_args": (f"-o UserKnownHostsFile={known_hosts_path()} "
                                        "-o StrictHostKeyChecking=yes"),
            "ansible_python_interpreter": "/usr/bin/python3",
        },
    }}}}
    group_vars = {
        "yasco_cluster_name": CLUSTER_NAME,
        "yasco_etcd_endpoints": [h.etcd_client_url for h in hosts],
        # The lab's Prometheus scrapes the watcher there (yasco-lab status names it).
        "yasco_watcher_metrics_listen": prometheus.watcher_listen(),
        # The playbooks as the controller, status.yml as the reader, and the HA
        # watcher's own source as the watcher.
        **_etcd_vars("yasco_etcd", credentials.EtcdUser(etcd_access.CONTROLLER_ROLE)),
        **_etcd_vars("yasco_etcd_watcher", credentials.EtcdUser(etcd_access.WATCHER_ROLE),
                     with_ca=False),
        **_etcd_vars("yasco_etcd_reader", credentials.EtcdUser(etcd_access.READER_ROLE),
                     with_ca=False),
        "yasco_ceph_conf": str(ceph_conf_path()),
        "yasco_ceph_client": CEPH_PROVISION_CLIENT,
        "yasco_ceph_keyring": str(ceph_keyring_path(CEPH_PROVISION_CLIENT)),
        "yasco_ceph_fence_client": CEPH_FENCE_CLIENT,
        "yasco_ceph_fence_keyring": str(ceph_keyring_path(CEPH_FENCE_CLIENT)),
        "yasco_ceph_hypervisor_client": CEPH_HYPERVISOR_CLIENT,
        "yasco_ceph_secret_uuid": CEPH_SECRET_UUID,
        "yasco_ceph_pool": CEPH_POOL,
        "yasco_ceph_monitors": [f"{ceph_address()}:{CEPH_MON_PORT}"],
        "yasco_virt_type": virt_type,
        # How long a returned host must stay up before the HA watcher brings its VMs
        # home (60 s by default): short, for the tests and the demo.
        "yasco_return_hold_down": 10,
        # How the return home, the drain and the rebalance live-migrate (docs/ha.md): a
        # busy guest's migration ends, and a host sends or receives two at most at once.
        "yasco_migration": {"auto_converge": True, "per_host": 2},
        # Any VM without boot settings of its own boots the canary guest.
        "yasco_vm_defaults": {**canary, "memory_mb": 128, "vcpus": 1, "disk_gb": 1},
    }
    (root / "hosts.yml").write_text(HEADER + _dump(inventory))
    (root / "group_vars" / "all" / "lab.yml").write_text(
        HEADER + "---\n" + _dump(group_vars))
    return root


class _Dumper(yaml.SafeDumper):
    """Lists indented under their key, as yamllint (and so ansible-lint) wants them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _dump(data: dict) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def remove() -> None:
    """The lab's inventory files gone: what `up` wrote, and what was written beside it
    for the lab's cluster alone (the VDM plan.yml wrote, the demo's VMs)."""
    root = inventory_dir()
    (root / "hosts.yml").unlink(missing_ok=True)
    shutil.rmtree(root / "group_vars", ignore_errors=True)
