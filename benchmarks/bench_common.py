"""What the benchmark scripts share: progress lines on stderr, a free local
port, a first-time user's environment (empty remembered costs), and --gpu-layers
as the API's arguments."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
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


def offload(layers: int | None) -> dict:
    """--gpu-layers N as ``SpeculativeLlama``'s arguments: N layers of both models on the GPU (None: none given)."""
    return {} if layers is None else {"n_gpu_layers": layers, "n_gpu_layers_draft": layers}
