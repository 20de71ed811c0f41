"""The warm-up's 1-row target passes on this machine: right after a 2-row pass (a switch) and the third in a row
(adaptive.SETTLED), medians of 5 in each of 3 repetitions, for the three built-in pairs' targets. Run: python
benchmarks/runs/gpu-2026-12-04/switch_cpu.py"""
import statistics

from specllama.backend import LlamaModel
from specllama.demo import demo_chat_pair, demo_coder_pair, demo_pair
from specllama.engine import SWITCH, _time_passes

for name, (target, _) in (("demo", demo_pair()), ("demo-chat", demo_chat_pair()), ("demo-coder", demo_coder_pair())):
    m = LlamaModel(target, n_ctx=512)
    m.warm_up((1, 2, 9))
    for rep in range(3):
        (t,) = _time_passes([(m, [9, 2, (SWITCH, 1), (None, 1), 1])])
        sw, st = statistics.median(t[SWITCH]), statistics.median(t[1])
        print(f"{name} rep {rep}: 1 row after 2 rows {1000 * sw:.1f} ms, third in a row {1000 * st:.1f} ms, "
              f"ratio {sw / st:.3f}; 2 rows {1000 * statistics.median(t[2]):.1f}, "
              f"9 rows {1000 * statistics.median(t[9]):.1f}", flush=True)
    m.close()
