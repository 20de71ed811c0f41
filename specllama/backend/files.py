"""GGUF files: is this one, and re-encoding one with llama.cpp's quantizer."""

from __future__ import annotations

import ctypes
import os

import llama_cpp

from ..errors import SpecLlamaError

GGUF_MAGIC = b"GGUF"


def check_gguf_file(path: str | os.PathLike) -> str:
    """Return ``path`` as a string if it names a readable GGUF file; raise
    :class:`SpecLlamaError` otherwise."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise SpecLlamaError(f"model file not found: {path!r} (expected a path to a .gguf file)")
    if os.path.isdir(path):
        raise SpecLlamaError(f"model path is a directory: {path!r} (expected a path to a .gguf file)")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise SpecLlamaError(f"cannot read model file {path!r}: {e.strerror}") from None
    if magic != GGUF_MAGIC:
        raise SpecLlamaError(f"not a GGUF file: {path!r} (it starts with {magic!r}, a GGUF file with b'GGUF')")
    return path


def quantize(src: str, dst: str, *, ftype: int = llama_cpp.LLAMA_FTYPE_ALL_F32, n_threads: int = 0) -> None:
    """Re-encode the GGUF model ``src`` as ``ftype`` (default F32) into ``dst``."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = n_threads
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        raise SpecLlamaError(f"llama.cpp could not re-encode {src!r} as type {ftype} (code {rc})")
