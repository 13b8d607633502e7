# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus metrics, served over HTTP by the hypervisor agent and the HA watcher
(docs/observability.md lists them, with the alerts shipped in
files/prometheus/yasco.rules.yml).

Level-based: each scrape asks its owner for a snapshot of what it knows then
(`Family` values), so a metric can never drift from the state it describes; a
`Durations` is the one thing kept between scrapes, the durations an owner measured.
Serving is best effort: a port that cannot be bound is
reported and the owner runs on, since metrics must never take HA down with them.
The agent serves them from the process that fences, so the server costs it one
thread whatever its clients do: a bounded number of connections, each with a
deadline (MetricsServer says how).
Imports nothing of Ansible, nor of the collection.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import logging
import re
import selectors
import socket
import threading
import time
from typing import Any, Callable

try:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)
    from prometheus_client.exposition import choose_encoder
except ImportError:  # reported by serve(), naming the package to install
    HAS_PROMETHEUS = False
else:
    HAS_PROMETHEUS = True

LOG = logging.getLogger("yasco-metrics")
PREFIX = "yasco_"

# Connections open at once: a few Prometheus servers and an operator's curl need far
# fewer; each costs a file descriptor and a few kilobytes, never a thread.
MAX_CONNECTIONS = 16
# Seconds a connection has, in all, to send its request and take the answer. A scrape
# takes milliseconds; a client that sends nothing, or a byte now and then, is closed.
CONNECTION_TIMEOUT = 5.0
# Bytes a request's line and headers may take; a scrape's take a few hundred.
MAX_REQUEST = 8192
# Seconds the server's thread waits for sockets at most, so that it closes
# connections past their deadline, and stops, that late at most.
POLL = 0.25


class MetricsError(Exception):
    """Metrics cannot be served; the message names the setting and what to do."""


@dataclasses.dataclass
class Family:
    """One metric family: `name` without the yasco_ prefix (and, for a counter,
    without _total), `kind` gauge, counter or histogram, and its samples as (labels,
    value), a histogram's value being its `Durations`."""
    name: str
    kind: str
    help: str
    samples: list[tuple[dict[str, str], Any]] = dataclasses.field(default_factory=list)

    def add(self, value: float, **labels: Any) -> Family:
        self.samples.append(({k: str(v) for k, v in labels.items()}, float(value)))
        return self


class Durations:
    """A histogram's state: how many durations fell at or under each bound (seconds),
    their count and their sum. Thread-safe: its owner observes, scrapes read."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.under = [0] * len(self.bounds)
        self.count = 0
        self.sum = 0.0
        self.lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self.lock:
            self.count += 1
            self.sum += seconds
            for index, bound in enumerate(self.bounds):
                if seconds <= bound:
                    self.under[index] += 1

    def buckets(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (le, count) pairs ending with +Inf, and the sum."""
        with self.lock:
            return ([(f"{b:g}", n) for b, n in zip(self.bounds, self.under)]
                    + [("+Inf", self.count)], self.sum)


def histogram(name: str, help_text: str, durations: Durations) -> Family:
    """A histogram family of one series, from `durations`."""
    return Family(name, "histogram", help_text, [({}, durations)])


def _family(kind: str, name: str, help_text: str, value: float | None = None,
            **labels: Any) -> Family:
    """A family of `kind`, with one sample when `value` is given."""
    family = Family(name, kind, help_text)
    return family if value is None else family.add(value, **labels)


gauge = functools.partial(_family, "gauge")
counter = functools.partial(_family, "counter")


def parse_listen(listen: str, where: str) -> tuple[str, int]:
    """`address:port` (`[v6]:port`, or `:port`) -> (address, port); the address is
    empty for `:port`, which serve() takes for every address and the agent for its
    host's own (agent_config.py)."""
    address, sep, port = str(listen).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise MetricsError(f"{where}: {listen!r} is not address:port (e.g. 0.0.0.0:9731, "
                           "[::]:9731 or :9731); leave it empty to serve no metrics")
    return address.strip("[]"), int(port)


class _Collector:
    def __init__(self, snapshot: Callable[[], list[Family]]) -> None:
        self.snapshot = snapshot

    def collect(self):
        try:
            families = self.snapshot()
        except Exception as err:  # pylint: disable=broad-except
            # A scrape must not break the owner; the scrape shows the gap instead.
            LOG.error("metrics snapshot failed: %s", err)
            families = []
        for family in families:
            cls = {"counter": CounterMetricFamily,
                   "histogram": HistogramMetricFamily}.get(family.kind, GaugeMetricFamily)
            names = sorted({k for labels, dummy in family.samples for k in labels})
            metric = cls(PREFIX + family.name, family.help, labels=names)
            for labels, value in family.samples:
                values = [labels.get(k, "") for k in names]
                if family.kind == "histogram":
                    buckets, total = value.buckets()
                    metric.add_metric(values, buckets, total)
                else:
                    metric.add_metric(values, value)
            yield metric


class MetricsServer:
    """The HTTP server of one owner's metrics. One daemon thread answers every client
    from a selector: a client never gets a thread of its own in the process that
    fences, nor holds the one there is, and the snapshot is taken once per scrape.

    At most MAX_CONNECTIONS are open at once. One more closes at once the oldest that
    has not sent its whole request (a scrape sends it as soon as it connects and is
    answered within milliseconds, so the oldest waiting is an idle client), or the new
    one when every open connection is being answered. Each connection has
    CONNECTION_TIMEOUT seconds in all, counted from its accept, to send its request
    and take the answer, however slowly it trickles; then it is closed. One request
    per connection (HTTP/1.0's close): a GET of /metrics (or /), answered in the format
    and encoding the scraper asks for, as prometheus-client's own server answers it.
    `shutdown()` stops the thread, `server_close()` closes every socket."""

    def __init__(self, address: str, port: int, snapshot: Callable[[], list[Family]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(snapshot))
        family, dummy, dummy, dummy, sockaddr = socket.getaddrinfo(
            address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(sockaddr)
            self.socket.listen(4 * MAX_CONNECTIONS)  # the kernel's queue: no cost here
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.socket, selectors.EVENT_READ)
        self.connections: dict[socket.socket, _Connection] = {}  # oldest first
        self.stopping = threading.Event()
        self.stopped = threading.Event()

    def serve_forever(self) -> None:
        try:
            while not self.stopping.is_set():
                for key, events in self.selector.select(POLL):
                    if key.fileobj is self.socket:
                        # One accept per wakeup: the requests of those accepted are
                        # read in between, before a flood can push them out.
                        self._accept()
                    elif key.fileobj in self.connections:
                        self._step(self.connections[key.fileobj], events)
                now = time.monotonic()
                for late in [c for c in self.connections.values() if c.deadline <= now]:
                    self._close(late)
        except Exception as err:  # pylint: disable=broad-except
            # A bug here ends the metrics, never the owner.
            LOG.error("metrics server stopped: %s", err)
        finally:
            self.stopped.set()

    def shutdown(self) -> None:
        """Stop serving; returns once the server's thread has left its loop."""
        self.stopping.set()
        self.stopped.wait(POLL * 4)

    def server_close(self) -> None:
        for connection in list(self.connections.values()):
            self._close(connection)
        self.selector.close()
        self.socket.close()

    def _accept(self) -> None:
        try:
            sock, dummy = self.socket.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:  # out of file descriptors, say: the owner runs on
            LOG.warning("metrics: cannot accept a connection: %s", err)
            return
        if len(self.connections) >= MAX_CONNECTIONS:
            idle = next((c for c in self.connections.values() if c.answer is None), None)
            if idle is None:
                sock.close()
                return
            self._close(idle)
        sock.setblocking(False)
        self.connections[sock] = _Connection(sock, time.monotonic() + CONNECTION_TIMEOUT)
        self.selector.register(sock, selectors.EVENT_READ)

    def _step(self, connection: _Connection, events: int) -> None:
        try:
            if connection.answer is None and events & selectors.EVENT_READ:
                data = connection.sock.recv(MAX_REQUEST)
                if not data:
                    self._close(connection)
                    return
                connection.request += data
                if _END_OF_HEAD.search(connection.request):
                    connection.answer = self._answer(connection.request)
                elif len(connection.request) > MAX_REQUEST:
                    connection.answer = _reply(431, "text/plain", b"request too large\n")
                else:
                    return
                self.selector.modify(connection.sock, selectors.EVENT_WRITE)
            elif connection.answer is not None and events & selectors.EVENT_WRITE:
                sent = connection.sock.send(connection.answer)
                connection.answer = connection.answer[sent:]
                if not connection.answer:
                    self._close(connection)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # reset by the client: nothing to tell it
            self._close(connection)
        except Exception as err:  # pylint: disable=broad-except
            # Whatever a client sends costs it its connection, never the server.
            LOG.warning("metrics: closed a connection: %s", err)
            self._close(connection)

    def _answer(self, request: bytes) -> bytes:
        """The whole HTTP answer to `request`, a request line and headers."""
        head = _END_OF_HEAD.split(request, 1)[0].decode("latin-1").splitlines() or [""]
        parts = head[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _reply(400, "text/plain", b"bad request\n")
        method, target = parts[0], parts[1]
        if method != "GET":
            return _reply(405, "text/plain", b"GET only\n", ("Allow", "GET"))
        if target.split("?", 1)[0] not in ("/metrics", "/"):
            return _reply(404, "text/plain", b"the metrics are at /metrics\n")
        headers = {}
        for header in head[1:]:
            name, sep, value = header.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        try:
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            body = encoder(self.registry)
        except Exception as err:  # pylint: disable=broad-except
            LOG.error("metrics: cannot encode the snapshot: %s", err)
            return _reply(500, "text/plain", b"cannot encode the metrics\n")
        extra: tuple[str, ...] = ()
        if any(coding.split(";")[0].strip().lower() == "gzip"
               for coding in headers.get("accept-encoding", "").split(",")):
            body, extra = gzip.compress(body), ("Content-Encoding", "gzip")
        return _reply(200, content_type, body, extra)

    def _close(self, connection: _Connection) -> None:
        self.connections.pop(connection.sock, None)
        try:
            self.selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        connection.sock.close()


_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")


@dataclasses.dataclass
class _Connection:
    sock: socket.socket
    deadline: float  # monotonic: when it is closed, answered or not
    request: bytes = b""
    answer: bytes | None = None  # what is left to send, once the request is read


def _reply(status: int, content_type: str, body: bytes, header: tuple[str, ...] = ()) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
              431: "Request Header Fields Too Large", 500: "Internal Server Error"}[status]
    lines = [f"HTTP/1.0 {status} {reason}", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", "Connection: close"]
    if header:
        lines.append(": ".join(header))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def serve(listen: str, snapshot: Callable[[], list[Family]], where: str) -> MetricsServer:
    """Serve `snapshot()`'s families at http://listen/metrics from a daemon thread
    (`:port` on every address); `shutdown()` and `server_close()` on the server
    returned stop it."""
    address, port = parse_listen(listen, where)
    if not HAS_PROMETHEUS:
        raise MetricsError(f"{where}: serving metrics needs prometheus-client: install "
                           "python3-prometheus-client (Debian) or prometheus-client (PyPI), "
                           "or leave the setting empty")
    try:
        server = MetricsServer(address or "0.0.0.0", port, snapshot)
    except OSError as err:
        raise MetricsError(f"{where}: cannot listen on {listen}: {err}; choose a free "
                           "address:port") from err
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
