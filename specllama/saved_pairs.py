"""Pairs the user saved by name (``specllama pair TARGET --save NAME``), in the
user's config folder: ``$XDG_CONFIG_HOME/specllama/pairs.json``, default
``~/.config/specllama/pairs.json`` (settings, not a cache: nothing here is
rebuilt). Every command then takes ``--pair NAME`` (or ``-m NAME``, ``-md NAME``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .errors import SpecLlamaError

PAIRS_FILE = "pairs.json"


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/specllama``, else ``~/.config/specllama``."""
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base) if base else Path.home() / ".config") / "specllama"


def pairs_file() -> Path:
    return config_dir() / PAIRS_FILE


def saved_pairs() -> dict[str, dict]:
    """{name: {"target": reference, "draft": reference, ...}}; none when the file is absent."""
    path = pairs_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise SpecLlamaError(f"cannot read the saved pairs {str(path)!r} ({type(e).__name__}): fix it or delete "
                             "it") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) and isinstance(v.get("target"), str) and
                                             isinstance(v.get("draft"), str) for v in data.values()):
        raise SpecLlamaError(f"the saved pairs {str(path)!r} must be a JSON object of "
                             '{"NAME": {"target": ..., "draft": ...}}: fix it or delete it')
    return data


def saved_pair(name: str) -> tuple[str, str] | None:
    """The (target, draft) references saved as ``name``, or None."""
    entry = saved_pairs().get(name)
    return (entry["target"], entry["draft"]) if entry else None


def check_name(name: str) -> None:
    """A name a pair can be saved as: a plain word that no built-in or curated pair has."""
    from .demo import BUILTIN_PAIRS
    from .pairs import curated_pairs

    if not name or name != name.strip() or ":" in name or "/" in name or os.sep in name:
        raise SpecLlamaError(f"pair name {name!r} must be a plain word (no spaces at its ends, ':' or '/')")
    if name in BUILTIN_PAIRS or name in curated_pairs():
        raise SpecLlamaError(f"pair name {name!r} is taken by a built-in or curated pair: choose another")


def save_pair(name: str, target: str, draft: str, **details: object) -> Path:
    """Save (or replace) the pair ``name``; ``details`` (what was measured) are kept beside it.
    Returns the file written."""
    check_name(name)
    pairs = saved_pairs()
    pairs[name] = {"target": target, "draft": draft, "saved": time.strftime("%Y-%m-%dT%H:%M:%S"), **details}
    path = pairs_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(pairs, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        raise SpecLlamaError(f"cannot write the saved pairs {str(path)!r} ({e.strerror})") from None
    return path
