# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's append-only event history in etcd (history/<event>, see
docs/etcd-schema.md): what happened, when, to which host and VM.

An event's number is the wall-clock time in nanoseconds, so that etcd's key order is
time order across writers; it is created only where no key exists, and a writer that
collides takes the next number. Nothing here ever changes or deletes an event.

A host's agent may not write history/: etcd grants key ranges, not create-only, and
whoever may write a range may delete or rewrite it, every host's events with it. The
agent writes its events under its own host instead (`append_for_agent`:
hosts/<host>/events/<number>, numbered the same way and bound to no lease, so that a
self-fence written as the host dies stays). The leading HA watcher copies each into
history/, checked (`from_agent`: what an agent writes is data, and says nothing of
another host), once (`copy_from_agent`), and then deletes the agent's key. The
readers (`recent`) show the events still waiting there too.
"""

from __future__ import annotations

import datetime
import math
import time
from typing import Any, Callable, Iterable, NamedTuple

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import from_json
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import (
    json_or_none, to_json)

# Kinds the collection writes; others are accepted, for operators' own notes.
KINDS = ("provisioned", "started", "migrated", "removed", "fenced", "unfenced",
         "self-fenced", "crashed", "evacuated", "returned", "maintenance", "note")
# The kinds a host's agent writes (its self-fences, its guests' crashes, its restarts
# in place): the only ones copied from under a host into the history.
AGENT_KINDS = ("self-fenced", "crashed", "restarted")
# What an agent's event may hold: its JSON text, each string in it (a VM's name, a
# reason, a key of its details) and how deep its details nest.
AGENT_EVENT_CHARS = 8192
AGENT_TEXT_CHARS = 1024
AGENT_DEPTH = 4
# An agent's event dated ahead of the watcher's clock waits until then, so that the
# history's key order stays time order; one dated further ahead than this is dropped
# (the host's clock is wrong, or its agent means to stay the newest event forever).
AGENT_AHEAD_NS = 300 * 10**9
_FIELDS = ("at", "kind", "host", "vm", "by", "details")
_ATTEMPTS = 64


def timestamp(at: float | None = None) -> str:
    """`at` (seconds since the epoch, now by default) as the history writes times."""
    stamp = datetime.datetime.fromtimestamp(time.time() if at is None else at,
                                            tz=datetime.timezone.utc)
    return stamp.isoformat(timespec="milliseconds")


def event(kind: str, *, host: str | None = None, vm: str | None = None,
          by: str | None = None, details: dict[str, Any] | None = None,
          at: float | None = None) -> dict[str, Any]:
    """An event's record. `at` is seconds since the epoch (now by default)."""
    if not kind or not isinstance(kind, str):
        raise EtcdError(f"event kind: must be a non-empty string, got {kind!r}")
    record: dict[str, Any] = {"at": timestamp(at), "kind": kind}
    for name, value in (("host", host), ("vm", vm), ("by", by)):
        if value:
            record[name] = value
    if details:
        record["details"] = details
    return record


def _create(etcd: EtcdClient, text: str, key_of: Callable[[int], str], where: str) -> str:
    """Create `text` at the first free key of the numbers from now on; its key."""
    number = time.time_ns()
    for attempt in range(_ATTEMPTS):
        key = key_of(number + attempt)
        if etcd.put_if(key, text, mod_revision=0).succeeded:
            return key
    raise EtcdError(f"{where}: {_ATTEMPTS} event numbers from {number} are all taken; "
                    "is a clock far ahead?")


def append(etcd: EtcdClient, record: dict[str, Any], *,
           cluster: str = etcd_keys.DEFAULT_CLUSTER) -> str:
    """Write `record` as the next event; its key."""
    return _create(etcd, to_json(record),
                   lambda number: etcd_keys.history_key(number, cluster=cluster),
                   etcd_keys.history_prefix(cluster=cluster))


def append_for_agent(etcd: EtcdClient, record: dict[str, Any], *, host: str,
                     cluster: str = etcd_keys.DEFAULT_CLUSTER) -> str:
    """Write `record`, an event of `host`'s agent, under that host for the leading HA
    watcher to copy into the history; its key. Bound to no lease: an event written
    just before the host dies is copied all the same."""
    return _create(etcd, to_json(record),
                   lambda number: etcd_keys.host_event_key(host, number, cluster=cluster),
                   etcd_keys.host_events_prefix(host, cluster=cluster))


# -- an agent's events, on their way to the history -----------------------------------

def _shown(value: Any) -> str:
    """An agent's value as a reason quotes it: escaped, and short."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _is_time(at: str) -> bool:
    try:
        datetime.datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _check_bounded(value: Any, depth: int = 0) -> None:
    if isinstance(value, str):
        if len(value) > AGENT_TEXT_CHARS:
            raise ValueError(f"details: a string of {len(value)} characters, more than "
                             f"{AGENT_TEXT_CHARS}")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"details: {value} is no JSON number")
    elif isinstance(value, (dict, list)):
        if depth >= AGENT_DEPTH:
            raise ValueError(f"details: nested deeper than {AGENT_DEPTH}")
        for item in (value if isinstance(value, list) else [*value, *value.values()]):
            _check_bounded(item, depth + 1)


def from_agent(host: str, value: str) -> dict[str, Any]:
    """An event that `host`'s agent wrote under its host (`value`, the key's text), as
    the history takes it; ValueError saying why it does not. It must be a JSON object,
    of a kind an agent writes (AGENT_KINDS), at an ISO 8601 time, its strings bounded;
    its `host` is `host` and its `by` the agent whatever else it says: an event naming
    another host or another writer is refused. Fields the history does not know are
    left out."""
    if len(value) > AGENT_EVENT_CHARS:
        raise ValueError(f"{len(value)} characters, more than {AGENT_EVENT_CHARS}")
    record = json_or_none(value)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    kind = record.get("kind")
    if kind not in AGENT_KINDS:
        raise ValueError(f"kind {_shown(kind)}: an agent writes only "
                         f"{', '.join(AGENT_KINDS)}")
    for field, own in (("host", host), ("by", "agent")):
        if record.get(field) not in (None, own):
            raise ValueError(f"{field} {_shown(record[field])}: not {own}, who wrote it")
    at = record.get("at")
    if not isinstance(at, str) or len(at) > 64 or not _is_time(at):
        raise ValueError(f"at {_shown(at)}: not an ISO 8601 time")
    checked: dict[str, Any] = {"at": at, "kind": kind, "host": host, "by": "agent"}
    vm = record.get("vm")
    if vm is not None:
        if (not isinstance(vm, str) or not vm or "/" in vm or len(vm) > 255
                or not vm.isprintable()):
            raise ValueError(f"vm {_shown(vm)}: not a VM's name")
        checked["vm"] = vm
    details = record.get("details")
    if details is not None:
        if not isinstance(details, dict):
            raise ValueError("details: not a JSON object")
        _check_bounded(details)
        checked["details"] = details
    return checked


def _source(kv: Any) -> dict[str, Any]:
    """What a copy records of the agent's event it came from: the key, and the
    revision of the write it copies."""
    return {"key": kv.key, "revision": kv.mod_revision}


class Copy(NamedTuple):
    """What became of an agent's event: `done` is copied (into the history's `key`, by
    this copy or an earlier one), dropped (`why`), waiting (dated ahead of now) or
    changed (its key changed or went since it was read: read it again)."""

    done: str
    key: str = ""
    why: str = ""


def copy_into_history(etcd: EtcdClient, kv: Any, *,
                      cluster: str = etcd_keys.DEFAULT_CLUSTER,
                      now_ns: int | None = None) -> Copy:
    """The history's copy of an agent's event, `kv` as read under
    hosts/<host>/events/, made once whoever runs it and however often: at the event's
    own number or the first free one after it (a number depends on nothing but the
    history), created only while the agent's key is as read, and recording that key
    and revision (`source`), by which a copy made before is found. The agent's key
    stays: `copy_from_agent` deletes it."""
    parsed = etcd_keys.parse_key(kv.key, cluster=cluster)
    number = etcd_keys.event_number(kv.key)
    if parsed is None or parsed.kind != "host_event" or number is None:
        raise ValueError(f"{kv.key}: not an agent's event")
    now = time.time_ns() if now_ns is None else now_ns
    if number > now + AGENT_AHEAD_NS:
        return Copy("dropped", why=f"dated {(number - now) / 1e9:.0f} s ahead of this "
                                   f"clock: is the clock of {parsed.host} right?")
    if number > now:
        return Copy("waiting")
    try:
        record = from_agent(parsed.host, kv.value)
    except ValueError as err:
        return Copy("dropped", why=str(err))
    source = _source(kv)
    text = to_json({**record, "source": source})
    for attempt in range(_ATTEMPTS):
        key = etcd_keys.history_key(number + attempt, cluster=cluster)
        swap = etcd.put_if(key, text, mod_revision=0, unchanged={kv.key: kv.mod_revision})
        if swap.succeeded:
            return Copy("copied", key)
        if swap.current is None:
            return Copy("changed")  # the number was free: the agent's key is what changed
        if (json_or_none(swap.current.value) or {}).get("source") == source:
            return Copy("copied", key)
    raise EtcdError(f"{etcd_keys.history_prefix(cluster=cluster)}: {_ATTEMPTS} event "
                    f"numbers from {number} are all taken; {kv.key} waits")


def copy_from_agent(etcd: EtcdClient, kv: Any, *, cluster: str = etcd_keys.DEFAULT_CLUSTER,
                    now_ns: int | None = None) -> Copy:
    """Copy an agent's event (`kv`, as read) into the history once
    (`copy_into_history`), or drop it, then delete the agent's key if it is still as
    read: a copy cut off in between is finished by the next, which finds the copy made."""
    copy = copy_into_history(etcd, kv, cluster=cluster, now_ns=now_ns)
    if copy.done in ("copied", "dropped"):
        etcd.delete_if(kv.key, mod_revision=kv.mod_revision)
    return copy


def waiting(kvs: Iterable[Any], *, cluster: str = etcd_keys.DEFAULT_CLUSTER,
            now_ns: int | None = None) -> list[dict[str, Any]]:
    """The agents' events among `kvs` (keys read under hosts/) as the HA watcher will
    copy them, each with its `key`, its `source` and `waiting` true; those it will drop
    are left out."""
    now = time.time_ns() if now_ns is None else now_ns
    found = []
    for kv in kvs:
        parsed = etcd_keys.parse_key(kv.key, cluster=cluster)
        if parsed is None or parsed.kind != "host_event":
            continue
        if (etcd_keys.event_number(kv.key) or 0) > now + AGENT_AHEAD_NS:
            continue
        try:
            record = from_agent(parsed.host, kv.value)
        except ValueError:
            continue
        found.append({"key": kv.key, **record, "source": _source(kv), "waiting": True})
    return found


def recent(etcd: EtcdClient, limit: int, *, cluster: str = etcd_keys.DEFAULT_CLUSTER,
           hosts_read: list[Any] | None = None) -> list[dict[str, Any]]:
    """The last `limit` events, oldest first, each with its `key`: the history's, and
    the agents' events still waiting under their hosts for the HA watcher (`waiting`).
    `hosts_read`: the keys under hosts/ as the caller read them, before this reads the
    history (read here first when not given), so that an event copied in between is
    found, and shown once."""
    if limit <= 0:
        return []
    if hosts_read is None:
        hosts_read = etcd.get_prefix(etcd_keys.hosts_prefix(cluster=cluster))
    agents = waiting(hosts_read, cluster=cluster)
    kvs = etcd.last_under(etcd_keys.history_prefix(cluster=cluster), limit)
    events = [{"key": kv.key, **from_json(kv.value, kv.key)} for kv in kvs]
    copied = [e.get("source") for e in events if e.get("source")]
    events += [e for e in agents if e["source"] not in copied]
    # By number, the history's first where one equals an agent's (sorted keeps order).
    events.sort(key=lambda e: etcd_keys.event_number(e["key"]) or 0)
    return events[-limit:]
