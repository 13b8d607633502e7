#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Power a hypervisor off or on through its BMC, and confirm it. The fence agents and
their errors belong to module_utils/adapters/power_fence.py."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: power_fence
short_description: Power a hypervisor off or on through its BMC, and confirm it
version_added: 0.1.0
description:
  - The power layer of fencing. The agent's self-fence, the host's watchdog and the
    Ceph blocklist each stop a failed host's VMs from writing; powering the host off
    through its BMC (IPMI or Redfish) also stops whatever else it runs, and holds
    when the layers before it did not act (a hung agent, a watchdog that never fired,
    a host that still has a Ceph client).
  - It runs Debian's fence agents, C(fence_ipmilan) or C(fence_redfish), as
    Pacemaker does. It reads the power state first, changes it only when it differs
    from O(state), and reads it again. The task succeeds only once the BMC reports
    the host in O(state).
  - C(playbooks/evacuate.yml) runs it for every failed hypervisor that has a
    C(yasco_fence_device), before it starts anything, as C(yasco_power_fence) says
    (V(require), V(prefer) or V(none)).
requirements:
  - fence-agents (Debian package) on the host the task runs on
  - ipmitool, for V(ipmilan)
author:
  - YASCO developers (@yasco)
options:
  host:
    description: The hypervisor, as the inventory names it; errors name it.
    type: str
    required: true
  state:
    description:
      - V(powered_off) powers the host off (a fence); V(powered_on) powers it on.
    type: str
    choices: [powered_off, powered_on]
    default: powered_off
  device:
    description: The host's BMC, as the inventory's C(yasco_fence_device) gives it.
    type: dict
    required: true
    suboptions:
      agent:
        description: The fence agent.
        type: str
        choices: [ipmilan, redfish]
        required: true
      address:
        description: The BMC's address, on the management network.
        type: str
        required: true
      port:
        description: The BMC's port; 623 for IPMI and 443 for Redfish when left out.
        type: int
      username:
        description: A BMC user allowed to control the power.
        type: str
        required: true
      password:
        description: Its password.
        type: str
        required: true
      lanplus:
        description: IPMI v2.0 (lanplus) rather than v1.5, for V(ipmilan).
        type: bool
        default: true
      cipher:
        description: The IPMI cipher suite, for V(ipmilan); the agent's default when left out.
        type: int
      privlvl:
        description:
          - The IPMI session's privilege level, for V(ipmilan). C(fence_ipmilan) asks
            for V(administrator) when left out; set V(operator) for a BMC user with
            the power-control privilege alone.
        type: str
        choices: [callback, user, operator, administrator]
      systems_uri:
        description: The Redfish system the BMC manages, for V(redfish).
        type: str
      ssl_insecure:
        description: Accept a Redfish BMC's certificate without checking it.
        type: bool
        default: false
  timeout:
    description:
      - Seconds the BMC gets to report the new power state; the agent retries within it.
    type: float
    default: 20
attributes:
  check_mode:
    details:
      - It reads the power state and says whether it would change it.
extends_documentation_fragment:
  - yasco.cluster.attributes
notes:
  - The password goes to the agent on its standard input, not on its command line;
    C(fence_ipmilan) hands it to C(ipmitool) with C(-P), which C(ipmitool) blanks as
    it starts.
seealso:
  - name: Pacemaker's fencing
    description: Why a cluster powers a failed node off before it recovers its resources.
    link: https://clusterlabs.org/pacemaker/doc/2.1/Pacemaker_Explained/html/fencing.html
"""

EXAMPLES = r"""
- name: Power hv3 off through its BMC, and confirm it is off
  yasco.cluster.power_fence:
    host: hv3
    device: "{{ hostvars['hv3'].yasco_fence_device }}"
    state: powered_off

- name: Power it on again once it has been looked at
  yasco.cluster.power_fence:
    host: hv3
    device:
      agent: redfish
      address: 10.0.9.13
      username: fence
      password: "{{ bmc_password }}"
      systems_uri: /redfish/v1/Systems/1
    state: powered_on
"""

RETURN = r"""
host:
  description: The hypervisor.
  returned: always
  type: str
  sample: hv3
before:
  description: The power state the BMC reported first, V(on) or V(off).
  returned: always
  type: str
  sample: "on"
power:
  description: The power state now, V(on) or V(off) (in check mode, what it would be).
  returned: always
  type: str
  sample: "off"
seconds:
  description: How long it took, BMC round trips included.
  returned: always
  type: float
  sample: 2.3
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.yasco.cluster.plugins.module_utils.adapters.power_fence import (
    PowerFenceError, device, set_power)

DEVICE_SPEC = {
    "agent": {"type": "str", "choices": ["ipmilan", "redfish"], "required": True},
    "address": {"type": "str", "required": True},
    "port": {"type": "int"},
    "username": {"type": "str", "required": True},
    "password": {"type": "str", "required": True, "no_log": True},
    "lanplus": {"type": "bool", "default": True},
    "cipher": {"type": "int"},
    "privlvl": {"type": "str", "choices": ["callback", "user", "operator", "administrator"]},
    "systems_uri": {"type": "str"},
    "ssl_insecure": {"type": "bool", "default": False},
}

ARGUMENT_SPEC = {
    "host": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["powered_off", "powered_on"],
              "default": "powered_off"},
    "device": {"type": "dict", "required": True, "options": DEVICE_SPEC},
    "timeout": {"type": "float", "default": 20.0},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    host, state = params["host"], params["state"].removeprefix("powered_")
    if params["timeout"] <= 0:
        module.fail_json(msg=f"timeout: must be a positive number of seconds, got "
                             f"{params['timeout']}", host=host)
    try:
        dev = device(host, {k: v for k, v in params["device"].items() if v is not None})
        result = set_power(dev, state, params["timeout"], check=module.check_mode)
    except PowerFenceError as err:
        module.fail_json(msg=str(err), host=host)
    module.exit_json(host=host, diff={"before": {"power": result["before"]},
                                      "after": {"power": result["power"]}}, **result)


if __name__ == "__main__":
    main()
