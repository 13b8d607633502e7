# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the etcd client fails, and what it says then.

Every failure the client (etcd.py) lets out is an `EtcdError` whose message names the
endpoints and says what to do: `NoSpace` and `Compacted` are the two a caller acts
on. Inside the client, one endpoint's failure is a `Failure` (why, and what to
check), carried by `Unavailable` when another endpoint may take the request, and
`NoAnswer` when it was sent and may have been applied. Here too are the texts etcd
answers with, told apart by their words, the diagnosis of a connection that
failed (refused, unresolved, TLS), from the exceptions requests wraps, and the refusal
of an etcd without TLS or authentication (unless ALLOW_INSECURE is set, in a lab).
Like the client, it imports nothing of Ansible.
"""

from __future__ import annotations

import json
import re
import ssl
import time
from dataclasses import dataclass
from typing import Any, Iterator

try:
    import urllib3.exceptions
except ImportError:  # then no client is made: etcd_gateway.ETCD3GW_IMPORT_ERROR says why
    _NAME_RESOLUTION: Any = ()
else:
    # Only urllib3 2 tells a name that does not resolve from a refused connection.
    _NAME_RESOLUTION = getattr(urllib3.exceptions, "NameResolutionError", ())

# Errors etcd answers with, by the text of gRPC's status message.
BAD_TOKEN = ("invalid auth token", "revision of auth store is old")
NO_USER = "user name is empty"
BAD_PASSWORD = "authentication failed"
AUTH_DISABLED = "authentication is not enabled"
_DENIED = "permission denied"
# What etcd's gateway answers, in plain text, to a client certificate with a common
# name while authentication is on: it would not be used as the user.
CN_REFUSED = "CommonName of client sending a request against gateway"
_NO_LEASE = "requested lease not found"
_NO_SPACE = "mvcc: database space exceeded"
COMPACTED = "mvcc: required revision has been compacted"
# What to do about NOSPACE, where it is reported.
NO_SPACE_ADVICE = ("free space and disarm the alarm: playbooks/etcd_maintenance.yml "
                   "(docs/production.md, etcd housekeeping)")

REACH_ADVICE = "check endpoints (yasco_etcd_endpoints) and that etcd runs there"
_CA_ADVICE = ("check that ca_cert (yasco_etcd_ca_cert) is the CA that signed etcd's "
              "server certificate and that the certificate names the endpoint's host")
_TLS_ADVICE = ("check ca_cert, client_cert and client_key (yasco_etcd_ca_cert, "
               "yasco_etcd_client_cert, yasco_etcd_client_key) and the endpoint's scheme")
CREDENTIALS = "username and password (yasco_etcd_username, yasco_etcd_password)"
# The lab-only switch under which the client talks to an etcd without TLS or
# authentication: set to 1 in the environment of the playbooks, the rulebook or the
# agent. Never in production: whoever reaches such an etcd owns the cluster.
ALLOW_INSECURE = "YASCO_ETCD_ALLOW_INSECURE"
INSECURE_ADVICE = (f"for a lab's or a test's throwaway etcd only, set {ALLOW_INSECURE}=1 "
                   f"in the environment of ansible-playbook, ansible-rulebook or the agent")


class EtcdError(Exception):
    """etcd could not be reached, refused, or answered unexpectedly; the message says
    which endpoint and what to do. `details` are data a module returns beside the
    message, such as what a lost compare-and-swap found."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class LeaseGone(EtcdError):
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


class Unsure(EtcdError):
    """A request that may not be repeated got no answer: it may have been applied."""


@dataclass(frozen=True)
class Failure:
    """Why one endpoint could not serve a request, and what the operator should check."""

    endpoint: str
    reason: str
    advice: str


class Unavailable(Exception):
    """The endpoint did not take the request: another endpoint may."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


class NoAnswer(Exception):
    """The request went out but no answer came in time: it may have been applied."""


def seconds(timeout: float) -> str:
    return f"{timeout:g} s"


def unreachable(failures: list[Failure], timeout: float) -> str:
    """The message for a request that no endpoint took: each one's reason, and what
    to check, once each."""
    endpoints = ", ".join(failure.endpoint for failure in failures)
    reasons = "; ".join(f"{failure.endpoint}: {failure.reason}" for failure in failures)
    advice = "; ".join(dict.fromkeys(failure.advice for failure in failures))
    return f"etcd at {endpoints}: unreachable within {seconds(timeout)} ({reasons}): {advice}"


def refusal(url: str, action: str, text: str, lease: int, username: str | None) -> EtcdError:
    """The EtcdError for an error etcd at `url` answered `action` with, in `text`;
    `lease` is the lease the request named, `username` who sent it."""
    if text.startswith(_NO_LEASE):
        return LeaseGone(f"etcd at {url}: {action}: lease {lease} does not exist "
                         f"(it expired or was revoked): grant a new lease")
    if text.startswith(NO_USER) or (text.startswith(BAD_TOKEN) and not username):
        return EtcdError(f"etcd at {url} requires authentication: set {CREDENTIALS}")
    if text.startswith(_NO_SPACE):
        return NoSpace(f"etcd at {url}: {action} refused: the database is full "
                       f"(alarm NOSPACE): {NO_SPACE_ADVICE}")
    if text.startswith((_DENIED, f"auth: {_DENIED}")):
        who = f"user {username!r}" if username else "this client"
        return EtcdError(f"etcd at {url}: {who} may not {action}: permission "
                         f"denied: grant the user a role that allows it "
                         f"(etcdctl role grant-permission)")
    return EtcdError(f"etcd at {url}: {action} failed: {text}")


def insecure_setup(endpoints: list[tuple[str, bool]], username: str | None) -> EtcdError | None:
    """The EtcdError that refuses a client of `endpoints`, each (url, whether it speaks
    https), as `username`; None when both are as YASCO's etcd runs: TLS and a user."""
    plain = [url for url, secure in endpoints if not secure]
    problems = []
    if plain:
        problems.append("plain http sends the password, its token and every key in clear, "
                        "and nothing proves the server is your etcd: use https:// endpoints "
                        "with ca_cert, client_cert and client_key (yasco_etcd_endpoints, "
                        "yasco_etcd_ca_cert, yasco_etcd_client_cert, yasco_etcd_client_key)")
    if not username:
        problems.append("no username is given, while YASCO's etcd runs with authentication "
                        f"on and each part as a user of its own: set {CREDENTIALS}")
    if not problems:
        return None
    named = ", ".join(plain or [url for url, dummy in endpoints])
    return EtcdError(f"etcd at {named}: refused: {'; and '.join(problems)}; "
                     f"docs/security.md has the setup; {INSECURE_ADVICE}")


def auth_disabled(url: str) -> EtcdError:
    """The EtcdError that refuses an etcd at `url` whose authentication is off."""
    return EtcdError(f"etcd at {url}: refused: authentication is not enabled there, so "
                     f"any client it admits may read and write every key, a fence or a "
                     f"placement among them: enable it (etcdctl auth enable, "
                     f"docs/production.md section 1); {INSECURE_ADVICE}")


def error_text(err: BaseException) -> str | None:
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


def connect_failure(endpoint: str, err: BaseException,
                    cert: str | tuple[str, str] | None = None) -> Failure | None:
    """Why the connection itself failed, or None when it was made (the request may
    then have reached etcd). `cert` is the client certificate presented, if any."""
    causes = list(_causes(err))
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            detail = cause.verify_message or cause.reason or str(cause)
            return Failure(endpoint, f"TLS: certificate verify failed: {detail}", _CA_ADVICE)
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            detail = (cause.reason.replace("_", " ").lower() if cause.reason
                      else re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(cause)))
            if "alert" in detail:  # the server refused what we presented
                detail += _client_certificate_problem(cert)
            return Failure(endpoint, f"TLS handshake failed: {detail}", _TLS_ADVICE)
    # urllib3 makes a refused connection a kind of connect timeout: look at it first.
    for cause in causes:
        if isinstance(cause, _NAME_RESOLUTION):
            return Failure(endpoint, "host name does not resolve", REACH_ADVICE)
        if isinstance(cause, urllib3.exceptions.NewConnectionError):
            system = next((c.strerror for c in causes
                           if isinstance(c, OSError) and c.strerror), "no connection")
            return Failure(endpoint, system.lower(), REACH_ADVICE)
    if any(isinstance(cause, urllib3.exceptions.ConnectTimeoutError) for cause in causes):
        return Failure(endpoint, "connecting timed out", REACH_ADVICE)
    return None
