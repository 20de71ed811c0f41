"""What the benchmark scripts share: progress lines on stderr, a free local port."""

from __future__ import annotations

import socket
import sys


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
