"""Ad hoc: the draft-length policy on the H200's costs (benchmarks/RESULTS.md, "On a GPU"), simulated.

The demo pair at temperature 0 as fresh processes paid in decoding (out/robust.json: a target-only
token 1.48 ms; passes of 3, 5 and 9 rows 2.6, 3.4 and 4.3 ms; a drafted token 1.75 ms) and as their
warm-ups timed it (1-row passes WARM_1x, 2-row 1.15x, 9-row 0.65x, a draft step 0.61x). Target-only
is the best fixed k there at any acceptance. Prints fresh processes' tokens per second over
target-only's and the share of passes that drafted.

    python benchmarks/runs/gpu-2026-12-04/sim_gpu.py [WARM_1x ...]
"""
import sys

import numpy as np

sys.path.insert(0, ".")
from tests import test_policy_sim as sim  # noqa: E402

GPU_DEMO = sim.Machine(rows=((1, 0.00148), (2, 0.0022), (3, 0.0026), (5, 0.0034), (9, 0.0043)),
                       draft_step=0.00175, catch_up_per_token=0.0002, draft_two_tokens=0.002)


def run(warm_1: float, accept: float, seed: int = 2, runs: int = sim.RUNS) -> tuple[float, float, float]:
    k_best, best = sim.best_fixed(GPU_DEMO, accept, seed=1)
    rng = np.random.default_rng(seed)
    results, drafting, passes = [], 0, 0
    for _ in range(runs):
        r = sim.Run(GPU_DEMO, rng, agree=accept, warm_up={1: warm_1, 2: 1.15, 9: 0.65}, warm_up_draft=0.61)
        results.append(r.call(sim.constant(accept)))
        drafting += r.drafting_passes
        passes += r.passes
    return k_best, sim.tps(results) / best, drafting / passes


if __name__ == "__main__":
    for warm_1 in [float(x) for x in sys.argv[1:]] or [1.0, 1.5, 1.7, 2.0]:
        for accept in (0.8, 0.95, 1.0):
            k, ratio, share = run(warm_1, accept)
            print(f"warm-up 1-row x{warm_1:g}, acceptance {accept:g}: best fixed k {k}; default {ratio:.3f} of it, "
                  f"drafting in {100 * share:.1f}% of passes", flush=True)
