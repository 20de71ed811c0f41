"""Ad hoc (2026-12-04): one process, the coder pair, 256 tokens at temperature 0 with --draft-max 0's path and
with the default (which decodes target-only there: drafting cannot pay), each under cProfile: what the
draft-length policy's choose and observe take a pass, against the target's eval. Remembered costs go to a
temporary file.

    python benchmarks/runs/confirm-2026-12-04/profile_policy.py
"""

import cProfile
import os
import pstats
import tempfile

os.environ["SPECLLAMA_COSTS_FILE"] = os.path.join(tempfile.mkdtemp(), "costs.json")

from specllama import SpeculativeLlama  # noqa: E402

llm = SpeculativeLlama(pair="demo-coder", n_ctx=1024, seed=1)
prompt = "Write a Python function that parses a CSV file and returns the rows as dictionaries."
llm.create_completion(prompt, max_tokens=16, temperature=0)  # the warm-up and the one-line notice
for name, draft_max in (("--draft-max 0", 0), ("default", None)):
    profile = cProfile.Profile()
    profile.enable()
    out = llm.create_completion(prompt, max_tokens=256, temperature=0, draft_max=draft_max)
    profile.disable()
    stats = pstats.Stats(profile).stats  # (file, line, function) -> (calls, primitive, tottime, cumtime, callers)
    by_name = {}
    for (_, _, function), (_, calls, _, cumulative, _) in stats.items():
        if function in ("choose", "observe", "eval"):
            calls0, cumulative0 = by_name.get(function, (0, 0.0))
            by_name[function] = (max(calls0, calls), max(cumulative0, cumulative))
    print(name, f"{out['usage']['completion_tokens']} tokens;",
          "; ".join(f"{f}: {1000 * c / n:.3f} ms a call over {n}" for f, (n, c) in sorted(by_name.items())))
