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
Imports nothing of Ansible, nor of the collection.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

try:
    from prometheus_client import CollectorRegistry, make_wsgi_app
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)
except ImportError:  # reported by serve(), naming the package to install
    HAS_PROMETHEUS = False
else:
    HAS_PROMETHEUS = True

LOG = logging.getLogger("yasco-metrics")
PREFIX = "yasco_"


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
    """`address:port` (`[v6]:port`, or `:port` for every address) -> (address, port)."""
    address, sep, port = str(listen).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise MetricsError(f"{where}: {listen!r} is not address:port (e.g. 0.0.0.0:9731, "
                           "[::]:9731 or :9731); leave it empty to serve no metrics")
    return address.strip("[]") or "0.0.0.0", int(port)


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


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:  # a scrape every few seconds is no news
        pass


def serve(listen: str, snapshot: Callable[[], list[Family]], where: str) -> WSGIServer:
    """Serve `snapshot()`'s families at http://listen/metrics from a daemon thread;
    `shutdown()` and `server_close()` on the server returned stop it."""
    address, port = parse_listen(listen, where)
    if not HAS_PROMETHEUS:
        raise MetricsError(f"{where}: serving metrics needs prometheus-client: install "
                           "python3-prometheus-client (Debian) or prometheus-client (PyPI), "
                           "or leave the setting empty")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(snapshot))
    try:
        server = make_server(address, port, make_wsgi_app(registry),
                             server_class=_Server6 if ":" in address else _Server,
                             handler_class=_Quiet)
    except OSError as err:
        raise MetricsError(f"{where}: cannot listen on {listen}: {err}; choose a free "
                           "address:port") from err
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
