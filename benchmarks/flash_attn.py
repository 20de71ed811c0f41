"""Flash attention's share of the gap between target-only decoding and `llama-bench`.

`llama-bench` (and `llama-speculative-simple`) run with flash attention `auto`,
which llama.cpp resolves to on for the CPU; llama-cpp-python's `Llama` turns it
off unless told (`flash_attn=False`), and so does specllama unless told
(`-fa on`: see docs/flags.md for why). For each
repetition, each in a fresh process and interleaved:

    llama-bench auto      llama-bench -m TARGET -p 0 -n N -r 1 -t T -o json (tg tokens/s)
    llama-bench off       the same with -fa 0
    loop off / loop on    llama-cpp-python with specllama's context parameters (n_ctx 4096,
                          n_batch 512, swa_full), decoding one token at a time and taking the
                          argmax of each logits row, flash_attn False / True

Prints each cell's runs and median, and paired medians of the ratios. Builds
`llama-bench` as benchmarks/native_compare.py does, if needed.

    python benchmarks/flash_attn.py               # the demo target, 6 reps, 96 tokens
    python benchmarks/flash_attn.py --reps 10 -m model.gguf
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from native_compare import build, llama_cpp_version  # noqa: E402

LOOP = r"""
import json, sys, time, llama_cpp, numpy as np
path, fa, n, threads = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(model_path=path, n_ctx=4096, n_batch=512, n_ubatch=512, n_threads=threads,
                      n_threads_batch=threads, logits_all=False, swa_full=True, flash_attn=fa, verbose=False)
batch = llama_cpp.llama_batch_init(512, 0, 1)
def decode(token, pos):
    batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0] = token, pos, 1, 0, 1
    batch.n_tokens = 1
    assert llama_cpp.llama_decode(llm.ctx, batch) == 0
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),))
decode(0, 0)  # warm-up, as llama-bench's
llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
t0, token = time.perf_counter(), 0
for i in range(n):
    token = int(decode(token, i).argmax())
print(json.dumps({"tokens_per_second": n / (time.perf_counter() - t0)}))
"""
CELLS = ("llama-bench auto", "llama-bench off", "loop off", "loop on")


def run(cell: str, bench: Path, target: str, n: int, threads: int) -> float:
    if cell.startswith("llama-bench"):
        cmd = [str(bench), "-m", target, "-p", "0", "-n", str(n), "-r", "1", "-t", str(threads), "-o", "json",
               *(["-fa", "0"] if cell.endswith("off") else [])]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return float(json.loads(out.stdout)[0]["avg_ts"])
    out = subprocess.run([sys.executable, "-c", LOOP, target, "1" if cell.endswith("on") else "0", str(n),
                          str(threads)], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_second"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", help="target GGUF (default: the demo pair's)")
    ap.add_argument("-n", type=int, default=96, help="tokens per run")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if args.model is None:
        from specllama.demo import demo_pair
        args.model = demo_pair()[0]
    bench = build(llama_cpp_version(), args.threads, targets=("llama-bench",))["llama-bench"]
    runs: dict[str, list[float]] = {c: [] for c in CELLS}
    for rep in range(args.reps):
        for cell in CELLS:
            runs[cell].append(run(cell, bench, args.model, args.n, args.threads))
        print(f"rep {rep + 1}: " + ", ".join(f"{c} {runs[c][-1]:.2f}" for c in CELLS), flush=True)
    print(f"\n{args.n} tokens, {args.threads} threads, {args.reps} fresh processes per cell, interleaved; tok/s")
    for cell in CELLS:
        print(f"  {cell:17s} median {statistics.median(runs[cell]):6.2f}  ({' '.join(f'{v:.2f}' for v in runs[cell])})")

    def paired(a: str, b: str) -> str:
        return f"{statistics.median(x / y for x, y in zip(runs[a], runs[b])):.3f}"

    print(f"  loop off / llama-bench off (like for like): {paired('loop off', 'llama-bench off')}")
    print(f"  loop off / llama-bench auto (specllama's setting against llama-bench's): "
          f"{paired('loop off', 'llama-bench auto')}")
    print(f"  flash attention on / off: llama-bench {paired('llama-bench auto', 'llama-bench off')}, "
          f"loop {paired('loop on', 'loop off')}")


if __name__ == "__main__":
    main()
