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
    assert "which the inventory does not know" in body["subject"], body
    assert "VM { { 6 * 7 }}, which" in body["subject"], body
    assert f"{{ {{ lookup('pipe', 'touch {pwned}') }}}}" in body["lines"], body
    (mail,) = mailbox.messages
    assert "which the inventory does not know" in str(make_header(decode_header(mail["Subject"])))
    assert not any("{{" in line for line in body["lines"]), body

