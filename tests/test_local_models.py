"""The models people already have: references into Ollama's store, the Hugging Face
cache and LM Studio's folder, split GGUFs, headers read without weights, and
`specllama models --local`. Every store is a real folder layout built here, with the
tiny generated GGUFs as its files; no test reads the user's stores."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from click.testing import CliRunner

from specllama import local_models, model_refs
from specllama.cli import main
from specllama.errors import SpecLlamaError
from specllama.gguf_header import HeaderError, read_header
from specllama.local_models import candidates, human_size, read_model, scan
from specllama.model_refs import OLLAMA_MODEL_LAYER, resolve
from specllama.speedup import header_speedup

from .tiny_models import random_weights, vocabulary, write_deep_target, write_model


@pytest.fixture
def stores(tmp_path, monkeypatch) -> dict[str, Path]:
    """Empty stores of each kind in tmp_path, and specllama's cache folder: nothing else is scanned."""
    places = {name: tmp_path / name for name in ("ollama", "hub", "lmstudio", "cache", "models")}
    for folder in places.values():
        folder.mkdir()
    monkeypatch.setenv("OLLAMA_MODELS", str(places["ollama"]))
    monkeypatch.setenv("HF_HUB_CACHE", str(places["hub"]))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("LMSTUDIO_MODELS", str(places["lmstudio"]))
    monkeypatch.setenv("SPECLLAMA_CACHE", str(places["cache"]))
    return places


def add_ollama(root: Path, host: str, namespace: str, model: str, tag: str, content: bytes | None,
               media_type: str = OLLAMA_MODEL_LAYER, manifest_text: str | None = None) -> Path:
    """One model in an Ollama store: its blob (content None: the blob is missing) and its manifest."""
    digest = hashlib.sha256(content or b"gone").hexdigest()
    if content is not None:
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "blobs" / f"sha256-{digest}").write_bytes(content)
    manifest = root / "manifests" / host / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(manifest_text if manifest_text is not None else json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:00", "size": 2},
        "layers": [{"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(content or b"")},
                   {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:11", "size": 10}]}))
    return root / "blobs" / f"sha256-{digest}"


# -- the header ------------------------------------------------------------------------

def test_the_header_says_what_the_gguf_library_reads(tiny_pair):
    target, _ = tiny_pair
    header = read_header(target, tokens=True)
    reader = gguf.GGUFReader(target)
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]) for i in field.data]
    assert header.tokens == tokens
    assert [t.name for t in header.tensors] == [t.name for t in reader.tensors]
    assert header.data_offset + header.tensors[0].offset == reader.tensors[0].data_offset
    assert sum(header.tensor_bytes().values()) == os.path.getsize(target) - header.data_offset
    raw = [len(t).to_bytes(8, "little") + t for t in tokens]
    assert header.tokens_sha256 == hashlib.sha256(b"".join(raw)).hexdigest()
    # the hashes of the last 128 prefixes: what the engine's size margin compares
    assert sorted(header.prefix_sha256) == list(range(len(tokens) - 128, len(tokens)))
    for n in (len(tokens) - 128, len(tokens) - 1):
        assert header.prefix_sha256[n] == hashlib.sha256(b"".join(raw[:n])).hexdigest()


def test_a_header_cut_short_or_no_gguf_is_one_line(tmp_path, tiny_pair):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(Path(tiny_pair[0]).read_bytes()[:24])  # magic, version and counts: no first key
    text = tmp_path / "text.gguf"
    text.write_text("hello, not a model")
    with pytest.raises(HeaderError) as e:
        read_header(cut)
    assert str(e.value) == f"{cut}: the GGUF header is cut short (it needs byte 32 of 24)"
    with pytest.raises(HeaderError) as e:
        read_header(text)
    assert str(e.value) == f"{text}: not a GGUF file (it starts with b'hell', a GGUF file with b'GGUF')"
    damaged = tmp_path / "damaged.gguf"
    data = bytearray(Path(tiny_pair[0]).read_bytes())
    data[24:32] = (1 << 40).to_bytes(8, "little")  # the first key's length: a terabyte
    damaged.write_bytes(bytes(data))
    with pytest.raises(HeaderError) as e:
        read_header(damaged)
    assert str(e.value) == f"{damaged}: the GGUF header is malformed (a string of {1 << 40} bytes at byte 24)"


def test_a_model_record_reads_sizes_from_the_header(tmp_path, tiny_pair):
    deep = write_deep_target(tmp_path)
    small, big = read_model(tiny_pair[1]), read_model(str(deep))
    assert (small.architecture, small.params, small.quantization, small.context, small.n_layer) == (
        "llama", 141_504, "F32", 1024, 2)
    assert (big.params, big.n_layer) == (388_032, 8)
    assert small.n_vocab == 463 and small.fingerprint == big.fingerprint
    # per token: every tensor but the input embedding (the output matrix is its own)
    assert small.cost_bytes == os.path.getsize(tiny_pair[1]) - read_header(tiny_pair[1]).data_offset - 463 * 64 * 4


# -- Ollama ------------------------------------------------------------------------------

def test_ollama_references_find_the_model_layer_blob(stores, tiny_pair):
    root = stores["ollama"]
    target, draft = (Path(p).read_bytes() for p in tiny_pair)
    library = add_ollama(root, "registry.ollama.ai", "library", "tiny", "latest", target)
    spaced = add_ollama(root, "registry.ollama.ai", "someone", "tiny-draft", "q8", draft)
    hosted = add_ollama(root, "hf.co", "org", "Tiny-GGUF", "Q4_K_M", draft)
    assert resolve("ollama:tiny", "target") == resolve("ollama:tiny:latest", "target") == str(library)
    assert resolve("ollama:someone/tiny-draft:q8", "draft") == str(spaced)
    assert resolve("ollama:hf.co/org/Tiny-GGUF:Q4_K_M", "draft") == str(hosted)
    models, problems = model_refs.ollama_models()
    assert [(m.ref, m.path) for m in models] == [("ollama:hf.co/org/Tiny-GGUF:Q4_K_M", str(hosted)),
                                                 ("ollama:tiny:latest", str(library)),
                                                 ("ollama:someone/tiny-draft:q8", str(spaced))]
    assert problems == []


def test_ollama_models_that_are_no_gguf_are_refused_by_name(stores):
    root = stores["ollama"]
    blob = add_ollama(root, "registry.ollama.ai", "library", "safetensors-only", "latest", b"PK\x03\x04 not gguf")
    add_ollama(root, "registry.ollama.ai", "library", "adapter", "latest", b"GGUF",
               media_type="application/vnd.ollama.image.adapter")
    gone = add_ollama(root, "registry.ollama.ai", "library", "gone", "7b", None)
    with pytest.raises(SpecLlamaError) as e:
        resolve("ollama:safetensors-only", "target")
    assert str(e.value) == (f"ollama:safetensors-only: not a GGUF model (its model blob {str(blob)!r} starts with "
                            "b'PK\\x03\\x04')")
    with pytest.raises(SpecLlamaError) as e:
        resolve("ollama:adapter", "target")
    assert str(e.value) == ("ollama:adapter: not a GGUF model (its manifest has no application/vnd.ollama.image.model "
                            "layer; its layers: application/vnd.ollama.image.adapter, "
                            "application/vnd.ollama.image.template)")
    with pytest.raises(SpecLlamaError) as e:
        resolve("ollama:gone:7b", "target")
    assert str(e.value) == f"ollama:gone:7b: its model blob {str(gone)!r} is missing (ollama pull it again)"
    with pytest.raises(SpecLlamaError) as e:
        resolve("ollama:gone", "target")  # the tag defaults to latest, which is not there: the tags that are
    assert str(e.value) == (f"ollama:gone: no such model in Ollama's store {str(root)!r} ($OLLAMA_MODELS); "
                            "found: ollama:gone:7b (name one of them)")


def test_ollama_models_moves_the_store(stores, tmp_path, monkeypatch, tiny_pair):
    add_ollama(stores["ollama"], "registry.ollama.ai", "library", "tiny", "latest", Path(tiny_pair[0]).read_bytes())
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("OLLAMA_MODELS", str(elsewhere))
    with pytest.raises(SpecLlamaError) as e:
        resolve("ollama:tiny", "target")
    assert str(e.value) == (f"ollama:tiny: no such model in Ollama's store {str(elsewhere)!r} ($OLLAMA_MODELS); "
                            "nothing of that kind was found (a model reference is " + model_refs.FORMS + ")")


# -- the Hugging Face hub cache -------------------------------------------------------------

def hub_repo(hub: Path, tiny_pair) -> tuple[Path, Path]:
    """models--org--tiny-GGUF with two snapshots: refs/main names the newer ("bbbb..."); the older ("aaaa...")
    has another model.gguf and a file of its own."""
    repo = hub / "models--org--tiny-GGUF"
    old, new = repo / "snapshots" / ("a" * 40), repo / "snapshots" / ("b" * 40)
    for snapshot, source in ((old, tiny_pair[1]), (new, tiny_pair[0])):
        snapshot.mkdir(parents=True)
        shutil.copy(source, snapshot / "model.gguf")
    shutil.copy(tiny_pair[1], old / "old-only.gguf")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("b" * 40)
    return old, new


def test_hub_cache_references_prefer_the_main_snapshot(stores, tiny_pair):
    old, new = hub_repo(stores["hub"], tiny_pair)
    assert resolve("hf:org/tiny-GGUF/model.gguf", "target") == str(new / "model.gguf")
    assert resolve("hf:org/tiny-GGUF@aaaa/model.gguf", "target") == str(old / "model.gguf")
    assert resolve("hf:org/tiny-GGUF/old-only.gguf", "draft") == str(old / "old-only.gguf")
    with pytest.raises(SpecLlamaError) as e:
        resolve("hf:org/tiny-GGUF/missing.gguf", "target")
    assert str(e.value) == "hf:org/tiny-GGUF/missing.gguf: no file 'missing.gguf' there; found: " \
                           "hf:org/tiny-GGUF/model.gguf (name one of them)"
    assert [m.ref for m in model_refs.hf_models()] == ["hf:org/tiny-GGUF/model.gguf",
                                                       "hf:org/tiny-GGUF@aaaaaaaaaaaa/old-only.gguf"]
    # a branch or tag by its name in refs/ (huggingface_hub's @main, @v1)
    (old.parent.parent / "refs" / "v1").write_text("a" * 40)
    assert resolve("hf:org/tiny-GGUF@main/model.gguf", "target") == str(new / "model.gguf")
    assert resolve("hf:org/tiny-GGUF@v1/model.gguf", "target") == str(old / "model.gguf")


def test_a_snapshot_link_to_a_missing_blob_says_so(stores, tiny_pair):
    """The hub cache's snapshot files link to blobs; a download that did not finish leaves a link to nothing."""
    repo = stores["hub"] / "models--org--cut-GGUF"
    (repo / "snapshots" / ("c" * 40)).mkdir(parents=True)
    link = repo / "snapshots" / ("c" * 40) / "model.gguf"
    link.symlink_to("../../blobs/0123abcd")
    for ref in ("hf:org/cut-GGUF/model.gguf", "hf:org/cut-GGUF"):
        with pytest.raises(SpecLlamaError) as e:
            resolve(ref, "target")
        assert str(e.value) == (f"{ref}: 'model.gguf' there links to '../../blobs/0123abcd', which is missing (a "
                                "download that did not finish, or a removed file): download it again")


def test_hf_home_moves_the_hub_cache(stores, tmp_path, monkeypatch, tiny_pair):
    home = tmp_path / "hf-home"
    _, new = hub_repo(home / "hub", tiny_pair)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(home))
    assert resolve("hf:org/tiny-GGUF/model.gguf", "target") == str(new / "model.gguf")
    monkeypatch.setenv("HF_HUB_CACHE", str(stores["hub"]))  # HF_HUB_CACHE wins over HF_HOME
    with pytest.raises(SpecLlamaError) as e:
        resolve("hf:org/tiny-GGUF/model.gguf", "target")
    assert str(e.value).startswith(f"hf:org/tiny-GGUF/model.gguf: not in the Hugging Face cache "
                                   f"{str(stores['hub'])!r} ($HF_HUB_CACHE; specllama downloads nothing here)")


# -- LM Studio and split GGUFs ---------------------------------------------------------------

def test_lmstudio_references_and_its_two_default_folders(stores, tmp_path, monkeypatch, tiny_pair):
    folder = stores["lmstudio"] / "lmstudio-community" / "tiny-GGUF"
    folder.mkdir(parents=True)
    shutil.copy(tiny_pair[0], folder / "tiny-Q8_0.gguf")
    assert resolve("lmstudio:lmstudio-community/tiny-GGUF/tiny-Q8_0.gguf", "target") == str(folder / "tiny-Q8_0.gguf")
    assert resolve("lmstudio:lmstudio-community/tiny-GGUF", "target") == str(folder / "tiny-Q8_0.gguf")  # its one
    monkeypatch.delenv("LMSTUDIO_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for folder in (tmp_path / "home" / ".lmstudio" / "models", tmp_path / "home" / ".cache" / "lm-studio" / "models"):
        repo = folder / "pub" / "repo"
        repo.mkdir(parents=True)
        shutil.copy(tiny_pair[1], repo / f"{folder.parts[-2]}.gguf")
    assert resolve("lmstudio:pub/repo/.lmstudio.gguf", "draft") == str(
        tmp_path / "home" / ".lmstudio" / "models" / "pub" / "repo" / ".lmstudio.gguf")
    assert [m.ref for m in model_refs.lmstudio_models()] == ["lmstudio:pub/repo/.lmstudio.gguf",
                                                             "lmstudio:pub/repo/lm-studio.gguf"]


def write_split(folder: Path) -> list[Path]:
    tokens, scores, types = vocabulary()
    write_model(folder / "tiny-split.gguf", random_weights(len(tokens), 0), tokens, scores, types,
                split_max_tensors=8)
    return sorted(folder.glob("tiny-split-*-of-*.gguf"))


def test_a_split_gguf_opens_by_its_first_part(stores, tiny_pair):
    folder = stores["lmstudio"] / "pub" / "split-GGUF"
    folder.mkdir(parents=True)
    parts = write_split(folder)
    assert [p.name for p in parts] == [f"tiny-split-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for ref in ("lmstudio:pub/split-GGUF/tiny-split.gguf", "lmstudio:pub/split-GGUF/tiny-split-00002-of-00003.gguf",
                "lmstudio:pub/split-GGUF", str(parts[2])):
        assert resolve(ref, "target") == str(parts[0])
    record = read_model(str(parts[0]))
    assert (record.size, record.params) == (sum(p.stat().st_size for p in parts), 141_504)
    parts[1].unlink()
    with pytest.raises(SpecLlamaError) as e:
        resolve(str(parts[0]), "target")
    assert str(e.value) == (f"{parts[0]}: the split model 'tiny-split-00001-of-00003.gguf' is missing its part "
                            f"{str(parts[1])!r} (every part must sit beside the first)")


def test_generate_opens_a_split_model_and_an_ollama_model(stores, tiny_pair):
    parts = write_split(stores["models"])
    add_ollama(stores["ollama"], "registry.ollama.ai", "library", "tiny", "latest", Path(tiny_pair[0]).read_bytes())
    runs = [CliRunner().invoke(main, ["generate", "-m", model, "-p", "Once upon a time", "-n", "6", "--temp", "0",
                                      "-t", "1", "-c", "128", "--json"])
            for model in (str(parts[1]), tiny_pair[0], "ollama:tiny")]
    assert [r.exit_code for r in runs] == [0, 0, 0]
    texts = [json.loads(r.stdout)["text"] for r in runs]
    assert texts[0] == texts[1] == texts[2]  # the same weights, however named


def test_an_unknown_reference_is_one_line_naming_the_forms(stores):
    result = CliRunner().invoke(main, ["generate", "-m", "ollama:qwen2.5-coder:7b", "-p", "x"])
    assert result.exit_code == 1
    assert result.stderr == (f"Error: ollama:qwen2.5-coder:7b: no such model in Ollama's store "
                             f"{str(stores['ollama'])!r} ($OLLAMA_MODELS); nothing of that kind was found (a model "
                             f"reference is {model_refs.FORMS})\n")


# -- specllama models --local ---------------------------------------------------------------

def test_models_local_groups_by_tokenizer_and_marks_the_pairs(stores, tiny_pair, foreign_draft):
    folder = stores["models"]
    deep = write_deep_target(folder)
    for path in (tiny_pair[1], foreign_draft[0]):
        shutil.copy(path, folder)
    draft, foreign = folder / "tiny-draft.gguf", folder / "tiny-foreign.gguf"
    result = CliRunner().invoke(main, ["models", "--local", "--dir", str(folder)])
    assert result.exit_code == 0 and result.stderr == ""
    shared, other = read_model(str(deep)).short_fingerprint, read_model(str(foreign)).short_fingerprint
    gain, _ = header_speedup(read_model(str(draft)).cost_bytes / read_model(str(deep)).cost_bytes)
    width = len(str(draft))  # the longest name in the first group
    assert result.stdout == "\n".join([
        f"tokenizer {shared} (llama, 463 tokens): 2 models",
        f"  {'model':<{width}}  arch   params   quant  size      context",
        f"  {str(deep):<{width}}  llama  388.03K  F32    {human_size(deep.stat().st_size):<8}  1024",
        f"  {str(draft):<{width}}  llama  141.50K  F32    577.9 KB  1024",
        f"  pair: -m {deep} -md {draft}  (expected {gain:.2f}x from sizes; a token costs 0.31x)",
        "",
        f"tokenizer {other} (llama, 463 tokens): 1 model",
        f"  {'model':<{len(str(foreign))}}  arch   params   quant  size      context",
        f"  {foreign}  llama  141.50K  F32    577.9 KB  1024",
        "  pair: none (no model here is much cheaper per token than another)",
    ]) + "\n"


def test_bad_files_are_one_line_each_and_the_scan_goes_on(stores, tiny_pair):
    folder = stores["models"]
    shutil.copy(tiny_pair[0], folder / "good.gguf")
    cut = folder / "cut.gguf"
    cut.write_bytes(Path(tiny_pair[0]).read_bytes()[:24])
    text = folder / "text.gguf"
    text.write_text("hello, not a model")
    add_ollama(stores["ollama"], "registry.ollama.ai", "library", "broken", "latest", b"GGUF",
               manifest_text="{not json")
    result = CliRunner().invoke(main, ["models", "--local", "--dir", str(folder)])
    assert result.exit_code == 0
    manifest = stores["ollama"] / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    assert result.stderr == (
        f"skipped: ollama:broken:latest: its manifest {str(manifest)!r} is not valid JSON (JSONDecodeError)\n"
        f"skipped: {cut}: the GGUF header is cut short (it needs byte 32 of 24)\n"
        f"skipped: {text}: not a GGUF file (it starts with b'hell', a GGUF file with b'GGUF')\n")
    assert result.stdout.splitlines()[2].startswith(f"  {folder / 'good.gguf'}  llama  141.50K  F32")


def test_the_store_models_are_listed_by_their_references(stores, tiny_pair):
    add_ollama(stores["ollama"], "registry.ollama.ai", "library", "tiny", "latest", Path(tiny_pair[0]).read_bytes())
    hub_repo(stores["hub"], tiny_pair)
    found = scan()
    assert sorted(m.ref for m in found.models) == ["hf:org/tiny-GGUF/model.gguf",
                                                   "hf:org/tiny-GGUF@aaaaaaaaaaaa/old-only.gguf", "ollama:tiny:latest"]
    assert found.problems == []


def test_a_second_scan_reads_no_header_that_did_not_change(stores, tiny_pair, monkeypatch):
    folder = stores["models"]
    copy = folder / "tiny.gguf"
    shutil.copy(tiny_pair[0], copy)
    first = scan([folder])
    reads = []
    real_read = local_models.read_model
    monkeypatch.setattr(local_models, "read_model", lambda *a, **k: reads.append(a) or real_read(*a, **k))
    again = scan([folder])
    assert reads == [] and again.models == first.models
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 10**9))  # touched: read again
    assert scan([folder]).models == first.models and reads == [(str(copy),)]
    assert json.loads(Path(os.environ["SPECLLAMA_LOCAL_MODELS_FILE"]).read_text())["version"] == 1


def test_candidates_rank_by_the_engines_check_and_the_cost(stores, tiny_pair, foreign_draft):
    deep = read_model(str(write_deep_target(stores["models"])))
    same_size, draft, foreign = (read_model(p) for p in (tiny_pair[0], tiny_pair[1], foreign_draft[0]))
    found = candidates(deep, [foreign, same_size, draft, deep])
    assert [(c.model.path, c.reason is None, c.compatible) for c in found] == [
        (tiny_pair[1], True, True), (tiny_pair[0], True, True), (foreign_draft[0], False, False)]
    king = "b'\\xe2\\x96\\x81king'"
    kong = "b'\\xe2\\x96\\x81kong'"
    assert found[2].reason == f"token {foreign_draft[1]} is {kong} in the draft but {king} in the target"
    same = candidates(same_size, [draft])[0]
    assert same.reason == "a token costs 1.00x the target's, so it should not pay (expected 1.00x at best, below 1.1x)"


def test_a_server_names_a_store_model_by_its_reference():
    assert model_refs.model_id("ollama:qwen2.5-coder:7b", "/o/blobs/sha256-12ab") == "ollama:qwen2.5-coder:7b"
    assert model_refs.model_id("/models/tiny.gguf", "/models/tiny.gguf") == "tiny.gguf"


def test_a_folder_that_is_not_there_is_one_line(stores, tmp_path):
    result = CliRunner().invoke(main, ["models", "--dir", str(tmp_path / "nowhere")])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0, "no GGUF models found\n", f"skipped: {tmp_path / 'nowhere'}: no such file or folder\n")


def test_models_local_loads_neither_llama_cpp_nor_numpy(stores):
    code = ("import sys; from specllama.cli_group import main; "
            f"main(['models', '--local', '--dir', {str(stores['models'])!r}], standalone_mode=False); "
            "print(sorted(m for m in ('llama_cpp', 'numpy', 'gguf', 'specllama.cli') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}).stdout
    assert out == "no GGUF models found\n[]\n"
