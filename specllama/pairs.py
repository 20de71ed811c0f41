"""Curated draft/target pairs (``models.txt`` at the repository root), the
local Hugging Face cache, and downloads.

A pair name can stand wherever a GGUF path can: ``-m NAME`` is the pair's
target, ``-md NAME`` its draft, ``--pair NAME`` both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from .errors import SpecLlamaError

ROLES = ("target", "draft")


@dataclass(frozen=True)
class ModelFile:
    pair: str
    role: str
    repo: str
    filename: str
    size: str
    comment: str = ""

    @property
    def url(self) -> str:
        """Where the file is downloaded from (honours $HF_ENDPOINT)."""
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo, self.filename)


@dataclass(frozen=True)
class Pair:
    name: str
    target: ModelFile
    draft: ModelFile


def parse_models(text: str, source: str = "models.txt") -> dict[str, Pair]:
    """Parse models.txt: ``name role repo file size  # comment`` per line."""
    files: dict[str, dict[str, ModelFile]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line, _, comment = raw.partition("#")
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 5 or fields[1] not in ROLES:
            raise ValueError(f"{source} line {n}: expected 'name target|draft repo file size', got {raw.strip()!r}")
        name, role, repo, filename, size = fields
        if role in files.setdefault(name, {}):
            raise ValueError(f"{source} line {n}: pair {name!r} has a second {role} line")
        files[name][role] = ModelFile(name, role, repo, filename, size, comment.strip())
    pairs = {}
    for name, roles in files.items():
        missing = [r for r in ROLES if r not in roles]
        if missing:
            raise ValueError(f"{source}: pair {name!r} has no {missing[0]} line")
        pairs[name] = Pair(name, roles["target"], roles["draft"])
    return pairs


MODELS_TXT = "models.txt"


def models_txt() -> Path:
    """The one list of pairs: the repository's ``models.txt`` (a checkout or
    an editable install), or the copy a built wheel carries in the package."""
    in_repo = Path(__file__).resolve().parent.parent / MODELS_TXT
    if in_repo.is_file():
        return in_repo
    packaged = resources.files("specllama").joinpath(MODELS_TXT)
    if packaged.is_file():
        return Path(str(packaged))
    raise SpecLlamaError(f"{MODELS_TXT} is missing from this installation (looked in {str(in_repo.parent)!r})")


def curated_pairs() -> dict[str, Pair]:
    path = models_txt()
    return parse_models(path.read_text(encoding="utf-8"), str(path))


def get_pair(name: str) -> Pair:
    pairs = curated_pairs()
    if name not in pairs:
        from .demo import BUILTIN_PAIRS

        known = ", ".join(sorted(BUILTIN_PAIRS)) + " (built in), " + ", ".join(sorted(pairs))
        raise SpecLlamaError(f"unknown pair {name!r}; known: {known} (see specllama models)")
    return pairs[name]


def cached_path(f: ModelFile) -> str | None:
    """The file's path in the local Hugging Face cache, or None (no network)."""
    from huggingface_hub import try_to_load_from_cache

    path = try_to_load_from_cache(f.repo, f.filename)
    return path if isinstance(path, str) and os.path.exists(path) else None


def resolve_model(value: str | None, role: str) -> str | None:
    """A -m/-md value: an existing path stays; a pair name becomes the cached
    file of that role, or a one-line error saying how to get it."""
    if value is None or os.path.exists(value):
        return value
    pairs = curated_pairs()
    if value not in pairs:
        return value  # not a name: let the file check report the missing path
    f = getattr(pairs[value], role)
    path = cached_path(f)
    if path is None:
        raise SpecLlamaError(
            f"{value} {role} {f.repo}/{f.filename} is not downloaded: run  specllama pull {value}  "
            f"(or fetch {f.url} by hand and pass its path)"
        )
    return path


def pull(name: str, *, on_file: Callable[[ModelFile], None] = lambda f: None) -> tuple[str, str]:
    """Download a pair's two files into the Hugging Face cache (resumable,
    with progress bars). Returns the (target, draft) paths."""
    from huggingface_hub import hf_hub_download

    pair = get_pair(name)
    paths = []
    for f in (pair.target, pair.draft):
        on_file(f)
        try:
            paths.append(hf_hub_download(f.repo, f.filename))
        except Exception as e:  # network, HTTP and disk errors alike: say what to fetch by hand
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SpecLlamaError(
                f"cannot download {f.repo}/{f.filename} ({reason}); fetch {f.url} by hand and pass its path with "
                f"{'-m' if f.role == 'target' else '-md'}"
            ) from None
    return paths[0], paths[1]
