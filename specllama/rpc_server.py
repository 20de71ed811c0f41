"""``specllama rpc-server``: llama.cpp's RPC server, in this process.

A remote host then needs only ``pip install`` of the same llama-cpp-python
build (with RPC). The server loop runs inside C (``ggml_backend_rpc_start_server``),
where a Python signal handler would never run; so it runs on a thread, and the
main thread waits for SIGINT or SIGTERM and then ends the process at once.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

from .backend import rpc
from .backend.rpc import DEFAULT_RPC_HOST, DEFAULT_RPC_PORT
from .errors import SpecLlamaError

# llama.cpp's rpc-server prints this for any host but 127.0.0.1
EXPOSED_WARNING = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
WARNING: Host ('{host}') is != '127.0.0.1'
         Never expose the RPC server to an open network!
         This is an experimental feature and is not secure!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""
LOOPBACK_NOTE = ("never expose an RPC server to an open network (no authentication: anyone who reaches it can "
                 "use its devices and memory); it listens on 127.0.0.1 only unless --host says otherwise")


def cache_dir() -> Path:
    """llama.cpp's RPC cache: ``$LLAMA_CACHE/rpc``, else the platform's cache
    folder (``$XDG_CACHE_HOME`` or ``~/.cache``) ``/llama.cpp/rpc``."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"]) / "rpc"
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "llama.cpp" / "rpc"


def check_listen(host: str, port: int) -> None:
    """Fail with one line, before the server starts, if ``host:port`` cannot be bound."""
    try:
        socket.inet_pton(socket.AF_INET, host)
    except OSError:
        raise SpecLlamaError(f"--host {host!r} is not an IPv4 address (llama.cpp's RPC server binds IPv4 only: "
                             "e.g. 127.0.0.1, or 0.0.0.0 for every interface)") from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as llama.cpp's server does
        try:
            s.bind((host, port))
        except OSError as e:
            raise SpecLlamaError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def run(*, host: str = DEFAULT_RPC_HOST, port: int = DEFAULT_RPC_PORT, n_threads: int | None = None,
        cache: bool = False, devices: Sequence[str] = (), echo: Callable[[str], None] = print) -> None:
    """Serve this machine's devices to llama.cpp RPC clients until SIGINT or SIGTERM.

    Args:
        host: IPv4 address to bind (127.0.0.1: this machine only).
        port: TCP port.
        n_threads: CPU threads of the CPU device (None: all cores).
        cache: keep tensors clients send in :func:`cache_dir`, so a model loads
            faster the next time.
        devices: device names to serve (none: every GPU, else the CPU).
        echo: where the status lines go (one string each).

    A signal ends the process (exit status 0), whatever the server is doing.

    Raises:
        SpecLlamaError: no RPC backend in this build, a bad host, a port in
            use, an unknown device; or llama.cpp's server loop ended by itself.
    """
    from .backend import default_threads

    rpc.require_rpc("rpc-server")
    check_listen(host, port)
    served = rpc.server_devices(devices)
    directory = None
    if cache:
        directory = cache_dir()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SpecLlamaError(f"cannot create the RPC cache {str(directory)!r}: {e.strerror or e}") from None
    if host != "127.0.0.1":
        echo(EXPOSED_WARNING.format(host=host).rstrip("\n"))
    endpoint = f"{host}:{port}"
    echo(f"specllama rpc-server: {endpoint}, devices {', '.join(rpc.device_name(d) for d in served)}; "
         f"{LOOPBACK_NOTE}. Stop with Ctrl-C or SIGTERM.")
    sys.stdout.flush()

    stopped = threading.Event()
    received: list[int] = []

    def on_signal(signum, frame) -> None:
        received.append(signum)
        stopped.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    server = threading.Thread(target=rpc.serve, args=(endpoint,), name="rpc-server", daemon=True,
                              kwargs={"devices": served, "n_threads": n_threads or default_threads(),
                                      "cache_dir": str(directory) if directory else None})
    server.start()
    while server.is_alive() and not stopped.wait(0.25):
        pass
    if stopped.is_set():
        echo(f"specllama rpc-server: stopped ({signal.Signals(received[0]).name})")
        sys.stdout.flush()
        sys.stderr.flush()
        rpc.flush_c_stdio()
        # the server thread sits in C (accept or a client's command) and cannot be joined: end here
        os._exit(0)
    rpc.flush_c_stdio()
    raise SpecLlamaError(f"llama.cpp's RPC server on {endpoint} stopped by itself (see its message above)")
