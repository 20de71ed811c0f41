"""Record real acceptance traces for the draft-length policy's timing-free
tests (tests/test_policy_sim.py): for each pair and prompt, the target's
greedy text and, at each of its positions, whether the draft's greedy token
agrees. At temperature 0 a pass at position j with k drafts keeps
min(k, the run of agreements from j) tokens, so the file replays a real
generation at any draft length, with its real, bursty rejections. Also the
costs measured with them: the median of 15 target passes of 1..9 rows and of
15 draft steps, at a 64-token context, interleaved.

    python benchmarks/acceptance_traces.py --pairs demo,demo-chat -n 256 \
        --out tests/data/acceptance_traces.json

The prompts are not robustness.py's held-out ones. The target's text is decoded
one token at a time and the draft's rows in one batch, where the engine
verifies in batches: at a near-tie the two can differ by batch
(benchmarks/numerics.py), so a trace may not match a real run token for token.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import log  # noqa: E402

PROMPTS = {
    "essay": "Write a short essay about why cities should plant more trees.\n\n",
    "recipe": "Here is a simple recipe for tomato soup:\n",
    "py": "import json\n\ndef load_config(path):\n",
    "js": "// Debounce a function in JavaScript\nfunction debounce(fn, wait) {\n",
    "qa": "Q: Why is the sky blue?\nA:",
    "letter": "Dear hiring manager,\n\nI am writing to apply for",
}
CONTEXT = 64
REPS = 15


def trace(target, draft, prompt: str, n: int) -> str:
    """'1'/'0' per generated position: the draft's greedy token is the target's."""
    toks = target.tokenize(prompt)
    target.rewind(0)
    text: list[int] = []
    row = target.eval(toks, n_logits=1)[0]
    for _ in range(n):
        tok = int(np.argmax(row))
        if target.is_eog(tok):
            break
        text.append(tok)
        row = target.eval([tok], n_logits=1)[0]
    draft.rewind(0)
    seq = toks + text
    rows = draft.eval(seq[:-1], n_logits=len(text)) if text else []  # row j predicts text[j]
    return "".join("1" if int(np.argmax(rows[j])) == text[j] else "0" for j in range(len(text)))


def costs(target, draft) -> dict:
    base = target.tokenize("hello " * CONTEXT)[:CONTEXT]
    target.rewind(0)
    target.eval(base, n_logits=1)
    draft.rewind(0)
    draft.eval(base, n_logits=1)
    verify: dict[int, list[float]] = {rows: [] for rows in range(1, 10)}
    steps: list[float] = []
    for _ in range(REPS):
        for rows in verify:
            target.rewind(CONTEXT)
            t0 = time.perf_counter()
            target.eval([base[1]] * rows, n_logits=rows, copy=False)
            verify[rows].append(time.perf_counter() - t0)
        draft.rewind(CONTEXT)
        t0 = time.perf_counter()
        draft.eval([base[1]], n_logits=1, copy=False)
        steps.append(time.perf_counter() - t0)
    return {"verify_seconds": {str(r): statistics.median(ts) for r, ts in verify.items()},
            "draft_step_seconds": statistics.median(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="demo,demo-chat")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ.setdefault("SPECLLAMA_COST_CACHE", "0")
    from specllama import SpeculativeLlama

    out: dict = {"command": "python benchmarks/acceptance_traces.py " + " ".join(sys.argv[1:]), "pairs": {}}
    for pair in args.pairs.split(","):
        with SpeculativeLlama(pair=pair, adaptive=False) as llm:
            target, draft = llm.engine.target, llm.engine.draft
            traces = {}
            for name, prompt in PROMPTS.items():
                traces[name] = trace(target, draft, prompt, args.n)
                log(f"{pair} {name}: {len(traces[name])} tokens, draft agrees at {traces[name].count('1')}")
            out["pairs"][pair] = {"traces": traces, **costs(target, draft)}
            log(f"{pair} costs: {out['pairs'][pair]}")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
