"""llama.cpp's backend sampling against specllama's numpy sampler (issue 48, item 7).

llama.cpp can run a sampler chain inside the decode's graph (``llama_context_params.samplers``,
``llama_set_sampler``) and hand back only the candidates and their logits
(``llama_get_sampled_candidates_ith``, ``llama_get_sampled_logits_ith``): no 262,144-logit row to
read. This measures whether that pays on this machine for the rows a draft step samples from: two
contexts of the demo draft in one process, one plain and one with the chain temperature 0.8, top-k
40, top-p 0.95, min-p 0.05 (the defaults) in its graph, step by step on the same tokens,
interleaved. Per step: the plain context's decode plus numpy's ``sparse_probs`` on its row, and the
backend context's decode plus reading its candidates; printed as medians and their ratio, with
whether the candidates agree. Then a verify pass (9 rows of one sequence) on the target with the
chain attached: llama.cpp's answer.

It opens llama.cpp directly (the package's backend has no use for the chain): a benchmark of
llama.cpp's API, not of specllama's path.

    python benchmarks/backend_sampling.py
    python benchmarks/backend_sampling.py --steps 100 --rounds 5
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import llama_cpp as L
import numpy as np

from specllama.demo import demo_pair
from specllama.sampling import SamplingParams, sparse_probs

PARAMS = SamplingParams()  # temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
KEEP: list = []  # what llama.cpp holds pointers to: the sampler configurations, the log callback


def chain():
    c = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    # the order of specllama's transforms (sampling.sparse_probs) and of llama.cpp's default chain
    for s in (L.llama_sampler_init_top_k(PARAMS.top_k), L.llama_sampler_init_top_p(PARAMS.top_p, 1),
              L.llama_sampler_init_min_p(PARAMS.min_p, 1), L.llama_sampler_init_temp(PARAMS.temperature)):
        L.llama_sampler_chain_add(c, s)
    return c


def context(model, threads: int, sampler=None):
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_threads, cp.n_threads_batch = 512, 512, threads, threads
    if sampler is not None:
        cfg = (L.llama_sampler_seq_config * 1)()
        cfg[0].seq_id, cfg[0].sampler = 0, ctypes.cast(sampler, ctypes.c_void_p)
        cp.samplers, cp.n_samplers = ctypes.cast(cfg, ctypes.POINTER(L.llama_sampler_seq_config)), 1
        KEEP.append((cfg, sampler))  # (alive as long as the context)
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "llama_init_from_model failed"
    return ctx


def decode(ctx, batch, tokens: list[int], pos: int, outputs: int) -> int:
    for j, t in enumerate(tokens):
        batch.token[j], batch.pos[j], batch.n_seq_id[j] = t, pos + j, 1
        batch.seq_id[j][0], batch.logits[j] = 0, int(j >= len(tokens) - outputs)
    batch.n_tokens = len(tokens)
    return L.llama_decode(ctx, batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="draft steps a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    KEEP.append(L.llama_log_callback(lambda *a: None))
    L.llama_log_set(KEEP[-1], ctypes.c_void_p())
    L.llama_backend_init()
    target_path, draft_path = demo_pair()
    draft = L.llama_model_load_from_file(draft_path.encode(), L.llama_model_default_params())
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(draft))
    plain, backend = context(draft, args.threads), context(draft, args.threads, chain())
    batch = L.llama_batch_init(512, 0, 1)
    times: dict[str, list[float]] = {"plain": [], "backend": []}
    agree = 0
    rng = np.random.default_rng(0)
    for _ in range(args.rounds):
        for ctx in (plain, backend):
            L.llama_memory_clear(L.llama_get_memory(ctx), True)
        tokens = [2] + rng.integers(1000, 20000, args.steps - 1).tolist()
        for pos, tok in enumerate(tokens):
            t0 = time.perf_counter()
            assert decode(plain, batch, [tok], pos, 1) == 0
            row = np.ctypeslib.as_array(L.llama_get_logits_ith(plain, 0), shape=(n_vocab,))
            ids = sparse_probs(row, PARAMS).ids
            t1 = time.perf_counter()
            assert decode(backend, batch, [tok], pos, 1) == 0
            n = L.llama_get_sampled_candidates_count_ith(backend, 0)
            cands = np.ctypeslib.as_array(L.llama_get_sampled_candidates_ith(backend, 0), shape=(n,)).copy()
            np.ctypeslib.as_array(L.llama_get_sampled_logits_ith(backend, 0), shape=(n,)).copy()
            t2 = time.perf_counter()
            if pos:  # (the first of a round runs cold)
                times["plain"].append(t1 - t0)
                times["backend"].append(t2 - t1)
            agree += set(np.asarray(ids).tolist()) <= set(cands.tolist())
    p, b = (1000 * statistics.median(times[k]) for k in ("plain", "backend"))
    print(f"demo draft, one-row steps ({len(times['plain'])} each, interleaved, {args.threads} threads), median ms:")
    print(f"  decode + numpy sparse_probs:        {p:.3f}")
    print(f"  decode with the chain in the graph: {b:.3f}   ({b / p:.2f}x)")
    print(f"  numpy's candidates among llama.cpp's: {agree} of {args.rounds * args.steps} steps")
    target = L.llama_model_load_from_file(target_path.encode(), L.llama_model_default_params())
    verify = context(target, args.threads, chain())
    rc = decode(verify, batch, [2] + list(range(1000, 1008)), 0, 9)
    print(f"target, a verify pass of 9 rows of one sequence with the chain attached: llama_decode returned {rc}"
          + (" (refused: backend sampling takes at most one output per sequence)" if rc else ""))


if __name__ == "__main__":
    main()
