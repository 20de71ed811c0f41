"""What the benchmark scripts share: progress lines on stderr, a free local
port, a first-time user's environment (empty remembered costs), a server process
started and waited for, and --gpu-layers as the API's arguments."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COSTS_VARIABLE = "SPECLLAMA_COSTS_FILE"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_env(tmp: str) -> dict:
    """The environment of one run: its own empty, writable remembered-costs file (under ``tmp``)."""
    path = Path(tempfile.mkdtemp(dir=tmp)) / "costs.json"
    path.write_text("{}", encoding="utf-8")
    return {**os.environ, COSTS_VARIABLE: str(path)}


def start_server(cmd: list[str], port: int, *, timeout: float = 300, env: dict | None = None) -> subprocess.Popen:
    """Start a server (``specllama serve``, llama-server) and wait until its ``/health`` answers 200."""
    import httpx

    log(f"starting: {' '.join(cmd)}")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{os.path.basename(cmd[0])} exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{' '.join(cmd[:3])} did not start")


def offload(layers: int | None) -> dict:
    """--gpu-layers N as ``SpeculativeLlama``'s arguments: N layers of both models on the GPU (None: none given)."""
    return {} if layers is None else {"n_gpu_layers": layers, "n_gpu_layers_draft": layers}
