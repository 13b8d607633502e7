"""The agent's hardware watchdog, against real etcd and libvirt's test driver: the agent
runs as an operator runs it (roles/agent/files/yasco_agent.py, a process of its own
that a test can stop with SIGSTOP, as a hung agent), and its watchdog device is a FIFO
read by the lab's emulator, which says when a real device would have reset the host.

What must hold: a hung agent's watchdog fires before its lease can expire; an agent
that self-fenced for want of etcd keeps the host alive; a clean stop disarms the
watchdog and a killed agent leaves it counting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from yasco_lab.watchdog import Watchdog

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

from .conftest import ROOT, closed_port_url, wait_for

TTL, MARGIN, TIMEOUT = 6, 2, 3


class Board:
    """The emulated watchdog of one host, served in a thread: `fired` is set, with the
    monotonic time in `fired_at`, when a real one would have reset the host."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path, 0o600)
        self.dog = Watchdog(str(path), TIMEOUT)
        self.done = threading.Event()
        self.fired = threading.Event()
        self.fired_at = 0.0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        if self.dog.run(stop=self.done.is_set):
            self.fired_at = time.monotonic()
            self.fired.set()

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)


class AgentProcess:
    def __init__(self, tmp_path: Path, endpoints: list[str], device: Path) -> None:
        self.host = "hv1"
        self.cluster = f"t{uuid.uuid4().hex[:8]}"
        config = tmp_path / f"agent-{uuid.uuid4().hex[:6]}.yml"
        config.write_text(json.dumps({
            "host": self.host, "cluster": self.cluster, "endpoints": endpoints,
            "ttl": TTL, "margin": MARGIN, "libvirt_uri": "test:///default",
            "address": "127.0.0.1", "watchdog_device": str(device),
            "watchdog_timeout": TIMEOUT}))
        self.log = tmp_path / "agent.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "roles" / "agent" / "files" / "yasco_agent.py"),
                 "--config", str(config)],
                env={**os.environ, "YASCO_AGENT_LIB": str(ROOT / "collections")},
                stdout=log, stderr=subprocess.STDOUT)

    def alive_key(self) -> str:
        return etcd_keys.alive_key(self.host, cluster=self.cluster)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(name="board")
def fixture_board(tmp_path: Path) -> Iterator[Board]:
    board = Board(tmp_path / "watchdog")
    yield board
    board.close()


def start(tmp_path: Path, endpoints: list[str], board: Board) -> AgentProcess:
    return AgentProcess(tmp_path, endpoints, Path(board.dog.path))


def test_a_hung_agent_resets_its_host_before_its_lease_can_expire(etcd, tmp_path, board):
    client = etcd.client()
    agent = start(tmp_path, [etcd.url], board)
    try:
        registered = wait_for(lambda: client.get(agent.alive_key()), 15)
        assert registered, agent.log.read_text()
        assert wait_for(lambda: board.dog.armed and board.dog.pets > 10, 5), (
            "the agent does not pet its watchdog")
        agent.signal(signal.SIGSTOP)  # hung: renews nothing, fences nothing, pets nothing
        assert board.fired.wait(TTL + 2), "the watchdog never fired for a hung agent"
        gone = wait_for(lambda: client.get(agent.alive_key()) is None, TTL + 5)
        expired_at = time.monotonic()
        assert gone, "the hung agent's lease never expired"
        lead = expired_at - board.fired_at
        print(f"\nwatchdog reset {lead:.2f} s before the lease was seen to expire")
        assert lead > 0, "the host was reset only after its lease expired"
    finally:
        agent.close()
        client.close()


def test_an_agent_cut_off_from_etcd_self_fences_and_keeps_its_host_up(tmp_path, board):
    """No lease of its own can be valid: the agent stops petting before its start's
    deadline, self-fences (nothing to destroy here) and then pets again: losing etcd
    must not reset every host of the cluster."""
    agent = start(tmp_path, [closed_port_url()], board)
    try:
        assert wait_for(lambda: "SELF-FENCE:" in agent.log.read_text(), TTL + 5), (
            agent.log.read_text())
        assert not board.fired.wait(2 * TTL), "a self-fenced agent let its host reset"
        assert board.dog.armed and agent.proc.poll() is None
    finally:
        agent.close()


def test_a_clean_stop_disarms_the_watchdog_and_a_killed_agent_leaves_it_counting(
        etcd, tmp_path, board):
    client = etcd.client()
    try:
        agent = start(tmp_path, [etcd.url], board)
        assert wait_for(lambda: client.get(agent.alive_key()), 15), agent.log.read_text()
        assert wait_for(lambda: board.dog.armed, 5)
        agent.signal(signal.SIGTERM)
        assert agent.proc.wait(15) == 0
        assert not board.dog.armed and board.dog.disarms == 1
        assert not board.fired.wait(TIMEOUT + 1), "the watchdog fired after a clean stop"

        agent = start(tmp_path, [etcd.url], board)
        assert wait_for(lambda: client.get(agent.alive_key()), 15), agent.log.read_text()
        assert wait_for(lambda: board.dog.armed, 5)
        killed = time.monotonic()
        agent.signal(signal.SIGKILL)
        assert board.fired.wait(TIMEOUT + 2), "a killed agent's watchdog never fired"
        assert board.fired_at - killed <= TIMEOUT + 0.5
    finally:
        agent.close()
        client.close()
