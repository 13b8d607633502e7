"""A webhook receiver for YASCO's HA notifications (role yasco.cluster.notify), on the
machine the playbooks run on: the demo shows what the operators were told, and the
tests check it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
