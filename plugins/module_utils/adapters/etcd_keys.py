# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the cluster's state lives in etcd: every key name, and only here.

Everything of one cluster is under `/yasco/<cluster>/` (docs/etcd-schema.md says who
writes each key, which are bound to a lease and which change only by compare-and-swap):

    hosts/<host>/registered       the hypervisor belongs to the cluster (persistent)
    hosts/<host>/alive            the host agent runs (bound to the agent's lease)
    hosts/<host>/maintenance      the host is in maintenance
    hosts/<host>/frozen           the host's agent has seen HA disarmed in freeze mode
                                  and will not self-fence (bound to the agent's lease)
    hosts/<host>/domains/<vm>     a domain runs on the host (bound to the agent's lease)
    hosts/<host>/restarts/<vm>    the host's agent restarts, or restarted, the VM in
                                  place (bound to the agent's lease)
    hosts/<host>/events/<number>  an event of the host's agent, on its way to history/
                                  (not bound to a lease; the leading watcher copies it)
    vms/<vm>                      where a VM is and in what state (compare-and-swap only)
    requested/<vm>                the state an operator asks for the VM (absent: started)
    fences/<host>                 the host was fenced
    vdm/version                   the version of the VDM applied
    vdm/ha                        what the HA reconciler needs of the VDM applied
    ha/disarmed                   automatic evacuation is paused
    watchers/leader               the HA watcher that leads (bound to its lease)
    history/<20-digit number>     append-only events, in order

Pure Python, no I/O: the modules, the inventory plugin, the agent and the event
source build and read keys with these functions, so a key's name changes in one place.
Records are JSON, written by `to_json` and read by `json_or_none` (or the client's
`from_json`, which fails on what is not JSON).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

ROOT = "/yasco/"
DEFAULT_CLUSTER = "yasco"
# Zero-padded so that etcd's byte order (the order of a range read) is numeric order.
HISTORY_DIGITS = 20

# The records of hosts/<host>/, each named after its kind.
HOST_RECORDS = ("registered", "alive", "maintenance")
KINDS = ("registered", "alive", "maintenance", "domain", "restart", "vm", "requested", "fence",
         "vdm_version", "vdm_ha", "history", "disarmed", "frozen", "host_event")


class ParsedKey(NamedTuple):
    """What a key is about: its kind (one of KINDS), and the host and VM it names."""

    kind: str
    host: str | None = None
    vm: str | None = None


def _name(what: str, name: str) -> str:
    # A '/' would shift every part of the key after it and make it parse as another kind.
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} name {name!r}: must be a non-empty string")
    if "/" in name:
        raise ValueError(f"{what} name {name!r}: must not contain '/'")
    return name


def cluster_prefix(cluster: str = DEFAULT_CLUSTER) -> str:
    """Everything of one cluster: `/yasco/<cluster>/`."""
    return f"{ROOT}{_name('cluster', cluster)}/"


def hosts_prefix(*, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{cluster_prefix(cluster)}hosts/"


def host_prefix(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    """Every key about one hypervisor."""
    return f"{hosts_prefix(cluster=cluster)}{_name('host', host)}/"


def registered_key(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{host_prefix(host, cluster=cluster)}registered"


def alive_key(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{host_prefix(host, cluster=cluster)}alive"


def frozen_key(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    """The agent's word that it has seen HA disarmed in freeze mode."""
    return f"{host_prefix(host, cluster=cluster)}frozen"


def maintenance_key(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{host_prefix(host, cluster=cluster)}maintenance"


# Who writes a maintenance marker for a stop of their own (its `by`): the agent's
# planned stop, the drain, and the emergency shutdown. Anyone else's marker is an
# operator's request to drain the host.
EMERGENCY_SHUTDOWN = "emergency_shutdown"
PLANNED_MAINTENANCE = ("agent", "drain", EMERGENCY_SHUTDOWN)


def asks_migration(marker: Any) -> bool:
    """Whether a maintenance marker (as parsed) is the agent's own asking for its VMs to
    be migrated away as its host goes down (`shutdown_policy: migrate`): a drain, which
    leaves the stopping agent alone."""
    return (isinstance(marker, dict) and marker.get("by") == "agent"
            and marker.get("migrate") is True)


# What a liveness value's `storage` says when the agent's storage probe has not
# reached Ceph for its grace period (module_utils/agent/storage_probe.py); "ok" when it has.
STORAGE_LOST = "lost"


def takes_vms(host: dict[str, Any]) -> bool:
    """Whether a hypervisor, as cluster_status or the reconciler observe it, may be
    given a VM to start or take: alive, not in maintenance (nor draining), not fenced,
    and not cut off from Ceph as its agent reports."""
    return bool(host.get("alive")) and not host.get("maintenance") \
        and not host.get("fenced") and host.get("storage") != STORAGE_LOST


def died_in_maintenance(host: dict[str, Any]) -> bool:
    """Whether a hypervisor in maintenance, as cluster_status or the reconciler observe
    it, went down without its agent's clean stop (a crash or a cut during a drain): no
    liveness key, and a registration whose agent never wrote `stopped` into it. A
    maintenance marker says that a stop is planned, not that this one was: the VMs
    still recorded there then fail over as for any failure."""
    registered = host.get("registered")
    return (bool(host.get("maintenance")) and not host.get("alive")
            and isinstance(registered, dict) and not registered.get("stopped"))


def domains_prefix(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    """The domains the host's agent reports running there."""
    return f"{host_prefix(host, cluster=cluster)}domains/"


def domain_key(host: str, vm: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{domains_prefix(host, cluster=cluster)}{_name('VM', vm)}"


def restarts_prefix(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    """The VMs the host's agent restarts, or restarted, in place (agent_restart.py)."""
    return f"{host_prefix(host, cluster=cluster)}restarts/"


def restart_key(host: str, vm: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{restarts_prefix(host, cluster=cluster)}{_name('VM', vm)}"


def host_events_prefix(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    """The events the host's agent wrote that the leading HA watcher has not yet
    copied into history/: an agent may not write history/ itself."""
    return f"{host_prefix(host, cluster=cluster)}events/"


def host_event_key(host: str, event: int, *, cluster: str = DEFAULT_CLUSTER) -> str:
    """The key of the host's agent's event number `event` (numbered as history/)."""
    return f"{host_events_prefix(host, cluster=cluster)}{_number(event)}"


def vms_prefix(*, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{cluster_prefix(cluster)}vms/"


def vm_key(vm: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{vms_prefix(cluster=cluster)}{_name('VM', vm)}"


def requested_prefix(*, cluster: str = DEFAULT_CLUSTER) -> str:
    """The VMs' requested states (playbooks/vm_state.yml), one key each."""
    return f"{cluster_prefix(cluster)}requested/"


def requested_key(vm: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{requested_prefix(cluster=cluster)}{_name('VM', vm)}"


def fences_prefix(*, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{cluster_prefix(cluster)}fences/"


def fence_key(host: str, *, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{fences_prefix(cluster=cluster)}{_name('host', host)}"


def vdm_version_key(*, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{cluster_prefix(cluster)}vdm/version"


def vdm_ha_key(*, cluster: str = DEFAULT_CLUSTER) -> str:
    """The applied VDM as the HA reconciler reads it (vdm_document.ha_view)."""
    return f"{cluster_prefix(cluster)}vdm/ha"


def disarmed_key(*, cluster: str = DEFAULT_CLUSTER) -> str:
    """Present while automatic evacuation is paused cluster-wide (playbooks/disarm.yml)."""
    return f"{cluster_prefix(cluster)}ha/disarmed"


def watchers_prefix(*, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{cluster_prefix(cluster)}watchers/"


def watchers_leader_key(*, cluster: str = DEFAULT_CLUSTER) -> str:
    """Held by the HA watcher that leads, under its lease."""
    return f"{watchers_prefix(cluster=cluster)}leader"


def history_prefix(*, cluster: str = DEFAULT_CLUSTER) -> str:
    return f"{cluster_prefix(cluster)}history/"


def _number(event: int) -> str:
    if isinstance(event, bool) or not isinstance(event, int) or event < 0:
        raise ValueError(f"history event {event!r}: must be a non-negative integer")
    if len(str(event)) > HISTORY_DIGITS:
        raise ValueError(f"history event {event}: more than {HISTORY_DIGITS} digits")
    return f"{event:0{HISTORY_DIGITS}d}"


def _is_number(part: str) -> bool:
    return len(part) == HISTORY_DIGITS and all(digit in "0123456789" for digit in part)


def history_key(event: int, *, cluster: str = DEFAULT_CLUSTER) -> str:
    """The key of event number `event`: a sequence number, or a time in nanoseconds."""
    return f"{history_prefix(cluster=cluster)}{_number(event)}"


def event_number(key: str) -> int | None:
    """The number of a history/ or hosts/<host>/events/ key, or None when its last
    part is not one."""
    last = key.rsplit("/", 1)[-1]
    return int(last) if _is_number(last) else None


def parse_key(key: str, *, cluster: str = DEFAULT_CLUSTER) -> ParsedKey | None:
    """What `key` is about, or None when it is not a key of this layout (a reader
    skips those: a newer writer may have added kinds this reader does not know)."""
    prefix = cluster_prefix(cluster)
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    if any(not part for part in parts):
        return None
    # Written out rather than with `match`, which managed hosts' older Pythons lack.
    if len(parts) == 3 and parts[0] == "hosts" and parts[2] in HOST_RECORDS:
        return ParsedKey(parts[2], parts[1])
    if len(parts) == 3 and parts[0] == "hosts" and parts[2] == "frozen":
        return ParsedKey("frozen", parts[1])
    if len(parts) == 4 and parts[0] == "hosts" and parts[2] == "domains":
        return ParsedKey("domain", parts[1], parts[3])
    if len(parts) == 4 and parts[0] == "hosts" and parts[2] == "restarts":
        return ParsedKey("restart", parts[1], parts[3])
    if (len(parts) == 4 and parts[0] == "hosts" and parts[2] == "events"
            and _is_number(parts[3])):
        return ParsedKey("host_event", parts[1])
    if len(parts) == 2 and parts[0] == "vms":
        return ParsedKey("vm", None, parts[1])
    if len(parts) == 2 and parts[0] == "requested":
        return ParsedKey("requested", None, parts[1])
    if len(parts) == 2 and parts[0] == "fences":
        return ParsedKey("fence", parts[1])
    if parts == ["vdm", "version"]:
        return ParsedKey("vdm_version")
    if parts == ["vdm", "ha"]:
        return ParsedKey("vdm_ha")
    if parts == ["ha", "disarmed"]:
        return ParsedKey("disarmed")
    if len(parts) == 2 and parts[0] == "history" and _is_number(parts[1]):
        return ParsedKey("history")
    return None


def to_json(data: Any) -> str:
    """The JSON form of a record: compact with sorted keys, so that equal records are
    equal strings and an unchanged record is not rewritten."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def json_or_none(value: str) -> Any:
    """`value` parsed as JSON, or None when it is not: for readers that must go on
    past a record someone else wrote (the agent, the watcher)."""
    try:
        return json.loads(value)
    except ValueError:
        return None


# A fence record (fences/<host>) being lifted carries the lift's mark under this field
# (ceph_fencing.HostFenceRun): from then on it fences nothing, though it still stands
# until the lift deletes it.
FENCE_LIFT_MARK = "lifting"


def fence_stands(record: Any) -> bool:
    """Whether a fence record's value, parsed, fences its host: one being lifted
    does not."""
    return isinstance(record, dict) and FENCE_LIFT_MARK not in record


def fence_lift_mark(record: Any) -> dict[str, Any] | None:
    """A fence record's lift mark, if it has one."""
    mark = record.get(FENCE_LIFT_MARK) if isinstance(record, dict) else None
    return mark if isinstance(mark, dict) else None


def fence_unmarked(record: Any) -> Any:
    """A fence record without its lift mark."""
    if isinstance(record, dict):
        return {k: v for k, v in record.items() if k != FENCE_LIFT_MARK}
    return record
