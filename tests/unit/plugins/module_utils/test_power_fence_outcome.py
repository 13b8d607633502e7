"""What an evacuation's power fencing came to, by policy (power_fence.outcome): the
decision evacuate.yml takes before it fences or starts anything."""

from __future__ import annotations

import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.power_fence import (
    PowerFenceError, outcome)

OFF = {"item": "hv1", "power": "off", "changed": True}
DOWN = {"item": "hv2", "failed": True,
        "msg": "hv2's BMC at 10.0.9.12:623 did not say whether the host is on: timed out"}


def test_require_refuses_every_failed_host_not_confirmed_off_and_says_why():
    result = outcome(["hv3", "hv1", "hv2"], [OFF, DOWN], "require")
    assert result == {
        "powered_off": ["hv1"], "confirmed": [],
        "errors": [DOWN["msg"]],
        "refused": [f"hv2 not confirmed off ({DOWN['msg']})",
                    "hv3 not confirmed off (no yasco_fence_device)"]}


def test_prefer_carries_on_and_names_the_hosts_that_were_not_powered_off():
    result = outcome(["hv1", "hv2", "hv3"], [OFF, DOWN], "prefer")
    assert result == {"powered_off": ["hv1"], "confirmed": [], "errors": [DOWN["msg"]],
                      "refused": []}


def test_none_powers_nothing_and_refuses_nothing():
    assert outcome(["hv1"], [], "none") == {"powered_off": [], "confirmed": [], "errors": [],
                                            "refused": []}


def test_a_host_its_bmc_reports_still_on_is_not_powered_off():
    result = outcome(["hv1"], [{"item": "hv1", "power": "on"}], "require")
    assert result["powered_off"] == [] and result["errors"] == [
        "hv1: the BMC did not report it off"]
    assert result["refused"] == ["hv1 not confirmed off (the BMC did not report it off)"]


def test_a_policy_that_is_not_one_is_refused_naming_the_variable():
    with pytest.raises(PowerFenceError, match="yasco_power_fence: 'always' is not one of "
                                              "require, prefer, none"):
        outcome(["hv1"], [], "always")


def test_a_host_the_operator_confirmed_off_counts_as_off_when_its_bmc_cannot_say():
    result = outcome(["hv2", "hv3"], [DOWN], "require", confirmed=["hv2", "hv3"])
    assert result == {"powered_off": [], "confirmed": ["hv2", "hv3"], "errors": [],
                      "refused": []}
