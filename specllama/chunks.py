"""A file shipped in chunks across packages: find the chunks, join them once
into a cache folder, and check the result's size and SHA-256.

The package index caps a file's size, so a GGUF can travel as numbered
packages, each holding one chunk. :func:`chunk_files` finds them where they
are installed (without importing them); :func:`assemble` streams them into a
temporary file beside the destination while hashing, and moves it into place
only when the size and hash match. A marker file beside the result keeps the
hash it was checked against with the file's size and modification time, so
later calls check those instead of hashing the whole file again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Sequence

from .errors import SpecLlamaError

BLOCK = 1 << 20  # bytes read at a time
MARKER_SUFFIX = ".sha256.json"


def chunk_files(package_prefix: str, count: int, relative: str) -> list[Path] | None:
    """The installed chunk files, in order: for n = 1 .. ``count``, the file
    ``relative.format(n=n)`` (e.g. ``"data/part{n:02d}.bin"``) inside the
    package ``{package_prefix}{n}``; None if any package or file is missing.
    Found with ``importlib.util.find_spec`` (nothing is imported)."""
    files = []
    for n in range(1, count + 1):
        spec = importlib.util.find_spec(f"{package_prefix}{n}")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]) / relative.format(n=n)
        if not path.is_file():
            return None
        files.append(path)
    return files


def assemble(chunks: Sequence[os.PathLike | str], destination: os.PathLike | str, *, size: int, sha256: str,
             label: str, fix: str) -> Path:
    """``chunks`` joined in order into ``destination``, once.

    An existing ``destination`` is reused when its size and modification time
    match the marker written when it was checked (no hashing then), or, with
    no such marker, when hashing it gives ``sha256``; otherwise it is removed
    and joined again.

    Args:
        chunks: the chunk files, in order.
        destination: where the joined file goes (its folder must exist).
        size: the joined file's size in bytes.
        sha256: its SHA-256, as hex.
        label: what the file is, for the error message (e.g. ``"demo-coder target"``).
        fix: what the user should do when the chunks are damaged.

    Returns:
        ``destination`` as a Path.

    Raises:
        SpecLlamaError: the joined chunks do not have this size and hash;
            no file (joined, partial or marker) is left behind then.
    """
    destination = Path(destination)
    if _checked(destination, size, sha256):
        return destination
    _marker(destination).unlink(missing_ok=True)
    destination.unlink(missing_ok=True)  # not the expected file: nothing of it is kept
    # beside the destination (one file system: the move is atomic), named for this process
    temp = destination.with_name(f".{destination.name}.{os.getpid()}.part")
    try:
        digest = hashlib.sha256()
        written = 0
        with open(temp, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as f:
                    while block := f.read(BLOCK):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
        got = digest.hexdigest()
        if written != size or got != sha256:
            raise SpecLlamaError(
                f"the {label} joined from {len(chunks)} installed chunks is damaged: expected {size:,} bytes with "
                f"SHA-256 {sha256}, got {written:,} bytes with SHA-256 {got}; {fix}"
            )
        os.replace(temp, destination)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _write_marker(destination, sha256)
    return destination


def _marker(destination: Path) -> Path:
    return destination.with_name(destination.name + MARKER_SUFFIX)


def _checked(destination: Path, size: int, sha256: str) -> bool:
    """Whether ``destination`` is the expected file: by its marker (size and
    mtime as when it was hashed), else by hashing it once (then marked)."""
    try:
        stat = destination.stat()
    except FileNotFoundError:
        return False
    if stat.st_size != size:
        return False
    try:
        marked = json.loads(_marker(destination).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        marked = None
    if marked == _marker_record(stat, sha256):
        return True
    if _sha256_of(destination) != sha256:
        return False
    _write_marker(destination, sha256)
    return True


def _marker_record(stat: os.stat_result, sha256: str) -> dict[str, object]:
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def _write_marker(destination: Path, sha256: str) -> None:
    marker = _marker(destination)
    partial = marker.with_name(marker.name + ".part")
    partial.write_text(json.dumps(_marker_record(destination.stat(), sha256)) + "\n", encoding="utf-8")
    os.replace(partial, marker)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()
