"""A BMC as the inventory gives it (power_fence.device), and what its fence agent reads
on standard input. The agents themselves run against IPMI BMCs in
tests/playbooks/test_power_fence.py and on the lab."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.power_fence import (
    PowerFenceError, device)

IPMI = {"agent": "ipmilan", "address": "10.0.9.11", "username": "fence", "password": "pw"}


def test_the_agent_reads_every_option_and_the_password_on_its_standard_input():
    dev = device("hv1", {**IPMI, "cipher": 3, "privlvl": "operator"})
    options = dict(line.split("=", 1) for line in dev.options("off", 20).splitlines())
    # Each value quoted: the agent strips one pair of quotes, and keeps the rest.
    assert options == {"action": '"off"', "ip": '"10.0.9.11"', "username": '"fence"',
                       "password": '"pw"', "ipport": '"623"', "power_timeout": '"20"',
                       "login_timeout": '"10"', "lanplus": '"1"', "cipher": '"3"',
                       "privlvl": '"operator"'}
    assert "pw" not in repr(dev)
    assert dev.where == "hv1's BMC at 10.0.9.11:623"


def test_a_redfish_bmc_names_its_system_and_may_skip_the_certificate_check():
    dev = device("hv2", {**IPMI, "agent": "redfish", "port": 8443,
                         "systems_uri": "/redfish/v1/Systems/1", "ssl_insecure": True})
    options = {name: value.strip('"') for name, value in (
        line.split("=", 1) for line in dev.options("status", 5).splitlines())}
    assert (options["ipport"], options["ssl"], options["ssl_insecure"],
            options["systems_uri"]) == ("8443", "1", "1", "/redfish/v1/Systems/1")
    assert "lanplus" not in options


@pytest.mark.parametrize(("spec", "error"), [
    ({**IPMI, "agent": "ilo"},
     "hv1: yasco_fence_device.agent: 'ilo' is not one of ipmilan, redfish"),
    ({k: v for k, v in IPMI.items() if k != "password"}, "hv1: yasco_fence_device: password missing"),
    ({**IPMI, "adress": "x"}, "hv1: yasco_fence_device: unknown field(s) adress; known: "),
    ({**IPMI, "port": 70000}, "hv1: yasco_fence_device.port: 70000 is not a port number"),
    ({**IPMI, "port": "six"}, "hv1: yasco_fence_device: port and cipher must be whole numbers"),
    ("10.0.9.11", "hv1: yasco_fence_device: expected a mapping with agent, address, "),
    # A line break would start an option of its own on the agent's standard input.
    ({**IPMI, "password": "pw\nipmitool_path=/bin/true"},
     "hv1: yasco_fence_device: password must not hold a line break"),
    ({**IPMI, "privlvl": "root"}, "hv1: yasco_fence_device.privlvl: 'root' is not one of "),
])
def test_a_device_that_is_not_one_is_refused_naming_the_host_and_the_field(spec, error):
    with pytest.raises(PowerFenceError) as raised:
        device("hv1", spec)
    assert str(raised.value).startswith(error)
