# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd adapter: a client of one etcd cluster, `EtcdClient`, made by `connect()`.

Modules, the lookup and the inventory plugin talk to etcd only through `EtcdClient`,
made by `connect()` from the connection options (module_utils/adapters/etcd_module.py has
them as an argument spec, and the module glue). Every failure, from a refused connection to a
rejected password, surfaces as one `EtcdError` (etcd_errors.py) whose message names the
endpoints and says what to do. A compare-and-swap that loses is not a failure: it is a
`SwapResult`; what the client returns is in etcd_data.py. It imports nothing of
Ansible, so that the host agent runs it where Ansible is not installed.

It speaks etcd's v3 JSON gateway; etcd_gateway.py carries each request to a member,
failing over between them and authenticating on each. The request bodies are built
here rather than by etcd3gw's helpers: those encode text as Latin-1, drop the count of
deleted keys and cannot compare a key's mod_revision, and keys and values here are
UTF-8 strings.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_data import (
    KeyValue, Lease, SwapResult, WatchEvent, decode, encode, header_revision, prefix_range,
    watch_batch)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    ALLOW_INSECURE, COMPACTED, CREDENTIALS, EtcdError, LeaseGone, Unsure, insecure_setup)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_gateway import (
    HAS_ETCD3GW, Gateway)
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json

DEFAULT_TIMEOUT = 5.0

# The connection options of `connect()`, which modules take as ETCD_ARGUMENT_SPEC
# (module_utils/adapters/etcd_module.py) and the plugins as options of the same names.
CONNECTION_OPTIONS = ("endpoints", "ca_cert", "client_cert", "client_key", "username",
                      "password", "timeout")


class EtcdClient:
    """A client of one etcd cluster, given by its endpoints.

    Each request goes to the endpoint that last answered; when it cannot be reached,
    to the next, in the order given. A request that was sent but not answered in time
    is retried elsewhere only when repeating it is harmless (reads, plain puts and
    deletes) or guarded (a compare-and-swap, tried once more), never a lease grant.
    One client per thread.

    It refuses an etcd that is not run as docs/security.md says: an endpoint over
    plain http or no username, here; authentication found off, at the first request.
    `allow_insecure` lets it talk to such an etcd, a lab's or a test's: by default,
    whether YASCO_ETCD_ALLOW_INSECURE=1 is in the environment (`insecure_allowed`).
    """

    def __init__(self, endpoints: Sequence[str], *, ca_cert: str | None = None,
                 client_cert: str | None = None, client_key: str | None = None,
                 username: str | None = None, password: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT,
                 allow_insecure: bool | None = None) -> None:
        if not HAS_ETCD3GW:
            raise EtcdError("the Python library etcd3gw is missing on this host: "
                            "pip install etcd3gw")
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        endpoints = [url.strip() for url in endpoints if url and url.strip()]
        if not endpoints:
            raise EtcdError("endpoints: none given: set endpoints (yasco_etcd_endpoints, "
                            "YASCO_ETCD_ENDPOINTS) to etcd's client URLs, such as "
                            "https://10.0.0.1:2379")
        if timeout is None or timeout <= 0:
            raise EtcdError(f"timeout: must be a positive number of seconds, got {timeout}")
        for option, path in (("ca_cert", ca_cert), ("client_cert", client_cert),
                             ("client_key", client_key)):
            if path and not os.path.isfile(path):
                raise EtcdError(f"{option}: {path} is not a file: give the path of a PEM file")
        if client_key and not client_cert:
            raise EtcdError("client_key is set without client_cert: set both")
        if bool(username) != bool(password):
            raise EtcdError(f"set both or neither of {CREDENTIALS}")
        cert = (client_cert, client_key) if client_key else client_cert
        self.timeout = float(timeout)
        self.username = username
        if allow_insecure is None:
            allow_insecure = insecure_allowed()
        self._gateway = Gateway(endpoints, self.timeout, ca_cert or True, cert or None,
                                username, password, allow_insecure=allow_insecure)
        refused = None if allow_insecure else insecure_setup(
            [(member.url, member.secure) for member in self._gateway.members], username)
        if refused is not None:
            self._gateway.close()
            raise refused

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._gateway.close()

    @property
    def endpoints(self) -> list[str]:
        return [member.url for member in self._gateway.members]

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to now: the one that last answered."""
        return self._gateway.members[self._gateway.current].url

    # -- keys ---------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        """The key, or None when it does not exist."""
        result = self._gateway.request(f"read {key}", "/kv/range",
                                       {"key": encode(_key(key))}, repeatable=True)
        kvs = result.get("kvs") or []
        return KeyValue.from_gateway(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        """Every key starting with `prefix`, in key order."""
        return self.read_prefix(prefix)[1]

    def read_prefix(self, prefix: str) -> tuple[int, list[KeyValue]]:
        """Every key starting with `prefix` and the store revision they were read at:
        the starting point of a watch from the next revision that misses nothing."""
        result = self._gateway.request(f"read {prefix}*", "/kv/range", prefix_range(prefix),
                                       repeatable=True)
        return header_revision(result), [KeyValue.from_gateway(item)
                                         for item in result.get("kvs") or []]

    def last_under(self, prefix: str, limit: int) -> list[KeyValue]:
        """The last `limit` keys starting with `prefix`, in key order, read without
        the ones before them."""
        payload = {**prefix_range(prefix), "limit": int(limit), "sort_order": "DESCEND",
                   "sort_target": "KEY"}
        result = self._gateway.request(f"read the last {limit} of {prefix}*", "/kv/range",
                                       payload, repeatable=True)
        return [KeyValue.from_gateway(item) for item in reversed(result.get("kvs") or [])]

    def revision(self) -> int:
        """The store's current revision, read linearizably: a member cut off from the
        majority cannot answer, so this also moves the client to one that can."""
        result = self._gateway.request("read the revision", "/kv/range",
                                       {"key": encode("\0"), "limit": 1}, repeatable=True)
        return header_revision(result)

    def watch_prefix(self, prefix: str, start_revision: int, *, idle: float
                     ) -> Iterator[tuple[int, list[WatchEvent]]]:
        """Every change under `prefix` from `start_revision` on, as (revision, events)
        batches, streamed from the endpoint that last answered. It ends when nothing
        has come for `idle` seconds (etcd may be cut off: call `revision()`, then
        watch again from the next revision); it raises EtcdError when the stream
        breaks, and Compacted when `start_revision` is gone."""
        request = {"create_request": {**prefix_range(prefix), "prev_kv": True,
                                      "start_revision": str(start_revision)}}
        yield from self._gateway.stream(
            f"watch {prefix}*", "/watch", request, idle,
            lambda url, message: watch_batch(url, prefix, message))

    def get_prefixes(self, prefixes: Sequence[str]) -> dict[str, list[KeyValue]]:
        """Every key under each prefix, all read at one revision (one transaction), so
        that records under different prefixes are consistent with each other."""
        payload = {"compare": [], "failure": [],
                   "success": [{"request_range": prefix_range(prefix)} for prefix in prefixes]}
        result = self._gateway.request(f"read {', '.join(p + '*' for p in prefixes)}",
                                       "/kv/txn", payload, repeatable=True)
        responses = result.get("responses") or []
        return {prefix: [KeyValue.from_gateway(item)
                         for item in response.get("response_range", {}).get("kvs") or []]
                for prefix, response in zip(prefixes, responses)}

    def get_json(self, key: str, default: Any = None) -> Any:
        """The key's value parsed as JSON, or `default` when the key does not exist."""
        found = self.get(key)
        return default if found is None else found.json()

    def put(self, key: str, value: str, *, lease: int = 0) -> int:
        """Write the key (bound to `lease` unless 0); the store's new revision."""
        payload = {"key": encode(_key(key)), "value": encode(_value(value))}
        if lease:
            payload["lease"] = str(lease)
        result = self._gateway.request(f"write {key}", "/kv/put", payload, repeatable=True,
                                       lease=lease)
        return header_revision(result)

    def put_json(self, key: str, data: Any, *, lease: int = 0) -> int:
        return self.put(key, to_json(data), lease=lease)

    def delete(self, key: str) -> int:
        """Delete the key; how many keys went (0 or 1)."""
        result = self._gateway.request(f"delete {key}", "/kv/deleterange",
                                       {"key": encode(_key(key))}, repeatable=True)
        return int(result.get("deleted", 0))

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key starting with `prefix`; how many went."""
        if not prefix:
            raise EtcdError("refusing to delete every key in etcd: give a non-empty prefix")
        result = self._gateway.request(f"delete {prefix}*", "/kv/deleterange",
                                       prefix_range(prefix), repeatable=True)
        return int(result.get("deleted", 0))

    def put_if(self, key: str, value: str, *, mod_revision: int | None = None,
               value_equals: str | None = None, lease: int = 0,
               while_exists: str | None = None,
               unchanged: dict[str, int] | None = None) -> SwapResult:
        """Write the key only if its mod_revision is `mod_revision` (0: only if it does
        not exist) and/or its value is `value_equals`, with `while_exists` only while
        that other key exists, and with `unchanged` only while each of those other
        keys has the mod_revision given (0: absent), atomically."""
        request = {"key": encode(_key(key)), "value": encode(_value(value))}
        if lease:
            request["lease"] = str(lease)
        return self._swap(f"write {key}", key, {"request_put": request}, mod_revision,
                          value_equals, lease, while_exists, unchanged)

    def delete_if(self, key: str, *, mod_revision: int | None = None,
                  value_equals: str | None = None) -> SwapResult:
        """Delete the key only if its mod_revision and/or value are as given."""
        return self._swap(f"delete {key}", key,
                          {"request_delete_range": {"key": encode(_key(key))}},
                          mod_revision, value_equals, 0)

    def _swap(self, action: str, key: str, operation: dict[str, Any],
              mod_revision: int | None, value_equals: str | None, lease: int,
              while_exists: str | None = None,
              unchanged: dict[str, int] | None = None) -> SwapResult:
        compare = []
        if while_exists is not None:
            compare.append({"key": encode(_key(while_exists)), "target": "VERSION",
                            "result": "GREATER", "version": "0"})
        for other, revision in sorted((unchanged or {}).items()):
            compare.append({"key": encode(_key(other)), "target": "MOD", "result": "EQUAL",
                            "mod_revision": str(int(revision))})
        if mod_revision is not None:
            # A key that does not exist compares as mod_revision 0.
            compare.append({"key": encode(key), "target": "MOD", "result": "EQUAL",
                            "mod_revision": str(mod_revision)})
        if value_equals is not None:
            compare.append({"key": encode(key), "target": "VALUE", "result": "EQUAL",
                            "value": encode(_value(value_equals))})
        if not compare:
            raise EtcdError(f"{action}: a compare-and-swap needs mod_revision or value_equals")
        payload = {"compare": compare, "success": [operation],
                   "failure": [{"request_range": {"key": encode(key)}}]}
        try:
            result = self._gateway.request(action, "/kv/txn", payload, repeatable=False,
                                           lease=lease)
        except Unsure as unsure:
            # A member that dies with the request in flight: the comparison makes a
            # second try on another member safe, since etcd applies at most one of the
            # two. If the second finds the key changed, the first may have changed it.
            if len(self._gateway.members) < 2:
                raise
            result = self._gateway.request(action, "/kv/txn", payload, repeatable=False,
                                           lease=lease)
            if not result.get("succeeded"):
                raise unsure from None
        revision = header_revision(result)
        if result.get("succeeded"):
            return SwapResult(True, revision)
        responses = result.get("responses") or [{}]
        kvs = responses[0].get("response_range", {}).get("kvs") or []
        return SwapResult(False, revision, KeyValue.from_gateway(kvs[0]) if kvs else None)

    # -- leases -------------------------------------------------------------------

    def grant_lease(self, ttl: int, lease_id: int = 0) -> Lease:
        """A new lease of `ttl` seconds (etcd may raise a TTL below its minimum), with
        the id `lease_id`, or one etcd picks when 0."""
        if ttl <= 0:
            raise EtcdError(f"ttl: must be a positive number of seconds, got {ttl}")
        result = self._gateway.request(f"grant lease {lease_id or ''}".strip(),
                                       "/lease/grant", {"TTL": str(ttl), "ID": str(lease_id)},
                                       repeatable=False)
        if result.get("error"):
            raise EtcdError(f"etcd at {self.endpoint}: granting a lease failed: "
                            f"{result['error']}")
        granted = int(result.get("TTL", ttl))
        return Lease(int(result["ID"]), granted, granted)

    def revoke_lease(self, lease_id: int) -> bool:
        """Revoke the lease, deleting every key bound to it; False when it did not
        exist (expired or revoked already)."""
        try:
            self._gateway.request(f"revoke lease {lease_id}", "/kv/lease/revoke",
                                  {"ID": str(lease_id)}, repeatable=True, lease=lease_id)
        except LeaseGone:
            return False
        return True

    def lease_info(self, lease_id: int, *, keys: bool = True) -> Lease | None:
        """The lease's time to live and (with `keys`) the keys bound to it, or None
        when it does not exist."""
        result = self._gateway.request(f"read lease {lease_id}", "/kv/lease/timetolive",
                                       {"ID": str(lease_id), "keys": keys}, repeatable=True)
        # -1 for a lease that is not there; left out (0) in its last second.
        ttl = int(result.get("TTL", 0))
        if ttl < 0:
            return None
        return Lease(lease_id, ttl, int(result.get("grantedTTL", 0)),
                     tuple(decode(key) for key in result.get("keys") or []))

    def keepalive_once(self, lease_id: int) -> int | None:
        """Renew the lease once; its TTL again, or None when it had expired."""
        result = self._gateway.request(f"renew lease {lease_id}", "/lease/keepalive",
                                       {"ID": str(lease_id)}, repeatable=True)
        ttl = int((result.get("result") or {}).get("TTL", 0))
        return ttl if ttl > 0 else None

    # -- maintenance ----------------------------------------------------------------

    def alarms(self) -> list[dict[str, str]]:
        """The alarms raised in the cluster, each {"member": its id in hex, "alarm":
        "NOSPACE" or "CORRUPT"}; none on a healthy cluster."""
        result = self._gateway.request("read the alarms", "/maintenance/alarm",
                                       {"action": "GET"}, repeatable=True)
        return [{"member": f"{int(alarm.get('memberID', 0)):x}",
                 "alarm": str(alarm.get("alarm", "NONE"))}
                for alarm in result.get("alarms") or []]

    def disarm(self, alarm: dict[str, str]) -> None:
        """Disarm one alarm that `alarms()` listed. etcd raises NOSPACE again at the
        next write if its database is still over its quota."""
        self._gateway.request(f"disarm {alarm['alarm']} of member {alarm['member']}",
                              "/maintenance/alarm",
                              {"action": "DEACTIVATE",
                               "memberID": str(int(alarm["member"], 16)),
                               "alarm": alarm["alarm"]}, repeatable=True)

    def status(self) -> dict[str, int | str]:
        """The status of the member this client talks to (`endpoint`): its id, the
        size of its database file and how much of it holds data, and the store's
        revision."""
        result = self._gateway.request("read the member's status", "/maintenance/status",
                                       {}, repeatable=True)
        header = result.get("header") or {}
        return {"member": f"{int(header.get('member_id', 0)):x}",
                "db_size": int(result.get("dbSize", 0)),
                "db_size_in_use": int(result.get("dbSizeInUse", 0)),
                "revision": int(header.get("revision", 0))}

    def compact(self, revision: int) -> bool:
        """Discard every revision before `revision` on every member: keys' current
        values stay, their history goes. The space is reused, not given back to the
        file system: `defragment()` does that. False when the history was compacted
        that far already (by etcd's own compactor, another run)."""
        try:
            self._gateway.request(f"compact to revision {revision}", "/kv/compaction",
                                  {"revision": str(revision), "physical": True},
                                  repeatable=True)
        except EtcdError as err:
            if COMPACTED not in str(err):
                raise
            return False
        return True

    def defragment(self) -> None:
        """Rewrite the database file of the member this client talks to (`endpoint`),
        giving its free space back. That member answers nothing while it runs: do one
        member at a time."""
        self._gateway.request("defragment", "/maintenance/defragment", {},
                              repeatable=False)


def insecure_allowed() -> bool:
    """Whether the environment says this is a lab, whose etcd may run without TLS or
    authentication: YASCO_ETCD_ALLOW_INSECURE=1 (or true, yes)."""
    return os.environ.get(ALLOW_INSECURE, "").strip().lower() in ("1", "true", "yes")


def _key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise EtcdError(f"key {key!r}: must be a non-empty string")
    return key


def _value(value: str) -> str:
    if not isinstance(value, str):
        raise EtcdError(f"value {value!r}: must be a string; use put_json for data")
    return value


def connect(params: dict[str, Any]) -> EtcdClient:
    """A client from the options of ETCD_ARGUMENT_SPEC (a module's params, or a
    plugin's options of the same names)."""
    timeout = params.get("timeout")
    return EtcdClient(params.get("endpoints") or [], ca_cert=params.get("ca_cert"),
                      client_cert=params.get("client_cert"),
                      client_key=params.get("client_key"), username=params.get("username"),
                      password=params.get("password"),
                      timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
