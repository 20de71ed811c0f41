"""Where a parallel-slots run's drafting goes: concurrency.py's rows, in process, traced.

Runs ``--rows`` rows of concurrency.py's requests (4 clients, 8 streamed-length chats each row) through one
``SpeculativeLlama(n_parallel=4)``, and counts: the steps the batch policy chose for (several slots running)
and how many of them drafted; the passes the lone policy chose for (a slot running alone) and how many drafted;
the draft model's decodes (one token per slot: draft steps; more: catch-ups and first steps) and the target's,
with the seconds llama_decode took. An empty remembered-costs file, as a first-time user's.

    python benchmarks/slots_trace.py                  # demo-chat, temperature 0, 4 rows
    python benchmarks/slots_trace.py --temperature 0.8 --rows 8
    python benchmarks/slots_trace.py --draft-max 0     # the same requests target-only
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from concurrency import LENGTHS, QUESTIONS  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo-chat")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--draft-max", type=int, default=8, help="0: target-only, the yardstick of the same requests")
    args = p.parse_args()
    os.environ["SPECLLAMA_COSTS_FILE"] = str(Path(tempfile.mkdtemp()) / "costs.json")

    from specllama import SpeculativeLlama
    from specllama.backend import model as backend
    from specllama.policy import AdaptivePolicy, BatchPolicy

    counts: collections.Counter = collections.Counter()
    names: dict[int, str] = {}
    batch_choose, lone_choose, decode_batch = BatchPolicy.choose, AdaptivePolicy.choose, backend.LlamaModel.decode_batch
    chosen_at: dict[int, int] = {}

    def traced_batch(self, cap, slots, step, behind=0):
        k = batch_choose(self, cap, slots, step, behind)
        if chosen_at.get(id(self)) != step:  # one choice per step, asked by every slot
            chosen_at[id(self)] = step
            counts["batch steps"] += 1
            counts["batch steps drafting"] += bool(k)
        return k

    def traced_lone(self, cap, **told):
        plan = lone_choose(self, cap, **told)
        counts["lone passes"] += 1
        counts["lone passes drafting"] += bool(plan.k)
        return plan

    def traced_decode(self, pieces):
        t0 = time.perf_counter()
        out = decode_batch(self, pieces)
        model = names.get(id(self._base), "?")
        step = all(len(tokens) == 1 for _, tokens, _ in pieces)
        kind = f"{model} decodes ({'one token a slot' if step or model == 'target' else 'more'})"
        counts[kind] += 1
        counts[f"{kind} seconds"] += time.perf_counter() - t0
        return out

    BatchPolicy.choose, AdaptivePolicy.choose, backend.LlamaModel.decode_batch = (traced_batch, traced_lone,
                                                                                  traced_decode)
    lock = threading.Lock()
    with SpeculativeLlama(pair=args.pair, n_ctx=8192, n_parallel=4, draft_max=args.draft_max) as llm:
        names[id(llm.engine.target._base)], names[id(llm.engine.draft._base)] = "target", "draft"
        jobs = [(QUESTIONS[i % len(QUESTIONS)], LENGTHS[i % len(LENGTHS)]) for i in range(8)]
        for _ in range(args.rows):
            def client(k: int) -> None:
                for question, n in jobs[k::4]:
                    out = llm.create_chat_completion([{"role": "user", "content": question}], max_tokens=n,
                                                     temperature=args.temperature, seed=1)
                    with lock:
                        counts["tokens"] += out["usage"]["completion_tokens"]
                        counts["drafted"] += out["speculative"]["n_drafted"]

            t0 = time.perf_counter()
            threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            counts["seconds"] += time.perf_counter() - t0
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in sorted(counts.items())}, indent=2))


if __name__ == "__main__":
    main()
