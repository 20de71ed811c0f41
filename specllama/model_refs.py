"""Model references: the one place a name a user gives for a model becomes a GGUF path.

A reference is a path; a pair name (built in, curated in models.txt, or saved
by ``specllama pair --save``), standing for its file of the role asked; or a
model in another tool's store, found where that tool keeps it (nothing is
downloaded):

- ``ollama:NAME[:TAG]``, ``ollama:NAMESPACE/NAME:TAG``, ``ollama:hf.co/ORG/REPO:TAG``:
  Ollama's manifest, its model layer's blob (``$OLLAMA_MODELS``, default
  ``~/.ollama/models``);
- ``hf:ORG/REPO/FILE.gguf`` (``hf:ORG/REPO@REVISION/FILE.gguf``; ``hf:ORG/REPO`` when it holds one
  model): the Hugging Face hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``,
  default ``~/.cache/huggingface/hub``), the snapshot ``refs/main`` names first;
- ``lmstudio:PUBLISHER/REPO/FILE.gguf`` (``lmstudio:PUBLISHER/REPO`` when it holds one model):
  LM Studio's models folder (``~/.lmstudio/models``, the older
  ``~/.cache/lm-studio/models``, or ``$LMSTUDIO_MODELS``).

A split GGUF (``NAME-00001-of-00003.gguf``) opens by its first part, whichever part
(or ``NAME.gguf``) is named. A reference that finds nothing, or more than one
model, is one :class:`~specllama.errors.SpecLlamaError` line listing what was found
and how to name it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecLlamaError
from .gguf_header import MAGIC, SPLIT_NAME, is_later_part, split_parts

OLLAMA, HF, LMSTUDIO = "ollama:", "hf:", "lmstudio:"
PREFIXES = (OLLAMA, HF, LMSTUDIO)
OLLAMA_HOST, OLLAMA_NAMESPACE, OLLAMA_TAG = "registry.ollama.ai", "library", "latest"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
LMSTUDIO_VARIABLE = "LMSTUDIO_MODELS"  # LM Studio's models folder(s), os.pathsep-separated, instead of the defaults
MAX_LISTED = 8  # references an error lists before "and N more"
FORMS = ("a path to a .gguf file, a pair name, ollama:NAME:TAG, hf:ORG/REPO/FILE.gguf or "
         "lmstudio:PUBLISHER/REPO/FILE.gguf")


@dataclass(frozen=True)
class StoreModel:
    """A GGUF model in a tool's store: how to name it, and its file (a split model's first part)."""

    ref: str
    path: str


# -- where the stores are -------------------------------------------------

def ollama_dir() -> Path:
    """Ollama's models folder: ``$OLLAMA_MODELS``, else ``~/.ollama/models``."""
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env) if env else Path.home() / ".ollama" / "models"


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it: ``$HF_HUB_CACHE``, ``$HF_HOME/hub``,
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    cache = os.environ.get("XDG_CACHE_HOME")
    return (Path(cache) if cache else Path.home() / ".cache") / "huggingface" / "hub"


def lmstudio_dirs() -> list[Path]:
    """LM Studio's models folders: ``$LMSTUDIO_MODELS`` (os.pathsep-separated), else
    ``~/.lmstudio/models`` and the older ``~/.cache/lm-studio/models``."""
    env = os.environ.get(LMSTUDIO_VARIABLE)
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


# -- the one resolution -----------------------------------------------------

def is_store_ref(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIXES)


def model_id(value: object, path: str) -> str:
    """How a model is named to a server's clients: a store reference as given (its file is a blob's
    hash, for Ollama), else its file's name."""
    return value if is_store_ref(value) else os.path.basename(path)  # type: ignore[return-value]


def resolve(value: str, role: str) -> str:
    """The GGUF path a reference names (see the module's doc).

    Args:
        value: a path, a pair name or a store reference.
        role: ``"target"`` or ``"draft"``: the file of a pair name.

    Returns:
        a path (a split model's first part). A value that is none of these is
        returned as it is, for the file check to name the missing path.

    Raises:
        SpecLlamaError: a store reference that finds nothing or more than one
            model, a split model missing a part, a pair that is not downloaded.
    """
    if value.startswith(OLLAMA):
        return _checked_parts(_ollama(value[len(OLLAMA):]), value)
    if value.startswith(HF):
        return _checked_parts(_hf(value[len(HF):]), value)
    if value.startswith(LMSTUDIO):
        return _checked_parts(_lmstudio(value[len(LMSTUDIO):]), value)
    if os.path.exists(value):
        return _checked_parts(split_parts(value)[0] if is_later_part(value) else value, value)
    return _pair_file(value, role)


def _pair_file(name: str, role: str) -> str:
    from .demo import BUILTIN_PAIRS
    from .pairs import ROLES, resolve_model
    from .saved_pairs import saved_pair

    if name in BUILTIN_PAIRS:
        return BUILTIN_PAIRS[name]()[ROLES.index(role)]
    saved = saved_pair(name)
    if saved is not None:
        return resolve(saved[ROLES.index(role)], role)
    return resolve_model(name, role)  # a curated pair's cached file, or the value itself


def check_pair(name: str) -> None:
    """Raise, listing the pairs there are, unless ``name`` is a pair: built in, curated, or saved."""
    from .demo import BUILTIN_PAIRS
    from .pairs import curated_pairs
    from .saved_pairs import saved_pairs

    saved = saved_pairs()
    if name in BUILTIN_PAIRS or name in saved or name in curated_pairs():
        return
    known = ", ".join(sorted(BUILTIN_PAIRS)) + " (built in), " + ", ".join(sorted(curated_pairs())) + (
        f", {', '.join(sorted(saved))} (saved by specllama pair --save)" if saved else "")
    raise SpecLlamaError(f"unknown pair {name!r}; known: {known} (see specllama models)")


def _checked_parts(path: str, ref: str) -> str:
    """``path``, after checking that every part of a split model is there."""
    for part in split_parts(path)[1:]:
        if not os.path.exists(part):
            raise SpecLlamaError(f"{ref}: the split model {os.path.basename(path)!r} is missing its part "
                                 f"{part!r} (every part must sit beside the first)")
    return path


def _ambiguous_or_missing(ref: str, found: list[str], what: str) -> SpecLlamaError:
    listed = ", ".join(found[:MAX_LISTED]) + (f" and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else "")
    if not found:
        return SpecLlamaError(f"{ref}: {what}; nothing of that kind was found (a model reference is {FORMS})")
    return SpecLlamaError(f"{ref}: {what}; found: {listed} (name one of them)")


def _one_model(files: list[str]) -> list[str]:
    """The models among files: each split model once, by its first part."""
    return sorted(f for f in files if f.endswith(".gguf") and not is_later_part(f))


def _pick_file(folder: Path, filename: str | None, ref: str, ref_of) -> str:
    """A GGUF file in ``folder`` by its name there (a split model: by any part, or its name without the part
    suffix); with no name, the folder's one model."""
    models = _one_model([p.relative_to(folder).as_posix() for p in folder.rglob("*.gguf")]) if folder.is_dir() \
        else []
    if filename is None:
        if len(models) == 1:
            return _not_dangling(folder / models[0], ref)
        raise _ambiguous_or_missing(ref, [ref_of(m) for m in models],
                                    "more than one model is there" if models else "no GGUF file is there")
    path = folder / filename
    _not_dangling(path, ref)
    if path.is_file():
        return split_parts(str(path))[0] if is_later_part(str(path)) else str(path)
    stem = filename[:-len(".gguf")] if filename.endswith(".gguf") else filename
    firsts = [m for m in models if (s := SPLIT_NAME.match(m)) and s["stem"] == stem]
    if len(firsts) == 1:
        return str(folder / firsts[0])
    raise _ambiguous_or_missing(ref, [ref_of(m) for m in models], f"no file {filename!r} there")


def _not_dangling(path: Path, ref: str) -> str:
    """``path``, unless it is a link to a file that is not there (the hub cache's snapshot links to a blob that an
    unfinished or removed download left out)."""
    if path.is_symlink() and not path.exists():
        raise SpecLlamaError(f"{ref}: {path.name!r} there links to {os.readlink(path)!r}, which is missing (a download "
                             "that did not finish, or a removed file): download it again")
    return str(path)


# -- Ollama -------------------------------------------------------------------

def _ollama_parts(name: str) -> tuple[str, str, str, str]:
    """(host, namespace, model, tag) of an Ollama name, with Ollama's defaults."""
    path, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", OLLAMA_TAG)
    parts = path.split("/")
    if len(parts) == 1:
        parts = [OLLAMA_HOST, OLLAMA_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [OLLAMA_HOST, *parts]
    return parts[0], "/".join(parts[1:-1]), parts[-1], tag or OLLAMA_TAG


def ollama_ref(host: str, namespace: str, model: str, tag: str) -> str:
    """The shortest reference Ollama would take for this manifest."""
    if host == OLLAMA_HOST:
        name = model if namespace == OLLAMA_NAMESPACE else f"{namespace}/{model}"
    else:
        name = f"{host}/{namespace}/{model}"
    return f"{OLLAMA}{name}:{tag}"


def _ollama(name: str) -> str:
    ref = OLLAMA + name
    if not name:
        raise SpecLlamaError(f"{ref}: give a model, as ollama:NAME:TAG (e.g. ollama:qwen2.5-coder:7b)")
    host, namespace, model, tag = _ollama_parts(name)
    root = ollama_dir()
    manifest = root / "manifests" / host / namespace / model / tag
    if not manifest.is_file():
        models, _ = ollama_models(root, with_blobs=False)
        same = [m.ref for m in models if m.ref.rsplit(":", 1)[0] == ollama_ref(host, namespace, model, tag)
                .rsplit(":", 1)[0]]
        raise _ambiguous_or_missing(ref, same or [m.ref for m in models],
                                    f"no such model in Ollama's store {str(root)!r} ($OLLAMA_MODELS)")
    return _ollama_blob(root, manifest, ref)


def _ollama_blob(root: Path, manifest: Path, ref: str) -> str:
    """The model layer's blob of one manifest; a manifest Ollama could not run as a GGUF model is an error."""
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
    except (OSError, ValueError, AttributeError) as e:
        raise SpecLlamaError(f"{ref}: its manifest {str(manifest)!r} is not valid JSON ({type(e).__name__})") from None
    digests = [layer.get("digest", "") for layer in layers
               if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER]
    if not digests:
        kinds = sorted({str(layer.get("mediaType")) for layer in layers if isinstance(layer, dict)})
        raise SpecLlamaError(f"{ref}: not a GGUF model (its manifest has no {OLLAMA_MODEL_LAYER} layer; its layers: "
                             f"{', '.join(kinds) or 'none'})")
    blob = root / "blobs" / digests[0].replace(":", "-")
    if not blob.is_file():
        raise SpecLlamaError(f"{ref}: its model blob {str(blob)!r} is missing (ollama pull it again)")
    try:
        with open(blob, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise SpecLlamaError(f"{ref}: cannot read its model blob {str(blob)!r} ({e.strerror})") from None
    if magic != MAGIC:
        raise SpecLlamaError(f"{ref}: not a GGUF model (its model blob {str(blob)!r} starts with {magic!r})")
    return str(blob)


def ollama_models(root: Path | None = None, *, with_blobs: bool = True) -> tuple[list[StoreModel], list[str]]:
    """Every manifest in Ollama's store: its reference and model blob (``with_blobs``; else the manifest),
    and one line for each manifest that names no GGUF blob."""
    root = ollama_dir() if root is None else root
    manifests = root / "manifests"
    models: list[StoreModel] = []
    problems: list[str] = []
    if not manifests.is_dir():
        return models, problems
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        parts = manifest.relative_to(manifests).parts
        if len(parts) < 4:
            continue
        ref = ollama_ref(parts[0], "/".join(parts[1:-2]), parts[-2], parts[-1])
        if not with_blobs:
            models.append(StoreModel(ref, str(manifest)))
            continue
        try:
            models.append(StoreModel(ref, _ollama_blob(root, manifest, ref)))
        except SpecLlamaError as e:
            problems.append(str(e))
    return models, problems


# -- the Hugging Face hub cache ----------------------------------------------------

def _hf_repo_dir(repo: str) -> Path:
    return hub_cache_dir() / ("models--" + repo.replace("/", "--"))


def _hf_snapshots(repo_dir: Path) -> list[Path]:
    """The repository's snapshots, the one ``refs/main`` names first, then the newest."""
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return []
    found = sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    try:
        main = (repo_dir / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        main = ""
    return sorted(found, key=lambda p: p.name != main)


def _hf(spec: str) -> str:
    ref = HF + spec
    parts = spec.split("/")
    if len(parts) < 2 or not all(parts[:2]):
        raise SpecLlamaError(f"{ref}: give a repository and a file, as hf:ORG/REPO/FILE.gguf")
    repo, _, revision = "/".join(parts[:2]).partition("@")
    filename = "/".join(parts[2:]) or None
    repo_dir = _hf_repo_dir(repo)
    snapshots = _hf_snapshots(repo_dir)
    if revision:  # a commit (or its start), or a branch or tag that refs/ names (huggingface_hub writes refs/main)
        try:
            named = (repo_dir / "refs" / revision).read_text(encoding="utf-8").strip()
        except (OSError, ValueError):
            named = ""
        snapshots = [s for s in snapshots if s.name == named or s.name.startswith(revision)]
    if not snapshots:
        cached = [m.ref for m in hf_models()]
        raise _ambiguous_or_missing(ref, cached, f"not in the Hugging Face cache {str(hub_cache_dir())!r} "
                                                 "($HF_HUB_CACHE; specllama downloads nothing here)")
    errors = []
    for snapshot in snapshots:  # refs/main's first; a file the main snapshot lacks may be in an older one
        try:
            return _pick_file(snapshot, filename, ref, lambda m, s=snapshot: _hf_ref(repo, s, m, snapshots[0]))
        except SpecLlamaError as e:
            errors.append(e)
    raise errors[0]


def _hf_ref(repo: str, snapshot: Path, filename: str, main: Path) -> str:
    at = "" if snapshot == main else f"@{snapshot.name[:12]}"
    return f"{HF}{repo}{at}/{filename}"


def hf_models(root: Path | None = None) -> list[StoreModel]:
    """Every GGUF model in the hub cache: the main snapshot's, and those only older snapshots hold."""
    root = hub_cache_dir() if root is None else root
    models: list[StoreModel] = []
    if not root.is_dir():
        return models
    for repo_dir in sorted(root.glob("models--*")):
        repo = repo_dir.name[len("models--"):].replace("--", "/", 1)
        snapshots = _hf_snapshots(repo_dir)
        seen: set[str] = set()
        for snapshot in snapshots:
            for name in _one_model([p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.gguf")]):
                if name not in seen:
                    seen.add(name)
                    models.append(StoreModel(_hf_ref(repo, snapshot, name, snapshots[0]), str(snapshot / name)))
    return models


# -- LM Studio ----------------------------------------------------------------

def _lmstudio(spec: str) -> str:
    ref = LMSTUDIO + spec
    parts = spec.split("/")
    if len(parts) < 2 or not all(parts[:2]):
        raise SpecLlamaError(f"{ref}: give a publisher, a repository and a file, as "
                             "lmstudio:PUBLISHER/REPO/FILE.gguf")
    filename = "/".join(parts[2:]) or None
    for root in lmstudio_dirs():
        folder = root / parts[0] / parts[1]
        if folder.is_dir():
            return _pick_file(folder, filename, ref, lambda m, r=root: f"{LMSTUDIO}{parts[0]}/{parts[1]}/{m}")
    where = " or ".join(repr(str(p)) for p in lmstudio_dirs())
    raise _ambiguous_or_missing(ref, [m.ref for m in lmstudio_models()],
                                f"not in LM Studio's models folder {where} (${LMSTUDIO_VARIABLE})")


def lmstudio_models(roots: list[Path] | None = None) -> list[StoreModel]:
    """Every GGUF model in LM Studio's models folders (PUBLISHER/REPO/FILE.gguf)."""
    models: list[StoreModel] = []
    for root in lmstudio_dirs() if roots is None else roots:
        if not root.is_dir():
            continue
        for name in _one_model([p.relative_to(root).as_posix() for p in root.rglob("*.gguf")]):
            if name.count("/") >= 2:
                models.append(StoreModel(LMSTUDIO + name, str(root / name)))
    return models


def store_models() -> tuple[list[StoreModel], list[str]]:
    """Every model in the stores above, and one line for each Ollama manifest that names no GGUF model."""
    ollama, problems = ollama_models()
    return ollama + hf_models() + lmstudio_models(), problems
