"""A compromised hypervisor against the controller, through the real HA watcher:
ansible-rulebook runs rulebooks/ha.yml against a real etcd, with notifications
configured as production has them (a webhook and a mail server, where the watcher's
events get templated). What root on hv1 writes with its agent's etcd user, which may
write every key of its host, names a VM and gives a reason that are Jinja templates;
the playbooks the watcher runs must run none of it (module_utils/cluster/untrusted.py),
and still tell the operators what was written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from email.header import decode_header, make_header
from pathlib import Path

import yaml
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Message
from yasco_lab.inbox import Inbox

from ansible_collections.yasco.cluster.plugins.module_utils.adapters import etcd_keys

from .conftest import ROOT, free_port, wait_for

BIN = Path(sys.executable).parent
# ansible-rulebook's JVM, then a playbook: slow on a loaded machine.
WAIT = 180.0


class Mailbox(Message):
    """An SMTP server on a free port, keeping the messages it took."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list = []
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def handle_message(self, message) -> None:
        self.messages.append(message)


def watcher_env() -> dict[str, str]:
    jvms = sorted(Path("/usr/lib/jvm").glob("java-17-openjdk-*"))
    return {**os.environ, "JAVA_HOME": str(jvms[-1]), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def test_a_template_written_by_a_hypervisor_runs_nothing_on_the_controller(etcd, tmp_path):
    cluster = f"t{uuid.uuid4().hex[:10]}"
    pwned = tmp_path / "pwned"
    attack = f"{{{{ lookup('pipe', 'touch {pwned}') }}}}"
    receiver, mailbox = Inbox(), Mailbox()
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {"localhost": {"ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable}},
        "vars": {"yasco_cluster_name": cluster, "yasco_etcd_endpoints": [etcd.url],
                 "yasco_vms": {"web": {"kind": "ha"}},
                 "yasco_notify_webhooks": [{"url": receiver.url + "/yasco"}],
                 "yasco_notify_mail": {"host": "127.0.0.1", "port": mailbox.port,
                                       "secure": "never", "from": "yasco@example.com",
                                       "to": ["ops@example.com"]}}}}))
    variables = tmp_path / "vars.yml"
    variables.write_text(yaml.safe_dump({"yasco_etcd_endpoints": [etcd.url],
                                         "yasco_cluster_name": cluster}))
    log = tmp_path / "watcher.log"
    with open(log, "w") as out:
        watcher = subprocess.Popen(  # pylint: disable=consider-using-with
            [str(BIN / "ansible-rulebook"), "-i", str(inventory), "--rulebook",
             str(ROOT / "rulebooks" / "ha.yml"), "--vars", str(variables)],
            cwd=tmp_path, env=watcher_env(), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        with etcd.client() as hv1:
            assert wait_for(lambda: hv1.get(etcd_keys.watchers_leader_key(cluster=cluster)),
                            WAIT), log.read_text(errors="replace")[-3000:]
            # What hv1's agent writes as it restarts a VM in place: the VM's name is the
            # key's last part, its reason free text.
            hv1.put_json(etcd_keys.restart_key("hv1", "{{ 6 * 7 }}", cluster=cluster),
                         {"state": "restarted", "reason": attack, "count": 1})
        assert wait_for(lambda: receiver.received and mailbox.messages, WAIT), (
            log.read_text(errors="replace")[-5000:])
    finally:
        os.killpg(watcher.pid, signal.SIGTERM)
        watcher.wait(30)
        receiver.close()
        mailbox.controller.stop()
    assert not pwned.exists(), "a template written by hv1 ran on the controller"
    (message,) = receiver.received
    body = message["body"]
    assert body["event"] == "vm_restarted"
    # Told as written, never as an HA VM of the inventory, and inert.
    assert body["subject"] == (f"{cluster}: VM {{ {{ 6 * 7 }}}}, which the inventory does not "
                               "know, restarted in place on hv1 by its agent"), body
    assert f"{{ {{ lookup('pipe', 'touch {pwned}') }}}}" in body["lines"], body
    (mail,) = mailbox.messages
    assert "which the inventory does not know" in str(make_header(decode_header(mail["Subject"])))
    assert not any("{{" in line for line in body["lines"]), body


def test_what_the_inventory_plugin_the_lookup_and_a_module_read_of_a_hypervisor_runs_nothing(
        etcd, tmp_path):
    """The other ways a hypervisor's word enters a playbook: the etcd inventory plugin's
    host variables, the etcd lookup and etcd_key_info's result. Each is text ansible-core
    never renders, however a playbook uses it."""
    cluster = f"t{uuid.uuid4().hex[:10]}"
    pwned = tmp_path / "pwned"
    attack = f"{{{{ lookup('pipe', 'touch {pwned}') }}}}"
    key = etcd_keys.registered_key("hv1", cluster=cluster)
    with etcd.client() as hv1:
        hv1.put_json(key, {"address": "10.0.0.11", "note": attack})
        hv1.put_json(etcd_keys.alive_key("hv1", cluster=cluster), {"host": "hv1"})
    source = tmp_path / "cluster.etcd.yml"
    source.write_text(yaml.safe_dump({"plugin": "yasco.cluster.etcd", "cluster": cluster,
                                      "endpoints": [etcd.url]}))
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Use what hv1 wrote", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "said": "{{ hostvars['hv1'].yasco_registered.note }}"},
        "tasks": [
            {"name": "Read it", "yasco.cluster.etcd_key_info": {
                "key": key, "endpoints": [etcd.url]}, "register": "read"},
            {"name": "Keep it", "ansible.builtin.set_fact": {
                "kept": "{{ (read.value | from_json).note }}"}},
            {"name": "Show it", "ansible.builtin.debug": {"msg": [
                "{{ said }}", "{{ kept }}",
                f"{{{{ (lookup('yasco.cluster.etcd', '{key}', endpoints=['{etcd.url}'])"
                " | from_json).note }}"]}}]}]))
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(source), "-i", "localhost,", str(play)],
        cwd=tmp_path, env={**watcher_env(), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"},
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not pwned.exists(), "a template written by hv1 ran on the controller"
    assert done.stdout.count(f"touch {pwned}") == 3, done.stdout
