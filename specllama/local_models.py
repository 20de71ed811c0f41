"""Every GGUF model on this machine, from its header alone: Ollama's, LM Studio's
and the Hugging Face cache's models, specllama's cache folder, and folders
given; grouped by tokenizer, with the pairs that could draft.

A model's record (architecture, parameters, quantization, size, context, its
vocabulary's fingerprint, what a token costs) is remembered by path, size and
modification time in :func:`index_file`, so a second scan reads no header that
did not change. A file that cannot be read is one line naming it; the scan goes on.
No numpy and no llama.cpp here: a scan whose headers are remembered is quick.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from .errors import SpecLlamaError
from .gguf_header import Header, HeaderError, is_later_part, read_header, split_parts
from .model_refs import StoreModel, store_models
from .speedup import MIN_EXPECTED_SPEEDUP, header_speedup

INDEX_VARIABLE = "SPECLLAMA_LOCAL_MODELS_FILE"  # the index's full path, instead of the default
INDEX_NAME = "local-models.json"
INDEX_VERSION = 1
FINGERPRINT_CHARS = 16  # hex digits kept of each vocabulary hash (64 bits)
SHOWN_FINGERPRINT = 8  # ... and shown
# tokenizer.ggml.model -> llama.cpp's llama_vocab_type (what LlamaModel.vocab_info reports)
VOCAB_TYPES = {"no_vocab": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}
# llama.cpp's BOS/EOS ids for a vocabulary type whose header names none
DEFAULT_SPECIAL = {1: (1, 2), 2: (11, 11)}
NO_TOKEN = -1


@dataclass
class LocalModel:
    """One GGUF model as its header describes it.

    Attributes:
        ref: how to name it (a store reference, or its path).
        path: the file (a split model's first part).
        size: bytes on disk, every part.
        cost_bytes: the weights read per token: every tensor but the input
            embedding (a lookup), which counts where the output shares it.
        prefixes: ``{n: hash of the first n tokens}`` for the sizes within
            the engine's margin below ``n_vocab`` (see :func:`compatible`).
    """

    ref: str
    path: str
    size: int
    architecture: str
    name: str
    params: int
    quantization: str
    context: int
    n_layer: int
    n_embd: int
    cost_bytes: int
    tokenizer: str
    vocab_type: int
    bos: int
    eos: int
    n_vocab: int
    fingerprint: str
    prefixes: dict[str, str] = field(default_factory=dict)

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:SHOWN_FINGERPRINT] if self.fingerprint else "-"


def index_file() -> Path:
    """Where scanned headers are remembered: ``$SPECLLAMA_LOCAL_MODELS_FILE``, else
    ``local-models.json`` in specllama's cache folder (``$SPECLLAMA_CACHE``)."""
    env = os.environ.get(INDEX_VARIABLE)
    if env:
        return Path(env)
    from .demo import cache_dir

    return cache_dir() / INDEX_NAME


def default_places() -> list[Path]:
    """Folders scanned besides the stores: specllama's cache folder (the built demo models)."""
    from .demo import cache_dir

    return [cache_dir()]


# -- reading one model ---------------------------------------------------------

def _quantization(file_type: object) -> str:
    if not isinstance(file_type, int):
        return "?"
    from gguf import LlamaFileType  # the names llama.cpp gives its file types

    try:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"type {file_type}"


def _special(metadata: dict, key: str, vocab_type: int, default_index: int) -> int:
    value = metadata.get(f"tokenizer.ggml.{key}_token_id")
    if isinstance(value, int):
        return value
    return DEFAULT_SPECIAL.get(vocab_type, (NO_TOKEN, NO_TOKEN))[default_index]


def read_model(path: str, ref: str | None = None) -> LocalModel:
    """One model's record from its header (and, for a split model, every part's tensor infos).

    Raises:
        HeaderError: a file that is not GGUF, a header cut short, a missing part.
    """
    parts = split_parts(path)
    head = read_header(parts[0])
    headers: list[Header] = [head]
    for part in parts[1:]:
        if not os.path.exists(part):
            raise HeaderError(f"{path}: the split model is missing its part {part!r}")
        headers.append(read_header(part))
    md = head.metadata
    arch = str(md.get("general.architecture", "?"))
    tensors = {t.name: t for h in headers for t in h.tensors}
    sizes = {name: n for h in headers for name, n in h.tensor_bytes().items()}
    params = 0
    for t in tensors.values():
        n = 1
        for d in t.shape:
            n *= d
        params += n
    tied = "output.weight" not in tensors
    cost = sum(n for name, n in sizes.items() if tied or name != "token_embd.weight")
    tokenizer = str(md.get("tokenizer.ggml.model", "none"))
    vocab_type = VOCAB_TYPES.get(tokenizer, NO_TOKEN)
    tokens = md.get("tokenizer.ggml.tokens")
    n_vocab = getattr(tokens, "count", 0)

    def number(key: str) -> int:
        value = md.get(f"{arch}.{key}")
        return int(value) if isinstance(value, (int, float)) else 0

    return LocalModel(
        ref=ref or path, path=path, size=sum(h.file_size for h in headers), architecture=arch,
        name=str(md.get("general.name", "")), params=params, quantization=_quantization(md.get("general.file_type")),
        context=number("context_length"), n_layer=number("block_count"), n_embd=number("embedding_length"),
        cost_bytes=cost, tokenizer=tokenizer, vocab_type=vocab_type, bos=_special(md, "bos", vocab_type, 0),
        eos=_special(md, "eos", vocab_type, 1), n_vocab=n_vocab,
        fingerprint=(head.tokens_sha256 or "")[:FINGERPRINT_CHARS],
        prefixes={str(n): h[:FINGERPRINT_CHARS] for n, h in head.prefix_sha256.items()},
    )


# -- the scan ----------------------------------------------------------------------

@dataclass
class Scan:
    """What a scan found: the models, and one line for each file that could not be read."""

    models: list[LocalModel]
    problems: list[str]


def _stamp(path: str) -> str | None:
    """Size and modification time of every part: what invalidates a remembered header."""
    try:
        stats = [os.stat(p) for p in split_parts(path)]
    except OSError:
        return None
    return ";".join(f"{s.st_size}:{s.st_mtime_ns}" for s in stats)


def _read_index() -> dict:
    try:
        data = json.loads(index_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data.get("entries", {}) if isinstance(data, dict) and data.get("version") == INDEX_VERSION else {}


def _write_index(entries: dict) -> None:
    """Best effort: an index that cannot be written is no error (the next scan reads the headers again)."""
    path = index_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": INDEX_VERSION, "entries": entries}), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def folder_models(folder: Path) -> list[StoreModel]:
    """Every GGUF model under ``folder`` (a split model once, by its first part), named by its path."""
    if folder.is_file():
        return [StoreModel(str(folder), str(folder))]
    if not folder.is_dir():
        return []
    return [StoreModel(str(p), str(p)) for p in sorted(folder.rglob("*.gguf")) if not is_later_part(str(p))]


def scan(dirs: Iterable[str | os.PathLike] = (), *, stores: bool = True) -> Scan:
    """Every GGUF model in the stores (``stores``), specllama's cache folder and ``dirs``.

    Args:
        dirs: more folders (searched recursively for ``*.gguf``) or files.
        stores: also Ollama's, the Hugging Face cache's and LM Studio's models,
            and specllama's cache folder.

    Returns:
        the models (each file once, the first name found for it) and the problems.
    """
    found: list[StoreModel] = []
    problems: list[str] = []
    if stores:
        in_stores, problems = store_models()
        found += in_stores
        for folder in default_places():
            found += folder_models(folder)
    for d in dirs:
        if not os.path.exists(d):
            problems.append(f"{d}: no such file or folder")
        found += folder_models(Path(d))
    index = _read_index()
    fresh: dict = {}
    models: list[LocalModel] = []
    seen: set[str] = set()
    for entry in found:
        real = os.path.realpath(entry.path)
        if real in seen:
            continue
        seen.add(real)
        stamp = _stamp(entry.path)
        if stamp is None:
            problems.append(f"{entry.ref}: cannot read it")
            continue
        kept = index.get(real)
        if not (isinstance(kept, dict) and kept.get("stamp") == stamp):
            try:
                kept = {"stamp": stamp, "model": asdict(read_model(entry.path))}
            except HeaderError as e:
                kept = {"stamp": stamp, "error": str(e)}
        fresh[real] = kept
        if "error" in kept:
            problems.append(kept["error"] if entry.ref == entry.path else f"{entry.ref}: {kept['error']}")
        else:
            models.append(LocalModel(**{**kept["model"], "ref": entry.ref, "path": entry.path}))
    if any(index.get(k) != v for k, v in fresh.items()):
        _write_index({k: v for k, v in index.items() if k not in fresh and os.path.exists(k)} | fresh)
    return Scan(models, problems)


# -- which can draft for which -------------------------------------------------------

def compatible(target: LocalModel, draft: LocalModel) -> bool:
    """Whether ``draft`` passes :func:`specllama.vocab.check_compatible` for ``target``, from the
    headers' hashes: the same vocabulary type and BOS/EOS ids, sizes within the margin, and the
    smaller vocabulary's tokens the larger one's first ones (hash equality)."""
    if not target.fingerprint or not draft.fingerprint or (target.vocab_type, target.bos, target.eos) != (
            draft.vocab_type, draft.bos, draft.eos):
        return False
    small, large = sorted((target, draft), key=lambda m: m.n_vocab)
    if small.n_vocab == large.n_vocab:
        return small.fingerprint == large.fingerprint
    return large.prefixes.get(str(small.n_vocab)) == small.fingerprint


def cost_ratio(target: LocalModel, draft: LocalModel) -> float:
    """What a draft token costs relative to a target token: weights read per token."""
    return draft.cost_bytes / target.cost_bytes if target.cost_bytes else float("inf")


@dataclass(frozen=True)
class Candidate:
    """A model considered as a draft for a target: its expected speed-up from the headers (1.0 when none), or
    why it cannot draft."""

    model: LocalModel
    expected: float
    k: int
    reason: str | None  # None: it can draft and should pay
    compatible: bool  # it passes the vocabulary check (a reason then says why it should not pay)


def candidates(target: LocalModel, models: Iterable[LocalModel]) -> list[Candidate]:
    """Every other model as a draft for ``target``, best expected speed-up first."""
    out = []
    for m in models:
        if m.path == target.path:  # a scan names each file once
            continue
        if not compatible(target, m):
            out.append(Candidate(m, 1.0, 0, vocabulary_reason(target, m), False))
            continue
        ratio = cost_ratio(target, m)
        gain, k = header_speedup(ratio)
        reason = None if gain >= MIN_EXPECTED_SPEEDUP else (
            f"a token costs {ratio:.2f}x the target's, so it should not pay (expected {gain:.2f}x at best, "
            f"below {MIN_EXPECTED_SPEEDUP:g}x)")
        out.append(Candidate(m, gain, k, reason, True))
    return sorted(out, key=lambda c: (c.reason is not None, -c.expected, c.model.ref))


def vocabulary_reason(target: LocalModel, draft: LocalModel) -> str:
    """Why ``draft``'s vocabulary fails the engine's check for ``target``: that check's own words, on
    the tokens read from both headers."""
    from .vocab import VocabInfo, check_compatible

    def info(m: LocalModel) -> VocabInfo:
        if not m.fingerprint:
            return VocabInfo(m.ref, m.vocab_type, m.bos, m.eos, [])
        return VocabInfo(m.ref, m.vocab_type, m.bos, m.eos, read_header(m.path, tokens=True).tokens or [])

    try:
        if not target.fingerprint or not draft.fingerprint:
            return "a model without a vocabulary cannot draft"
        check_compatible(info(target), info(draft))
    except SpecLlamaError as e:
        return str(e).split(": ", 1)[-1] if str(e).startswith("draft ") else str(e)
    return "its vocabulary matches, but its header's hashes did not"  # not reached for intact headers


def groups(models: list[LocalModel]) -> list[list[LocalModel]]:
    """The models in groups that share a tokenizer (each model compatible with another of its group),
    largest model first within a group, groups by their largest model."""
    parent = list(range(len(models)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_kind: dict[tuple, list[int]] = {}
    for i, m in enumerate(models):
        by_kind.setdefault((m.vocab_type, m.bos, m.eos), []).append(i)
    for members in by_kind.values():
        for a_pos, a in enumerate(members):
            for b in members[a_pos + 1:]:
                if root(a) != root(b) and compatible(models[a], models[b]):
                    parent[root(b)] = root(a)
    grouped: dict[int, list[LocalModel]] = {}
    for i, m in enumerate(models):
        grouped.setdefault(root(i), []).append(m)
    ordered = [sorted(g, key=lambda m: (-m.cost_bytes, m.ref)) for g in grouped.values()]
    return sorted(ordered, key=lambda g: (-g[0].cost_bytes, g[0].ref))


# -- the listing ----------------------------------------------------------------------

def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


COLUMNS = ("model", "arch", "params", "quant", "size", "context")


def format_scan(found: Scan) -> str:
    """The listing ``specllama models --local`` prints: one table per tokenizer, then its pairs."""
    if not found.models:
        return "no GGUF models found"
    lines = []
    for group in groups(found.models):
        first = group[0]
        lines.append(f"tokenizer {first.short_fingerprint} ({first.tokenizer}, {first.n_vocab} tokens): "
                     f"{len(group)} model{'s' if len(group) != 1 else ''}")
        cells = [list(COLUMNS)] + [[m.ref, m.architecture, human_count(m.params), m.quantization,
                                    human_size(m.size), str(m.context)] for m in group]
        widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        pairs = 0
        for target in group:
            good = [c for c in candidates(target, group) if c.reason is None]
            if good:
                pairs += 1
                best = good[0]
                more = f"; {len(good) - 1} more could draft" if len(good) > 1 else ""
                lines.append(f"  pair: -m {target.ref} -md {best.model.ref}  (expected {best.expected:.2f}x from "
                             f"sizes; a token costs {cost_ratio(target, best.model):.2f}x{more})")
        if not pairs:
            lines.append("  pair: none (no model here is much cheaper per token than another)")
        lines.append("")
    return "\n".join(lines).rstrip("\n")
