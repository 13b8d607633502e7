"""rulebooks/ha_controller.yml, the HA watcher for an EDA controller activation, run
for real, and a controller installed as production installs one (scripts/controller:
no lab, no checkout on its paths) running what AWX would.

ansible-rulebook runs the rulebook with the real event source against the lab and
launches job templates on a local server that answers the part of AWX's API that
`run_job_template` uses and records each launch (yasco_lab.inbox.ControllerInbox).
A host crashes, comes back and is put into maintenance: each time the right template
is launched once, with the variables its playbook reads. Then the test does what AWX
would do with each launch: it runs the template's playbook, by its name in the
installed collection, with the launch's extra variables, from the controller install.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys
from yasco_lab import hypervisor, layout
from yasco_lab.credentials import etcd_client
from yasco_lab.inbox import ControllerInbox

from ..ansible_run import ROOT, run_playbook
from .conftest import yasco_lab
from .lab_cluster import (
    make_inventory, records, start_watcher, stop_watcher, wait_for, wait_until_one_leads)

pytestmark = pytest.mark.controller_install

# The job templates awx_configure.yml creates, and the playbook each runs.
PLAYBOOKS = {"YASCO evacuate": "evacuate", "YASCO return home": "return_home",
             "YASCO drain": "drain", "YASCO recover VM": "recover_vm",
             "YASCO notify": "notify", "YASCO fence check": "fence_check"}
HOLD_DOWN = 5  # seconds a returned host must stay up before it is brought home
# The lease's expiry, the watcher's settle and a loaded machine.
DOWN_WITHIN = hypervisor.AGENT_TTL + 30


@pytest.fixture(name="installed", scope="module")
def fixture_installed(controller_install) -> dict:
    """A controller installed by scripts/controller, and the inventory it runs with."""
    return {"prefix": controller_install}


@pytest.fixture(name="controller")
def fixture_controller(lab, installed, tmp_path):
    """A recording controller, the watcher running the controller's rulebook at it,
    and a VDM planned by the controller install for an inventory with no VMs."""
    inbox = ControllerInbox(list(PLAYBOOKS))
    inventory = make_inventory(lab, tmp_path / "inventory", {})
    settings = inventory / "group_vars" / "all" / "lab.yml"
    settings.write_text(yaml.safe_dump({**yaml.safe_load(settings.read_text()),
                                        "yasco_return_hold_down": HOLD_DOWN}))
    installed["inventory"] = inventory
    as_awx(installed, "plan")
    watcher = start_watcher(inventory, tmp_path / "watcher.log", 0,
                            "--rulebook", "rulebooks/ha_controller.yml",
                            "--controller-url", inbox.url, "--controller-token", "lab",
                            "--controller-ssl-verify", "no")
    try:
        wait_until_one_leads(lab, [watcher])
        yield inbox
    finally:
        stop_watcher(watcher)
        inbox.close()
        print("\n" + (tmp_path / "watcher.log").read_text(errors="replace")[-3000:])


def launched(inbox: ControllerInbox, template: str, within: float) -> list[dict]:
    return wait_for(f"{template!r} launched", lambda: inbox.launched(template), within,
                    every=0.5)


def ours(extra_vars: dict) -> dict:
    """The rulebook's variables, without what ansible-rulebook adds (`ansible_eda`)."""
    assert extra_vars["ansible_eda"]["ruleset"] == "YASCO HA watcher (EDA controller)"
    return {k: v for k, v in extra_vars.items() if k != "ansible_eda"}


def as_awx(installed: dict, playbook: str, extra_vars: dict | None = None) -> list[dict]:
    """Run the collection's `playbook` from the controller install, as a job template
    runs it: by name, on the site's inventory, with the launch's extra variables."""
    rc, results = run_playbook(f"yasco.cluster.{playbook}", str(installed["inventory"]),
                               extra_vars=extra_vars, controller=installed["prefix"])
    assert rc == 0, [r.get("msg") for r in results if r.get("failed")]
    return results


def fenced(lab, host: str) -> bool:
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        return etcd.get(etcd_keys.fence_key(host, cluster=layout.CLUSTER_NAME)) is not None


def test_the_controllers_rulebook_launches_evacuate_return_home_and_drain_once(
        lab, installed, controller):
    # A host no VM is recorded on: its evacuation fences it and starts nothing, and
    # leaves no VM down for the tests after this one.
    busy = {record.get("host") for record in records(lab).values()}
    host = next((h["name"] for h in reversed(lab["hosts"]) if h["name"] not in busy), None)
    assert host, f"every lab host has VMs recorded on it ({sorted(busy)}): a test before " \
        "this one left VMs behind"
    yasco_lab("crash", host)
    try:
        (evacuate,) = launched(controller, "YASCO evacuate", DOWN_WITHIN)
        assert ours(evacuate) == {"yasco_failed_hosts": [host]}
        as_awx(installed, PLAYBOOKS["YASCO evacuate"], evacuate)
        assert fenced(lab, host)
    finally:
        yasco_lab("boot", host)

    (home,) = launched(controller, "YASCO return home", 60 + HOLD_DOWN)
    assert ours(home) == {"yasco_host": host}
    as_awx(installed, PLAYBOOKS["YASCO return home"], home)
    assert not fenced(lab, host)

    key = etcd_keys.maintenance_key(host, cluster=layout.CLUSTER_NAME)
    with etcd_client(lab["etcd_endpoints"]) as etcd:
        etcd.put(key, '{"by": "operator", "reason": "firmware update"}')
    try:
        (drain,) = launched(controller, "YASCO drain", 30)
        # The reason stays in etcd, where the drain reads it: the watcher hands on no
        # text a hypervisor may have written as an extra variable.
        assert ours(drain) == {"yasco_host": host}
        as_awx(installed, PLAYBOOKS["YASCO drain"], drain)
    finally:
        as_awx(installed, "undrain", {"yasco_host": host})
    # Once each: nothing else was asked of the controller for that host.
    assert [launch["template"] for launch in controller.launches][:3] == [
        "YASCO evacuate", "YASCO return home", "YASCO drain"], controller.launches
    assert len(controller.launched("YASCO evacuate")) == 1
    # The install reads the cluster as the checkout does: every host up, none fenced.
    (status,) = [r for r in as_awx(installed, "status") if "hypervisors" in r]
    assert all(h["alive"] and not h.get("fenced") for h in status["hypervisors"]), status


def test_the_controller_install_holds_nothing_of_the_lab_or_the_tests(installed):
    listed = subprocess.run([str(installed["prefix"] / "venv" / "bin" / "pip"), "list",
                             "--format=freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert {"ansible", "ansible-rulebook", "etcd3gw", "ortools"} <= names
    assert not names & {"yasco-lab", "pyghmi", "pytest", "molecule", "ansible-lint",
                        "hypothesis", "aiosmtpd"}, names
    packages = (ROOT / "scripts" / "controller").read_text()
    for lab_only in ("ceph-osd", "ceph-mon", "qemu-system", "libvirt-daemon", "linux-image",
                     "chromium", "etcd-server"):
        assert lab_only not in packages, lab_only
