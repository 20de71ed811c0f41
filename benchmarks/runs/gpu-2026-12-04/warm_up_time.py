"""The demo pair's warm-up on this machine, in seconds: as on a CPU (one 1-row target pass a turn) and as on a
GPU (three in a row, timed apart: adaptive.SETTLED), each in a fresh engine, interleaved. Run: python
benchmarks/runs/gpu-2026-12-04/warm_up_time.py [REPS]"""
import sys
import time

from specllama.backend import LlamaModel
from specllama.demo import demo_pair
from specllama.engine import SpeculativeEngine

target, draft = demo_pair()
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for offloaded in (False, True):
        engine = SpeculativeEngine(LlamaModel(target, n_ctx=4096), LlamaModel(draft, n_ctx=4096))
        engine.target.offloaded = offloaded  # the warm-up's pattern only: every layer stays on the CPU
        t0 = time.perf_counter()
        engine.warm_up()
        print(f"rep {rep}: the warm-up {'as on a GPU' if offloaded else 'as on a CPU'}: "
              f"{time.perf_counter() - t0:.2f} s", flush=True)
        engine.close()
