"""Where "coder busier machine" loses (seeds 0-1 of the scenario: generator seeds 8 and 18): its fresh processes'
seconds split into the draft's catch-ups (the prompt's where a call starts by feeding it, and those after
target-only passes), the drafting passes' excess over target-only passes and the probes' (each pass against
target-only's mean 1-row cost on that machine), and how many processes drafted in their first three passes.
``python benchmarks/history/runs/policy-2026-12-07/coder_busier.py [TREE]``: TREE's policy (default: this
checkout's), this checkout's simulator."""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [sys.argv[1] if len(sys.argv) > 1 else str(ROOT), str(ROOT / "benchmarks")]
import policy_sim as sim  # noqa: E402

SCALE, ACCEPT = 1.3, 0.95
one = sim.CODER.verify(1) * SCALE
for seed in (8, 18):
    rng = np.random.default_rng(seed)
    ours = [sim.Process(sim.CODER, rng, agree=ACCEPT) for _ in range(sim.RUNS)]
    alone = [sim.Process(sim.CODER, rng, fixed=0) for _ in range(sim.RUNS)]
    for proc in ours + alone:
        proc.scale = SCALE
    split = {"catch-up": 0.0, "drafting passes": 0.0, "probes": 0.0}
    seconds, tokens, early = 0.0, 0, 0
    for proc in ours:
        policy, passes = proc.policy, []
        observe, observe_catch_up = policy.observe, policy.observe_catch_up
        policy.observe = lambda r, _o=observe, _p=passes: (_p.append(r), _o(r))
        policy.observe_catch_up = lambda s, n, _o=observe_catch_up: (split.__setitem__(
            "catch-up", split["catch-up"] + s), _o(s, n))
        before = split["catch-up"]
        t, s = proc.call(sim.constant(ACCEPT))
        tokens, seconds = tokens + t, seconds + s
        early += any(r.n_drafted for r in passes[:3])
        # a call that starts by feeding the draft the prompt pays that catch-up outside any pass: what is left
        timed = sum(r.draft_seconds + r.verify_seconds + (r.probe_step or 0.0) for r in passes)
        split["catch-up"] += max(s - timed - (split["catch-up"] - before), 0.0)
        for r in passes:
            if r.n_drafted:
                split["drafting passes"] += r.draft_seconds + r.verify_seconds - (r.n_accepted + 1) * one
            elif r.rows > 1:
                split["probes"] += r.verify_seconds + (r.probe_step or 0.0) - one
    base = sim.tps([proc.call(sim.constant(ACCEPT)) for proc in alone])
    print(f"seed {seed}: figure {tokens / seconds / base:.4f}; of all seconds: "
          + ", ".join(f"{name} {value / seconds:.4f}" for name, value in split.items())
          + f"; processes that drafted in their first 3 passes: {early} of {len(ours)}")
