# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The way from the etcd client (etcd.py) to etcd's members: their v3 JSON gateways,
one request at a time or as a stream, failing over between them and authenticating
on each.

It speaks the gateway through etcd3gw's client and requests session (python-etcd3
does not import with protobuf 4). etcd3gw has no authentication, so `Gateway` fetches
the token itself and sends it in the `Authorization` header of that session. What
went wrong on the way is told apart here: what shows that nothing reached etcd lets
the request go to the next member; what etcd answered becomes an EtcdError
(etcd_errors.py says in what words). Like the client, it imports nothing of Ansible.
"""

from __future__ import annotations

import errno
import json
import selectors
import socket
import time
import traceback
import urllib.parse
from typing import Any, Callable, Iterator, TypeVar

try:
    import requests
    from etcd3gw import exceptions as gateway_errors
    from etcd3gw.client import Etcd3Client
except ImportError:  # reported by the caller, e.g. module.fail_json(msg=missing_required_lib(...))
    HAS_ETCD3GW = False
    ETCD3GW_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_ETCD3GW = True
    ETCD3GW_IMPORT_ERROR = None

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    AUTH_DISABLED, BAD_PASSWORD, BAD_TOKEN, CN_REFUSED, CREDENTIALS, NO_USER, REACH_ADVICE,
    EtcdError, Failure, NoAnswer, Unavailable, Unsure, auth_disabled, connect_failure,
    error_text, refusal, seconds, unreachable)

# Connecting to a member on the cluster's network takes milliseconds; one that does
# not accept in a second is down (a dead host's address can take seconds to fail),
# so move on to the next whatever the request timeout.
CONNECT_TIMEOUT = 1.0
DEFAULT_PORT = 2379

Answer = TypeVar("Answer")


def _endpoint(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an endpoint URL such as https://10.0.0.1:2379."""
    problem = (f"endpoints: {url!r} is not a URL like https://10.0.0.1:2379 or "
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


class Member:
    """One endpoint: its gateway client, its session and, with auth, its token.
    etcd's simple tokens are valid only on the member that issued them, so each
    endpoint authenticates on its own."""

    def __init__(self, url: str, timeout: float, verify: str | bool,
                 cert: str | tuple[str, str] | None) -> None:
        scheme, host, port = _endpoint(url)
        self.address = (host, port)
        self.url = url.strip().rstrip("/")
        self.secure = scheme == "https"
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


class Gateway:
    """The members of one etcd cluster, given by their endpoint URLs, and the one
    requests go to now (`current`): the one that last answered. `verify` and `cert`
    are requests' (the CA, or True; the client certificate, or with its key). A member
    whose authentication is off is refused unless `allow_insecure` (a lab's)."""

    def __init__(self, endpoints: list[str], timeout: float, verify: str | bool,
                 cert: str | tuple[str, str] | None, username: str | None,
                 password: str | None, *, allow_insecure: bool = False) -> None:
        self.timeout = timeout
        self.username = username
        self._password = password
        self.allow_insecure = allow_insecure
        self.members = [Member(url, timeout, verify, cert) for url in endpoints]
        self.current = 0
        self._picked = False

    def close(self) -> None:
        for member in self.members:
            member.session.close()

    def _pick_member(self) -> None:
        """Start with the endpoint that accepts a connection first, all tried at once
        (in a tie, the earlier in the order given): a short-lived client, such as a
        module run, must not wait a connect timeout on a dead first endpoint every
        time. The nearest member usually wins, which is what the order is for."""
        self._picked = True
        if len(self.members) < 2:
            return
        pending: dict[socket.socket, int] = {}
        for index, member in enumerate(self.members):
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
                    self.current = min(connected)
                    return
        finally:
            waiting.close()
            for sock in pending:
                sock.close()

    def request(self, action: str, path: str, payload: dict[str, Any], *,
                repeatable: bool, lease: int = 0) -> dict[str, Any]:
        """Send one request, failing over between endpoints; etcd's answer."""
        if not self._picked:
            self._pick_member()
        failures: list[Failure] = []
        count = len(self.members)
        for step in range(count):
            index = (self.current + step) % count
            member = self.members[index]
            try:
                result = self._send(member, action, path, payload, lease)
            except Unavailable as err:
                failures.append(err.failure)
                continue
            except NoAnswer:
                if repeatable:
                    failures.append(Failure(member.url, f"no answer within "
                                            f"{seconds(self.timeout)}", REACH_ADVICE))
                    continue
                # The next request, a compare-and-swap's second try among them, goes
                # to the next member.
                self.current = (index + 1) % count
                raise Unsure(
                    f"etcd at {member.url}: no answer to {action} within "
                    f"{seconds(self.timeout)}; it may or may not have been applied: check "
                    f"that etcd is healthy (etcdctl endpoint health), then read the key "
                    f"and retry") from None
            self.current = index
            return result
        raise EtcdError(unreachable(failures, self.timeout))

    def stream(self, action: str, path: str, payload: dict[str, Any], idle: float,
               answer: Callable[[str, dict[str, Any]], Answer | None]) -> Iterator[Answer]:
        """`answer(endpoint, message)` of each message etcd streams back to one request
        to the member that last answered, but None. It ends when nothing has come for
        `idle` seconds; it raises EtcdError when the stream breaks."""
        member = self.members[self.current]
        if self.username and not member.authenticated:
            try:
                self.authenticate(member)
            except Unavailable as err:  # a member down: the caller tries again
                raise EtcdError(f"etcd at {member.url}: {action}: "
                                f"{err.failure.reason}") from None
        try:
            url = member.gateway.get_url(path)  # asks the member its API version once
        except gateway_errors.Etcd3Exception as err:
            raise EtcdError(f"etcd at {member.url}: {action}: unreachable "
                            f"({error_text(err) or type(err).__name__})") from None
        try:
            with member.session.post(url, json=payload,
                                     stream=True, timeout=(member.timeouts[0], idle)) as reply:
                if reply.status_code != 200:
                    raise EtcdError(f"etcd at {member.url}: {action}: HTTP "
                                    f"{reply.status_code} {reply.text[:200]}")
                for line in reply.iter_lines():
                    if line:
                        found = answer(member.url, json.loads(line))
                        if found is not None:
                            yield found
        except requests.RequestException as err:  # a member that died, a cut network
            if _idle(err):
                return
            raise EtcdError(f"etcd at {member.url}: {action} broke: {err}") from None
        except ValueError as err:
            raise EtcdError(f"etcd at {member.url}: {action}: not etcd's answer "
                            f"({err})") from None

    def _send(self, member: Member, action: str, path: str, payload: dict[str, Any],
              lease: int) -> dict[str, Any]:
        if self.username and not member.authenticated:
            self.authenticate(member)
        try:
            return self._post(member, path, payload)
        except gateway_errors.Etcd3Exception as err:
            text = error_text(err) or ""
            if not text.startswith((*BAD_TOKEN, NO_USER)) or not self.username:
                raise refusal(member.url, action, text, lease, self.username) from None
        # The token expired, auth changed since it was issued, or auth was turned on
        # since this client found it off: authenticate again, once.
        self.authenticate(member)
        try:
            return self._post(member, path, payload)
        except gateway_errors.Etcd3Exception as err:
            raise refusal(member.url, action, error_text(err) or "", lease,
                          self.username) from None

    def _post(self, member: Member, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """etcd3gw's request, with the failures that say nothing reached etcd told
        apart from those where a request may have."""
        try:
            return member.post(path, payload)
        except (gateway_errors.ConnectionFailedError,
                gateway_errors.ConnectionTimeoutError) as err:
            failure = connect_failure(member.url, err, member.session.cert)
            if failure is not None:
                raise Unavailable(failure) from None
            if (isinstance(err, gateway_errors.ConnectionFailedError)
                    and not isinstance(err.__context__, requests.RequestException)):
                # 503 from etcd itself (no leader, stopping): it applied nothing.
                reason = error_text(err) or "service unavailable"
                raise Unavailable(Failure(member.url, reason, REACH_ADVICE)) from None
            # Sent, but the answer timed out or the connection broke: it may have applied.
            raise NoAnswer() from None
        except gateway_errors.ApiVersionDiscoveryFailedError as err:
            raise Unavailable(Failure(member.url, f"not etcd ({err.detail_text})",
                                      REACH_ADVICE)) from None
        except gateway_errors.Etcd3Exception as err:
            if error_text(err) is None:
                answer = " ".join(str(arg) for arg in err.args) or "an unexpected answer"
                if CN_REFUSED in f"{answer} {getattr(err, 'detail_text', '')}":
                    raise Unavailable(Failure(
                        member.url, "the client certificate has a common name (CN), which "
                        "etcd's gateway refuses while authentication is on",
                        "issue client_cert (yasco_etcd_client_cert) without a CN: the user "
                        "is username and password")) from None
                raise Unavailable(Failure(member.url, f"not etcd's gateway (answered "
                                          f"{answer})", REACH_ADVICE)) from None
            raise
        except (requests.RequestException, ValueError) as err:
            # Not JSON, or a URL requests rejects: whatever answers there is not etcd.
            raise Unavailable(Failure(member.url, f"not etcd ({str(err)[:200]})",
                                      REACH_ADVICE)) from None

    def authenticate(self, member: Member) -> None:
        member.session.headers.pop("Authorization", None)
        try:
            result = self._post(member, "/auth/authenticate",
                                {"name": self.username, "password": self._password})
        except gateway_errors.Etcd3Exception as err:
            text = error_text(err) or ""
            if text.startswith(AUTH_DISABLED):
                # Every request would be allowed, whoever sends it: a lab's etcd at best.
                if not self.allow_insecure:
                    raise auth_disabled(member.url) from None
                member.authenticated = True
                return
            if text.startswith(BAD_PASSWORD):
                raise EtcdError(f"etcd at {member.url}: authentication as {self.username!r} "
                                f"failed: wrong user name or password: check "
                                f"{CREDENTIALS}") from None
            raise EtcdError(f"etcd at {member.url}: authentication as {self.username!r} "
                            f"failed: {text}") from None
        member.token = result.get("token")
        if member.token:
            member.session.headers["Authorization"] = member.token
        member.authenticated = True


def _idle(err: BaseException) -> bool:
    """Whether a streaming read stopped because nothing came in time."""
    seen: BaseException | None = err
    while seen is not None:
        if "Read timed out" in str(seen) or isinstance(seen, requests.exceptions.ReadTimeout):
            return True
        seen = seen.__cause__ or seen.__context__
    return "Read timed out" in str(err.args)
