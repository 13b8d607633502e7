# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Power fencing through a host's BMC, with the fence agents Pacemaker uses.

The agents (Debian's fence-agents: `fence_ipmilan` over IPMI, `fence_redfish` over
Redfish) do the protocol and, on `off`, wait until the BMC reports the power off:
a host is fenced only once its BMC says so. They read their options on standard
input, one `name="value"` a line, so the password is not on the agent's command line
(fence_ipmilan hands it to ipmitool's, which ipmitool blanks as it starts).

Exit codes, as every fence agent has them: 0 success (for `status`: on), 2 for
`status` when off, anything else a failure, with the reason on standard error.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from typing import Any

AGENTS = {"ipmilan": "fence_ipmilan", "redfish": "fence_redfish"}
# What an agent's `--help` calls them: the port of the BMC is `ipport`.
DEFAULT_PORTS = {"ipmilan": 623, "redfish": 443}
STATES = ("on", "off")
PRIVILEGES = ("callback", "user", "operator", "administrator")


class PowerFenceError(Exception):
    """A BMC that cannot be reached, refuses the credentials or does not power off."""


@dataclasses.dataclass(frozen=True)
class FenceDevice:
    """A host's BMC, as the inventory gives it (`yasco_fence_device`)."""

    host: str
    agent: str
    address: str
    username: str
    password: str = dataclasses.field(repr=False)
    port: int | None = None
    lanplus: bool = True
    cipher: int | None = None
    # The IPMI session's privilege level; fence_ipmilan asks for administrator.
    privlvl: str | None = None
    # Redfish: which system the BMC manages, and whether its certificate is checked.
    systems_uri: str | None = None
    ssl_insecure: bool = False

    @property
    def where(self) -> str:
        return f"{self.host}'s BMC at {self.address}:{self.port or DEFAULT_PORTS[self.agent]}"

    def options(self, action: str, timeout: float) -> str:
        """The agent's standard input for `action`."""
        lines = {"action": action, "ip": self.address, "username": self.username,
                 "password": self.password,
                 "ipport": self.port or DEFAULT_PORTS[self.agent],
                 # How long the agent waits for the BMC to report the new state.
                 "power_timeout": int(max(1, timeout)),
                 "login_timeout": int(max(1, min(timeout, 10)))}
        if self.agent == "ipmilan":
            lines["lanplus"] = int(self.lanplus)
            if self.cipher is not None:
                lines["cipher"] = self.cipher
            if self.privlvl:
                lines["privlvl"] = self.privlvl
        else:
            lines["ssl"] = 1
            if self.ssl_insecure:
                lines["ssl_insecure"] = 1
            if self.systems_uri:
                lines["systems_uri"] = self.systems_uri
        # Quoted: the agents strip one pair of double quotes, and nothing else of
        # the value (device() refuses line breaks, which would start a new option).
        return "".join(f'{name}="{value}"\n' for name, value in lines.items())


def device(host: str, spec: dict[str, Any]) -> FenceDevice:
    """A FenceDevice from the inventory's mapping; PowerFenceError naming the host and
    the field when it is not one."""
    where = f"{host}: yasco_fence_device"
    if not isinstance(spec, dict):
        raise PowerFenceError(f"{where}: expected a mapping with agent, address, username "
                              f"and password, got {type(spec).__name__}")
    known = {f.name for f in dataclasses.fields(FenceDevice)} - {"host"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise PowerFenceError(f"{where}: unknown field(s) {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(known))}")
    missing = [name for name in ("agent", "address", "username", "password")
               if spec.get(name) in (None, "")]
    if missing:
        raise PowerFenceError(f"{where}: {', '.join(missing)} missing")
    if spec["agent"] not in AGENTS:
        raise PowerFenceError(f"{where}.agent: {spec['agent']!r} is not one of "
                              f"{', '.join(AGENTS)}")
    try:
        port = None if spec.get("port") in (None, "") else int(spec["port"])
        cipher = None if spec.get("cipher") in (None, "") else int(spec["cipher"])
    except (TypeError, ValueError):
        raise PowerFenceError(f"{where}: port and cipher must be whole numbers") from None
    if port is not None and not 0 < port < 65536:
        raise PowerFenceError(f"{where}.port: {port} is not a port number")
    broken = sorted(name for name, value in spec.items()
                    if isinstance(value, str) and ("\n" in value or "\r" in value))
    if broken:
        raise PowerFenceError(f"{where}: {', '.join(broken)} must not hold a line break")
    if spec.get("privlvl") not in (None, "", *PRIVILEGES):
        raise PowerFenceError(f"{where}.privlvl: {spec['privlvl']!r} is not one of "
                              f"{', '.join(PRIVILEGES)}")
    return FenceDevice(host=host, agent=spec["agent"], address=str(spec["address"]),
                       username=str(spec["username"]), password=str(spec["password"]),
                       port=port, lanplus=bool(spec.get("lanplus", True)), cipher=cipher,
                       systems_uri=spec.get("systems_uri"), privlvl=spec.get("privlvl") or None,
                       ssl_insecure=bool(spec.get("ssl_insecure", False)))


def _run(dev: FenceDevice, action: str, timeout: float) -> subprocess.CompletedProcess[str]:
    binary = shutil.which(AGENTS[dev.agent]) or shutil.which(AGENTS[dev.agent],
                                                             path="/usr/sbin:/sbin")
    if binary is None:
        raise PowerFenceError(f"{AGENTS[dev.agent]} is not installed: install Debian's "
                              "fence-agents (and ipmitool for IPMI) on the controller")
    try:
        # The agent retries on its own; the wall-clock bound is for a hung one.
        return subprocess.run([binary], input=dev.options(action, timeout), text=True,
                              capture_output=True, timeout=2 * timeout + 30, check=False)
    except subprocess.TimeoutExpired:
        raise PowerFenceError(f"{dev.where}: {AGENTS[dev.agent]} {action} did not finish "
                              f"within {2 * timeout + 30:.0f} s") from None
    except OSError as err:
        raise PowerFenceError(f"{AGENTS[dev.agent]} did not run: {err}") from None


def _reason(done: subprocess.CompletedProcess[str]) -> str:
    """The agent's own words: its ERROR lines, else the last thing it printed."""
    lines = [line for line in (done.stderr + done.stdout).splitlines()
             if line.strip() and "DeprecationWarning" not in line
             and not line.strip().startswith("from ")]
    errors = [line.split("ERROR:", 1)[1].strip() for line in lines if "ERROR:" in line]
    return "; ".join(errors) or (lines[-1].strip() if lines else f"exit {done.returncode}")


def power_state(dev: FenceDevice, timeout: float = 20) -> str:
    """`on` or `off`, as the BMC reports it."""
    done = _run(dev, "status", timeout)
    # Off is what lets the VMs start elsewhere: the agent must say it in words too.
    said = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode == 0 and said[0] == "Status: ON":
        return "on"
    if done.returncode == 2 and said[0] == "Status: OFF":
        return "off"
    raise PowerFenceError(f"{dev.where} did not say whether the host is on: "
                          f"{_reason(done)}; check the address, the credentials and that "
                          "the BMC answers")


def set_power(dev: FenceDevice, state: str, timeout: float = 20,
              check: bool = False) -> dict[str, Any]:
    """Power the host `state` (on or off) and confirm it with the BMC; what was done
    (with `check`, what would be): `before`, `power` (now), `changed` and `seconds`."""
    if state not in STATES:
        raise PowerFenceError(f"state: {state!r} is not one of {', '.join(STATES)}")
    started = time.monotonic()
    before = power_state(dev, timeout)
    if before != state and not check:
        done = _run(dev, state, timeout)
        if done.returncode != 0:
            raise PowerFenceError(f"{dev.where} did not power the host {state}: "
                                  f"{_reason(done)}")
        now = power_state(dev, timeout)
        if now != state:
            raise PowerFenceError(f"{dev.where} accepted power {state}, but reports the "
                                  f"host {now}")
    return {"before": before, "power": state, "changed": before != state,
            "seconds": round(time.monotonic() - started, 3)}


POLICIES = ("require", "prefer", "none")


def outcome(failed: list[str], results: list[dict[str, Any]], policy: str,
            confirmed: list[str] | None = None) -> dict[str, Any]:
    """What an evacuation's power fencing came to, from the registered results of
    power_fence over the newly failed hosts that have a BMC (each result's `item` is
    the host): `powered_off`, the hosts their BMCs confirmed off; `confirmed`, those
    an operator confirmed off instead (their BMC lost power with them, say);
    `errors`, why the others were not; and, with `require`, `refused`: every failed
    host confirmed off neither way, with why, for which nothing may be fenced or
    started."""
    if policy not in POLICIES:
        raise PowerFenceError(f"yasco_power_fence: {policy!r} is not one of "
                              f"{', '.join(POLICIES)}")
    by_host = {result.get("item"): result for result in results or []}
    powered_off, errors, refused, by_hand = [], [], [], []
    for host in sorted(failed or []):
        result = by_host.get(host)
        if result is not None and result.get("power") == "off":
            powered_off.append(host)
            continue
        if host in (confirmed or []):
            by_hand.append(host)
            continue
        if result is None:
            why = "no yasco_fence_device"
        else:
            why = result.get("msg") or "the BMC did not report it off"
            errors.append(why if why.startswith(f"{host}'s BMC") else f"{host}: {why}")
        if policy == "require":
            refused.append(f"{host} not confirmed off ({why})")
    return {"powered_off": powered_off, "confirmed": by_hand, "errors": errors,
            "refused": refused}
