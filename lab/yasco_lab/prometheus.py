"""The lab's Prometheus: a node of its own on the lab bridge that scrapes every
hypervisor's agent and the HA watcher on the controller, and evaluates the alerting
rules the collection ships (files/prometheus/yasco.rules.yml). `yasco-lab up` starts it
when Debian's prometheus is installed (`make setup` installs it)."""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from . import node
from .errors import LabError
from .layout import SUBNET, HostLayout, controller_address, repo_root, state_dir

NODE = "metrics"  # its link, yasco-metrics, must fit 15 characters
PORT = 9090
AGENT_METRICS_PORT = 9731
# The first watcher's; a second one on the controller takes the next (scripts/watch's
# METRICS=).
WATCHER_METRICS_PORT = 9732
WATCHERS = 2
# Every second: a failover takes about ten, and must show.
SCRAPE_INTERVAL = "1s"


def address() -> str:
    return str(SUBNET.network_address + 3)


def url() -> str:
    return f"http://{address()}:{PORT}"


def agent_listen(host: HostLayout) -> str:
    return f"{host.address}:{AGENT_METRICS_PORT}"


def watcher_listen(index: int = 0) -> str:
    """Where the lab's HA watcher number `index` serves its metrics: the controller's
    end of the bridge, a port each. One started with a port already taken runs on
    without metrics."""
    return f"{controller_address()}:{WATCHER_METRICS_PORT + index}"


def directory() -> Path:
    return state_dir() / "prometheus"


def installed() -> bool:
    return shutil.which("prometheus") is not None


def configuration(hosts: list[HostLayout]) -> dict[str, Any]:
    return {"global": {"scrape_interval": SCRAPE_INTERVAL,
                       "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [str(repo_root() / "files" / "prometheus" / "yasco.rules.yml")],
            "scrape_configs": [
                {"job_name": "yasco-agent",
                 "static_configs": [{"targets": [agent_listen(h)], "labels": {"node": h.name}}
                                    for h in hosts]},
                {"job_name": "yasco-watcher",
                 "static_configs": [{"targets": [watcher_listen(i) for i in range(WATCHERS)]}]}]}


def spawn(hosts: list[HostLayout]) -> node.Node:
    """A fresh node for Prometheus, with its configuration written (no data kept from
    an earlier lab)."""
    root = directory()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / "prometheus.yml").write_text(json.dumps(configuration(hosts), indent=2))
    return node.spawn(NODE, root / "node.log")


def run(n: node.Node, timeout: float = 60) -> None:
    """Start Prometheus in its node, attached to the bridge, and wait until it is ready."""
    root = directory()
    n.start_daemon(shutil.which("prometheus") or "prometheus",
                   f"--config.file={root / 'prometheus.yml'}",
                   f"--storage.tsdb.path={root / 'data'}",
                   f"--web.listen-address=0.0.0.0:{PORT}", log=root / "prometheus.log")
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise LabError(f"Prometheus did not start within {timeout:.0f} s; see "
                           f"{root / 'prometheus.log'}")
        time.sleep(0.2)


def ready() -> bool:
    try:
        with urllib.request.urlopen(url() + "/-/ready", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def query(expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    return _api("query", query=expr)


def query_range(expr: str, start: float, end: float, step: float = 1.0
                ) -> list[dict[str, Any]]:
    """A range query's result matrix: each series' `metric` and `values` [(t, "v")]."""
    return _api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                step=f"{step:g}")


def _api(path: str, **params: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{url()}/api/v1/{path}?{urllib.parse.urlencode(params)}",
                                    timeout=10) as reply:
            body = json.load(reply)
    except OSError as err:
        raise LabError(f"Prometheus at {url()}: {params.get('query')}: {err}") from err
    if body.get("status") != "success":
        raise LabError(f"Prometheus: {params.get('query')}: {body}")
    return body["data"]["result"]
