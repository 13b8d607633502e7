"""libvirt_domain against libvirt's built-in test driver (test:///default): a real
libvirt, in memory, with no hypervisor. The driver keeps its state while one
connection stays open, so each test holds one and runs the module's logic in-process;
a few tests run the module itself through ansible-playbook."""

from __future__ import annotations

import copy

import libvirt
import pytest

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import libvirt as lv
from ansible_collections.yasco.cluster.plugins.module_utils.adapters.libvirt_xml import (
    GUEST_AGENT_CHANNEL, domain_summary, render_domain_xml)
from ansible_collections.yasco.cluster.plugins.module_utils.resources.libvirt_domain import (
    DomainRun)

from ....ansible_run import local_play, run_playbook

URI = "test:///default"
DISK = {"rbd": None, "file": "/var/lib/images/vm1.img", "device": "disk", "format": "raw",
        "monitors": [], "auth_user": None, "secret_uuid": None, "target": None, "bus": None,
        "cache": "none", "discard": None, "readonly": False}
RBD_DISK = {**DISK, "file": None, "rbd": "yasco/vm1", "monitors": ["10.0.0.2:6789"],
            "auth_user": "hypervisor", "secret_uuid": "5b3f0a6e-7a1c-4e0b-9d53-1f2ad0c0ffee"}
SPEC = {"vcpus": 1, "memory_mb": 128, "domain_type": "kvm", "machine": "pc", "kernel": None,
        "initrd": None, "cmdline": None, "disks": [DISK, RBD_DISK],
        "nics": [{"network": "default", "bridge": None, "mac": None, "model": "virtio"}],
        "serial_log": None}
# What a task gives: the module fills in the rest.
TASK_SPEC = {"vcpus": 1, "memory_mb": 64, "disks": [{"file": "/tmp/x.img"}]}


def params(**changes):
    base = {"uri": URI, "connect_timeout": 5.0, "name": "vm1", "state": "running",
            "spec": copy.deepcopy(SPEC), "xml": None, "autostart": False, "target_uri": None,
            "timeout": 5.0, "destroy_after_timeout": False}
    return {**base, **changes}


@pytest.fixture(autouse=True)
def operator_pythonpath(monkeypatch):
    """ansible-playbook runs as an operator runs it: ansible-test units puts a copy of
    ansible holding only module_utils on PYTHONPATH for module tests, with which
    ansible-playbook cannot start."""
    monkeypatch.delenv("PYTHONPATH", raising=False)


@pytest.fixture(name="conn")
def fixture_conn():
    conn = libvirt.open(URI)  # holds the driver's state for the test
    yield conn
    for dom in conn.listAllDomains():
        if dom.name() != "test":
            if dom.isActive():
                dom.destroy()
            dom.undefine()
    conn.close()


def run(check_mode=False, **changes):
    return DomainRun(params(**changes), check_mode).run()


def test_define_and_start_then_a_rerun_changes_nothing(conn):
    first = run()
    assert first["changed"] and first["actions"] == ["define", "start"]
    assert first["state"] == "running"
    dom = conn.lookupByName("vm1")
    assert dom.isActive() and dom.isPersistent() and not dom.autostart()
    assert "yasco/vm1" in first["xml"] and "10.0.0.2" in first["xml"]
    again = run()
    assert not again["changed"] and again["actions"] == []


def test_check_mode_reports_and_changes_nothing(conn):
    result = run(check_mode=True)
    assert result["changed"] and result["actions"] == ["define", "start"]
    assert result["state"] == "running"
    assert '"memory_mb": 128' in result["diff"]["after"]
    assert "vm1" not in [d.name() for d in conn.listAllDomains()]


def test_a_changed_spec_redefines_with_a_diff_and_keeps_uuid_and_mac(conn):
    run()
    dom = conn.lookupByName("vm1")
    uuid, mac = dom.UUIDString(), domain_summary(dom.XMLDesc(0))["nics"][0]["mac"]
    spec = copy.deepcopy(SPEC)
    spec["memory_mb"] = 256
    result = run(spec=spec)
    assert result["changed"] and result["actions"] == ["redefine"]
    assert result["pending_restart"] is True
    assert '"memory_mb": 128' in result["diff"]["before"]
    assert '"memory_mb": 256' in result["diff"]["after"]
    dom = conn.lookupByName("vm1")
    inactive = domain_summary(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    assert dom.UUIDString() == uuid and inactive["nics"][0]["mac"] == mac
    assert inactive["memory_mb"] == 256
    assert not run(spec=spec)["changed"]


def test_shutdown_destroyed_and_absent(conn):
    run()
    assert run(state="shutdown")["state"] == "shutoff"
    assert not run(state="shutdown")["changed"]
    run(state="running")
    destroyed = run(state="destroyed")
    assert destroyed["actions"] == ["destroy"] and destroyed["state"] == "shutoff"
    assert conn.lookupByName("vm1").isPersistent()
    gone = run(state="absent", spec=None)
    assert gone["actions"] == ["undefine"] and gone["state"] == "undefined"
    assert not run(state="absent", spec=None)["changed"]


def test_raw_xml_defines_and_is_compared_by_settings_not_text(conn):
    xml = render_domain_xml("vm1", SPEC)
    assert run(spec=None, xml=xml, state="present")["actions"] == ["define"]
    # libvirt's expanded XML of the same domain is no change.
    expanded = conn.lookupByName("vm1").XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert not run(spec=None, xml=expanded, state="present")["changed"]


def test_autostart_is_off_unless_asked_for(conn):
    run()
    assert run(autostart=True)["actions"] == ["autostart"]
    assert conn.lookupByName("vm1").autostart()
    assert not run(autostart=True)["changed"]


@pytest.mark.parametrize("changes, message", [
    ({"spec": None}, "domain vm1 is not defined on test:///default: give spec or xml"),
    ({"spec": None, "xml": "<domain><name>other</name></domain>"},
     "xml names the domain 'other', not 'vm1'"),
    ({"spec": None, "xml": "<domain"}, "domain XML: not valid XML"),
    ({"uri": "nonsense:///x"}, "libvirt at nonsense:///x: cannot connect"),
    ({"uri": "qemu+libssh://root@127.0.0.1:1/system"},
     "libvirt at qemu+libssh://root@127.0.0.1:1/system: 127.0.0.1:1 unreachable"),
    ({"target_uri": URI, "state": "absent"}, "target_uri cannot be combined with state=absent"),
    ({"target_uri": URI, "name": "nowhere"}, "defined on neither"),
])
def test_bad_input_is_named(conn, changes, message):
    with pytest.raises(lv.LibvirtAdapterError) as err:
        run(**changes)
    assert message in str(err.value)


def test_a_domain_running_on_both_hosts_is_refused(conn):
    # test:///default is one host seen through two URIs: the domain runs "on both".
    run()
    with pytest.raises(lv.LibvirtAdapterError, match="running on both"):
        run(target_uri=URI)
    assert conn.lookupByName("vm1").isActive()


# -- through ansible-playbook ---------------------------------------------------

def test_the_module_reports_in_check_mode_and_validates_its_spec(tmp_path):
    define = {"yasco.cluster.libvirt_domain": {
        "uri": URI, "name": "vm2", "state": "running",
        "spec": TASK_SPEC}}
    bad = {"yasco.cluster.libvirt_domain": {
        "uri": URI, "name": "vm3", "spec": {"vcpus": 1, "memory_mb": 64, "disks": [{}]}},
        "ignore_errors": True}
    existing = {"yasco.cluster.libvirt_domain": {"uri": URI, "name": "test",
                                                 "state": "running"}}
    rc, (checked, invalid, running) = run_playbook(
        local_play({"name": "define", **define}, {"name": "bad", **bad},
                   {"name": "existing", **existing}, check=True), tmp_path=tmp_path)
    assert rc == 0
    assert checked["changed"] and checked["actions"] == ["define", "start"]
    assert invalid["failed"]
    assert "one of the following is required: rbd, file" in invalid["msg"]
    assert "spec -> disks" in invalid["msg"]
    assert not running["changed"] and running["state"] == "running"


def test_module_defaults_set_the_uri_for_the_action_group(tmp_path):
    task = {"name": "existing", "yasco.cluster.libvirt_domain": {"name": "test",
                                                                 "state": "running"}}
    rc, (result,) = run_playbook(local_play(
        task, module_defaults={"group/yasco.cluster.libvirt": {"uri": URI}}),
        tmp_path=tmp_path)
    assert rc == 0 and result["uri"] == URI and result["state"] == "running"


def test_a_batch_runs_each_domain_on_one_connection_and_reports_each(tmp_path):
    # test:///default starts afresh on every connection, so the second vm2 changing
    # nothing shows the batch shares one connection, and that it is idempotent.
    batch = {"name": "batch", "diff": True, "yasco.cluster.libvirt_domain": {
        "uri": URI, "state": "running",
        "domains": [{"name": "vm2", "spec": TASK_SPEC}, {"name": "vm2", "spec": TASK_SPEC},
                    {"name": "test", "state": "destroyed"}]}}
    rc, (result,) = run_playbook(local_play(batch), tmp_path=tmp_path)
    assert rc == 0, result
    assert result["changed"] is True
    assert [(r["name"], r["changed"], r["actions"], r["state"]) for r in result["results"]] \
        == [("vm2", True, ["define", "start"], "running"), ("vm2", False, [], "running"),
            ("test", True, ["destroy"], "shutoff")]
    assert [d["before_header"] for d in result["diff"]] == ["vm2", "test"]


def test_a_bad_element_fails_the_batch_naming_it_before_anything_is_done(tmp_path):
    batch = {"name": "batch", "ignore_errors": True, "yasco.cluster.libvirt_domain": {
        "uri": URI, "state": "destroyed",
        "domains": [{"name": "test"}, {"name": "vm3", "spec": {"vcpus": 1}},
                    {"spec": {"vcpus": 1, "memory_mb": 64}}]}}
    both = {"name": "both", "ignore_errors": True, "yasco.cluster.libvirt_domain": {
        "uri": URI, "name": "test", "domains": [{"name": "test"}]}}
    rc, (bad, mixed) = run_playbook(local_play(batch, both), tmp_path=tmp_path)
    assert rc == 0
    assert bad["failed"] and "results" not in bad
    assert bad["msg"] == ("domains[1] (vm3): missing required arguments: memory_mb found "
                          "in spec")
    assert mixed["msg"] == "parameters are mutually exclusive: name|domains"


def test_the_vm_kind_is_kept_in_the_domain_metadata_and_compared(conn):
    run(spec={**copy.deepcopy(SPEC), "kind": "ha"})
    dom = conn.lookupByName("vm1")
    assert lv.domain_kind(dom) == "ha"
    assert domain_summary(dom.XMLDesc())["kind"] == "ha"
    assert not run(spec={**copy.deepcopy(SPEC), "kind": "ha"})["changed"]
    changed = run(spec={**copy.deepcopy(SPEC), "kind": "plain"})
    # The running domain takes the new kind at once, for the self-fence.
    assert changed["actions"] == ["redefine", "set kind"]
    assert '"kind": "plain"' in changed["diff"]["after"]
    assert lv.domain_kind(conn.lookupByName("vm1")) == "plain"
    assert lv.domain_kind(conn.lookupByName("test")) is None  # defined by someone else


def test_a_batch_that_keeps_going_tries_every_domain_and_names_each_failure(tmp_path):
    domains = [{"name": "vm2", "spec": TASK_SPEC}, {"name": "ghost"},
               {"name": "vm5", "spec": TASK_SPEC}, {"name": "vm6", "spec": TASK_SPEC}]
    going = {"name": "going", "ignore_errors": True, "yasco.cluster.libvirt_domain": {
        "uri": URI, "state": "running", "keep_going": True, "domains": domains}}
    stopping = {"name": "stopping", "ignore_errors": True, "yasco.cluster.libvirt_domain": {
        "uri": URI, "state": "running", "domains": domains}}
    rc, (kept_going, stopped) = run_playbook(local_play(going, stopping), tmp_path=tmp_path)
    assert rc == 0
    assert kept_going["failed"] and kept_going["msg"].startswith("name ghost: ")
    assert [(r["name"], r.get("state"), bool(r.get("failed"))) for r in kept_going["results"]] \
        == [("vm2", "running", False), ("ghost", None, True), ("vm5", "running", False),
            ("vm6", "running", False)]
    # Without keep_going, the first failure stops the batch: vm5 and vm6 are not tried.
    assert stopped["failed"] and stopped["name"] == "ghost"
    assert [r["name"] for r in stopped["results"]] == ["vm2"]


def test_a_parallel_batch_runs_every_domain_and_returns_them_in_order(tmp_path):
    names = [f"vm{i}" for i in range(2, 9)]
    domains = [{"name": name, "spec": TASK_SPEC} for name in names]
    domains.insert(3, {"name": "ghost"})
    parallel = {"name": "parallel", "ignore_errors": True, "yasco.cluster.libvirt_domain": {
        "uri": URI, "state": "running", "keep_going": True, "parallel": 3,
        "domains": domains}}
    listed = {"name": "listed", "ansible.builtin.command": {
        "argv": ["virsh", "-c", URI, "list", "--name"]}}
    zero = {"name": "zero", "ignore_errors": True, "yasco.cluster.libvirt_domain": {
        "uri": URI, "state": "running", "parallel": 0, "domains": domains}}
    rc, (ran, dummy, refused) = run_playbook(local_play(parallel, listed, zero),
                                             tmp_path=tmp_path)
    assert rc == 0
    assert ran["failed"] and ran["msg"].startswith("name ghost: ")
    assert [(r["name"], r.get("state")) for r in ran["results"]] == [
        *[(name, "running") for name in names[:3]], ("ghost", None),
        *[(name, "running") for name in names[3:]]]
    assert all(r["actions"] == ["define", "start"] for r in ran["results"] if "actions" in r)
    assert refused["failed"] and refused["msg"] == "parallel: must be 1 or more, got 0"


def test_a_guest_that_shuts_down_in_time_is_not_destroyed(conn):
    run()
    done = run(state="shutdown", destroy_after_timeout=True, timeout=2.0)
    assert done["actions"] == ["shutdown"] and done["state"] == "shutoff"


def test_the_guest_agent_channel_is_defined_when_asked_for_and_compared(conn):
    run(spec={**SPEC, "guest_agent": True})
    xml = conn.lookupByName("vm1").XMLDesc(0)
    assert GUEST_AGENT_CHANNEL in xml
    assert domain_summary(xml)["guest_agent"] is True
    assert not run(spec={**SPEC, "guest_agent": True})["changed"]
    assert run(spec={**SPEC, "guest_agent": False})["pending_restart"]


def test_domain_info_tells_a_domain_without_an_agent_from_one_whose_agent_is_silent(conn):
    from ansible_collections.yasco.cluster.plugins.module_utils.resources.libvirt_guest import (
        DomainInfo)

    def info(**changes):
        base = {"uri": URI, "connect_timeout": 5.0, "name": None, "domains": None,
                "guest_agent": True}
        return DomainInfo({**base, **changes}, False).run()

    run()
    assert info(name="vm1")["domains"] == [
        {"name": "vm1", "uri": URI, "state": "running", "guest_agent": "no_channel"}]
    assert info(name="vm1")["no_agent"] == ["vm1"]
    run(state="shutdown")
    run(state="running", spec={**SPEC, "guest_agent": True})
    # The test driver has no guest agent to answer: one that may come up, not ready yet.
    silent = info(domains=[{"name": "vm1"}, {"name": "nothere"}])
    assert [d["guest_agent"] for d in silent["domains"]] == ["not_answering", "not_running"]
    assert silent["not_ready"] == ["vm1", "nothere"]
    assert silent["domains"][1]["state"] == "undefined"
    assert "guest_agent" not in info(name="vm1", guest_agent=False)["domains"][0]


def test_a_guest_that_panics_is_reset_in_place_unless_it_is_to_be_destroyed(conn):
    run()
    xml = conn.lookupByName("vm1").XMLDesc(0)
    assert "<on_crash>restart</on_crash>" in xml and "<panic model='isa'" in xml
    assert domain_summary(xml)["on_crash"] == "restart"
    assert not run()["changed"]
    destroyed = run(spec={**SPEC, "on_crash": "destroy"})
    assert destroyed["changed"] and destroyed["pending_restart"]
    xml = conn.lookupByName("vm1").XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert "<on_crash>destroy</on_crash>" in xml and "<panic model='isa'" in xml


def test_a_watchdog_device_is_defined_when_asked_for_and_compared(conn):
    run(spec={**SPEC, "watchdog": True})
    xml = conn.lookupByName("vm1").XMLDesc(0)
    assert "<watchdog model='i6300esb' action='reset'" in xml
    assert domain_summary(xml)["watchdog"] is True
    assert not run(spec={**SPEC, "watchdog": True})["changed"]
    assert run(spec={**SPEC, "watchdog": False})["pending_restart"]


def test_raw_xml_without_on_crash_is_libvirts_default_and_a_rerun_changes_nothing(conn):
    xml = ("<domain type='test'><name>vm1</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>"
           "<os><type>hvm</type></os></domain>")
    assert run(spec=None, xml=xml)["changed"]
    assert domain_summary(xml)["on_crash"] == "destroy"
    assert not run(spec=None, xml=xml)["changed"]
