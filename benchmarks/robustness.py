"""Is the default's speed-up robust, or luck? Fresh processes with empty remembered costs.

Each run is a new `specllama generate --json` process whose remembered-costs file
(SPECLLAMA_COSTS_FILE) is a fresh, empty, writable file: what a first-time user
gets (the built models stay shared). Within a round the configurations run in
ABBA order (forward, then backward; a configuration's value in the round is the
mean of its two runs), on one prompt of the round (story, code and chat in turn,
held out from any tuning):

    target-only (--draft-max 0), the default, --draft-fixed with k = 2, 4, 8 (the
    default rule), and k = 4 run again as an A/A control (its ratio to the first
    k = 4 is the noise floor).

--rotate starts round r's ABBA order at the r-th configuration, so that over the
rounds each configuration takes every position in turn (a round's positions can
run a few percent apart on a shared VM, and the fixed order gives each
configuration the same positions in every round); each run's position is saved.

--configs takes a subset, and "target-only (A/A)" or "k=8 (A/A)" as the control
instead: where no draft length can pay (the coder pair on a few cores), the best
fixed setting is target-only, and a round of target-only, the default and
target-only's twin takes a fraction of the time fixed drafts need there; where
the best fixed k is 8 (the demo pair at 0.8), its own twin measures the noise of
the comparison that counts (a longer draft's speed moves more with its text's
acceptance: over 20 rounds, benchmarks/history/runs/confirm-2026-12-04/rob46_demo.json,
default / k = 8's 10th percentile read 0.900 where k = 4's twin read 0.953).

At temperature > 0 every configuration samples a text of its own from the same
law (one random source serves drafting and acceptance, so another k or another
adaptive choice draws another text), and a text's acceptance moves a run's
speed (in one round, 0.80 of the drafts kept in k = 8's text against 0.95 in
k = 4's). The A/A twin therefore runs with a seed of its own there
(--aa-same-seed: the configuration's it repeats, whose text it then replays, measuring timing noise
alone, as rounds saved before this option did).

The best fixed k is chosen once per pair and temperature, from the medians
pooled over all rounds; every ratio is paired within a round. Printed: each
round, then per pair and temperature the median and 10th percentile of
default/best-fixed, default/target-only and the A/A ratio, with a bootstrap
95% interval for the medians, and decode tok/s and load + warm-up seconds
apart; and how often a default that did the best fixed setting's very work
would miss each goal over as many rounds (the A/A ratios resampled: where that
is common, a miss by a little says nothing about the policy). From the
processes' details (--save keeps them): how far two runs of the same work
differ (timing noise alone), the default's drafts per pass, and each
configuration's share of drafts kept (what its texts allowed).

--long-lived: one process per configuration makes 10 consecutive API calls
(SpeculativeLlama, as the server does); configurations interleaved, ratios from
the third call on.

    python benchmarks/robustness.py                              # 20 rounds, demo, demo-chat, demo-coder
    python benchmarks/robustness.py --rounds 5 --pairs demo -n 128
    python benchmarks/robustness.py --long-lived --rounds 3
    python benchmarks/robustness.py --pairs demo-coder --configs "target-only,default,target-only (A/A)"
    python benchmarks/robustness.py --save run.json ...   # then, even if stopped: --report run.json
                                        # (run.json also keeps each process's drafts, passes and text hash)
    python benchmarks/robustness.py --report a.json b.json   # the rounds of both runs pooled
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import fresh_env, log, offload  # noqa: E402

PROMPTS = {  # held out: none of these is a bench prompt or one the policy was tuned on
    "story": "The lighthouse keeper had not seen a ship in eleven days when, one grey morning,",
    "code": "def merge_intervals(intervals):\n    \"\"\"Merge overlapping [start, end] intervals.\"\"\"\n",
    "chat": "User: What should I pack for a three-day hiking trip in the mountains?\nAssistant:",
}
CONFIGS = {
    "target-only": ["--draft-max", "0"],
    "default": [],
    "k=2": ["--draft-fixed", "--draft-max", "2"],
    "k=4": ["--draft-fixed", "--draft-max", "4"],
    "k=8": ["--draft-fixed", "--draft-max", "8"],
    "k=4 (A/A)": ["--draft-fixed", "--draft-max", "4"],
    "k=8 (A/A)": ["--draft-fixed", "--draft-max", "8"],
    "target-only (A/A)": ["--draft-max", "0"],
}
DEFAULT_CONFIGS = ("target-only", "default", "k=2", "k=4", "k=8", "k=4 (A/A)")
FIXED = ("k=2", "k=4", "k=8")
TWINS = {"k=4 (A/A)": "k=4", "k=8 (A/A)": "k=8", "target-only (A/A)": "target-only"}  # A/A controls, what they repeat
AA_SEED_OFFSET = 1000  # the A/A twin's seed at temperature > 0, after its original's (unless --aa-same-seed)
# what --save keeps of each fresh process besides its speed (what a slow round did), and its text's hash
# (and, where it drafts, what its policy stood on: generate --json's "policy")
DETAIL = ("tokens_per_second", "n_drafted", "n_accepted", "n_target_passes", "acceptance_by_position", "draft_seconds",
          "verify_seconds")
PAIRS = ("demo", "demo-chat", "demo-coder")
BOOTSTRAP = 2000
# the goals (issue 18): a median of default/best-fixed at least these (demo pairs; the coder pair,
# whose best fixed setting is target-only), and a 10th percentile no lower than the A/A control's minus this
MEDIAN_GOALS = (0.97, 0.98)
P10_MARGIN = 0.03

LONG_LIVED = r"""
import json, sys, time
from specllama import SpeculativeLlama
pair, prompt, n, temp, seed, calls, flags = json.loads(sys.argv[1])
t0 = time.perf_counter()
with SpeculativeLlama(pair=pair, seed=seed, **flags) as llm:
    load = time.perf_counter() - t0
    speeds = []
    for i in range(calls):
        out = llm.create_completion(prompt, max_tokens=n, temperature=temp, timings=True)
        speeds.append(out["timings"]["predicted_per_second"])
print(json.dumps({"load_seconds": load, "tokens_per_second": speeds}))
"""
API_FLAGS = {"target-only": {"draft_max": 0}, "default": {}, "k=2": {"draft_max": 2, "adaptive": False},
             "k=4": {"draft_max": 4, "adaptive": False}, "k=8": {"draft_max": 8, "adaptive": False},
             "k=4 (A/A)": {"draft_max": 4, "adaptive": False}, "k=8 (A/A)": {"draft_max": 8, "adaptive": False},
             "target-only (A/A)": {"draft_max": 0}}


def generate_command(pair: str, prompt: str, n: int, temp: float, seed: int, flags: list[str]) -> list[str]:
    """The command line of one fresh ``specllama generate --json`` process (``flags``: its configuration's)."""
    return [sys.executable, "-m", "specllama", "generate", "--pair", pair, "-p", prompt, "-n", str(n),
            "--temp", str(temp), "--seed", str(seed), "--ignore-eos", "--json", *flags]


def offload_flags(layers: int | None) -> list[str]:
    """--gpu-layers as ``specllama generate``'s flags: both models' layers on the GPU."""
    return [] if layers is None else ["-ngl", str(layers), "-ngld", str(layers)]


def run_generate(pair: str, config: str, prompt: str, n: int, temp: float, seed: int, tmp: str,
                 gpu_layers: int | None = None) -> dict:
    """One fresh process; its decode tok/s and its load + warm-up seconds."""
    cmd = generate_command(pair, prompt, n, temp, seed, CONFIGS[config] + offload_flags(gpu_layers))
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=fresh_env(tmp))
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    data = json.loads(out.stdout)
    text = hashlib.sha256(data["text"].encode()).hexdigest()[:12]
    return {"tps": data["tokens_per_second"], "load": wall - data["seconds"],
            "detail": {key: data[key] for key in DETAIL} | {"text": text}
            | ({"policy": data["policy"]} if "policy" in data else {})}


def run_long_lived(pair: str, config: str, prompt: str, n: int, temp: float, seed: int, calls: int,
                   tmp: str, gpu_layers: int | None = None) -> dict:
    """One process, ``calls`` consecutive API calls; tok/s of each."""
    arg = json.dumps([pair, prompt, n, temp, seed, calls, API_FLAGS[config] | offload(gpu_layers)])
    out = subprocess.run([sys.executable, "-c", LONG_LIVED, arg], capture_output=True, text=True,
                         env=fresh_env(tmp))
    if out.returncode != 0:
        raise SystemExit(f"long-lived {pair} {config} failed:\n{out.stderr}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return {"tps": data["tokens_per_second"], "load": data["load_seconds"]}


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def bootstrap_median(xs: list[float], rng: random.Random) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval for the median."""
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP))
    return quantile(meds, 0.025), quantile(meds, 0.975)


def identical_work_misses(aa: list[float], rng: random.Random) -> dict:
    """How often a default that did the best fixed setting's very work would
    miss the goals over this many rounds: its ratios then vary as the A/A
    control's do. Bootstrap draws of as many rounds from the A/A ratios
    (scaled to a median of 1 for the median goals, as identical work has):
    the share whose median is below each of ``MEDIAN_GOALS``, and the share of
    pairs of draws whose first 10th percentile is below the second's minus
    ``P10_MARGIN``. The smallest real shortfall a run of these rounds can
    tell from noise is about where these shares become small."""
    n = len(aa)
    centre = statistics.median(aa)
    scaled = [x / centre for x in aa]
    medians = [statistics.median(rng.choices(scaled, k=n)) for _ in range(BOOTSTRAP)]
    p10_misses = sum(quantile(rng.choices(aa, k=n), 0.1) < quantile(rng.choices(aa, k=n), 0.1) - P10_MARGIN
                     for _ in range(BOOTSTRAP))
    return {"median_below": {f"{g:g}": sum(m < g for m in medians) / BOOTSTRAP for g in MEDIAN_GOALS},
            "p10_below_control": p10_misses / BOOTSTRAP}


def summarize(ratios: list[float], rng: random.Random) -> dict:
    lo, hi = bootstrap_median(ratios, rng)
    return {"median": statistics.median(ratios), "p10": quantile(ratios, 0.1), "median_ci": [lo, hi],
            "n": len(ratios)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated built-in pairs")
    ap.add_argument("--temps", default="0,0.8", help="temperatures, comma-separated")
    ap.add_argument("-n", type=int, default=256, help="tokens per run (per call with --long-lived)")
    ap.add_argument("--prompts", default=",".join(PROMPTS), help="prompt kinds, taken in turn by round")
    ap.add_argument("--long-lived", action="store_true", help="10 consecutive API calls per process")
    ap.add_argument("--calls", type=int, default=10, help="API calls per process with --long-lived")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                    help="comma-separated, target-only and default among them and one A/A control "
                         f"(default: all but target-only's twin); of: {', '.join(CONFIGS)}")
    ap.add_argument("--aa-same-seed", action="store_true",
                    help="at temperature > 0, run the A/A twin with its original's seed (its text; timing noise alone)")
    ap.add_argument("--rotate", action="store_true",
                    help="round r starts its ABBA order at the r-th configuration (each takes every position in "
                         "turn)")
    ap.add_argument("--gpu-layers", type=int, metavar="N",
                    help="layers of both models on the GPU (-ngl N -ngld N; -1: all); needs a GPU build of "
                         "llama-cpp-python")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", metavar="FILE", help="write the measurements so far to FILE after every round")
    ap.add_argument("--report", metavar="FILE", nargs="+", help="print the summary of --save files (runs stopped "
                    "early included; the rounds of several files pooled) and measure nothing")
    args = ap.parse_args()
    if args.report:
        values, loads, saved_args, runs = pooled([json.loads(Path(f).read_text()) for f in args.report])
        report(values, loads, saved_args, args.json, runs)
        return
    pairs = args.pairs.split(",")
    temps = [float(t) for t in args.temps.split(",")]
    prompts = args.prompts.split(",")
    configs = check_configs(args.configs)
    first_counted = 2 if args.long_lived else 0  # from the third call on

    # values[(pair, temp)][config] = one value per round (the mean of its ABBA runs)
    values: dict[tuple[str, float], dict[str, list[float]]] = {}
    loads: dict[tuple[str, float], dict[str, list[float]]] = {}
    runs: list[dict] = []  # each fresh process: round, pair, temperature, configuration, prompt, detail
    with tempfile.TemporaryDirectory(prefix="specllama-robustness-") as tmp:
        for r in range(args.rounds):
            kind = prompts[r % len(prompts)]
            for pair in pairs:
                for temp in temps:
                    got: dict[str, list[float]] = {c: [] for c in configs}
                    load: dict[str, list[float]] = {c: [] for c in configs}
                    for position, c in enumerate(round_order(configs, r, args.rotate), start=1):
                        seed = args.seed + r
                        if c in TWINS and temp > 0 and not args.aa_same_seed:
                            seed += AA_SEED_OFFSET  # a text of its own, as every other configuration samples
                        if args.long_lived:
                            out = run_long_lived(pair, c, PROMPTS[kind], args.n, temp, seed, args.calls, tmp,
                                                 args.gpu_layers)
                            got[c].append(statistics.mean(out["tps"][first_counted:]))
                        else:
                            out = run_generate(pair, c, PROMPTS[kind], args.n, temp, seed, tmp, args.gpu_layers)
                            got[c].append(out["tps"])
                            runs.append({"round": r + 1, "pair": pair, "temperature": temp, "config": c,
                                         "prompt": kind, "seed": seed, "position": position, **out["detail"]})
                        load[c].append(out["load"])
                    cell = values.setdefault((pair, temp), {c: [] for c in configs})
                    lcell = loads.setdefault((pair, temp), {c: [] for c in configs})
                    for c in configs:
                        cell[c].append(statistics.mean(got[c]))
                        lcell[c].append(statistics.mean(load[c]))
                    log(f"round {r + 1} {pair} temp {temp:g} {kind}: " + ", ".join(
                        f"{c} {cell[c][-1]:.1f}" for c in configs) + " tok/s")
                    if args.save:
                        Path(args.save).write_text(json.dumps({
                            "args": vars(args), "values": [[p, t, v] for (p, t), v in values.items()],
                            "loads": [[p, t, v] for (p, t), v in loads.items()], "runs": runs}))
    report([[p, t, v] for (p, t), v in values.items()], [[p, t, v] for (p, t), v in loads.items()], vars(args),
           args.json, runs)


def round_order(configs: list[str], r: int, rotate: bool) -> list[str]:
    """Round ``r``'s runs (0-based): ABBA, forward then backward; with
    ``rotate`` the forward half starts at configuration ``r`` mod their
    number, so that over the rounds each takes every position in turn."""
    start = r % len(configs) if rotate else 0
    forward = configs[start:] + configs[:start]
    return forward + forward[::-1]


def check_configs(value: str) -> list[str]:
    """--configs: known names, with target-only, the default and exactly one A/A control
    and what it repeats."""
    configs = value.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {', '.join(map(repr, unknown))}; known: {', '.join(CONFIGS)}")
    twins = [c for c in configs if c in TWINS]
    if "target-only" not in configs or "default" not in configs or len(twins) != 1 or TWINS[twins[0]] not in configs:
        raise SystemExit(f"--configs {value!r}: needs target-only, default, one A/A control ({', '.join(TWINS)}) "
                         "and the configuration it repeats")
    return configs


def pooled(saved: list[dict]) -> tuple[list, list, dict, list]:
    """The rounds of several --save files as one run's (values, loads, args,
    runs): each pair and temperature's rounds, file after file. Runs of
    another length or mode do not pool."""
    # runs saved before --aa-same-seed existed ran the twin on k = 4's seed; before --configs, all six
    before = {"aa_same_seed": True, "configs": ",".join(DEFAULT_CONFIGS)}
    keys = ("n", "long_lived", "calls", "aa_same_seed", "configs")
    first = before | saved[0]["args"]
    for data in saved[1:]:
        other = before | data["args"]
        differ = [f"{key} {first[key]} vs {other[key]}" for key in keys if other[key] != first[key]]
        if differ:
            raise SystemExit(f"--report: files of different runs ({', '.join(differ)}) do not pool")
    out = []
    for part in ("values", "loads"):
        cells: dict[tuple[str, float], dict[str, list[float]]] = {}
        for data in saved:
            for pair, temp, cell in data[part]:
                into = cells.setdefault((pair, temp), {c: [] for c in cell})
                for c, xs in cell.items():
                    into.setdefault(c, []).extend(xs)
        out.append([[p, t, v] for (p, t), v in cells.items()])
    runs = [run | {"file": i} for i, data in enumerate(saved) for run in data.get("runs", [])]
    return out[0], out[1], first, runs


def noise(runs: list[dict]) -> dict | None:
    """From the processes' details (files saved with them): how far two runs
    of the same work (one round, one configuration, the same text, so the
    same passes) differ in speed, and how many drafts per pass the default
    made. None without details."""
    same: dict[tuple, list[float]] = {}
    for run in runs:
        key = (run.get("file", 0), run["round"], run["config"], run["text"])
        same.setdefault(key, []).append(run["tokens_per_second"])
    spread = [max(v) / min(v) for v in same.values() if len(v) == 2]
    per_pass = [run["n_drafted"] / run["n_target_passes"] for run in runs
                if run["config"] == "default" and run["n_target_passes"]]
    kept: dict[str, list[float]] = {}  # the share of drafts kept, by configuration (one value a text)
    for run in runs:
        if run["n_drafted"]:
            kept.setdefault(run["config"], []).append(run["n_accepted"] / run["n_drafted"])
    if not spread or not per_pass:
        return None
    return {"identical_work_pairs": len(spread), "identical_work_spread_median": statistics.median(spread),
            "identical_work_spread_max": max(spread), "default_drafts_per_pass": [min(per_pass), max(per_pass)],
            "drafts_kept": {c: [min(v), max(v)] for c, v in kept.items()}}


def report(values_list: list, loads_list: list, args: dict, as_json: bool, runs: list | None = None) -> None:
    """Print the summary: per pair and temperature, the medians, the paired
    ratios with their bootstrap intervals and 10th percentiles (and, from the
    processes' details, :func:`noise`)."""
    values = {(p, t): v for p, t, v in values_list}
    loads = {(p, t): v for p, t, v in loads_list}
    rng = random.Random(args["seed"])
    rows = []
    for (pair, temp), cell in values.items():
        configs = list(cell)
        # chosen once, pooled over rounds; without fixed draft lengths, target-only (where none can pay)
        best = max((c for c in FIXED if c in cell), key=lambda c: statistics.median(cell[c]), default="target-only")
        twin = next(c for c in TWINS if c in cell)
        n = len(cell["default"])
        ratios = {
            "default/best-fixed": [cell["default"][i] / cell[best][i] for i in range(n)],
            "default/target-only": [cell["default"][i] / cell["target-only"][i] for i in range(n)],
            "A/A": [cell[twin][i] / cell[TWINS[twin]][i] for i in range(n)],
        }
        rows.append({
            "pair": pair, "temperature": temp, "best_fixed": best, "rounds": n,
            "decode_tps_median": {c: statistics.median(cell[c]) for c in configs},
            "load_and_warm_up_seconds_median": {c: statistics.median(loads[(pair, temp)][c]) for c in configs},
            "ratios": {name: summarize(xs, rng) for name, xs in ratios.items()},
            "identical_work_misses": identical_work_misses(ratios["A/A"], rng),
            "noise": noise([r for r in runs or () if (r["pair"], r["temperature"]) == (pair, temp)]),
        })
    rounds = max((row["rounds"] for row in rows), default=0)
    if as_json:
        print(json.dumps({"long_lived": args["long_lived"], "n": args["n"], "rounds": rounds, "results": rows}))
        return
    mode = f"long-lived ({args['calls']} calls, from the third on)" if args["long_lived"] else "fresh processes"
    print(f"{mode}, {args['n']} tokens, {rounds} rounds, empty remembered costs")
    for row in rows:
        print(f"\n{row['pair']} temp {row['temperature']:g} (best fixed: {row['best_fixed']}; {row['rounds']} rounds)")
        print("  decode tok/s (median): " + ", ".join(f"{c} {v:.1f}" for c, v in row["decode_tps_median"].items()))
        print("  load + warm-up s (median): " + ", ".join(
            f"{c} {v:.2f}" for c, v in row["load_and_warm_up_seconds_median"].items()))
        for name, s in row["ratios"].items():
            print(f"  {name:<20} median {s['median']:.3f} [{s['median_ci'][0]:.3f}, {s['median_ci'][1]:.3f}]"
                  f"  p10 {s['p10']:.3f}")
        miss = row["identical_work_misses"]
        print("  identical work would miss: median < " + ", < ".join(
            f"{g} in {share:.0%}" for g, share in miss["median_below"].items())
            + f"; p10 < A/A p10 - {P10_MARGIN:g} in {miss['p10_below_control']:.0%} (bootstrap of the A/A ratios)")
        if row["noise"]:
            z = row["noise"]
            print(f"  the same work run twice ({z['identical_work_pairs']} pairs): speeds differ by "
                  f"{z['identical_work_spread_median']:.3f}x at the median, {z['identical_work_spread_max']:.3f}x "
                  f"at most; the default drafted {z['default_drafts_per_pass'][0]:.2f}-"
                  f"{z['default_drafts_per_pass'][1]:.2f} per pass")
            print("  share of drafts kept, least and most of a run: " + ", ".join(
                f"{c} {lo:.3f}-{hi:.3f}" for c, (lo, hi) in z["drafts_kept"].items()))


if __name__ == "__main__":
    main()
