"""The CPU quirk guard (specllama.backend.cpu): where it looks, and what it
reads of a model."""

from __future__ import annotations

from specllama.backend import LlamaModel, cpu
from specllama.backend.model import _quantized


def test_quantized_is_read_from_the_file_type(tiny_pair, coder_paths):
    with LlamaModel(tiny_pair[0], n_ctx=32) as f32, LlamaModel(coder_paths[1], n_ctx=32) as q8:
        assert (_quantized(f32.llama), _quantized(q8.llama)) == (False, True)
        # a model of full-precision weights never runs the child, whatever the machine
        assert cpu.amx_refused(f32.path, False) is (cpu._verdict is True)
        # a quantized model that was loaded evaluates here (on a machine that refuses AMX: without it)
        assert q8.eval(q8.tokenize("hello world, this is a test"), n_logits=1).shape == (1, q8.n_vocab)
