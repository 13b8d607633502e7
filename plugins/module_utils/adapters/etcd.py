# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd adapter: connections, authentication, fail-over and errors, in one place.

Modules, the lookup and the inventory plugin talk to etcd only through `EtcdClient`,
made by `connect()` from the connection options (module_utils/adapters/etcd_module.py has
them as an argument spec, and the module glue). Every failure, from a refused connection to a
rejected password, surfaces as one `EtcdError` whose message names the endpoints and
says what to do. A compare-and-swap that loses is not a failure: it is a `SwapResult`.
It imports nothing of Ansible, so that the host agent runs it where Ansible is not
installed.

It speaks etcd's v3 JSON gateway through etcd3gw's client and requests session
(python-etcd3 does not import with protobuf 4). etcd3gw has no authentication, so this
adapter fetches the token itself and sends it in the `Authorization` header of that
session. The request bodies are built here rather than by etcd3gw's helpers: those
encode text as Latin-1, drop the count of deleted keys and cannot compare a key's
mod_revision, and keys and values here are UTF-8 strings.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import selectors
import socket
import ssl
import time
import traceback
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

try:
    import requests
    import urllib3.exceptions
    from etcd3gw import exceptions as gateway_errors
    from etcd3gw.client import Etcd3Client
except ImportError:  # reported by the caller, e.g. module.fail_json(msg=missing_required_lib(...))
    HAS_ETCD3GW = False
    ETCD3GW_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_ETCD3GW = True
    ETCD3GW_IMPORT_ERROR = None
    # Only urllib3 2 tells a name that does not resolve from a refused connection.
    _NAME_RESOLUTION = getattr(urllib3.exceptions, "NameResolutionError", ())

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_keys import to_json

DEFAULT_TIMEOUT = 5.0
# Connecting to a member on the cluster's network takes milliseconds; one that does
# not accept in a second is down (a dead host's address can take seconds to fail),
# so move on to the next whatever the request timeout.
CONNECT_TIMEOUT = 1.0
DEFAULT_PORT = 2379

# The connection options of `connect()`, which modules take as ETCD_ARGUMENT_SPEC
# (module_utils/adapters/etcd_module.py) and the plugins as options of the same names.
CONNECTION_OPTIONS = ("endpoints", "ca_cert", "client_cert", "client_key", "username",
                      "password", "timeout")

# Errors etcd answers with, by the text of gRPC's status message.
_BAD_TOKEN = ("invalid auth token", "revision of auth store is old")
_NO_USER = "user name is empty"
_BAD_PASSWORD = "authentication failed"
_AUTH_DISABLED = "authentication is not enabled"
_DENIED = "permission denied"
# What etcd's gateway answers, in plain text, to a client certificate with a common
# name while authentication is on: it would not be used as the user.
_CN_REFUSED = "CommonName of client sending a request against gateway"
_NO_LEASE = "requested lease not found"
_NO_SPACE = "mvcc: database space exceeded"
_COMPACTED = "mvcc: required revision has been compacted"
# What to do about NOSPACE, where it is reported.
NO_SPACE_ADVICE = ("free space and disarm the alarm: playbooks/etcd_maintenance.yml "
                   "(docs/production.md, etcd housekeeping)")


class EtcdError(Exception):
    """etcd could not be reached, refused, or answered unexpectedly; the message says
    which endpoint and what to do. `details` are data a module returns beside the
    message, such as what a lost compare-and-swap found."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class _LeaseGone(EtcdError):
    """The lease named by a request does not exist (revoking it then is no failure)."""


class NoSpace(EtcdError):
    """etcd refused a write because its database reached its quota: the NOSPACE alarm
    is raised, and until an operator frees space and disarms it etcd refuses every
    write and new lease, while reads, deletes and lease renewals go on."""


class Compacted(EtcdError):
    """A watch asked for revisions etcd has compacted away; `revision` is the oldest
    it still has. Read the current state again, then watch from there."""

    def __init__(self, message: str, revision: int) -> None:
        super().__init__(message)
        self.revision = revision


@dataclass(frozen=True)
class WatchEvent:
    """One change seen by a watch: `kind` is PUT or DELETE; `previous` is the key
    before it (None when it was created), which for a DELETE says what was deleted."""

    kind: str
    kv: KeyValue
    previous: KeyValue | None


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
        return cls(key=_decode(item["key"]), value=_decode(item.get("value", "")),
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


@dataclass(frozen=True)
class _Failure:
    """Why one endpoint could not serve a request, and what the operator should check."""

    endpoint: str
    reason: str
    advice: str


class _Unavailable(Exception):
    """The endpoint did not take the request: another endpoint may."""

    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


class _NoAnswer(Exception):
    """The request went out but no answer came in time: it may have been applied."""


class _Unsure(EtcdError):
    """A request that may not be repeated got no answer: it may have been applied."""


_REACH_ADVICE = "check endpoints (yasco_etcd_endpoints) and that etcd runs there"
_CA_ADVICE = ("check that ca_cert (yasco_etcd_ca_cert) is the CA that signed etcd's "
              "server certificate and that the certificate names the endpoint's host")
_TLS_ADVICE = ("check ca_cert, client_cert and client_key (yasco_etcd_ca_cert, "
               "yasco_etcd_client_cert, yasco_etcd_client_key) and the endpoint's scheme")
_CREDENTIALS = "username and password (yasco_etcd_username, yasco_etcd_password)"


def from_json(value: str, key: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as err:
        raise EtcdError(f"{key} holds no JSON ({err}): it was not written by YASCO; "
                        f"fix or delete it") from err


def _encode(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _decode(data: str) -> str:
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


def _endpoint(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an endpoint URL such as https://10.0.0.1:2379."""
    problem = (f"endpoints: {url!r} is not a URL like http://10.0.0.1:2379 or "
               f"https://etcd1.example.com:2379")
    try:
        parsed = urllib.parse.urlsplit(url.strip())
        port = parsed.port or DEFAULT_PORT
    except ValueError as err:
        raise EtcdError(f"{problem} ({err})") from err
    if (parsed.scheme not in ("http", "https") or not parsed.hostname
            or parsed.path not in ("", "/") or parsed.query or parsed.fragment):
        raise EtcdError(problem)
    return parsed.scheme, parsed.hostname, port


def _seconds(timeout: float) -> str:
    return f"{timeout:g} s"


def _causes(err: BaseException) -> Iterator[BaseException]:
    """The exception and everything it wraps: requests wraps urllib3, which wraps the
    socket or TLS error that says what actually happened."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None),
                  *current.args]
        todo.extend(item for item in linked if isinstance(item, BaseException))


def _client_certificate_problem(cert: str | tuple[str, str] | None) -> str:
    """What is wrong with our client certificate that the server may have refused, as
    far as can be seen here (its dates), or ''. A server's TLS alert does not say why."""
    path = cert[0] if isinstance(cert, tuple) else cert
    if not path:
        return ": no client certificate was given (client_cert)"
    try:
        from cryptography import x509  # pylint: disable=import-outside-toplevel
        with open(path, "rb") as stream:
            certificate = x509.load_pem_x509_certificate(stream.read())
        now = time.time()
        if certificate.not_valid_after_utc.timestamp() < now:
            return f": the client certificate {path} expired on {certificate.not_valid_after_utc}"
        if certificate.not_valid_before_utc.timestamp() > now:
            return (f": the client certificate {path} is not valid before "
                    f"{certificate.not_valid_before_utc}")
    except (ImportError, OSError, ValueError, AttributeError):
        pass  # without the cryptography library (or an older one), the alert says enough
    return ""


def _connect_failure(endpoint: str, err: BaseException,
                     cert: str | tuple[str, str] | None = None) -> _Failure | None:
    """Why the connection itself failed, or None when it was made (the request may
    then have reached etcd). `cert` is the client certificate presented, if any."""
    causes = list(_causes(err))
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            detail = cause.verify_message or cause.reason or str(cause)
            return _Failure(endpoint, f"TLS: certificate verify failed: {detail}", _CA_ADVICE)
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            detail = (cause.reason.replace("_", " ").lower() if cause.reason
                      else re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(cause)))
            if "alert" in detail:  # the server refused what we presented
                detail += _client_certificate_problem(cert)
            return _Failure(endpoint, f"TLS handshake failed: {detail}", _TLS_ADVICE)
    # urllib3 makes a refused connection a kind of connect timeout: look at it first.
    for cause in causes:
        if isinstance(cause, _NAME_RESOLUTION):
            return _Failure(endpoint, "host name does not resolve", _REACH_ADVICE)
        if isinstance(cause, urllib3.exceptions.NewConnectionError):
            system = next((c.strerror for c in causes
                           if isinstance(c, OSError) and c.strerror), "no connection")
            return _Failure(endpoint, system.lower(), _REACH_ADVICE)
    if any(isinstance(cause, urllib3.exceptions.ConnectTimeoutError) for cause in causes):
        return _Failure(endpoint, "connecting timed out", _REACH_ADVICE)
    return None


def _error_text(err: BaseException) -> str | None:
    """etcd's own words from a gateway error (the gRPC status message in the body), or
    None when the body is not the gateway's: then something else answered."""
    try:
        body = json.loads(getattr(err, "detail_text", None) or "")
    except ValueError:
        return None
    if not isinstance(body, dict) or "code" not in body:
        return None
    message = str(body.get("message") or body.get("error") or "").strip()
    return message[len("etcdserver: "):] if message.startswith("etcdserver: ") else message


class _Member:
    """One endpoint: its gateway client, its session and, with auth, its token.
    etcd's simple tokens are valid only on the member that issued them, so each
    endpoint authenticates on its own."""

    def __init__(self, url: str, timeout: float, verify: str | bool,
                 cert: str | tuple[str, str] | None) -> None:
        scheme, host, port = _endpoint(url)
        self.address = (host, port)
        self.url = url.strip().rstrip("/")
        self.session = requests.Session()
        # Proxies are for the internet; etcd is on the cluster's network, and an
        # execution environment's HTTP_PROXY must not swallow its requests.
        self.session.trust_env = False
        self.session.verify = verify
        if cert is not None:
            self.session.cert = cert
        self.timeouts = (min(timeout, CONNECT_TIMEOUT), timeout)  # requests' (connect, read)
        self.gateway = Etcd3Client(host=host, port=port, protocol=scheme,
                                   timeout=self.timeouts, session=self.session)
        self.token: str | None = None
        self.authenticated = False

    def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self.gateway.post(self.gateway.get_url(path), json=payload)


class EtcdClient:
    """A client of one etcd cluster, given by its endpoints.

    Each request goes to the endpoint that last answered; when it cannot be reached,
    to the next, in the order given. A request that was sent but not answered in time
    is retried elsewhere only when repeating it is harmless (reads, plain puts and
    deletes) or guarded (a compare-and-swap, tried once more), never a lease grant.
    One client per thread.
    """

    def __init__(self, endpoints: Sequence[str], *, ca_cert: str | None = None,
                 client_cert: str | None = None, client_key: str | None = None,
                 username: str | None = None, password: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        if not HAS_ETCD3GW:
            raise EtcdError("the Python library etcd3gw is missing on this host: "
                            "pip install etcd3gw")
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        endpoints = [url.strip() for url in endpoints if url and url.strip()]
        if not endpoints:
            raise EtcdError("endpoints: none given: set endpoints (yasco_etcd_endpoints, "
                            "YASCO_ETCD_ENDPOINTS) to etcd's client URLs, such as "
                            "http://10.0.0.1:2379")
        if timeout is None or timeout <= 0:
            raise EtcdError(f"timeout: must be a positive number of seconds, got {timeout}")
        for option, path in (("ca_cert", ca_cert), ("client_cert", client_cert),
                             ("client_key", client_key)):
            if path and not os.path.isfile(path):
                raise EtcdError(f"{option}: {path} is not a file: give the path of a PEM file")
        if client_key and not client_cert:
            raise EtcdError("client_key is set without client_cert: set both")
        if bool(username) != bool(password):
            raise EtcdError(f"set both or neither of {_CREDENTIALS}")
        cert = (client_cert, client_key) if client_key else client_cert
        self.timeout = float(timeout)
        self.username = username
        self._password = password
        self._members = [_Member(url, self.timeout, ca_cert or True, cert or None)
                         for url in endpoints]
        self._current = 0
        self._picked = False

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        for member in self._members:
            member.session.close()

    @property
    def endpoints(self) -> list[str]:
        return [member.url for member in self._members]

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to now: the one that last answered."""
        return self._members[self._current].url

    # -- keys ---------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        """The key, or None when it does not exist."""
        result = self._request(f"read {key}", "/kv/range", {"key": _encode(_key(key))},
                               repeatable=True)
        kvs = result.get("kvs") or []
        return KeyValue.from_gateway(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        """Every key starting with `prefix`, in key order."""
        return self.read_prefix(prefix)[1]

    def read_prefix(self, prefix: str) -> tuple[int, list[KeyValue]]:
        """Every key starting with `prefix` and the store revision they were read at:
        the starting point of a watch from the next revision that misses nothing."""
        result = self._request(f"read {prefix}*", "/kv/range", _prefix_range(prefix),
                               repeatable=True)
        return _revision(result), [KeyValue.from_gateway(item)
                                   for item in result.get("kvs") or []]

    def last_under(self, prefix: str, limit: int) -> list[KeyValue]:
        """The last `limit` keys starting with `prefix`, in key order, read without
        the ones before them."""
        payload = {**_prefix_range(prefix), "limit": int(limit), "sort_order": "DESCEND",
                   "sort_target": "KEY"}
        result = self._request(f"read the last {limit} of {prefix}*", "/kv/range", payload,
                               repeatable=True)
        return [KeyValue.from_gateway(item) for item in reversed(result.get("kvs") or [])]

    def revision(self) -> int:
        """The store's current revision, read linearizably: a member cut off from the
        majority cannot answer, so this also moves the client to one that can."""
        result = self._request("read the revision", "/kv/range",
                               {"key": _encode("\0"), "limit": 1}, repeatable=True)
        return _revision(result)

    def watch_prefix(self, prefix: str, start_revision: int, *, idle: float
                     ) -> Iterator[tuple[int, list[WatchEvent]]]:
        """Every change under `prefix` from `start_revision` on, as (revision, events)
        batches, streamed from the endpoint that last answered. It ends when nothing
        has come for `idle` seconds (etcd may be cut off: call `revision()`, then
        watch again from the next revision); it raises EtcdError when the stream
        breaks, and Compacted when `start_revision` is gone."""
        member = self._members[self._current]
        if self.username and not member.authenticated:
            try:
                self._authenticate(member)
            except _Unavailable as err:  # a member down: the caller tries again
                raise EtcdError(f"etcd at {member.url}: watch {prefix}*: "
                                f"{err.failure.reason}") from None
        request = {"create_request": {**_prefix_range(prefix), "prev_kv": True,
                                      "start_revision": str(start_revision)}}
        try:
            url = member.gateway.get_url("/watch")  # asks the member its API version once
        except gateway_errors.Etcd3Exception as err:
            raise EtcdError(f"etcd at {member.url}: watch {prefix}*: unreachable "
                            f"({_error_text(err) or type(err).__name__})") from None
        try:
            with member.session.post(url, json=request,
                                     stream=True, timeout=(member.timeouts[0], idle)) as reply:
                if reply.status_code != 200:
                    raise EtcdError(f"etcd at {member.url}: watch {prefix}*: HTTP "
                                    f"{reply.status_code} {reply.text[:200]}")
                for line in reply.iter_lines():
                    if line:
                        batch = _watch_batch(member.url, prefix, json.loads(line))
                        if batch is not None:
                            yield batch
        except requests.RequestException as err:  # a member that died, a cut network
            if _idle(err):
                return
            raise EtcdError(f"etcd at {member.url}: watch {prefix}* broke: {err}") from None
        except ValueError as err:
            raise EtcdError(f"etcd at {member.url}: watch {prefix}*: not etcd's answer "
                            f"({err})") from None

    def get_prefixes(self, prefixes: Sequence[str]) -> dict[str, list[KeyValue]]:
        """Every key under each prefix, all read at one revision (one transaction), so
        that records under different prefixes are consistent with each other."""
        payload = {"compare": [], "failure": [],
                   "success": [{"request_range": _prefix_range(prefix)} for prefix in prefixes]}
        result = self._request(f"read {', '.join(p + '*' for p in prefixes)}", "/kv/txn",
                               payload, repeatable=True)
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
        payload = {"key": _encode(_key(key)), "value": _encode(_value(value))}
        if lease:
            payload["lease"] = str(lease)
        result = self._request(f"write {key}", "/kv/put", payload, repeatable=True,
                               lease=lease)
        return _revision(result)

    def put_json(self, key: str, data: Any, *, lease: int = 0) -> int:
        return self.put(key, to_json(data), lease=lease)

    def delete(self, key: str) -> int:
        """Delete the key; how many keys went (0 or 1)."""
        result = self._request(f"delete {key}", "/kv/deleterange",
                               {"key": _encode(_key(key))}, repeatable=True)
        return int(result.get("deleted", 0))

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key starting with `prefix`; how many went."""
        if not prefix:
            raise EtcdError("refusing to delete every key in etcd: give a non-empty prefix")
        result = self._request(f"delete {prefix}*", "/kv/deleterange", _prefix_range(prefix),
                               repeatable=True)
        return int(result.get("deleted", 0))

    def put_if(self, key: str, value: str, *, mod_revision: int | None = None,
               value_equals: str | None = None, lease: int = 0,
               while_exists: str | None = None) -> SwapResult:
        """Write the key only if its mod_revision is `mod_revision` (0: only if it does
        not exist) and/or its value is `value_equals`, and, with `while_exists`, only
        while that other key exists, atomically."""
        request = {"key": _encode(_key(key)), "value": _encode(_value(value))}
        if lease:
            request["lease"] = str(lease)
        return self._swap(f"write {key}", key, {"request_put": request}, mod_revision,
                          value_equals, lease, while_exists)

    def delete_if(self, key: str, *, mod_revision: int | None = None,
                  value_equals: str | None = None) -> SwapResult:
        """Delete the key only if its mod_revision and/or value are as given."""
        return self._swap(f"delete {key}", key,
                          {"request_delete_range": {"key": _encode(_key(key))}},
                          mod_revision, value_equals, 0)

    def _swap(self, action: str, key: str, operation: dict[str, Any],
              mod_revision: int | None, value_equals: str | None, lease: int,
              while_exists: str | None = None) -> SwapResult:
        compare = []
        if while_exists is not None:
            compare.append({"key": _encode(_key(while_exists)), "target": "VERSION",
                            "result": "GREATER", "version": "0"})
        if mod_revision is not None:
            # A key that does not exist compares as mod_revision 0.
            compare.append({"key": _encode(key), "target": "MOD", "result": "EQUAL",
                            "mod_revision": str(mod_revision)})
        if value_equals is not None:
            compare.append({"key": _encode(key), "target": "VALUE", "result": "EQUAL",
                            "value": _encode(_value(value_equals))})
        if not compare:
            raise EtcdError(f"{action}: a compare-and-swap needs mod_revision or value_equals")
        payload = {"compare": compare, "success": [operation],
                   "failure": [{"request_range": {"key": _encode(key)}}]}
        try:
            result = self._request(action, "/kv/txn", payload, repeatable=False, lease=lease)
        except _Unsure as unsure:
            # A member that dies with the request in flight: the comparison makes a
            # second try on another member safe, since etcd applies at most one of the
            # two. If the second finds the key changed, the first may have changed it.
            if len(self._members) < 2:
                raise
            result = self._request(action, "/kv/txn", payload, repeatable=False, lease=lease)
            if not result.get("succeeded"):
                raise unsure from None
        revision = _revision(result)
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
        result = self._request(f"grant lease {lease_id or ''}".strip(), "/lease/grant",
                               {"TTL": str(ttl), "ID": str(lease_id)}, repeatable=False)
        if result.get("error"):
            raise EtcdError(f"etcd at {self.endpoint}: granting a lease failed: "
                            f"{result['error']}")
        granted = int(result.get("TTL", ttl))
        return Lease(int(result["ID"]), granted, granted)

    def revoke_lease(self, lease_id: int) -> bool:
        """Revoke the lease, deleting every key bound to it; False when it did not
        exist (expired or revoked already)."""
        try:
            self._request(f"revoke lease {lease_id}", "/kv/lease/revoke",
                          {"ID": str(lease_id)}, repeatable=True, lease=lease_id)
        except _LeaseGone:
            return False
        return True

    def lease_info(self, lease_id: int, *, keys: bool = True) -> Lease | None:
        """The lease's time to live and (with `keys`) the keys bound to it, or None
        when it does not exist."""
        result = self._request(f"read lease {lease_id}", "/kv/lease/timetolive",
                               {"ID": str(lease_id), "keys": keys}, repeatable=True)
        # -1 for a lease that is not there; left out (0) in its last second.
        ttl = int(result.get("TTL", 0))
        if ttl < 0:
            return None
        return Lease(lease_id, ttl, int(result.get("grantedTTL", 0)),
                     tuple(_decode(key) for key in result.get("keys") or []))

    def keepalive_once(self, lease_id: int) -> int | None:
        """Renew the lease once; its TTL again, or None when it had expired."""
        result = self._request(f"renew lease {lease_id}", "/lease/keepalive",
                               {"ID": str(lease_id)}, repeatable=True)
        ttl = int((result.get("result") or {}).get("TTL", 0))
        return ttl if ttl > 0 else None

    # -- maintenance ----------------------------------------------------------------

    def alarms(self) -> list[dict[str, str]]:
        """The alarms raised in the cluster, each {"member": its id in hex, "alarm":
        "NOSPACE" or "CORRUPT"}; none on a healthy cluster."""
        result = self._request("read the alarms", "/maintenance/alarm", {"action": "GET"},
                               repeatable=True)
        return [{"member": f"{int(alarm.get('memberID', 0)):x}",
                 "alarm": str(alarm.get("alarm", "NONE"))}
                for alarm in result.get("alarms") or []]

    def disarm(self, alarm: dict[str, str]) -> None:
        """Disarm one alarm that `alarms()` listed. etcd raises NOSPACE again at the
        next write if its database is still over its quota."""
        self._request(f"disarm {alarm['alarm']} of member {alarm['member']}",
                      "/maintenance/alarm",
                      {"action": "DEACTIVATE", "memberID": str(int(alarm["member"], 16)),
                       "alarm": alarm["alarm"]}, repeatable=True)

    def status(self) -> dict[str, int | str]:
        """The status of the member this client talks to (`endpoint`): its id, the
        size of its database file and how much of it holds data, and the store's
        revision."""
        result = self._request("read the member's status", "/maintenance/status", {},
                               repeatable=True)
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
            self._request(f"compact to revision {revision}", "/kv/compaction",
                          {"revision": str(revision), "physical": True}, repeatable=True)
        except EtcdError as err:
            if _COMPACTED not in str(err):
                raise
            return False
        return True

    def defragment(self) -> None:
        """Rewrite the database file of the member this client talks to (`endpoint`),
        giving its free space back. That member answers nothing while it runs: do one
        member at a time."""
        self._request("defragment", "/maintenance/defragment", {}, repeatable=False)

    # -- requests -----------------------------------------------------------------

    def _pick_member(self) -> None:
        """Start with the endpoint that accepts a connection first, all tried at once
        (in a tie, the earlier in the order given): a short-lived client, such as a
        module run, must not wait a connect timeout on a dead first endpoint every
        time. The nearest member usually wins, which is what the order is for."""
        self._picked = True
        if len(self._members) < 2:
            return
        pending: dict[socket.socket, int] = {}
        for index, member in enumerate(self._members):
            try:
                infos = socket.getaddrinfo(*member.address, type=socket.SOCK_STREAM)
                sock = socket.socket(infos[0][0], socket.SOCK_STREAM)
            except OSError:
                continue
            sock.setblocking(False)
            if sock.connect_ex(infos[0][4]) in (0, errno.EINPROGRESS):
                pending[sock] = index
            else:
                sock.close()
        deadline = time.monotonic() + CONNECT_TIMEOUT
        connected: set[int] = set()
        # A selector, not select(): a long-lived process (a watcher, a test run) may
        # hold more than 1024 descriptors, which select() cannot wait on.
        waiting = selectors.DefaultSelector()
        for sock in pending:
            waiting.register(sock, selectors.EVENT_WRITE)
        try:
            while pending and time.monotonic() < deadline:
                for key, dummy in waiting.select(max(0.0, deadline - time.monotonic())):
                    sock = key.fileobj
                    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                        connected.add(pending[sock])
                    waiting.unregister(sock)
                    sock.close()
                    del pending[sock]
                if connected:
                    self._current = min(connected)
                    return
        finally:
            waiting.close()
            for sock in pending:
                sock.close()

    def _request(self, action: str, path: str, payload: dict[str, Any], *,
                 repeatable: bool, lease: int = 0) -> dict[str, Any]:
        """Send one request, failing over between endpoints; etcd's answer."""
        if not self._picked:
            self._pick_member()
        failures: list[_Failure] = []
        count = len(self._members)
        for step in range(count):
            index = (self._current + step) % count
            member = self._members[index]
            try:
                result = self._send(member, action, path, payload, lease)
            except _Unavailable as err:
                failures.append(err.failure)
                continue
            except _NoAnswer:
                if repeatable:
                    failures.append(_Failure(member.url, f"no answer within "
                                             f"{_seconds(self.timeout)}", _REACH_ADVICE))
                    continue
                # The next request, a compare-and-swap's second try among them, goes
                # to the next member.
                self._current = (index + 1) % count
                raise _Unsure(
                    f"etcd at {member.url}: no answer to {action} within "
                    f"{_seconds(self.timeout)}; it may or may not have been applied: check "
                    f"that etcd is healthy (etcdctl endpoint health), then read the key "
                    f"and retry") from None
            self._current = index
            return result
        raise EtcdError(_unreachable(failures, self.timeout))

    def _send(self, member: _Member, action: str, path: str, payload: dict[str, Any],
              lease: int) -> dict[str, Any]:
        if self.username and not member.authenticated:
            self._authenticate(member)
        try:
            return self._post(member, path, payload)
        except gateway_errors.Etcd3Exception as err:
            text = _error_text(err) or ""
            if not text.startswith((*_BAD_TOKEN, _NO_USER)) or not self.username:
                raise self._refusal(member, action, text, lease) from None
        # The token expired, auth changed since it was issued, or auth was turned on
        # since this client found it off: authenticate again, once.
        self._authenticate(member)
        try:
            return self._post(member, path, payload)
        except gateway_errors.Etcd3Exception as err:
            raise self._refusal(member, action, _error_text(err) or "", lease) from None

    def _post(self, member: _Member, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """etcd3gw's request, with the failures that say nothing reached etcd told
        apart from those where a request may have."""
        try:
            return member.post(path, payload)
        except (gateway_errors.ConnectionFailedError,
                gateway_errors.ConnectionTimeoutError) as err:
            failure = _connect_failure(member.url, err, member.session.cert)
            if failure is not None:
                raise _Unavailable(failure) from None
            if (isinstance(err, gateway_errors.ConnectionFailedError)
                    and not isinstance(err.__context__, requests.RequestException)):
                # 503 from etcd itself (no leader, stopping): it applied nothing.
                reason = _error_text(err) or "service unavailable"
                raise _Unavailable(_Failure(member.url, reason, _REACH_ADVICE)) from None
            # Sent, but the answer timed out or the connection broke: it may have applied.
            raise _NoAnswer() from None
        except gateway_errors.ApiVersionDiscoveryFailedError as err:
            raise _Unavailable(_Failure(member.url, f"not etcd ({err.detail_text})",
                                        _REACH_ADVICE)) from None
        except gateway_errors.Etcd3Exception as err:
            if _error_text(err) is None:
                answer = " ".join(str(arg) for arg in err.args) or "an unexpected answer"
                if _CN_REFUSED in f"{answer} {getattr(err, 'detail_text', '')}":
                    raise _Unavailable(_Failure(
                        member.url, "the client certificate has a common name (CN), which "
                        "etcd's gateway refuses while authentication is on",
                        "issue client_cert (yasco_etcd_client_cert) without a CN: the user "
                        "is username and password")) from None
                raise _Unavailable(_Failure(member.url, f"not etcd's gateway (answered "
                                            f"{answer})", _REACH_ADVICE)) from None
            raise
        except (requests.RequestException, ValueError) as err:
            # Not JSON, or a URL requests rejects: whatever answers there is not etcd.
            raise _Unavailable(_Failure(member.url, f"not etcd ({str(err)[:200]})",
                                        _REACH_ADVICE)) from None

    def _authenticate(self, member: _Member) -> None:
        member.session.headers.pop("Authorization", None)
        try:
            result = self._post(member, "/auth/authenticate",
                                {"name": self.username, "password": self._password})
        except gateway_errors.Etcd3Exception as err:
            text = _error_text(err) or ""
            if text.startswith(_AUTH_DISABLED):
                # Nothing to authenticate against: every request is allowed anyway.
                member.authenticated = True
                return
            if text.startswith(_BAD_PASSWORD):
                raise EtcdError(f"etcd at {member.url}: authentication as {self.username!r} "
                                f"failed: wrong user name or password: check "
                                f"{_CREDENTIALS}") from None
            raise EtcdError(f"etcd at {member.url}: authentication as {self.username!r} "
                            f"failed: {text}") from None
        member.token = result.get("token")
        if member.token:
            member.session.headers["Authorization"] = member.token
        member.authenticated = True

    def _refusal(self, member: _Member, action: str, text: str, lease: int) -> Exception:
        """The EtcdError for an error etcd answered with."""
        if text.startswith(_NO_LEASE):
            return _LeaseGone(f"etcd at {member.url}: {action}: lease {lease} does not exist "
                              f"(it expired or was revoked): grant a new lease")
        if text.startswith(_NO_USER) or (text.startswith(_BAD_TOKEN) and not self.username):
            return EtcdError(f"etcd at {member.url} requires authentication: set "
                             f"{_CREDENTIALS}")
        if text.startswith(_NO_SPACE):
            return NoSpace(f"etcd at {member.url}: {action} refused: the database is full "
                           f"(alarm NOSPACE): {NO_SPACE_ADVICE}")
        if text.startswith((_DENIED, f"auth: {_DENIED}")):
            who = f"user {self.username!r}" if self.username else "this client"
            return EtcdError(f"etcd at {member.url}: {who} may not {action}: permission "
                             f"denied: grant the user a role that allows it "
                             f"(etcdctl role grant-permission)")
        return EtcdError(f"etcd at {member.url}: {action} failed: {text}")


def _key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise EtcdError(f"key {key!r}: must be a non-empty string")
    return key


def _value(value: str) -> str:
    if not isinstance(value, str):
        raise EtcdError(f"value {value!r}: must be a string; use put_json for data")
    return value


def _idle(err: BaseException) -> bool:
    """Whether a streaming read stopped because nothing came in time."""
    seen: BaseException | None = err
    while seen is not None:
        if "Read timed out" in str(seen) or isinstance(seen, requests.exceptions.ReadTimeout):
            return True
        seen = seen.__cause__ or seen.__context__
    return "Read timed out" in str(err.args)


def _watch_batch(url: str, prefix: str, message: dict[str, Any]
                 ) -> tuple[int, list[WatchEvent]] | None:
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
    return _revision(result), events


def _prefix_range(prefix: str) -> dict[str, str]:
    return {"key": _encode(prefix) if prefix else base64.b64encode(b"\0").decode("ascii"),
            "range_end": _range_end(prefix)}


def _revision(result: dict[str, Any]) -> int:
    return int((result.get("header") or {}).get("revision", 0))


def _unreachable(failures: list[_Failure], timeout: float) -> str:
    endpoints = ", ".join(failure.endpoint for failure in failures)
    reasons = "; ".join(f"{failure.endpoint}: {failure.reason}" for failure in failures)
    advice = "; ".join(dict.fromkeys(failure.advice for failure in failures))
    return f"etcd at {endpoints}: unreachable within {_seconds(timeout)} ({reasons}): {advice}"


def connect(params: dict[str, Any]) -> EtcdClient:
    """A client from the options of ETCD_ARGUMENT_SPEC (a module's params, or a
    plugin's options of the same names)."""
    timeout = params.get("timeout")
    return EtcdClient(params.get("endpoints") or [], ca_cert=params.get("ca_cert"),
                      client_cert=params.get("client_cert"),
                      client_key=params.get("client_key"), username=params.get("username"),
                      password=params.get("password"),
                      timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
