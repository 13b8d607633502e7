"""The duration histogram the HA watcher keeps between scrapes (metrics.Durations), and
the metrics server against real sockets."""

from __future__ import annotations

import gzip
import socket
import time
import urllib.error
import urllib.request
from typing import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import metrics
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.metrics import Durations


def test_durations_fall_in_every_bucket_at_or_above_them_and_add_up():
    durations = Durations((30, 10))
    for seconds in (4.5, 10, 12, 700):
        durations.observe(seconds)
    buckets, total = durations.buckets()
    assert buckets == [("10", 2), ("30", 3), ("+Inf", 4)]
    assert total == 726.5 and durations.count == 4


def test_no_duration_yet_is_zero_everywhere():
    assert Durations((5,)).buckets() == ([("5", 0), ("+Inf", 0)], 0.0)


# The metrics server, against real sockets: it runs in the process that fences, so
# what its clients do must cost that process neither threads nor time.

@pytest.fixture(name="served")
def fixture_served() -> Iterator[str]:
    """A real metrics server on a free port of 127.0.0.1; its address:port."""
    server = metrics.serve(f"127.0.0.1:{_free_port()}",
                           lambda: [metrics.gauge("agent_lease_held", "Held.", 1, host="hv1")],
                           "test")
    yield "%s:%d" % server.server_address[:2]
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(listen: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=2) as reply:
        text = reply.read().decode()
    return {sample.name + str(sorted(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _connect(listen: str) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (the client sends nothing)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def test_idle_connections_beyond_the_bound_do_not_block_a_scrape(served):
    idle = [_connect(served) for dummy in range(3 * metrics.MAX_CONNECTIONS)]
    try:
        started = time.monotonic()
        assert _scrape(served) == {"yasco_agent_lease_held[('host', 'hv1')]": 1.0}
        assert time.monotonic() - started < 1.0
        # The bound holds: the server closed every idle one it had no room for.
        still_open = [sock for sock in idle if not _closed_within(sock, 0.2)]
        assert len(still_open) < metrics.MAX_CONNECTIONS
    finally:
        for sock in idle:
            sock.close()


def test_a_connection_that_sends_nothing_is_closed_after_the_timeout(served):
    with _connect(served) as sock:
        started = time.monotonic()
        assert _closed_within(sock, metrics.CONNECTION_TIMEOUT + 2)
        assert time.monotonic() - started >= metrics.CONNECTION_TIMEOUT - 0.5
    assert _scrape(served)  # and the server serves on


def test_a_request_trickled_a_byte_at_a_time_is_cut_off_at_the_timeout(served):
    with _connect(served) as sock:
        started = time.monotonic()
        closed = False
        trickle = iter(b"GET /metrics HTTP/1.1\r\n" + b"X-Slow: y\r\n" * 100)
        while not closed and time.monotonic() < started + metrics.CONNECTION_TIMEOUT + 2:
            try:
                sock.sendall(bytes([next(trickle)]))
            except OSError:
                closed = True
            closed = closed or _closed_within(sock, 0.5)
        assert closed and time.monotonic() - started < metrics.CONNECTION_TIMEOUT + 1


def test_a_scrape_may_ask_for_openmetrics_gzipped(served):
    request = urllib.request.Request(f"http://{served}/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0",
        "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=2) as reply:
        assert reply.headers["Content-Type"].startswith("application/openmetrics-text")
        assert reply.headers["Content-Encoding"] == "gzip"
        assert b'yasco_agent_lease_held{host="hv1"} 1.0' in gzip.decompress(reply.read())
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://{served}/other", timeout=2)
