"""Each lab host's BMC: what IPMI on a management network is to a real machine.

One process in the controller's namespaces serves an IPMI BMC (pyghmi's BMC server)
per host, at the controller's bridge address, hvN's on port PORT_BASE + N. Powering
a host off through it crashes that lab host (every process at once, as a power cut
does); powering it on boots it. It lives outside the hosts' namespaces, as a BMC
lives outside its machine: a partitioned, hung or crashed host still has its BMC.
The real fence agent (`fence_ipmilan`, over `ipmitool`) talks to it end to end.

Every power action is appended to ACTIONS (one JSON object a line), which tests read.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .errors import LabError
from .layout import HostLayout, controller_address, state_dir

PORT_BASE = 6230
USERNAME = "admin"
MARKER = "yasco-lab-bmc"  # in the process's arguments: `down` finds it by that


def port(host: str, base: int = PORT_BASE) -> int:
    return base + HostLayout(host).index


def password_file() -> Path:
    return state_dir() / "bmc-password"


def actions_file() -> Path:
    return state_dir() / "bmc-actions.jsonl"


def device(host: str) -> dict:
    """The host's `yasco_fence_device`, for the lab's inventory."""
    return {"agent": "ipmilan", "address": controller_address(), "port": port(host),
            "username": USERNAME,
            "password": f"{{{{ lookup('ansible.builtin.file', '{password_file()}') }}}}"}


def actions() -> list[dict]:
    """Every power action the BMCs took since the lab came up, oldest first."""
    try:
        return [json.loads(line) for line in actions_file().read_text().splitlines()]
    except FileNotFoundError:
        return []


def spawn(hosts: list[str], fresh: bool = True) -> None:
    """Start the BMCs of `hosts`: `fresh`, as the lab comes up, with a new password
    and no actions yet; else as they were (a BMC that comes back)."""
    stop()
    if fresh or not password_file().exists():
        password_file().unlink(missing_ok=True)
        fd = os.open(password_file(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(12))
        actions_file().unlink(missing_ok=True)
    log_path = state_dir() / "bmc.log"
    with open(log_path, "a") as log:
        start = log.tell()
        subprocess.Popen([sys.executable, "-m", "yasco_lab.bmc", MARKER, *hosts],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    deadline = time.monotonic() + 30
    while "BMCs of " not in log_path.read_text(errors="replace")[start:]:
        if time.monotonic() > deadline:
            raise LabError(f"the lab's BMCs did not start: see {log_path}")
        time.sleep(0.1)


def stop() -> None:
    """Stop the lab's BMCs (not those a test serves over files), and wait until they
    are gone: their ports are free again."""
    stopped = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if MARKER.encode() in argv and b"--files" not in argv:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    stopped.append(entry)
                except ProcessLookupError:
                    pass
    deadline = time.monotonic() + 10
    while any(entry.exists() for entry in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)


class LabMachines:
    """The lab's hosts, as their BMCs see them: a power cut crashes one, power on boots
    it (in the background, as a machine boots after its BMC has answered)."""

    def __init__(self) -> None:
        self.booting: set[str] = set()

    def powered(self, host: str) -> bool:
        from . import lab  # the lab module starts this one
        return host in self.booting or lab.is_powered(host)

    def power_off(self, host: str) -> None:
        # In the background, as power_on: the lab's lock may be held for a while (a
        # boot), and the BMCs of the other hosts must answer meanwhile. The fence
        # agent polls the power state until the host is off.
        from . import lab

        def crash() -> None:
            try:
                _with_lab(lab.crash, host)
            except LabError as err:
                print(f"{host}: power off failed: {err}", flush=True)
        threading.Thread(target=crash, daemon=True).start()

    def power_on(self, host: str) -> None:
        from . import lab

        def boot() -> None:
            try:
                _with_lab(lab.boot, host)
            except LabError as err:
                print(f"{host}: boot failed: {err}", flush=True)
            finally:
                self.booting.discard(host)
        self.booting.add(host)
        threading.Thread(target=boot, daemon=True).start()


class FileMachines:
    """Machines whose power is a file each (DIR/HOST holds on or off): BMCs with no
    lab behind them, for the tests of the fencing module and playbooks."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def powered(self, host: str) -> bool:
        path = self.root / host
        return not path.exists() or path.read_text().strip() != "off"

    def power_off(self, host: str) -> None:
        (self.root / host).write_text("off")

    def power_on(self, host: str) -> None:
        (self.root / host).write_text("on")


def _with_lab(verb, host: str) -> None:
    """A lab verb, waiting for another yasco-lab command (a test's) to finish."""
    deadline = time.monotonic() + 120
    while True:
        try:
            verb(host)
            return
        except LabError as err:
            if "another yasco-lab command" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def serve(hosts: list[str], machines, address: str, password: str, log_path: Path,
          port_base: int = PORT_BASE) -> None:
    """Serve a BMC for each of `hosts` on `address`, forever."""
    from pyghmi.ipmi import bmc as ipmi_bmc
    import pyghmi.ipmi.private.session as ipmi_session

    def log(host: str, action: str, was: str, error: str | None = None) -> None:
        with open(log_path, "a") as out:
            out.write(json.dumps({"at": time.time(), "host": host, "action": action,
                                  "was": was, "error": error}) + "\n")
        print(f"{time.strftime('%H:%M:%S')} {host}: power {action} (was {was})"
              + (f": {error}" if error else ""), flush=True)

    class HostBmc(ipmi_bmc.Bmc):
        def __init__(self, host: str) -> None:
            super().__init__({USERNAME: password}, port=port(host, port_base),
                             address=address)
            self.host = host

        def get_power_state(self) -> str:
            return "on" if machines.powered(self.host) else "off"

        def _set(self, action: str, change) -> int:
            was = self.get_power_state()
            if was == action:
                return 0
            try:
                change(self.host)
            except LabError as err:
                log(self.host, action, was, str(err))
                return 0xff  # unspecified error: the fence agent reports a failure
            log(self.host, action, was)
            return 0

        def power_off(self) -> int:
            return self._set("off", machines.power_off)

        def power_on(self) -> int:
            return self._set("on", machines.power_on)

        def power_reset(self) -> int:
            self.power_off()
            return self.power_on()

        power_cycle = power_reset

    for host in hosts:
        HostBmc(host)
    print(f"BMCs of {', '.join(hosts)} at {address}, ports "
          f"{', '.join(str(port(h, port_base)) for h in hosts)}", flush=True)
    while True:
        ipmi_session.Session.wait_for_rsp(1)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m yasco_lab.bmc")
    parser.add_argument("marker", choices=[MARKER])
    parser.add_argument("--files", type=Path, help="power files instead of the lab")
    parser.add_argument("--address", default=None)
    parser.add_argument("--password-file", type=Path, default=None)
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--port-base", type=int, default=PORT_BASE)
    parser.add_argument("hosts", nargs="+")
    args = parser.parse_args(argv)
    machines = FileMachines(args.files) if args.files else LabMachines()
    serve(args.hosts, machines, args.address or controller_address(),
          (args.password_file or password_file()).read_text().strip(),
          args.log or actions_file(), args.port_base)


if __name__ == "__main__":
    main(sys.argv[1:])
