"""Record real acceptance traces for the draft-length policy's timing-free
tests (tests/test_policy_sim.py): for each pair and prompt, the target's
greedy text and, at each of its positions, whether the draft's greedy token
agrees. At temperature 0 a pass at position j with k drafts keeps
min(k, the run of agreements from j) tokens, so the file replays a real
generation at any draft length, with its real, bursty rejections. Also the
costs measured with them: the median of 15 target passes of 1..9 rows, of
15 draft steps and of 15 draft evaluations of two tokens (a pass's first
step after a pass that kept all its drafts: the last draft and the bonus
token), at a 64-token context, interleaved.

``--sampled T`` adds traces at temperature T
(the default top-k, top-p and min-p): the target's text sampled with a fixed
seed and, at each position j, the chance that a draft token there is
accepted, sum_x min(p_j(x), q_j(x)) with both rows after the same transforms.
Each position is judged at most once in a generation (a rejected one takes
the residual token, and the next pass starts after it), so drawing each
position's agreement once, with its own chance, replays a real sampled
generation: easy stretches and hard ones where they fell. (Token-level
acceptance; block verification, the default, keeps a little more.)

    python benchmarks/acceptance_traces.py --pairs demo,demo-chat -n 256 \
        --sampled 0.8 --out tests/data/acceptance_traces.json

``--costs-only`` measures the costs alone (no traces) and prints each row
count's pass as a multiple of one row's: how far a target pass's cost is from
a straight line through 1 and 9 rows (the warm-up times 1, 2 and 9 rows).

    python benchmarks/acceptance_traces.py --pairs demo,demo-chat --costs-only --out costs.json

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
from bench_common import log, offload  # noqa: E402

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
SAMPLED_SEED = 18


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


def sampled_trace(target, draft, prompt: str, n: int, temperature: float, rng: np.random.Generator) -> list[float]:
    """Per generated position of a sampled text: the chance a draft token is accepted there."""
    from specllama.sampling import SamplingParams, sparse_probs

    params = SamplingParams(temperature=temperature)
    toks = target.tokenize(prompt)
    target.rewind(0)
    text: list[int] = []
    targets = []
    row = target.eval(toks, n_logits=1)[0]
    for _ in range(n):
        p = sparse_probs(row, params)
        tok = p.sample(float(rng.random()))
        if target.is_eog(tok):
            break
        text.append(tok)
        targets.append(p)
        row = target.eval([tok], n_logits=1)[0]
    draft.rewind(0)
    rows = draft.eval((toks + text)[:-1], n_logits=len(text)) if text else []
    chances = []
    for p, q_row in zip(targets, rows):
        q = sparse_probs(q_row, params)
        common, ip, iq = np.intersect1d(p.ids, q.ids, assume_unique=True, return_indices=True)
        chances.append(round(float(np.minimum(p.probs[ip], q.probs[iq]).sum()), 4))
    return chances


def costs(target, draft) -> dict:
    base = target.tokenize("hello " * CONTEXT)[:CONTEXT]
    target.rewind(0)
    target.eval(base, n_logits=1)
    draft.rewind(0)
    draft.eval(base, n_logits=1)
    verify: dict[int, list[float]] = {rows: [] for rows in range(1, 10)}
    steps: list[float] = []
    pairs: list[float] = []
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
        draft.rewind(CONTEXT)
        t0 = time.perf_counter()
        draft.eval([base[1]] * 2, n_logits=1, copy=False)
        pairs.append(time.perf_counter() - t0)
    return {"verify_seconds": {str(r): statistics.median(ts) for r, ts in verify.items()},
            "draft_step_seconds": statistics.median(steps), "draft_two_token_seconds": statistics.median(pairs)}


def cost_line(pair: str, costs_of: dict) -> str:
    """One pair's costs in words: each row count's pass in ms and as a multiple
    of one row's (and of a straight line's through 1 and 9 rows)."""
    v = {int(r): t for r, t in costs_of["verify_seconds"].items()}
    line = {r: v[1] + (v[9] - v[1]) * (r - 1) / 8 for r in v}
    rows = ", ".join(f"{r}: {1000 * t:.1f} ms {t / v[1]:.2f}x (line {line[r] / v[1]:.2f}x)"
                     for r, t in sorted(v.items()))
    return (f"{pair}: target pass by rows {rows}; draft step {1000 * costs_of['draft_step_seconds']:.1f} ms, "
            f"two tokens {1000 * costs_of['draft_two_token_seconds']:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="demo,demo-chat")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sampled", type=float, metavar="T", help="also record sampled traces at this temperature")
    ap.add_argument("--costs-only", action="store_true", help="measure and print the costs alone, no traces")
    ap.add_argument("--files", nargs=2, metavar=("TARGET", "DRAFT"), help="a pair of GGUF files instead of --pairs")
    ap.add_argument("--gpu-layers", type=int, metavar="N", help="layers of both models on the GPU (-1: all)")
    args = ap.parse_args()
    os.environ.setdefault("SPECLLAMA_COST_CACHE", "0")
    from specllama import SpeculativeLlama

    out: dict = {"command": "python benchmarks/acceptance_traces.py " + " ".join(sys.argv[1:]), "pairs": {}}
    opened = ([("+".join(os.path.basename(f) for f in args.files), {"target": args.files[0], "draft": args.files[1]})]
              if args.files else [(pair, {"pair": pair}) for pair in args.pairs.split(",")])
    for pair, models in opened:
        with SpeculativeLlama(**models, adaptive=False, **offload(args.gpu_layers)) as llm:
            target, draft = llm.engine.target, llm.engine.draft
            if args.costs_only:
                out["pairs"][pair] = costs_of = costs(target, draft)
                print(cost_line(pair, costs_of), flush=True)
                continue
            traces = {}
            for name, prompt in PROMPTS.items():
                traces[name] = trace(target, draft, prompt, args.n)
                log(f"{pair} {name}: {len(traces[name])} tokens, draft agrees at {traces[name].count('1')}")
            costs_of = costs(target, draft)
            out["pairs"][pair] = {"traces": traces, **costs_of}
            if args.sampled is not None:
                rng = np.random.default_rng(SAMPLED_SEED)
                sampled = {}
                for name, prompt in PROMPTS.items():
                    sampled[name] = sampled_trace(target, draft, prompt, args.n, args.sampled, rng)
                    log(f"{pair} {name} at {args.sampled:g}: {len(sampled[name])} tokens, mean acceptance "
                        f"{statistics.mean(sampled[name]):.3f}")
                out["pairs"][pair]["sampled"] = {"temperature": args.sampled, "traces": sampled}
            log(f"{pair} costs: {costs_of}")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
