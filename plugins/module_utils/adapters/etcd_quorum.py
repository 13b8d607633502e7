# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the failures a VDM covers can take etcd below quorum.

When etcd's members run on the hypervisors, a failure set that takes half of them
or more stops etcd: no evacuation can run, and every agent self-fences its HA VMs
once it cannot renew its lease. A VDM that promises to survive that failure set
promises what cannot be kept, so the planner refuses it. Pure: the endpoints and
the hypervisors' addresses in, a message out.
"""

from __future__ import annotations

import urllib.parse
from typing import Iterable


def _member_host(endpoint: str) -> str:
    """The host part of an etcd client URL (`https://10.0.0.11:2379` -> `10.0.0.11`)."""
    return (urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
            .hostname or endpoint)


def members_by_hypervisor(endpoints: Iterable[str], addresses: dict[str, set[str]]
                          ) -> dict[str, list[str]]:
    """Each hypervisor that runs etcd members -> their endpoints. A member runs on a
    hypervisor when its URL's host is one of that hypervisor's addresses (its
    inventory name, `ansible_host`)."""
    found: dict[str, list[str]] = {}
    for endpoint in dict.fromkeys(endpoints):
        host = _member_host(endpoint)
        for hypervisor, names in addresses.items():
            if host in names:
                found.setdefault(hypervisor, []).append(endpoint)
    return found


def quorum_problem(endpoints: Iterable[str], addresses: dict[str, set[str]],
                   failure_sets: Iterable[frozenset[str]]) -> str | None:
    """Why the worst failure set would take etcd below quorum, or None when none
    would (or no member runs on a hypervisor)."""
    endpoints = list(dict.fromkeys(endpoints))
    on = members_by_hypervisor(endpoints, addresses)
    if not endpoints or not on:
        return None
    total = len(endpoints)
    can_lose = (total - 1) // 2

    def lost_with(failed: frozenset[str]) -> int:
        return sum(len(on.get(host, ())) for host in failed)

    # The set that takes most members; of those, the smallest, the clearest to read.
    worst = max(failure_sets, key=lambda failed: (lost_with(failed), -len(failed)),
                default=frozenset())
    lost = lost_with(worst)
    if lost <= can_lose:
        return None
    where = ", ".join(f"{endpoint} on {host}" for host in sorted(worst) for endpoint in
                      on.get(host, ()))
    return (f"etcd quorum: a failure of {', '.join(sorted(worst))}, which the VDM is to "
            f"survive, takes {lost} of etcd's {total} members ({where}); {total} members "
            f"survive {can_lose} lost, so etcd would stop: no evacuation could run and "
            f"every agent would self-fence its HA VMs. Run more members "
            f"({2 * lost + 1} survive {lost} lost), or run them off the hypervisors, or "
            f"lower yasco_failures_to_tolerate (and yasco_failure_domains_to_tolerate)")
