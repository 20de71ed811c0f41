"""A real ``specllama serve`` process on a free port, and what tests need
to talk to it: server-sent events read off the wire, Prometheus samples."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from .port_process import PortProcess


class ServerProcess(PortProcess):
    """``python -m specllama serve ARGS --port P`` until :meth:`stop`,
    started once ``/health`` answers 200; its stderr in a file
    (:meth:`output`)."""

    name = "serve"
    startup_seconds = 120.0  # the demo pair's first build takes a while
    stop_seconds = 30.0
    keep_stdout = False

    def __init__(self, args: list[str], log_dir: Path, *, env: dict | None = None) -> None:
        self.args = args
        super().__init__(log_dir, env={**os.environ, **(env or {})})
        self.url = f"http://127.0.0.1:{self.port}"

    def command(self, port: int) -> list[str]:
        return ["serve", *self.args, "--port", str(port)]

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False


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
