"""The user's state that specllama (and llm) can write, hashed: the cache folder (built demo models
excepted; the local models' index is there), the remembered costs, the chat history, llm's user folder,
the saved pairs. CI takes a snapshot before the
tests and compares after: a test run must leave all of it as it was.

    python .ci/user_state.py snapshot FILE   # write the hashes to FILE
    python .ci/user_state.py compare FILE    # exit 1, naming each path, if anything changed since

Standard library only, and the same default paths as specllama/demo.py, cost_cache.py, repl.py and
llm (click.get_app_dir("io.datasette.llm") on Linux).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path


def built_model(path: Path) -> bool:
    """A model file built into the cache folder, one being built (``.part``), or a file that goes with one
    (``NAME.gguf.sha256.json``)."""
    return ".gguf" in path.name or path.suffix == ".part"


def _env_path(variable: str, default: Path) -> Path:
    value = os.environ.get(variable)
    return Path(value) if value else default


def watched() -> list[tuple[Path, bool]]:
    """(path, whether built model files under it are exempt) for each place a run could write."""
    home = Path.home()
    models = _env_path("SPECLLAMA_CACHE", home / ".cache" / "specllama")
    config = _env_path("XDG_CONFIG_HOME", home / ".config")
    return [
        (models, True),
        (_env_path("SPECLLAMA_COSTS_FILE", home / ".cache" / "specllama-costs"), False),
        (_env_path("SPECLLAMA_HISTORY_FILE", models / "chat_history"), False),
        (_env_path("LLM_USER_PATH", config / "io.datasette.llm"), False),
        (config / "specllama", False),  # pairs saved by specllama pair --save
    ]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def snapshot() -> dict[str, str]:
    """{path: sha256} of every file watched (built models left out)."""
    out: dict[str, str] = {}
    for root, models_exempt in watched():
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if models_exempt and built_model(path):
                continue
            out[str(path)] = _sha256(path)
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    lines = [f"added:   {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"removed: {p}" for p in sorted(before.keys() - after.keys())]
    lines += [f"changed: {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("snapshot", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    command, file = argv
    if command == "snapshot":
        Path(file).write_text(json.dumps(snapshot(), indent=1), encoding="utf-8")
        return 0
    lines = changes(json.loads(Path(file).read_text(encoding="utf-8")), snapshot())
    if lines:
        print("the test run changed the user's state (tests must write only under temporary folders):",
              *lines, sep="\n  ", file=sys.stderr)
        return 1
    print(f"the user's state is unchanged ({', '.join(str(p) for p, _ in watched())})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
