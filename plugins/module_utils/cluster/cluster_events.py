# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's append-only event history in etcd (history/<event>, see
docs/etcd-schema.md): what happened, when, to which host and VM.

An event's number is the wall-clock time in nanoseconds, so that etcd's key order is
time order across writers; it is created only where no key exists, and a writer that
collides takes the next number. Nothing here ever changes or deletes an event.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import from_json
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    EtcdError)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json

# Kinds the collection writes; others are accepted, for operators' own notes.
KINDS = ("provisioned", "started", "migrated", "removed", "fenced", "unfenced",
         "self-fenced", "crashed", "evacuated", "returned", "maintenance", "note")
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


def append(etcd: EtcdClient, record: dict[str, Any], *,
           cluster: str = etcd_keys.DEFAULT_CLUSTER) -> str:
    """Write `record` as the next event; its key."""
    number = time.time_ns()
    text = to_json(record)
    for attempt in range(_ATTEMPTS):
        key = etcd_keys.history_key(number + attempt, cluster=cluster)
        if etcd.put_if(key, text, mod_revision=0).succeeded:
            return key
    raise EtcdError(f"{etcd_keys.history_prefix(cluster=cluster)}: {_ATTEMPTS} event numbers "
                    f"from {number} are all taken; is a clock far ahead?")


def recent(etcd: EtcdClient, limit: int, *, cluster: str = etcd_keys.DEFAULT_CLUSTER
           ) -> list[dict[str, Any]]:
    """The last `limit` events, oldest first, each with its `key`."""
    if limit <= 0:
        return []
    kvs = etcd.last_under(etcd_keys.history_prefix(cluster=cluster), limit)
    return [{"key": kv.key, **from_json(kv.value, kv.key)} for kv in kvs]
