"""A lab node: a process tree in its own network, mount, PID, UTS and IPC namespaces.

The node's PID 1 is a tiny reaper. Killing it with SIGKILL makes the kernel kill
every other process in the PID namespace at once, which is exactly a power loss:
QEMU, libvirtd, the etcd member, sshd and anything started over SSH die together,
with no cleanup. The network and mount namespaces vanish with the last process,
so a crashed or stopped node leaves no mounts, namespaces or links behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import LabError
from .layout import BRIDGE
from .network import ip

# PID 1 of a node must reap the orphans it inherits (daemons double-fork into it).
# PID 1 ignores signals it has no handler for, so only SIGKILL from outside stops it.
# It also serves the host's emulated hardware watchdog (watchdog.py) and exits when
# that fires: a reset. The watchdog's source travels in the command line: the node's
# boot mounts a fresh /tmp at once, which would hide a checkout under /tmp from a
# PID 1 that had not read the file yet.
_WATCHDOG = (Path(__file__).with_name("watchdog.py")).read_text()
_REAPER = f"""
import os, sys, threading, time, types
watchdog = types.ModuleType("watchdog")
exec(compile({_WATCHDOG!r}, "yasco_lab/watchdog.py", "exec"), watchdog.__dict__)
threading.Thread(target=watchdog.serve_and_reset, args=(sys.argv[-1],), daemon=True).start()
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"""
MARKER = "yasco-lab-node"


@dataclass(frozen=True)
class Node:
    """A running node, known by the controller-side PIDs of `unshare` and of its PID 1."""

    name: str
    unshare_pid: int
    init_pid: int

    def alive(self) -> bool:
        return _cmdline(self.init_pid)[-2:] == [MARKER, self.name]

    def nsenter(self, *command: str) -> list[str]:
        """A command line that runs `command` inside this node."""
        return ["nsenter", "-t", str(self.init_pid), "-a", "--", *command]

    def run(self, *command: str, input: str | None = None, timeout: float = 60,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.nsenter(*command), input=input, capture_output=True,
                                text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise LabError(f"{self.name}: `{' '.join(command)}` failed: "
                           f"{(result.stderr or result.stdout).strip()[-400:]}")
        return result

    def start_daemon(self, *command: str, log: Path) -> None:
        """Start a long-running process inside the node, owned by the node's PID 1."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            # setsid -f forks and returns at once; the daemon is re-parented to the reaper.
            subprocess.run(self.nsenter("setsid", "-f", *command), stdin=subprocess.DEVNULL,
                           stdout=out, stderr=subprocess.STDOUT, check=True, timeout=30)

    def kill(self) -> None:
        """Power loss: SIGKILL the node's PID 1, which takes every process of the node
        with it; returns once the last of them is gone."""
        kill_pids([self.init_pid, self.unshare_pid])


def spawn(name: str, log: Path) -> Node:
    """Start a new node and return it once its PID 1 is known."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["unshare", "--fork", "--pid", "--mount-proc", "--net", "--mount", "--uts",
             "--ipc", "--propagation", "private",
             "/usr/bin/python3", "-c", _REAPER, MARKER, name],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = _children(proc.pid)
        if children and _cmdline(children[0])[-2:] == [MARKER, name]:
            return Node(name, proc.pid, children[0])
        if proc.poll() is not None:
            raise LabError(f"{name}: could not create its namespaces (unshare exited "
                           f"{proc.returncode}); see {log}")
        time.sleep(0.02)
    proc.kill()
    raise LabError(f"{name}: its init process did not start within 10 s; see {log}")


def attach(node: Node, veth: str, address: str, prefix_len: int, hostname: str) -> None:
    """Plug the node into the lab bridge as eth0 with `address`, and name it."""
    # The kernel removes the old pair with the old node's namespace, a moment after
    # the node dies: it may be gone by the time it is deleted here.
    if Path(f"/sys/class/net/{veth}").exists():
        ip("link", "del", veth, check=False)
    deadline = time.monotonic() + 5
    while Path(f"/sys/class/net/{veth}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(node.init_pid))
    ip("link", "set", veth, "master", BRIDGE, "up")
    node.run("sh", "-ec", f"""
        hostname {hostname}
        ip link set lo up
        ip addr add {address}/{prefix_len} dev eth0
        ip link set eth0 up
    """)


def find_stale() -> list[tuple[int, str]]:
    """PID 1s of lab nodes still running, whoever started them (e.g. a crashed controller)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            argv = _cmdline(int(entry.name))
            if len(argv) >= 2 and argv[-2] == MARKER and "unshare" not in argv[0]:
                found.append((int(entry.name), argv[-1]))
    return found


def kill_pids(pids: list[int]) -> None:
    """SIGKILL `pids`, nodes' PID 1s among them, and wait until every process of those
    nodes is gone: the kernel kills the rest of a PID namespace once its PID 1 dies,
    but a process busy in the kernel takes a moment to exit, and until then it still
    runs the node's QEMU or holds its network namespace."""
    namespaces = {ns for ns in map(_net_namespace, pids) if ns is not None}
    namespaces.discard(_net_namespace(os.getpid()))  # the controller's own, never a node's
    _sigkill(pids)
    _wait_gone(pids, timeout=10)
    # What the PID 1 did not take with it (entered by nsenter, say), or not yet.
    rest = [pid for pid in _all_pids() if _net_namespace(pid) in namespaces]
    _sigkill(rest)
    _wait_gone(rest, timeout=30)


def _sigkill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _net_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in pids):
            return
        time.sleep(0.05)
    raise LabError(f"processes {pids} did not exit after SIGKILL")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"
