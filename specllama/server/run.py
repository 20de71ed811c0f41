"""Run the app under uvicorn, with a shutdown that ends cleanly.

On SIGINT or SIGTERM uvicorn stops accepting connections; the worker ends
the generation in flight after its current target pass and answers every
waiting request ("the server is shutting down"), so each client gets a
complete response and uvicorn's graceful shutdown is quick. The process then
returns normally (exit 0), instead of re-raising the signal as uvicorn does.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Callable

import uvicorn
from uvicorn.logging import DefaultFormatter

from .settings import SHUTDOWN_GRACE_SECONDS

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Server(uvicorn.Server):
    """uvicorn's server, telling ``on_exit`` when a signal asks it to stop."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame) -> None:
        super().handle_exit(sig, frame)
        try:  # a signal handler: hand the work to the event loop rather than take locks here
            asyncio.get_running_loop().call_soon_threadsafe(self._on_exit)
        except RuntimeError:
            self._on_exit()


def log_to_stderr() -> None:
    """specllama's request log, formatted as uvicorn's own lines."""
    logger = logging.getLogger("specllama.server")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def run(app, *, host: str, port: int, on_exit: Callable[[], None]) -> None:
    """Serve ``app`` until SIGINT/SIGTERM; ``on_exit`` is called when one arrives."""
    config = uvicorn.Config(app, host=host, port=port, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=int(2 * SHUTDOWN_GRACE_SECONDS))
    server = _Server(config, on_exit)
    # uvicorn re-raises the signal it caught once it is done: let that be a no-op, so a
    # requested shutdown exits 0 (and a Ctrl-C prints no KeyboardInterrupt traceback)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in SIGNALS}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
