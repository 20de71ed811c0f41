"""A ``python -m specllama ...`` process that listens on a free port: started,
waited for until it answers, its output kept in a file, stopped by a signal."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from signal import SIGTERM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortProcess:
    """``python -m specllama ARGS`` (ARGS from :meth:`command`, given the
    port) until :meth:`stop`; started when it answers :meth:`ready`.

    Its output goes to a file (a pipe nobody reads could fill up and block
    it); :meth:`output` reads it. Subclasses set ``name`` (for the log file
    and messages), ``startup_seconds`` and ``stop_seconds``, and say what
    ``ready`` means and which of its output streams the file keeps.
    """

    name = "specllama"
    startup_seconds = 30.0
    stop_seconds = 10.0
    keep_stdout = True  # the file keeps stdout and stderr; else stderr only (stdout dropped)

    def __init__(self, log_dir: Path, *, env: dict | None = None) -> None:
        self.port = free_port()
        self.log = log_dir / f"{self.name}-{self.port}.log"
        self._log_file = open(self.log, "wb")
        stdout, stderr = (self._log_file, subprocess.STDOUT) if self.keep_stdout else (subprocess.DEVNULL,
                                                                                       self._log_file)
        self.proc = subprocess.Popen([sys.executable, "-m", "specllama", *self.command(self.port)],
                                     stdout=stdout, stderr=stderr, env=env)
        self._wait_ready()

    def command(self, port: int) -> list[str]:
        """The arguments after ``python -m specllama``."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether it answers (one quick try)."""
        raise NotImplementedError

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_seconds
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            if self.ready():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not answer within {self.startup_seconds:.0f} s:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        return self.log.read_text(errors="replace")

    def signal(self, sig: int = SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self, sig: int = SIGTERM) -> int:
        """Send ``sig`` (a kill after ``stop_seconds``); the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(self.stop_seconds)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return self.proc.returncode
