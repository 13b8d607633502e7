# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster as the stories read it: the answer of the cluster_status module (its
hypervisors with their liveness, fences and maintenance, its VMs with their records
and where libvirt runs them, the requested states, the HA switch), read from etcd in
one request and from each hypervisor's libvirt. `ClusterView` is its one reader, by
name rather than by list.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any


class ClusterView:
    """cluster_status's answer, read by name; empty where it lacks a part."""

    def __init__(self, status: Any) -> None:
        self.status: dict[str, Any] = status if isinstance(status, dict) else {}

    @cached_property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """Each hypervisor: alive, its fence, its maintenance, its libvirt URI..."""
        return {h["name"]: h for h in self.status.get("hypervisors") or []}

    @cached_property
    def vms(self) -> dict[str, dict[str, Any]]:
        """Each VM: its record, its home, where it runs, what is requested of it."""
        return {vm["name"]: vm for vm in self.status.get("vms") or []}

    @property
    def uris(self) -> dict[str, str | None]:
        """Each hypervisor's libvirt URI."""
        return {name: host.get("uri") for name, host in self.hosts.items()}

    @property
    def requested(self) -> dict[str, str]:
        """Each VM's requested state, where one was set."""
        return self.status.get("requested") or {}

    @property
    def ha_disarmed(self) -> Any:
        """The HA switch's record when HA is disarmed, else None."""
        return self.status.get("ha_disarmed")
