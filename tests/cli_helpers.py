"""The command line as tests drive it: in process through click's CliRunner
(``invoke``, ``gen_json``, ``one_line_error``), or as a real process
(``run_cli``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner, Result

from specllama.cli import main

PROMPT = "once upon a time there lived a king"


def invoke(*args: str, input: str | None = None) -> Result:
    """``specllama ARGS`` in this process, ``input`` as its stdin."""
    return CliRunner().invoke(main, list(args), input=input)


def gen_json(tiny_pair, *flags: str) -> dict:
    """What ``specllama generate --json`` prints for the pair, one thread, PROMPT and ``flags``."""
    r = invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", PROMPT, "--json", *flags)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def one_line_error(r: Result, exit_code: int | None = None) -> str:
    """The single stderr line of a failed command (no traceback); ``exit_code``: the status it must have."""
    assert r.exit_code != 0, (r.exit_code, r.output)
    if exit_code is not None:
        assert r.exit_code == exit_code, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


AS_LIMIT = 3 << 30  # the address space a subprocess may use: a huge KV cache fails at once, on any machine


def limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_cli(*args: str | bytes, env: dict | None = None, timeout: float = 120, text: bool = False,
            memory_limited: bool = False) -> subprocess.CompletedProcess:
    """``specllama ARGS`` as a real process (arguments may be bytes, as a shell hands them over).

    Args:
        env: its environment (default: this one, with the cost cache off: a cold start, as a first run).
        text: decode its output.
        memory_limited: limit its address space to ``AS_LIMIT``.
    """
    if env is None:
        env = dict(os.environ, SPECLLAMA_COST_CACHE="0")
    return subprocess.run([sys.executable, "-m", "specllama", *args], capture_output=True, timeout=timeout,
                          env=env, text=text, preexec_fn=limit_memory if memory_limited else None)


def stderr_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """A process's stderr (bytes) as lines."""
    return proc.stderr.decode("utf-8", "replace").strip().splitlines()
