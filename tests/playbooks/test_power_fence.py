"""Power fencing through a BMC (module yasco.cluster.power_fence, playbooks/power_fence.yml
and evacuate.yml's policy check): the real fence agent, fence_ipmilan over ipmitool,
against IPMI BMCs served by pyghmi (the lab's BMC server, here over machines whose
power is a file each). On the lab, tests/lab/test_ha.py fences a hung, partitioned
hypervisor through its BMC during an evacuation."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from yasco_lab import bmc

from ..ansible_run import ROOT, local_play, run_playbook


def free_udp_base() -> int:
    """A port base whose next two UDP ports (hv1's and hv2's BMC) are free."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1] - 1
        try:
            for n in (1, 2):
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.bind(("127.0.0.1", base + n))
            return base
        except OSError:
            continue


class Bmcs:
    """hv1's and hv2's BMCs on 127.0.0.1; `power(host)` reads a machine's power."""

    def __init__(self, root: Path) -> None:
        self.machines = root / "machines"
        self.machines.mkdir()
        self.password = "s3cret-bmc"
        (root / "password").write_text(self.password)
        self.log = root / "actions.jsonl"
        self.base = free_udp_base()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "yasco_lab.bmc", bmc.MARKER, "--files", self.machines,
             "--address", "127.0.0.1", "--password-file", root / "password",
             "--log", self.log, "--port-base", str(self.base), "hv1", "hv2"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert "BMCs of hv1, hv2" in self.process.stdout.readline()

    def device(self, host: str, **changes) -> dict:
        return {"agent": "ipmilan", "address": "127.0.0.1", "port": bmc.port(host, self.base),
                "username": bmc.USERNAME, "password": self.password, **changes}

    def power(self, host: str) -> str:
        path = self.machines / host
        return path.read_text() if path.exists() else "on"

    def actions(self) -> list[dict]:
        return ([json.loads(line) for line in self.log.read_text().splitlines()]
                if self.log.exists() else [])

    def inventory(self, root: Path, **vars_) -> str:
        path = root / "hosts.yml"
        path.write_text(yaml.safe_dump({"all": {"children": {"yasco_hypervisors": {
            "hosts": {h: {"yasco_fence_device": self.device(h)} for h in ("hv1", "hv2")},
            "vars": {"ansible_connection": "local",
                     "ansible_python_interpreter": sys.executable, **vars_}}}}}))
        return str(path)


@pytest.fixture(name="bmcs")
def fixture_bmcs(tmp_path) -> Iterator[Bmcs]:
    served = Bmcs(tmp_path)
    yield served
    served.process.kill()
    served.process.wait()


def fence(bmcs: Bmcs, tmp_path: Path, host: str = "hv1", check: bool = False,
          **options) -> dict:
    options = {"host": host, "device": bmcs.device(host), **options}
    task = {"yasco.cluster.power_fence": options, "register": "fenced"}
    code, results = run_playbook(local_play(task, check=check), "localhost,", "--diff",
                                 tmp_path=tmp_path)
    assert code in (0, 2)
    return results[0]


def test_a_host_is_powered_off_once_confirmed_and_a_rerun_changes_nothing(bmcs, tmp_path):
    first = fence(bmcs, tmp_path)
    assert (first["changed"], first["before"], first["power"]) == (True, "on", "off")
    assert first["diff"] == {"before": {"power": "on"}, "after": {"power": "off"}}
    assert bmcs.power("hv1") == "off" and bmcs.power("hv2") == "on"
    again = fence(bmcs, tmp_path)
    assert (again["changed"], again["before"], again["power"]) == (False, "off", "off")
    assert [(a["host"], a["action"]) for a in bmcs.actions()] == [("hv1", "off")]
    on = fence(bmcs, tmp_path, state="powered_on")
    assert (on["changed"], on["before"], on["power"]) == (True, "off", "on")
    assert bmcs.power("hv1") == "on"


def test_check_mode_reads_the_power_and_changes_nothing(bmcs, tmp_path):
    result = fence(bmcs, tmp_path, check=True)
    assert (result["changed"], result["before"], result["power"]) == (True, "on", "off")
    assert bmcs.power("hv1") == "on" and bmcs.actions() == []


def test_a_wrong_password_or_a_bmc_that_does_not_answer_is_named_and_changes_nothing(
        bmcs, tmp_path):
    wrong = {"yasco.cluster.power_fence": {
        "host": "hv1", "device": bmcs.device("hv1", password="not-it"), "timeout": 3}}
    code, results = run_playbook(local_play(wrong), "localhost,", tmp_path=tmp_path)
    assert code == 2 and results[0]["failed"]
    port = bmc.port("hv1", bmcs.base)
    assert results[0]["msg"].startswith(
        f"hv1's BMC at 127.0.0.1:{port} did not say whether the host is on: ")
    assert "check the address, the credentials and that the BMC answers" in results[0]["msg"]
    # The password is in no output.
    assert "not-it" not in str(results)
    bmcs.process.kill()
    bmcs.process.wait()
    started = time.monotonic()
    code, results = run_playbook(local_play({"yasco.cluster.power_fence": {
        "host": "hv1", "device": bmcs.device("hv1"), "timeout": 2}}), "localhost,",
        tmp_path=tmp_path)
    assert code == 2 and f"hv1's BMC at 127.0.0.1:{port}" in results[0]["msg"]
    assert time.monotonic() - started < 120
    assert bmcs.power("hv1") == "on"


def test_a_device_with_a_bad_field_is_refused_naming_it(bmcs, tmp_path):
    code, results = run_playbook(local_play({"yasco.cluster.power_fence": {
        "host": "hv2", "device": {**bmcs.device("hv2"), "agent": "ilo"}}}), "localhost,",
        tmp_path=tmp_path)
    assert code == 2 and "agent" in results[0]["msg"] and "ipmilan" in results[0]["msg"]
    assert bmcs.power("hv2") == "on"


def test_the_playbook_powers_a_host_by_its_inventory_bmc_and_names_the_choices(bmcs, tmp_path):
    inventory = bmcs.inventory(tmp_path)
    code, results = run_playbook(ROOT / "playbooks" / "power_fence.yml", inventory,
                                 extra_vars={"host": "hv2"})
    assert code == 0 and bmcs.power("hv2") == "off"
    assert [r for r in results if r.get("power")][0]["changed"]
    code, results = run_playbook(ROOT / "playbooks" / "power_fence.yml", inventory,
                                 extra_vars={"host": "hv2", "state": "powered_on"})
    assert code == 0 and bmcs.power("hv2") == "on"
    code, results = run_playbook(ROOT / "playbooks" / "power_fence.yml", inventory,
                                 extra_vars={"host": "hv9"})
    assert code == 2
    assert "Say which hypervisor: -e host=NAME, one of hv1, hv2" in results[0]["msg"]


def test_an_evacuation_refuses_a_power_fencing_policy_that_is_not_one(tmp_path):
    code, results = run_playbook(ROOT / "playbooks" / "evacuate.yml", "localhost,",
                                 extra_vars={"yasco_power_fence": "sometimes"})
    assert code == 2
    assert results[0]["msg"].startswith(
        "yasco_power_fence: sometimes is not one of require (no VM of a failed host")
