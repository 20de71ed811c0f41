"""The built-in ``demo-coder`` pair: joining chunk files once with a hash check
(on small chunk packages the tests write), and the real Qwen2.5-Coder pair
from the ``coder`` extra (which the ``test`` extra pulls in; CI fails, not
skips, without it)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specllama.chunks import MARKER_SUFFIX, assemble, chunk_files
from specllama.cli import main
from specllama.demo import CHUNK_FILE, CODER_DRAFT, CODER_INSTALL_HINT, CODER_TARGET, DEMO_CODER
from specllama.errors import SpecLlamaError

from .cli_helpers import one_line_error

FIX = "reinstall it"
FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>")


def write_chunk_packages(root: Path, prefix: str, contents: list[bytes]) -> list[Path]:
    """Packages ``{prefix}1`` .. ``{prefix}N`` under ``root``, package n with ``data/part{n:02d}.bin``."""
    files = []
    for n, content in enumerate(contents, 1):
        package = root / f"{prefix}{n}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{n:02d}.bin").write_bytes(content)
        files.append(package / "data" / f"part{n:02d}.bin")
    return files


@pytest.fixture
def chunks(tmp_path, monkeypatch):
    """Three installed chunk packages (importable from tmp_path), their files and the joined bytes."""
    contents = [os.urandom(3 * 1024 * 1024 + 17), os.urandom(5), os.urandom(1024 * 1024)]
    files = write_chunk_packages(tmp_path / "site", "spl_test_chunk_part", contents)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return files, b"".join(contents)


def test_chunk_files_found_in_order(chunks, tmp_path):
    files, _ = chunks
    assert chunk_files("spl_test_chunk_part", 3, CHUNK_FILE) == files
    assert chunk_files("spl_test_chunk_part", 4, CHUNK_FILE) is None  # no 4th package
    assert chunk_files("spl_test_chunk_part", 3, "data/part01.bin") is None  # no such file in package 2


def test_assemble_once_with_hash_check(chunks, tmp_path):
    files, joined = chunks
    out = tmp_path / "cache"
    out.mkdir()
    dest = out / "model.gguf"
    sha = hashlib.sha256(joined).hexdigest()
    assert assemble(files, dest, size=len(joined), sha256=sha, label="x", fix=FIX) == dest
    assert dest.read_bytes() == joined
    marker = json.loads((out / ("model.gguf" + MARKER_SUFFIX)).read_text())
    assert marker == {"size": len(joined), "mtime_ns": dest.stat().st_mtime_ns, "sha256": sha}
    assert sorted(p.name for p in out.iterdir()) == ["model.gguf", "model.gguf" + MARKER_SUFFIX]

    # the next call reuses the checked file by its marker: damaged chunks are not read again
    files[1].write_bytes(b"XXXXX")
    mtime = dest.stat().st_mtime_ns
    assert assemble(files, dest, size=len(joined), sha256=sha, label="x", fix=FIX) == dest
    assert dest.stat().st_mtime_ns == mtime and dest.read_bytes() == joined

    # a file changed since it was checked (same size, new mtime) is hashed again: rejected, it is joined
    # again from the chunks; here they are damaged too: one clear error, and no file at all is left
    damaged = bytearray(joined)
    damaged[10] ^= 0xFF
    dest.write_bytes(bytes(damaged))
    with pytest.raises(SpecLlamaError, match="damaged"):
        assemble(files, dest, size=len(joined), sha256=sha, label="x", fix=FIX)
    assert list(out.iterdir()) == []


def test_a_changed_file_is_joined_again(chunks, tmp_path):
    files, joined = chunks
    dest = tmp_path / "model.gguf"
    sha = hashlib.sha256(joined).hexdigest()
    dest.write_bytes(b"\0" * len(joined))  # the right size, the wrong bytes, no marker
    assert assemble(files, dest, size=len(joined), sha256=sha, label="x", fix=FIX) == dest
    assert dest.read_bytes() == joined


def test_a_touched_but_intact_file_is_hashed_once_and_kept(chunks, tmp_path):
    files, joined = chunks
    dest = tmp_path / "model.gguf"
    sha = hashlib.sha256(joined).hexdigest()
    assemble(files, dest, size=len(joined), sha256=sha, label="x", fix=FIX)
    os.utime(dest, ns=(1_000_000_000, 1_000_000_000))
    files[0].unlink()  # the chunks are not needed: the file itself hashes right
    assert assemble(files, dest, size=len(joined), sha256=sha, label="x", fix=FIX) == dest
    marker = json.loads((tmp_path / ("model.gguf" + MARKER_SUFFIX)).read_text())
    assert marker["mtime_ns"] == 1_000_000_000


def test_a_corrupted_chunk_is_one_clear_error_and_leaves_nothing(chunks, tmp_path):
    files, joined = chunks
    sha = hashlib.sha256(joined).hexdigest()
    corrupted = bytearray(files[2].read_bytes())
    corrupted[100] ^= 0x01
    files[2].write_bytes(bytes(corrupted))
    got = hashlib.sha256(joined[:-len(corrupted)] + bytes(corrupted)).hexdigest()
    out = tmp_path / "cache"
    out.mkdir()
    with pytest.raises(SpecLlamaError) as e:
        assemble(files, out / "model.gguf", size=len(joined), sha256=sha, label="demo-coder target (model.gguf)",
                 fix=FIX)
    assert str(e.value) == (
        f"the demo-coder target (model.gguf) joined from 3 installed chunks is damaged: expected {len(joined):,} "
        f"bytes with SHA-256 {sha}, got {len(joined):,} bytes with SHA-256 {got}; {FIX}"
    )
    assert list(out.iterdir()) == []


def test_a_short_chunk_is_the_same_error(chunks, tmp_path):
    files, joined = chunks
    sha = hashlib.sha256(joined).hexdigest()
    files[1].write_bytes(b"abc")
    short = len(joined) - 2
    with pytest.raises(SpecLlamaError, match=f"expected {len(joined):,} bytes with SHA-256 {sha}, got {short:,} bytes"):
        assemble(files, tmp_path / "model.gguf", size=len(joined), sha256=sha, label="x", fix=FIX)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_missing_extra_names_the_install_command(monkeypatch):
    # a package set to None in sys.modules is one Python will not import: as if not installed
    monkeypatch.setitem(sys.modules, f"{CODER_TARGET.package}7", None)
    for args in (["--pair", DEMO_CODER], ["-m", DEMO_CODER]):
        r = CliRunner().invoke(main, ["generate", *args, "-p", "x"])
        assert r.exit_code == 1
        assert one_line_error(r) == f"Error: the coder demo models are not installed: run  {CODER_INSTALL_HINT}"


# -- the real pair --------------------------------------------------------------------------------------


def test_coder_pair_files(coder_paths):
    for path, model in zip(coder_paths, (CODER_TARGET, CODER_DRAFT)):
        assert Path(path).name == model.name and os.path.getsize(path) == model.size
        marker = json.loads(Path(path + MARKER_SUFFIX).read_text())
        assert marker == {"size": model.size, "mtime_ns": os.stat(path).st_mtime_ns, "sha256": model.sha256}
    from specllama.opener import resolve_paths

    # the name stands for its files wherever a path can: --pair, -m and -md
    assert resolve_paths(None, None, DEMO_CODER) == coder_paths
    assert resolve_paths(DEMO_CODER, DEMO_CODER) == coder_paths
    assert resolve_paths(DEMO_CODER, None) == (coder_paths[0], None)


def test_coder_pair_one_tokenizer_fim_and_chat_template(coder_paths):
    from specllama.backend import LlamaModel

    with LlamaModel(coder_paths[0], n_ctx=256) as target, LlamaModel(coder_paths[1], n_ctx=256) as draft:
        target_vocab, draft_vocab = target.vocab_info(), draft.vocab_info()
        assert target_vocab.n_vocab == draft_vocab.n_vocab == 151936
        assert list(target_vocab.tokens) == list(draft_vocab.tokens)
        assert (target.bos, target.eos) == (draft.bos, draft.eos)
        for text in FIM_TOKENS:
            ids = target.tokenize(text, add_bos=False)
            assert len(ids) == 1 and draft.tokenize(text, add_bos=False) == ids
            assert target.detokenize_special(ids[0]) == text
        for model in (target, draft):
            assert "<|im_start|>" in model.metadata["tokenizer.chat_template"]


def test_coder_pair_greedy_speculative_equals_target_only(coder_paths):
    def gen(*extra: str) -> dict:
        r = CliRunner().invoke(main, ["generate", "--pair", DEMO_CODER, "-n", "16", "--temp", "0", "--json",
                                      "-c", "512", "-t", "1", "-p", "def fib(n):", *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    # fixed drafts, so the draft really speaks (the default may decide target-only on a slow machine)
    spec, base = gen("--draft-fixed", "--draft-max", "4"), gen("--draft-max", "0")
    assert spec["text"] == base["text"]
    assert spec["tokens"] == base["tokens"] and len(base["tokens"]) == 16
    assert spec["n_accepted"] > 0 and spec["n_target_passes"] < base["n_target_passes"]
