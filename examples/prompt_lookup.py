"""Prompt-lookup drafting: no second model; drafts are copied from n-gram
matches in the prompt and the text so far. It pays on text that repeats its
input (summaries, edits, code changes), and the output is still exactly the
model's.

    python examples/prompt_lookup.py
    python examples/prompt_lookup.py -m model.gguf
"""

from _common import parse

from specllama import SpeculativeLlama

args = parse(__doc__, default_draft="prompt-lookup")
minutes = (
    "The committee reviewed the budget. The committee approved the budget. "
    "The committee reviewed the schedule. The committee approved the schedule. "
)
prompt = "Minutes:\n" + minutes * 2 + "\nThe minutes again, word for word:\n"
with SpeculativeLlama(args.model, args.model_draft, n_ctx=args.ctx_size, seed=0) as llm:
    out = llm.create_completion(prompt, max_tokens=args.n_predict, temperature=0)
    print(out["choices"][0]["text"])
    print(out["speculative"])
