"""What the draft-length policy chose at each pass of a real generation, and
what each choice rested on: fresh processes of `specllama generate` with an
empty remembered-costs file (what a first-time user gets), the policy's
warm-up timings and acceptance check, then per pass the draft length, the
estimates it was chosen from (acceptance by position, draft step, first step,
1-row and 9-row target passes, the expected tokens per second of each k) and
what the pass did (drafts, kept, draft and verify milliseconds); a padded
target-only pass that re-measures the costs (a probe: its rows, its target pass
and draft step milliseconds, and whether a recheck was under way).

Where robustness.py shows a slow run (its --save files keep each process's
drafts and passes), this shows why: for example a process that gave drafting
up after one pass whose first draft the target rejected.

    python benchmarks/policy_trace.py --runs 6                 # the demo pair, the story prompt, temperature 0
    python benchmarks/policy_trace.py --runs 1 --passes        # every pass
    python benchmarks/policy_trace.py --pair demo-chat --temp 0.8 --seed 7 --save trace.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import fresh_env  # noqa: E402
from robustness import PROMPTS  # noqa: E402


def traced_generate(argv: list[str]) -> dict:
    """One generation in this process, the policy's calls recorded."""
    from specllama import adaptive
    from specllama.cli import main

    record: list[dict] = []
    policy = adaptive.DraftLengthPolicy
    choose, observe, observe_probe = policy._choose, policy.observe, policy.observe_probe
    warm_up, agreement = policy.observe_warm_up, policy.observe_agreement

    def ms(seconds):
        return None if seconds is None else round(1000 * seconds, 2)

    def traced_choose(self, cap, minimum=0):
        k = choose(self, cap, minimum)
        if self.draft_seconds is not None and self.verify_passes and cap > 0:
            record.append({"pass": self.passes, "cap": cap, "k": k, "gave_up": self.gave_up,
                           "acceptance": [round(a, 3) for a in self.acceptances(cap)],
                           "draft_ms": ms(self.draft_seconds), "first_step_ms": ms(self.first_step_seconds),
                           "verify_1_ms": ms(self.verify_cost(1)), "verify_9_ms": ms(self.verify_cost(9)),
                           "tokens_per_second_by_k": [round(self.rate(j), 1) for j in range(cap + 1)]})
        return k

    def traced_observe(self, n_drafted, n_accepted, draft_seconds, verify_seconds, first_step=None):
        record.append({"drafted": n_drafted, "kept": n_accepted, "draft_ms": ms(draft_seconds),
                       "verify_ms": ms(verify_seconds), "first_step_ms": ms(first_step)})
        return observe(self, n_drafted, n_accepted, draft_seconds, verify_seconds, first_step)

    def traced_probe(self, rows, verify_seconds, draft_step_seconds):
        record.append({"probe_rows": rows, "verify_ms": ms(verify_seconds), "draft_ms": ms(draft_step_seconds),
                       "rechecking": self._rechecking})
        return observe_probe(self, rows, verify_seconds, draft_step_seconds)

    def traced_warm_up(self, steps, verify):
        record.append({"warm_up": {"draft_step_ms": [ms(t) for t in steps],
                                   "verify_ms": {str(r): [ms(t) for t in ts] for r, ts in verify.items()}}})
        return warm_up(self, steps, verify)

    def traced_agreement(self, agreed, n):
        record.append({"agreement": [agreed, n]})
        return agreement(self, agreed, n)

    policy._choose, policy.observe, policy.observe_probe = traced_choose, traced_observe, traced_probe
    policy.observe_warm_up, policy.observe_agreement = traced_warm_up, traced_agreement
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    try:
        with out.open("w") as f, contextlib.redirect_stdout(f):
            main(["generate", *argv, "--json"], standalone_mode=False)
        result = json.loads(out.read_text())
    finally:
        out.unlink()
    return {"tokens_per_second": result["tokens_per_second"], "n_target_passes": result["n_target_passes"],
            "n_drafted": result["n_drafted"], "n_accepted": result["n_accepted"], "trace": record}


def summary(run: dict) -> str:
    passes = [e for e in run["trace"] if "pass" in e]
    gave_up = next((e["pass"] for e in passes if e["gave_up"]), None)
    agreement = next((e["agreement"] for e in run["trace"] if "agreement" in e), None)
    return (f"{run['tokens_per_second']:.1f} tok/s, {run['n_target_passes']} passes, {run['n_drafted']} drafted, "
            f"{run['n_accepted']} kept; warm-up agreement {agreement[0] if agreement else '-'}/"
            f"{agreement[1] if agreement else '-'}; " + (f"gave drafting up at pass {gave_up}" if gave_up else
                                                           "never gave drafting up"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="demo")
    ap.add_argument("--prompt", default="story", choices=list(PROMPTS), help="one of robustness.py's prompts")
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=150)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--runs", type=int, default=1, help="fresh processes, one after another")
    ap.add_argument("--passes", action="store_true", help="print every pass")
    ap.add_argument("--save", metavar="FILE", help="write every run's trace to FILE")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one run, JSON on stdout
    args = ap.parse_args()
    argv = ["--pair", args.pair, "-p", PROMPTS[args.prompt], "-n", str(args.n), "--temp", str(args.temp),
            "--seed", str(args.seed), "--ignore-eos"]
    if args.one:
        print(json.dumps(traced_generate(argv)))
        return
    runs = []
    with tempfile.TemporaryDirectory(prefix="specllama-trace-") as tmp:
        for i in range(args.runs):
            cmd = [sys.executable, __file__, "--one", "--pair", args.pair, "--prompt", args.prompt, "--temp",
                   str(args.temp), "--seed", str(args.seed), "-n", str(args.n)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=fresh_env(tmp))
            if out.returncode != 0:
                raise SystemExit(f"run {i + 1} failed:\n{out.stderr}")
            run = json.loads(out.stdout.strip().splitlines()[-1])
            runs.append(run)
            print(f"run {i + 1}: {summary(run)}", flush=True)
            if args.passes:
                for event in run["trace"]:
                    print("  " + json.dumps(event))
    if args.save:
        Path(args.save).write_text(json.dumps({"args": vars(args), "runs": runs}))


if __name__ == "__main__":
    main()
