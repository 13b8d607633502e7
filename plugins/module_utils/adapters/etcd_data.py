# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the etcd client (etcd.py) returns, and how etcd's JSON gateway encodes it.

`KeyValue` is a key as etcd holds it, `WatchEvent` a change a watch saw, `SwapResult`
a compare-and-swap's outcome and `Lease` a lease. The gateway sends keys and values
base64-encoded and int64 numbers as strings, leaving out what is zero; the functions
here turn its answers into these records and UTF-8 text into its requests' fields,
so that the client deals in strings. Pure Python, no I/O.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    Compacted, EtcdError)


@dataclass(frozen=True)
class KeyValue:
    """A key as etcd holds it. `mod_revision` is what a compare-and-swap compares;
    `lease` is 0 when the key is bound to no lease."""

    key: str
    value: str
    mod_revision: int
    create_revision: int
    version: int
    lease: int

    @classmethod
    def from_gateway(cls, item: dict[str, Any]) -> KeyValue:
        # The gateway leaves out fields at their zero value and sends int64 as strings.
        return cls(key=decode(item["key"]), value=decode(item.get("value", "")),
                   mod_revision=int(item.get("mod_revision", 0)),
                   create_revision=int(item.get("create_revision", 0)),
                   version=int(item.get("version", 0)), lease=int(item.get("lease", 0)))

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "mod_revision": self.mod_revision,
                "create_revision": self.create_revision, "version": self.version,
                "lease": self.lease}

    def json(self) -> Any:
        """The value parsed as JSON, as every record of the cluster's layout is."""
        return from_json(self.value, self.key)


@dataclass(frozen=True)
class WatchEvent:
    """One change seen by a watch: `kind` is PUT or DELETE; `previous` is the key
    before it (None when it was created), which for a DELETE says what was deleted."""

    kind: str
    kv: KeyValue
    previous: KeyValue | None


@dataclass(frozen=True)
class SwapResult:
    """The outcome of a compare-and-swap. On failure, `current` is the key as the
    transaction found it (None when absent), read atomically with the comparison."""

    succeeded: bool
    revision: int  # the store's revision after the transaction
    current: KeyValue | None = None


@dataclass(frozen=True)
class Lease:
    """A lease: `ttl` is the seconds left, `granted_ttl` what it was granted with."""

    id: int
    ttl: int
    granted_ttl: int
    keys: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "ttl": self.ttl, "granted_ttl": self.granted_ttl,
                "keys": list(self.keys)}


def from_json(value: str, key: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as err:
        raise EtcdError(f"{key} holds no JSON ({err}): it was not written by YASCO; "
                        f"fix or delete it") from err


def encode(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def decode(data: str) -> str:
    return base64.b64decode(data).decode("utf-8", errors="backslashreplace")


def _range_end(prefix: str) -> str:
    """The end of the range of keys starting with `prefix`: the prefix with its last
    byte incremented (dropping trailing 0xff bytes), as etcdctl --prefix does."""
    end = bytearray(prefix.encode("utf-8"))
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        return base64.b64encode(b"\0").decode("ascii")  # every key
    end[-1] += 1
    return base64.b64encode(bytes(end)).decode("ascii")


def prefix_range(prefix: str) -> dict[str, str]:
    """The range of a request for every key starting with `prefix`."""
    return {"key": encode(prefix) if prefix else base64.b64encode(b"\0").decode("ascii"),
            "range_end": _range_end(prefix)}


def header_revision(result: dict[str, Any]) -> int:
    """The store's revision an answer was given at."""
    return int((result.get("header") or {}).get("revision", 0))


def watch_batch(url: str, prefix: str, message: dict[str, Any]
                ) -> tuple[int, list[WatchEvent]] | None:
    """The (revision, events) of one message of a watch of `prefix` from etcd at
    `url`, or None for the message that says the watch was created."""
    if "error" in message:
        error = message["error"]
        raise EtcdError(f"etcd at {url}: watch {prefix}*: "
                        f"{error.get('message') or error}")
    result = message.get("result") or {}
    compacted = int(result.get("compact_revision", 0))
    if compacted:
        raise Compacted(f"etcd at {url}: watch {prefix}*: revisions before {compacted} are "
                        "compacted", compacted)
    events = [WatchEvent(kind=item.get("type", "PUT"),
                         kv=KeyValue.from_gateway(item["kv"]),
                         previous=KeyValue.from_gateway(item["prev_kv"])
                         if item.get("prev_kv") else None)
              for item in result.get("events") or []]
    if result.get("created") and not events:
        return None
    return header_revision(result), events
