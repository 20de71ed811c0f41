"""A tiny stand-in for the Hugging Face hub on 127.0.0.1: it serves files at
``/{org}/{repo}/resolve/main/{filename}`` with the headers the hub client
reads (X-Repo-Commit, ETag, Content-Length) and byte ranges for resuming."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    def __init__(self, files: dict[str, Path]) -> None:
        """files: "org/repo/filename" -> local file to serve."""
        self.files = files
        self.requests: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _lookup(self):
                server.requests.append((self.command, self.path))
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) != 5 or parts[2:4] != ["resolve", "main"]:
                    return None
                return server.files.get("/".join(parts[:2] + parts[4:]))

            def _headers(self, data: bytes, status: int, start: int = 0) -> None:
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()

            def do_HEAD(self) -> None:
                path = self._lookup()
                if path is None:
                    self.send_error(404)
                    return
                self._headers(path.read_bytes(), 200)

            def do_GET(self) -> None:
                path = self._lookup()
                if path is None:
                    self.send_error(404)
                    return
                data = path.read_bytes()
                rng = self.headers.get("Range", "")
                start = int(rng[6:].split("-")[0]) if rng.startswith("bytes=") else 0
                self._headers(data, 206 if start else 200, start)
                self.wfile.write(data[start:])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "HubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
