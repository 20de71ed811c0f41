"""How far decoding's costs stood from the warm-up's in the saved policy traces: a shift of the whole machine, or
each kind on its own?

For each traced process (``benchmarks/policy_trace.py --save`` files under ``history/runs/policy-trace-*`` and this
folder), the log ratio of decoding's median cost to the warm-up's median, per kind: a draft step (from passes that
drafted two or more), a 9-row target pass, and a 1-row target pass (the median of the first three target-only passes
that were not probes). Printed: each file's processes, then, over the processes with two kinds or more, the spread
of their shift (the mean of their kinds' ratios) and of each kind about it.

    python benchmarks/history/runs/policy-2026-12-07/warm_up_shift.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FILES = sorted(HERE.parent.glob("policy-trace-*/*.json")) + sorted(HERE.glob("chat_code_*.json"))


def ratios(trace: list[dict]) -> dict:
    """Kind -> log(decoding's median / the warm-up's median), for the kinds both timed."""
    warm = next(e["warm_up"] for e in trace if "warm_up" in e)
    steps, rows = (warm["draft_step_ms"], warm["verify_ms"]) if "verify_ms" in warm else (warm["draft_steps"],
                                                                                           warm["rows"])
    warm_up = {"step": np.median(steps), 1: np.median(rows["1"]), 9: np.median(rows["9"])}
    passes = [e for e in trace if "verify_ms" in e and "drafted" in e]
    timed = {"step": [(e["draft_ms"] - e["first_step_ms"]) / (e["drafted"] - 1) for e in passes
                      if e["drafted"] > 1 and e.get("first_step_ms")],
             9: [e["verify_ms"] for e in passes if e["drafted"] == 8],
             1: [e["verify_ms"] for e in passes if e["drafted"] == 0 and e.get("rows", 1) == 1
                 and not e.get("probe_step_ms")][:3]}
    least = {"step": 3, 9: 3, 1: 1}
    return {kind: float(np.log(np.median(ts) / warm_up[kind])) for kind, ts in timed.items() if len(ts) >= least[kind]}


def main() -> None:
    processes = []
    for path in FILES:
        runs = [ratios(run["trace"]) for run in json.loads(path.read_text(encoding="utf-8"))["runs"]]
        print(f"{path.parent.name}/{path.name}: {len(runs)} processes")
        processes += runs
    two = [r for r in processes if len(r) >= 2]
    shifts = [np.mean(list(r.values())) for r in two]
    print(f"processes with two kinds or more: {len(two)}; their shift: mean {np.mean(shifts):+.3f}, "
          f"sd {np.std(shifts, ddof=1):.3f}")
    step_9 = [r["step"] - r[9] for r in two if "step" in r and 9 in r]
    print(f"a draft step against a 9-row pass (each a median of many timings), {len(step_9)} processes: "
          f"mean {np.mean(step_9):+.3f}, sd {np.std(step_9, ddof=1):.3f}")
    one = [r[1] - np.mean([v for k, v in r.items() if k != 1]) for r in two if 1 in r]
    print(f"a 1-row pass (one to three timings) against the other kinds' mean, {len(one)} processes: "
          f"mean {np.mean(one):+.3f}, sd {np.std(one, ddof=1):.3f}, "
          f"{sum(x >= np.log(1 / 0.87) for x in one)} at or above +{np.log(1 / 0.87):.3f} (0.87x)")


if __name__ == "__main__":
    main()
