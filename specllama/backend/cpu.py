"""What this CPU lets llama.cpp's CPU backend use.

Some virtual machines report AMX in the CPU's flags, and their kernel grants
a process the AMX tile data, yet llama.cpp built for that CPU (pip's default
build, ``-march=native``) stops on an illegal instruction (``tilezero``) at
the first pass of a quantized model, which it multiplies with AMX through an
extra CPU buffer type. (A lone tile instruction runs there; llama.cpp's
kernels do not, so no smaller test tells.) Where the CPU reports AMX and the
build uses it, the first quantized model a process loads is first run in a
child process for a few tokens; where the child dies, every model this
process loads goes without the extra buffer types (llama.cpp's
``--no-repack``: no AMX, no repacked weights). Elsewhere nothing runs.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys

import llama_cpp

#: what the child runs: the model's first passes, as a generation's (8 rows, then 1), on one thread
_PROBE = """
import sys, llama_cpp
model = llama_cpp.Llama(sys.argv[1], n_ctx=32, n_batch=32, n_threads=1, verbose=False)
model.eval([model.token_bos()] * 8)
model.eval([model.token_bos()])
"""
_verdict: bool | None = None  # once a quantized model was run: whether AMX was refused


@functools.lru_cache(maxsize=1)
def _amx_in_use() -> bool:
    """The CPU reports AMX and this llama.cpp build multiplies with it."""
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "amx_tile" in flags and b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


def amx_refused(path: str | os.PathLike, quantized: bool) -> bool:
    """Whether models must load without llama.cpp's extra CPU buffer types
    here: decided by the first quantized model ``path`` loaded, where AMX is
    in use (about a second, once a process)."""
    global _verdict
    if _verdict is None and quantized and _amx_in_use():
        try:
            child = subprocess.run([sys.executable, "-c", _PROBE, os.fspath(path)], capture_output=True,
                                   timeout=600)
            _verdict = child.returncode < 0  # killed by a signal (SIGILL); a load error is the parent's to report
        except (OSError, subprocess.SubprocessError):
            _verdict = False
    return bool(_verdict)
