"""A GGUF file's header, read without its weights: the key-value section and
the tensor infos, never a byte of tensor data.

The vocabulary's token list is walked once: its bytes are hashed (the
vocabulary's fingerprint, and the hashes of its last prefixes, which is what
:func:`specllama.vocab.check_compatible` compares when two vocabularies differ
in size by up to its margin), and kept only when asked for. The format:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from dataclasses import dataclass, field

from .errors import SpecLlamaError
from .vocab import MAX_VOCAB_SIZE_DIFFERENCE

MAGIC = b"GGUF"
CHUNK = 1 << 20  # bytes read at a time
MAX_STRING = 1 << 24  # a longer string is a damaged header, not a chat template: never read a file's weights
TOKENS_KEY = "tokenizer.ggml.tokens"
# value type -> struct format of a scalar (8: string, 9: array)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# split GGUFs (llama.cpp's gguf-split): NAME-00001-of-00003.gguf, opened by the first part
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class HeaderError(SpecLlamaError):
    """A file that is not a GGUF one, or whose header is cut short or malformed."""


@dataclass(frozen=True)
class ArrayValue:
    """An array in the key-value section, by its element type and length (its elements are not kept)."""

    type: int
    count: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # from the start of the data section


@dataclass
class Header:
    """What a GGUF header says.

    Attributes:
        metadata: the key-value section; arrays as :class:`ArrayValue`.
        data_offset: where the tensor data starts in the file.
        tokens: the token list (only when read with ``tokens=True``).
        tokens_sha256: the hash of the token array's bytes (None without one).
        prefix_sha256: ``{n: hash of the first n tokens' bytes}`` for the
            ``MAX_VOCAB_SIZE_DIFFERENCE`` lengths below the full one.
    """

    path: str
    version: int
    metadata: dict[str, object]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int
    tokens: list[bytes] | None = None
    tokens_sha256: str | None = None
    prefix_sha256: dict[int, str] = field(default_factory=dict)

    def tensor_bytes(self) -> dict[str, int]:
        """Each tensor's size in bytes, from the offsets (alignment padding included)."""
        ordered = sorted(self.tensors, key=lambda t: t.offset)
        ends = [t.offset for t in ordered[1:]] + [self.file_size - self.data_offset]
        return {t.name: max(0, end - t.offset) for t, end in zip(ordered, ends)}


class _Reader:
    """Sequential reads from a file through a buffer of ``CHUNK`` bytes."""

    def __init__(self, f, path: str, size: int) -> None:
        self.f, self.path, self.size = f, path, size
        self.buf, self.pos, self.base = b"", 0, 0  # base: the file offset of buf[0]

    def need(self, n: int) -> None:
        if self.pos + n <= len(self.buf):
            return
        if self.base + self.pos + n > self.size:
            raise HeaderError(f"{self.path}: the GGUF header is cut short (it needs byte {self.base + self.pos + n} "
                              f"of {self.size})")
        rest = self.buf[self.pos:]
        self.base += self.pos
        self.buf, self.pos = rest + self.f.read(max(CHUNK, n - len(rest))), 0
        if len(self.buf) < n:
            raise HeaderError(f"{self.path}: the GGUF header is cut short (at byte {self.base + len(self.buf)})")

    def unpack(self, fmt: struct.Struct):
        self.need(fmt.size)
        value = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return value

    def skip(self, n: int) -> None:
        if self.pos + n <= len(self.buf):
            self.pos += n
            return
        n -= len(self.buf) - self.pos
        self.base += len(self.buf) + n
        self.buf, self.pos = b"", 0
        self.f.seek(self.base)

    def length(self, n: int, at: int) -> int:
        """A string's length ``n``, read at byte ``at``, if it is one a header can hold."""
        if n > MAX_STRING:
            raise HeaderError(f"{self.path}: the GGUF header is malformed (a string of {n} bytes at byte {at})")
        return n

    def string(self) -> str:
        at = self.base + self.pos
        n = self.length(self.unpack(_U64), at)
        self.need(n)
        value = self.buf[self.pos:self.pos + n]
        self.pos += n
        return value.decode("utf-8", errors="replace")

    def strings(self, count: int, *, keep: bool, hashed: bool) -> tuple[list[bytes] | None, str | None, dict]:
        """Walk an array of ``count`` strings. Returns the strings (``keep``, else None), and (``hashed``) the
        hash of the array's bytes and ``{n: hash of the first n strings' bytes}`` for the last
        ``MAX_VOCAB_SIZE_DIFFERENCE`` lengths below ``count``."""
        kept: list[bytes] | None = [] if keep else None
        digest = hashlib.sha256() if hashed else None
        prefixes: dict[int, str] = {}
        i = self._walk(0, max(0, count - MAX_VOCAB_SIZE_DIFFERENCE) if hashed else count, kept, digest)
        while i < count:  # one at a time: each length's hash
            prefixes[i] = digest.copy().hexdigest()  # type: ignore[union-attr]
            i = self._walk(i, i + 1, kept, digest)
        return kept, (digest.hexdigest() if digest is not None else None), prefixes

    def _walk(self, i: int, stop: int, kept: list[bytes] | None, digest) -> int:
        """Strings i..stop-1 of an array, as many at a time as the buffer holds."""
        unpack = _U64.unpack_from
        while i < stop:
            self.need(8)
            self.need(8 + self.length(unpack(self.buf, self.pos)[0], self.base + self.pos))
            buf, pos, start = self.buf, self.pos, self.pos
            end = len(buf)
            while i < stop and pos + 8 <= end:
                n = unpack(buf, pos)[0]
                if pos + 8 + n > end:
                    break
                if kept is not None:
                    kept.append(buf[pos + 8:pos + 8 + n])
                pos += 8 + n
                i += 1
            if digest is not None:
                digest.update(memoryview(buf)[start:pos])
            self.pos = pos
        return i

    def value(self, vtype: int, key: str):
        if vtype in _SCALARS:
            fmt = struct.Struct(_SCALARS[vtype])
            return self.unpack(fmt)
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack(_U32), self.unpack(_U64)
            if etype in _SCALARS:
                self.skip(struct.calcsize(_SCALARS[etype]) * count)
            elif etype == _STRING:
                self.strings(count, keep=False, hashed=False)
            else:
                raise HeaderError(f"{self.path}: key {key!r} is an array of type {etype}, which GGUF does not have")
            return ArrayValue(etype, count)
        raise HeaderError(f"{self.path}: key {key!r} has value type {vtype}, which GGUF does not have")


def read_header(path: str | os.PathLike, *, tokens: bool = False) -> Header:
    """Read a GGUF file's header (key-value section and tensor infos).

    Args:
        path: the file.
        tokens: also keep the token list (for :func:`specllama.vocab.check_compatible`).

    Returns:
        the :class:`Header`; the token array is hashed either way.

    Raises:
        HeaderError: not a GGUF file, an unknown version, a header cut short
            or malformed (one line naming the file).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return _read(_Reader(f, path, size), path, size, tokens)
    except OSError as e:
        raise HeaderError(f"{path}: cannot read it ({e.strerror})") from None
    except (UnicodeDecodeError, OverflowError, MemoryError, ValueError, struct.error) as e:
        if isinstance(e, HeaderError):
            raise
        raise HeaderError(f"{path}: the GGUF header is malformed ({type(e).__name__})") from None


def _read(r: _Reader, path: str, size: int, keep_tokens: bool) -> Header:
    r.need(min(4, size))
    if r.buf[:4] != MAGIC:
        raise HeaderError(f"{path}: not a GGUF file (it starts with {r.buf[:4]!r}, a GGUF file with {MAGIC!r})")
    r.pos = 4
    version = r.unpack(_U32)
    if version not in (2, 3):
        raise HeaderError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
    n_tensors, n_kv = r.unpack(_U64), r.unpack(_U64)
    if n_tensors > size or n_kv > size:
        raise HeaderError(f"{path}: the GGUF header is malformed ({n_tensors} tensors, {n_kv} keys in {size} bytes)")
    metadata: dict[str, object] = {}
    kept, digest, prefixes = None, None, {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.unpack(_U32)
        if key == TOKENS_KEY and vtype == _ARRAY:
            etype, count = r.unpack(_U32), r.unpack(_U64)
            if etype != _STRING:
                raise HeaderError(f"{path}: {TOKENS_KEY} is not an array of strings")
            kept, digest, prefixes = r.strings(count, keep=keep_tokens, hashed=True)
            metadata[key] = ArrayValue(etype, count)
        else:
            metadata[key] = r.value(vtype, key)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack(_U32)
        if n_dims > 8:
            raise HeaderError(f"{path}: tensor {name!r} has {n_dims} dimensions (GGUF allows at most 8)")
        shape = tuple(r.unpack(_U64) for _ in range(n_dims))
        tensors.append(TensorInfo(name, shape, r.unpack(_U32), r.unpack(_U64)))
    alignment = metadata.get("general.alignment", 32)
    alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
    end = r.base + r.pos
    data_offset = end + (-end % alignment)
    return Header(path, version, metadata, tensors, data_offset, size, kept, digest, prefixes)


def split_parts(path: str) -> list[str]:
    """All parts of a split GGUF named by any of them (``NAME-0000K-of-0000N.gguf``), first
    part first; ``[path]`` for a file that is not a part."""
    folder, name = os.path.split(path)
    m = SPLIT_NAME.match(name)
    if not m:
        return [path]
    count = int(m["count"])
    return [os.path.join(folder, f"{m['stem']}-{no:05d}-of-{count:05d}.gguf") for no in range(1, count + 1)]


def is_later_part(path: str) -> bool:
    """Whether ``path`` is the second or a later part of a split GGUF (opened through its first part)."""
    m = SPLIT_NAME.match(os.path.basename(path))
    return bool(m) and int(m["no"]) > 1
