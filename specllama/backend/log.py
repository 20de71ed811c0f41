"""llama.cpp's log: silent unless a model is loaded with verbose=True."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

import llama_cpp

# llama.cpp's log goes to this callback; it prints only while a model is
# loaded with verbose=True. (llama-cpp-python's own callback maps the current
# log levels wrongly and prints warnings as errors.)
_log_verbose = False


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if _log_verbose:
        sys.stderr.write(text.decode("utf-8", errors="replace"))


llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


_real_stderr: int | None = None  # while quiet: a duplicate of the real file descriptor 2


def real_stderr_fd() -> int:
    """The file descriptor of the real stderr, also while :func:`quiet_stderr`
    silences fd 2 (for a last message before the process ends)."""
    return _real_stderr if _real_stderr is not None else 2


@contextlib.contextmanager
def quiet_stderr(enabled: bool):
    """Silence what llama.cpp prints while loading: its log, and what goes
    straight to file descriptor 2."""
    global _log_verbose
    if not enabled:
        _log_verbose = True
        try:
            yield
        finally:
            _log_verbose = False
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    global _real_stderr
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    outer, _real_stderr = _real_stderr, saved
    try:
        yield
    finally:
        _real_stderr = outer
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
