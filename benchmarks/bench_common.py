"""What the benchmark scripts share: progress lines on stderr, a free local
port, a first-time user's environment (empty remembered costs), a server process
started and waited for, concurrent HTTP clients, and --gpu-layers as the API's
arguments."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

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


def run_clients(url: str, n_clients: int, jobs: Sequence[Any], request: Callable[[Any, Any], dict], *,
                timeout: float = 900) -> tuple[list[dict], float]:
    """``jobs`` over ``n_clients`` threads, each its own connection, client k taking jobs k, k + n, ...;
    ``request(client, job)`` makes one request. Returns the results and the wall time. A request on a
    keep-alive connection the server had closed (llama-server closes them; nothing came back) is sent again;
    a client that fails stops the run, so no row is averaged over fewer requests than asked."""
    import httpx

    results: list[dict] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def client_loop(k: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=timeout) as client:
                for job in jobs[k::n_clients]:
                    for attempt in range(3):
                        try:
                            r = request(client, job)
                            break
                        except httpx.RemoteProtocolError:
                            if attempt == 2:
                                raise
                    with lock:
                        results.append(r)
        except Exception as e:
            failures.append(e)

    threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(f"{url}: {len(failures)} client(s) failed, {len(results)} of {len(jobs)} requests done: "
                         f"{failures[0]!r}")
    return results, time.perf_counter() - t0


def offload(layers: int | None) -> dict:
    """--gpu-layers N as ``SpeculativeLlama``'s arguments: N layers of both models on the GPU (None: none given)."""
    return {} if layers is None else {"n_gpu_layers": layers, "n_gpu_layers_draft": layers}
