"""Real etcd servers for the etcd tests, started once per run and stopped at its end.

Debian's etcd 3.4 (/usr/bin/etcd), never a mock, each on 127.0.0.1 with free ports and
a data directory of its own:

- `etcd`: plain HTTP, no authentication;
- `etcd_tls`: HTTPS that requires a client certificate, with a CA, server and client
  certificates made here with the openssl command, and a second CA that signed
  nothing (for a client that trusts the wrong CA);
- `etcd_auth`: HTTP with authentication enabled (etcdctl): user root, and a user that
  may only read.

The three start together; short heartbeat and election timeouts make each its own
leader within a fraction of a second and let leases as short as 1 s live 1 s.
Tests keep to keys under a prefix of their own, so they do not see each other's keys.

None of them is run as YASCO's production etcd is (TLS and authentication both), which
every client refuses (adapters/etcd.py): the tests here run with the lab-only switch
YASCO_ETCD_ALLOW_INSECURE=1 in os.environ (`lab_switch`), which the commands they
start (ansible-playbook, ansible-rulebook, agents) inherit. A test of a refusal takes
it out (`secure_only`).

Modules and plugins are run as an operator runs them: `playbook` runs
ansible-playbook on localhost and returns each task's result from the JSON callback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests
import yaml
from yasco_lab import pki

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd import EtcdClient
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.etcd_errors import (
    ALLOW_INSECURE)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"
STARTUP_SECONDS = 20


@dataclass(frozen=True)
class EtcdServer:
    """A running etcd and what a client needs to reach it."""

    url: str
    data_dir: Path
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    wrong_ca: str | None = None  # a CA that did not sign this server's certificate
    username: str | None = None
    password: str | None = None
    credentials: dict[str, str] = field(default_factory=dict)  # further users: password

    def options(self, **overrides: Any) -> dict[str, Any]:
        """The connection options (as modules and plugins name them) to reach it."""
        options = {"endpoints": [self.url], "ca_cert": self.ca_cert,
                   "client_cert": self.client_cert, "client_key": self.client_key,
                   "username": self.username, "password": self.password, "timeout": 5.0}
        options.update(overrides)
        return {name: value for name, value in options.items() if value is not None}

    def client(self, **overrides: Any) -> EtcdClient:
        options = self.options(**overrides)
        return EtcdClient(options.pop("endpoints"), **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class CuttableLink:
    """A TCP link to a real etcd member that a test can cut one way, as a member
    whose host dies with requests in flight: with `requests` off, what the client
    sends never reaches etcd; with `replies` off, etcd applies it but the answer
    never comes back. Either way the client's connection stays open, unanswered."""

    def __init__(self, url: str) -> None:
        self.upstream = (url.rsplit(":", 1)[0].split("//")[-1], int(url.rsplit(":", 1)[1]))
        self.requests = self.replies = True
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, dummy = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server, "requests"),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, "replies"),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, way: str) -> None:
        try:
            while data := source.recv(65536):
                if getattr(self, way):
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                sock.close()

    def close(self) -> None:
        self.listener.close()


def wait_for(condition, seconds: float) -> bool:
    """Whether `condition()` came true within `seconds` (polled, never timed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def closed_port_url() -> str:
    """A URL where nothing listens: connecting is refused at once."""
    return f"http://127.0.0.1:{free_port()}"


def make_pki(directory: Path) -> dict[str, str]:
    directory.mkdir()
    ca = pki.make_ca(directory, "ca", days=2)
    pki.make_ca(directory, "other-ca", days=2)
    # etcd's gateway is a client of etcd's own gRPC server, with the server certificate.
    pki.issue(directory, "server", ca, subject="/CN=server", usage="serverAuth,clientAuth",
              addresses=("127.0.0.1",), days=2)
    pki.issue(directory, "client", ca, subject="/CN=client", days=2)
    return {name: str(directory / file) for name, file in (
        ("ca", "ca.crt"), ("wrong_ca", "other-ca.crt"), ("server_cert", "server.crt"),
        ("server_key", "server.key"), ("client_cert", "client.crt"),
        ("client_key", "client.key"))}


@dataclass
class Started:
    process: subprocess.Popen
    url: str
    data_dir: Path
    log: Path


def start_etcd(root: Path, name: str, scheme: str = "http", *tls: str) -> Started:
    client_url = f"{scheme}://127.0.0.1:{free_port()}"
    peer_url = f"http://127.0.0.1:{free_port()}"
    data_dir = root / name
    log = root / f"{name}.log"
    command = [ETCD, "--name", name, "--data-dir", str(data_dir),
               "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
               "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
               "--initial-cluster", f"{name}={peer_url}",
               "--heartbeat-interval", "10", "--election-timeout", "100",
               "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn", *tls]
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    return Started(process, client_url, data_dir, log)


def wait_until_serving(started: Started, verify: str | bool = True,
                       cert: tuple[str, str] | None = None) -> None:
    """Until etcd answers a read, which needs a leader."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if started.process.poll() is not None:
            raise RuntimeError(f"etcd {started.url} exited: {started.log.read_text()}")
        try:
            answer = requests.post(f"{started.url}/v3/kv/range", json={"key": "AA=="},
                                   verify=verify, cert=cert, timeout=1)
            if answer.status_code == 200:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"etcd {started.url} did not serve within {STARTUP_SECONDS} s: "
                               f"{started.log.read_text()}")
        time.sleep(0.05)


def etcdctl(url: str, *args: str) -> None:
    done = subprocess.run([ETCDCTL, "--endpoints", url, *args], capture_output=True, text=True,
                          env={**os.environ, "ETCDCTL_API": "3"}, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"etcdctl {' '.join(args)}: {done.stdout}{done.stderr}")


def stop(started: Started) -> None:
    started.process.terminate()
    try:
        started.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        started.process.kill()
        started.process.wait(timeout=10)


@pytest.fixture(name="lab_switch", scope="package", autouse=True)
def fixture_lab_switch() -> Iterator[None]:
    """The lab-only switch, on for the tests of this package alone: the lab's tests,
    whose etcd runs with TLS and users, must never need it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ALLOW_INSECURE, "1")
        yield


@pytest.fixture(name="secure_only")
def fixture_secure_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the lab-only switch, for this test and the commands it starts."""
    monkeypatch.delenv(ALLOW_INSECURE, raising=False)


@pytest.fixture(name="etcd_servers", scope="session")
def fixture_etcd_servers(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EtcdServer]]:
    root = tmp_path_factory.mktemp("etcd")
    pki = make_pki(root / "pki")
    running: list[Started] = []
    try:
        plain = start_etcd(root, "plain")
        running.append(plain)
        tls = start_etcd(root, "tls", "https", "--cert-file", pki["server_cert"],
                         "--key-file", pki["server_key"], "--trusted-ca-file", pki["ca"],
                         "--client-cert-auth")
        running.append(tls)
        auth = start_etcd(root, "auth")
        running.append(auth)

        wait_until_serving(plain)
        wait_until_serving(tls, pki["ca"], (pki["client_cert"], pki["client_key"]))
        wait_until_serving(auth)
        etcdctl(auth.url, "user", "add", "root:root-secret")
        etcdctl(auth.url, "user", "add", "reader:reader-secret")
        etcdctl(auth.url, "role", "add", "read-everything")
        etcdctl(auth.url, "role", "grant-permission", "read-everything", "--prefix=true",
                "read", "/")
        etcdctl(auth.url, "user", "grant-role", "reader", "read-everything")
        etcdctl(auth.url, "auth", "enable")

        yield {
            "plain": EtcdServer(plain.url, plain.data_dir),
            "tls": EtcdServer(tls.url, tls.data_dir, ca_cert=pki["ca"],
                              client_cert=pki["client_cert"], client_key=pki["client_key"],
                              wrong_ca=pki["wrong_ca"]),
            "auth": EtcdServer(auth.url, auth.data_dir, username="root",
                               password="root-secret",
                               credentials={"reader": "reader-secret"}),
        }
    finally:
        for started in running:
            stop(started)


@pytest.fixture(name="etcd")
def fixture_etcd(etcd_servers: dict[str, EtcdServer]) -> EtcdServer:
    return etcd_servers["plain"]


@pytest.fixture(name="etcd_tls")
def fixture_etcd_tls(etcd_servers: dict[str, EtcdServer]) -> EtcdServer:
    return etcd_servers["tls"]


@pytest.fixture(name="etcd_auth")
def fixture_etcd_auth(etcd_servers: dict[str, EtcdServer]) -> EtcdServer:
    return etcd_servers["auth"]


@pytest.fixture(name="prefix")
def fixture_prefix() -> str:
    """A key prefix no other test uses."""
    return f"/test/{uuid.uuid4().hex[:12]}/"


@dataclass
class PlaybookRun:
    returncode: int
    results: list[dict[str, Any]]  # each task's result on localhost, in order
    output: str

    def result(self, name: str) -> dict[str, Any]:
        """The result of the task named `name`."""
        return self.named[name]

    @property
    def named(self) -> dict[str, dict[str, Any]]:
        return {result["_task"]: result for result in self.results}


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment of an Ansible command run as an operator runs it, with no etcd
    settings leaking in from the environment of the test run but the lab-only switch,
    where a test has it on."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("YASCO_ETCD_") or name == ALLOW_INSECURE}
    env.update({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    env.update(extra)
    return env


def playbook_command(path: Path, *args: str) -> list[str]:
    return [str(BIN / "ansible-playbook"), "-i", "localhost,", "-e", "ansible_connection=local",
            "-e", f"ansible_python_interpreter={sys.executable}", str(path), *args]


def write_playbook(directory: Path, tasks: list[dict[str, Any]], **play: Any) -> Path:
    path = directory / f"play-{uuid.uuid4().hex[:8]}.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, **play,
                                     "tasks": tasks}], sort_keys=False))
    return path


def parse_run(done: subprocess.CompletedProcess[str]) -> PlaybookRun:
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    report = json.loads(done.stdout)
    results = []
    for task in report["plays"][0]["tasks"]:
        result = dict(task["hosts"]["localhost"])
        result["_task"] = task["task"]["name"]
        results.append(result)
    return PlaybookRun(done.returncode, results, output)


@pytest.fixture(name="playbook")
def fixture_playbook(tmp_path: Path) -> Callable[..., PlaybookRun]:
    """Run tasks in a play on localhost through ansible-playbook; give each task a
    `name` to find its result with PlaybookRun.result."""

    def run(tasks: list[dict[str, Any]], *args: str, env: dict[str, str] | None = None,
            **play: Any) -> PlaybookRun:
        path = write_playbook(tmp_path, tasks, **play)
        done = subprocess.run(playbook_command(path, *args), cwd=ROOT,
                              env=ansible_env(**(env or {})), capture_output=True, text=True,
                              timeout=120, check=False)
        return parse_run(done)

    return run
