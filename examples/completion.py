"""A plain completion with SpeculativeLlama: llama-cpp-python's
create_completion, answered by speculative decoding.

    python examples/completion.py
    python examples/completion.py -m target.gguf -md draft.gguf -n 128
"""

from _common import parse

from specllama import SpeculativeLlama

args = parse(__doc__)
with SpeculativeLlama(args.model, args.model_draft, n_ctx=args.ctx_size, seed=0) as llm:
    out = llm.create_completion("Once upon a time, in a small village by the sea,", max_tokens=args.n_predict,
                                temperature=0.8)
    print(out["choices"][0]["text"])
    print(out["usage"], out["speculative"])
