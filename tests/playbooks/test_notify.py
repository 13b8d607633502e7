"""HA notifications (role yasco.cluster.notify): one message per action to every
webhook the inventory names, as JSON or as Slack-style text, headers sent but never
logged, and a webhook that is down reported by name without failing the action.
Against a real HTTP receiver started here; on the lab, an evacuation's notification
is checked by tests/lab/test_ha.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from ..ansible_run import run_playbook
from ..etcd.conftest import closed_port_url


class Receiver:
    """An HTTP server that keeps each POST's path, headers and JSON body."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({"path": self.path, "headers": dict(self.headers),
                                 "body": json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(name="receiver")
def fixture_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


def notify(tmp_path, webhooks: list[dict]) -> tuple[int, list[dict]]:
    play = [{"name": "Notify", "hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": {"yasco_cluster_name": "prod", "yasco_notify_webhooks": webhooks,
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
    dead = closed_port_url() + "/hook"
    rc, results = notify(tmp_path, [{"url": dead}, {"url": receiver.url + "/up"}])
    assert rc == 0
    assert [r["path"] for r in receiver.received] == ["/up"]
    warnings = [item["msg"] for r in results for item in r.get("results", [])
                if "did not reach" in str(item.get("msg", ""))]
    assert len(warnings) == 1 and dead in warnings[0]
    assert "check the URL and that the receiver runs (yasco_notify_webhooks)" in warnings[0]


def test_no_webhook_sends_nothing(tmp_path, receiver):
    rc, dummy = notify(tmp_path, [])
    assert rc == 0 and receiver.received == []
