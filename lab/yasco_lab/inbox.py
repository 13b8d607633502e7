"""Receivers on the machine the playbooks run on, for what YASCO sends out:
- `Inbox`, a webhook receiver for the HA notifications (role yasco.cluster.notify): the
  demo shows what the operators were told, and the tests check it;
- `ControllerInbox`, the part of an automation controller's API that ansible-rulebook's
  `run_job_template` uses: what rulebooks/ha_controller.yml launches, recorded."""

from __future__ import annotations

import json
import threading
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class Inbox:
    """An HTTP server on a free port of `host` that keeps each POST's path, headers and
    JSON body, in the order they came, in `received`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({"path": self.path, "headers": dict(self.headers),
                                 "body": json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        """The `event` of each JSON notification received, in order."""
        return [m["body"].get("event") for m in list(self.received)
                if isinstance(m["body"], dict)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ControllerInbox:
    """An HTTP server on a free port of `host` that answers what ansible-rulebook asks
    an automation controller (AWX, AAP) when it runs a job template: its version, the
    template by name, the launch, the job's status. Every template in `templates`
    exists, in organization `organization`; each launch is kept in `launches` as
    {"template", "extra_vars"}, and its job reported successful at once."""

    def __init__(self, templates: list[str], organization: str = "Default",
                 host: str = "127.0.0.1") -> None:
        launches: list[dict[str, Any]] = []
        self.launches = launches
        ids = {name: number for number, name in enumerate(templates, start=1)}
        lock = threading.Lock()

        def template(name: str) -> dict[str, Any]:
            number = ids[name]
            return {"id": number, "type": "job_template", "name": name,
                    "summary_fields": {"organization": {"name": organization}},
                    "related": {"launch": f"/api/v2/job_templates/{number}/launch/"},
                    "ask_limit_on_launch": False, "ask_labels_on_launch": False,
                    "ask_inventory_on_launch": False, "ask_variables_on_launch": True}

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/api/v2/config/":
                    self._reply(200, {"version": "4.6.0"})
                elif url.path == "/api/v2/unified_job_templates/":
                    found = [template(query["name"])] if query.get("name") in ids else []
                    self._reply(200, {"count": len(found), "next": None, "results": found})
                elif url.path == "/api/v2/jobs/":
                    wanted = [int(n) for n in query.get("id__in", "").split(",") if n]
                    self._reply(200, {"count": len(wanted), "next": None, "results": [
                        {"id": n, "status": "successful", "artifacts": {}} for n in wanted]})
                else:
                    self._reply(404, {"detail": "Not found."})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                match = re.fullmatch(r"/api/v2/job_templates/(\d+)/launch/", self.path)
                name = next((n for n, i in ids.items() if match and i == int(match[1])), None)
                if name is None:
                    self._reply(404, {"detail": "Not found."})
                    return
                with lock:
                    launches.append({"template": name, "extra_vars": body.get("extra_vars")})
                    job = len(launches)
                self._reply(201, {"id": job, "job": job, "status": "pending",
                                  "url": f"/api/v2/jobs/{job}/"})

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def launched(self, template: str) -> list[dict[str, Any]]:
        """The extra variables of each launch of `template`, in order."""
        return [launch["extra_vars"] for launch in list(self.launches)
                if launch["template"] == template]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
