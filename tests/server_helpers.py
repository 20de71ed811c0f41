"""A real ``specllama serve`` process on a free port, and what tests need
to talk to it: server-sent events read off the wire, Prometheus samples."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

STARTUP_SECONDS = 120.0  # the demo pair's first build takes a while


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``python -m specllama serve ARGS --port P`` until :meth:`stop`.

    stderr goes to a file (a pipe nobody reads could fill up and block the
    server); :meth:`stderr` reads it.
    """

    def __init__(self, args: list[str], log_dir: Path, *, env: dict | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log_dir / f"serve-{self.port}.log"
        self._log_file = open(self._log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "specllama", "serve", *args, "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=self._log_file,
                                     env={**os.environ, **(env or {})})
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"specllama serve exited with {self.proc.returncode}:\n{self.stderr()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"specllama serve did not become healthy:\n{self.stderr()}")

    def stderr(self) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        return self._log.read_text(errors="replace")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return self.proc.returncode


def sse_payloads(lines) -> list[str]:
    """The ``data:`` payloads of an event stream, in order (comments and
    blank separators dropped); checks each event is one ``data:`` line."""
    out = []
    for line in lines:
        if not line or line.startswith(":"):
            continue
        assert line.startswith("data: "), line
        out.append(line[len("data: "):])
    return out


def sse_json(lines) -> tuple[list[dict], str]:
    """The JSON events of a stream and its last payload (``[DONE]``)."""
    payloads = sse_payloads(lines)
    return [json.loads(p) for p in payloads[:-1]], payloads[-1]


def metric_samples(text: str) -> dict[str, float]:
    """Prometheus text as {"name{labels}": value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each sample grew by (samples that appeared count from 0)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
