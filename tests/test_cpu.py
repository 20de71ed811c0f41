"""The CPU quirk guard (specllama.backend.cpu): where it looks, and what it
reads of a model."""

from __future__ import annotations

from specllama.backend import LlamaModel, cpu
from specllama.backend.model import _quantized


def test_a_full_precision_model_is_not_quantized_and_never_runs_the_child(tiny_pair):
    """Read from the file type, as the coder pair's quantized draft is below (a test of its own: the tiny model's
    keeps this module in the quick tier)."""
    with LlamaModel(tiny_pair[0], n_ctx=32) as f32:
        assert not _quantized(f32.llama)
        # a model of full-precision weights never runs the child, whatever the machine
        assert cpu.amx_refused(f32.path, False) is (cpu._verdict is True)


def test_quantized_is_read_from_the_file_type(coder_paths):
    with LlamaModel(coder_paths[1], n_ctx=32) as q8:
        assert _quantized(q8.llama)
        # a quantized model that was loaded evaluates here (on a machine that refuses AMX: without it)
        assert q8.eval(q8.tokenize("hello world, this is a test"), n_logits=1).shape == (1, q8.n_vocab)
