"""HA notifications (role yasco.cluster.notify): one message per action to every
webhook the inventory names, as JSON or as Slack-style text, and by mail; headers and
passwords sent but never logged, and a webhook or mail server that is down reported
by name without failing the action. playbooks/notify.yml turns the watcher's etcd
events into notifications. Against a real HTTP receiver and a real SMTP server
(aiosmtpd) started here; on the lab, tests/lab/test_ha.py checks the notifications of
an evacuation, a return home, a drain and the reconciler's restarts."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from email.header import decode_header, make_header
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Message
from aiosmtpd.smtp import AuthResult
from yasco_lab.inbox import Inbox

from ..ansible_run import BIN, ROOT, run_playbook
from ..etcd.conftest import closed_port_url, free_port


@pytest.fixture(name="receiver")
def fixture_receiver() -> Iterator[Inbox]:
    receiver = Inbox()
    yield receiver
    receiver.close()


class Mailbox(Message):
    """An SMTP server on a free port; the messages it took, as email.message objects."""

    def __init__(self, **options) -> None:
        super().__init__()
        self.messages = []
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, **options)
        self.controller.start()

    def handle_message(self, message) -> None:
        self.messages.append(message)


@pytest.fixture(name="mailbox")
def fixture_mailbox() -> Iterator[Mailbox]:
    mailbox = Mailbox()
    yield mailbox
    mailbox.controller.stop()


def notify(tmp_path, webhooks: list[dict], mail: dict | None = None) -> tuple[int, list[dict]]:
    play = [{"name": "Notify", "hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": {"yasco_cluster_name": "prod", "yasco_notify_webhooks": webhooks,
                      "yasco_notify_mail": mail or {},
                      "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
             "tasks": [{"name": "Tell the operators", "ansible.builtin.include_role": {
                 "name": "yasco.cluster.notify"}, "vars": {
                     "notify_event": "evacuation", "notify_severity": "warning",
                     "notify_subject": "prod: hv1 failed; 2 HA VM(s) started elsewhere",
                     "notify_lines": ["started: db1 on hv2, web1 on hv3", "left down: -"],
                     "notify_details": {"started": {"db1": "hv2", "web1": "hv3"}}}}]}]
    return run_playbook(play, "localhost,", tmp_path=tmp_path)


def test_each_webhook_gets_one_message_in_its_format(tmp_path, receiver):
    rc, results = notify(tmp_path, [
        {"url": receiver.url + "/json", "headers": {"Authorization": "Bearer s3cret"}},
        {"url": receiver.url + "/chat", "format": "text"}])
    assert rc == 0
    by_path = {r["path"]: r for r in receiver.received}
    assert sorted(by_path) == ["/chat", "/json"] and len(receiver.received) == 2
    full = by_path["/json"]["body"]
    assert full["cluster"] == "prod" and full["event"] == "evacuation"
    assert full["severity"] == "warning"
    assert full["subject"] == "prod: hv1 failed; 2 HA VM(s) started elsewhere"
    assert full["details"] == {"started": {"db1": "hv2", "web1": "hv3"}}
    assert full["lines"] == ["started: db1 on hv2, web1 on hv3", "left down: -"]
    assert by_path["/json"]["headers"]["Authorization"] == "Bearer s3cret"
    assert by_path["/chat"]["body"] == {"text": "prod: hv1 failed; 2 HA VM(s) started "
                                                "elsewhere\nstarted: db1 on hv2, web1 on "
                                                "hv3\nleft down: -"}
    assert "s3cret" not in json.dumps(results)


def test_a_webhook_that_is_down_is_named_and_fails_nothing(tmp_path, receiver):
    dead = closed_port_url()
    rc, results = notify(tmp_path, [{"url": dead + "/hook"}, {"url": receiver.url + "/up"},
                                    {"url": dead + "/named", "name": "pager"}])
    assert rc == 0
    assert [r["path"] for r in receiver.received] == ["/up"]
    warnings = [item["msg"] for r in results for item in r.get("results", [])
                if "did not reach" in str(item.get("msg", ""))]
    assert len(warnings) == 2
    assert f"did not reach webhook 1 ({dead}): " in warnings[0]
    assert "did not reach pager: " in warnings[1]
    assert "check its URL and that the receiver runs (yasco_notify_webhooks)" in warnings[0]


class FailingHook:
    """A webhook that answers every POST with `status`, and says in its answer where it
    was posted to, as some receivers' errors do."""

    def __init__(self, status: int) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                body = f"no such hook: {self.path}".encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_notify_output(tmp_path, webhooks: list[dict], *args: str) -> str:
    """All that ansible-playbook prints, with its default output, for `notify`."""
    notify(tmp_path, webhooks)  # writes the play to tmp_path, and checks it runs
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_STDOUT_CALLBACK": "default"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_failing_webhook_is_named_without_its_secret(tmp_path):
    """A Slack or Teams incoming webhook's URL is its secret: a failure names its
    scheme and host, and neither the playbook's report nor its output at -vvv holds
    the URL's path, query or user."""
    secret = "T0SECRET/B0SECRET/xoxSECRETTOKEN"
    answering = FailingHook(404)
    try:
        down = closed_port_url()
        hooks = [{"url": f"{answering.url}/services/{secret}?token=q{secret[-6:]}"},
                 {"url": down.replace("//", f"//user:pw{secret[-6:]}@") + f"/services/{secret}",
                  "format": "text"}]
        rc, results = notify(tmp_path, hooks)
        assert rc == 0
        shown = json.dumps(results) + "".join(run_notify_output(tmp_path, hooks, *verbosity)
                                              for verbosity in ([], ["-vvv"]))
        assert "SECRET" not in shown and secret[-6:] not in shown
        warnings = [item["msg"] for r in results for item in r.get("results", [])
                    if "did not reach" in str(item.get("msg", ""))]
        assert len(warnings) == 2
        assert f"did not reach webhook 1 ({answering.url}): " in warnings[0]
        assert "404" in warnings[0]
        assert f"did not reach webhook 2 ({down}): " in warnings[1]
    finally:
        answering.close()


def test_no_webhook_sends_nothing(tmp_path, receiver):
    rc, dummy = notify(tmp_path, [])
    assert rc == 0 and receiver.received == []


def test_a_mail_says_the_severity_in_its_subject_and_everything_in_its_body(
        tmp_path, mailbox):
    rc, results = notify(tmp_path, [], mail={
        "host": "127.0.0.1", "port": mailbox.port, "secure": "never",
        "sender": "yasco@prod.example", "to": ["oncall@example.com", "ops@example.com"]})
    assert rc == 0
    (message,) = mailbox.messages
    subject = str(make_header(decode_header(message["Subject"])))
    assert subject == "[warning] prod: hv1 failed; 2 HA VM(s) started elsewhere"
    assert message["From"] == "yasco@prod.example"
    recipients = sorted(a.strip() for a in message["X-RcptTo"].split(","))
    assert recipients == ["oncall@example.com", "ops@example.com"]
    (body,) = (part.get_payload(decode=True).decode() for part in message.walk()
               if part.get_content_type() == "text/plain")
    assert body.startswith("prod: hv1 failed; 2 HA VM(s) started elsewhere\n"
                           "started: db1 on hv2, web1 on hv3\nleft down: -\n")
    assert "event: evacuation" in body and "db1: hv2" in body
    assert not any("WARNING" in str(r.get("msg", "")) for r in results)


def test_a_mail_server_that_is_down_is_named_and_fails_nothing(tmp_path, receiver):
    port = int(closed_port_url().rsplit(":", 1)[1])
    rc, results = notify(tmp_path, [{"url": receiver.url + "/up"}], mail={
        "host": "127.0.0.1", "port": port, "password": "m4ilpass", "username": "yasco",
        "to": ["oncall@example.com"]})
    assert rc == 0 and len(receiver.received) == 1
    warnings = [r["msg"] for r in results if "was not mailed" in str(r.get("msg", ""))]
    assert len(warnings) == 1 and f"127.0.0.1:{port}" in warnings[0]
    assert "check yasco_notify_mail" in warnings[0]
    assert "m4ilpass" not in json.dumps(results)


class ClearMailbox(Mailbox):
    """An SMTP server that offers AUTH without offering STARTTLS, as a misconfigured
    relay, or one a man in the middle strips STARTTLS from, does; the credentials it
    was sent, in `logins`."""

    def __init__(self) -> None:
        self.logins: list[tuple[bytes, bytes]] = []
        super().__init__(authenticator=self.authenticate, auth_require_tls=False)

    def authenticate(self, server, session, envelope, mechanism, auth_data) -> AuthResult:
        self.logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=True)


@pytest.mark.parametrize("secure", ["try", "never", None])
def test_the_smtp_password_is_never_sent_without_tls(tmp_path, secure):
    clear = ClearMailbox()
    try:
        rc, results = notify(tmp_path, [], mail={
            "host": "127.0.0.1", "port": clear.port, "username": "yasco",
            "password": "m4ilpass", "to": ["oncall@example.com"],
            **({"secure": secure} if secure else {})})
    finally:
        clear.controller.stop()
    assert rc == 0
    assert clear.logins == [] and clear.messages == []
    warnings = [r["msg"] for r in results if "was not mailed" in str(r.get("msg", ""))]
    assert len(warnings) == 1
    if secure:  # refused before connecting, naming the setting and what to do
        assert (f"yasco_notify_mail.secure is {secure} with a username and password, which "
                "would send the password in clear") in warnings[0]
        assert "set secure to starttls (port 587) or always (SMTPS, port 465)" in warnings[0]
    else:  # a password requires TLS: this server offers none
        assert f"StartTLS is not offered on server 127.0.0.1:{clear.port}" in warnings[0]
    assert "m4ilpass" not in json.dumps(results)


def watcher_event(tmp_path, receiver, event: dict) -> dict:
    """What playbooks/notify.yml posts for the watcher's `event`."""
    rc, dummy = run_playbook(
        ROOT / "playbooks" / "notify.yml", "localhost,", extra_vars={
            "yasco_event": event, "yasco_cluster_name": "prod",
            "yasco_notify_webhooks": [{"url": receiver.url}], "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        tmp_path=tmp_path)
    assert rc == 0
    (posted,) = receiver.received
    receiver.received.clear()
    return posted["body"]


def test_the_watchers_etcd_events_become_notifications(tmp_path, receiver):
    alarm = {"type": "etcd_alarm", "hosts": [], "raised": True,
             "alarms": [{"member": "8e9e05c52164694d", "alarm": "NOSPACE"}]}
    raised = watcher_event(tmp_path, receiver, alarm)
    assert (raised["event"], raised["severity"]) == ("etcd_alarm", "critical")
    assert raised["subject"] == ("prod: etcd ALARM NOSPACE: etcd refuses writes, nothing "
                                 "can be evacuated or moved")
    assert raised["lines"][0] == "8e9e05c52164694d: NOSPACE"
    assert "playbooks/etcd_maintenance.yml" in raised["lines"][-1]
    assert raised["details"] == alarm
    cleared = watcher_event(tmp_path, receiver, {**alarm, "raised": False, "alarms": []})
    assert cleared["severity"] == "info" and cleared["subject"] == (
        "prod: etcd's alarms are cleared, writes are accepted again")
    space = watcher_event(tmp_path, receiver, {
        "type": "etcd_space", "hosts": [], "raised": True, "over": ["https://etcd1:2379"],
        "members": [{"endpoint": "https://etcd1:2379", "member": "a1", "db_size": 1,
                     "percent": 83.5}], "quota_bytes": 2147483648})
    assert (space["severity"], space["subject"]) == (
        "warning", "prod: etcd nearly full on https://etcd1:2379")
    assert space["lines"][0] == "https://etcd1:2379: 83.5 % of the quota"
    # As docs/observability.md has an operator try the configuration.
    tried = watcher_event(tmp_path, receiver, {"type": "test", "hosts": []})
    assert (tried["event"], tried["severity"], tried["subject"]) == ("test", "info", "prod: test")


def test_the_watcher_event_playbook_refuses_no_event_naming_the_variable(tmp_path):
    rc, results = run_playbook(ROOT / "playbooks" / "notify.yml", "localhost,", extra_vars={
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}"}, tmp_path=tmp_path)
    assert rc == 2
    assert "set yasco_event to the watcher's event" in results[0]["msg"]
