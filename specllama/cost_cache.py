"""Measured costs remembered between processes: per (pair, machine, offload
settings), the draft-length policy's timings and acceptance record, in
:func:`costs_file` (beside the built demo models, not among them). A new
process starts informed instead of learning from its own cold first passes."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path

FILE_VARIABLE = "SPECLLAMA_COSTS_FILE"  # the file's full path, instead of the default
OFF_VARIABLE = "SPECLLAMA_COST_CACHE"  # "0": neither read nor write (a cold start every time)
MAX_ENTRIES = 64  # the oldest entries go first


def _file_id(path: str | None) -> str:
    if path is None:
        return "none"
    try:
        st = os.stat(path)
        return f"{os.path.abspath(path)}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        return f"{path}:?"


def cost_key(target_path: str, draft_path: str | None, *, build: str = "", **settings: object) -> str:
    """A key for what changes costs: this pair of files (path, size, time),
    these load settings (offload of both models, threads, context, RPC),
    this llama.cpp build and its system info (``build``), and this machine,
    so that another thread count, context size, build or pair never steers
    a run."""
    parts = [_file_id(target_path), _file_id(draft_path), platform.machine(), platform.processor(),
             str(os.cpu_count()), f"build={build}"] + [f"{k}={settings[k]}" for k in sorted(settings)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def costs_file() -> Path:
    """Where remembered costs live: ``$SPECLLAMA_COSTS_FILE``, else
    ``~/.cache/specllama-costs/costs.json``."""
    env = os.environ.get(FILE_VARIABLE)
    return Path(env) if env else Path.home() / ".cache" / "specllama-costs" / "costs.json"


def _read() -> dict:
    try:
        data = json.loads(costs_file().read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: start afresh


def enabled() -> bool:
    return os.environ.get(OFF_VARIABLE, "1") != "0"


def load(key: str) -> dict | None:
    """The saved snapshot for ``key``, or None."""
    if not enabled():
        return None
    entry = _read().get(key)
    return entry.get("policy") if isinstance(entry, dict) else None


def save(key: str, snapshot: dict) -> None:
    """Remember ``snapshot`` for ``key`` (best effort: a cache that cannot
    be written is no error)."""
    if not enabled():
        return
    data = _read()
    data[key] = {"saved": time.time(), "policy": snapshot}
    if len(data) > MAX_ENTRIES:
        for old in sorted(data, key=lambda k: data[k].get("saved", 0) if isinstance(data[k], dict) else 0)[
                : len(data) - MAX_ENTRIES]:
            del data[old]
    path = costs_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
