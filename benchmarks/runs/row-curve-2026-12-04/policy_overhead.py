"""Ad hoc (2026-12-04): microseconds per choose + observe of the policy at a checkout (the
argument), 2000 passes of synthetic timings, best of 5:
    python benchmarks/runs/row-curve-2026-12-04/policy_overhead.py <checkout>
"""

import random
import sys
import time

sys.path.insert(0, sys.argv[1])
from specllama.adaptive import DraftLengthPolicy  # noqa: E402

policy = DraftLengthPolicy()
policy.observe_warm_up([0.016] * 5, {1: [0.043] * 5, 2: [0.06] * 5, 9: [0.116] * 5})
random.seed(0)
N = 2000


def run() -> float:
    start = time.perf_counter()
    for _ in range(N):
        k = policy.choose(8)
        if k:
            policy.observe(k, random.randint(0, k), 0.016 * k * random.uniform(0.8, 1.2),
                           (0.043 + 0.009 * k) * random.uniform(0.8, 1.2))
        else:
            policy.observe(0, 0, 0.0, 0.043 * random.uniform(0.8, 1.2))
    return time.perf_counter() - start


print(f"{min(run() for _ in range(5)) / N * 1e6:.0f} us per choose + observe (best of 5)")
