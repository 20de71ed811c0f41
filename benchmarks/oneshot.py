"""What a user gets from one `specllama generate`: a fresh process per run.

Runs `specllama generate --json` on the demo pair in a new process for each
configuration, interleaved (config order rotates every repetition), and
prints the median decoding speed (tokens/s as the stats line reports it)
and each configuration's ratio to `--draft-max 0` in the same run.

    python benchmarks/oneshot.py                    # 128 tokens, the story prompt, 3 repetitions
    python benchmarks/oneshot.py --repeat 5 --json  # more repetitions, JSON out
    SPECLLAMA_COST_CACHE=0 python benchmarks/oneshot.py   # every process starts cold (no saved costs)
    python benchmarks/oneshot.py --rpc 127.0.0.1:50052    # each configuration also with the target on a
                                                          # running `specllama rpc-server` (-ngl 99)

Ratios are to `--draft-max 0` in the same setting (local, or through the RPC server).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

STORY = "Once upon a time, in a small village by the sea,"

CONFIGS = {
    "target only (--draft-max 0)": ["--draft-max", "0"],
    "default": [],
    "--draft-fixed --draft-max 4": ["--draft-fixed", "--draft-max", "4"],
    "--draft-fixed --draft-max 8": ["--draft-fixed", "--draft-max", "8"],
    "--rule block": ["--rule", "block"],
}


def run_once(flags: list[str], temp: float, n: int, seed: int, prompt: str) -> dict:
    cmd = [sys.executable, "-m", "specllama", "generate", "-p", prompt, "-n", str(n), "--temp", str(temp),
           "--seed", str(seed), "--json", *flags]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    data["wall_seconds"] = time.perf_counter() - t0
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=128, help="tokens per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--temp", default="0,0.8", help="temperatures, comma-separated")
    ap.add_argument("--only", default=None, help="comma-separated config names (default: all)")
    ap.add_argument("--prompt", default=STORY)
    ap.add_argument("--rpc", default=None, metavar="HOST:PORT",
                    help="also run each configuration with the target on this RPC server (-ngl 99)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    temps = [float(t) for t in args.temp.split(",")]
    base_name = next(iter(CONFIGS))  # the ratios' denominator: always run
    configs = {k: v for k, v in CONFIGS.items() if not args.only or k == base_name or k in args.only.split(",")}
    if args.rpc:
        configs.update({f"{k} via RPC": [*v, "--rpc", args.rpc, "-ngl", "99"] for k, v in list(configs.items())})
    names = list(configs)
    results: dict[tuple[float, str], list[dict]] = {}
    for r in range(args.repeat):
        for temp in temps:
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                d = run_once(configs[name], temp, args.n, 1000 + r, args.prompt)
                results.setdefault((temp, name), []).append(d)
                print(f"  rep {r} temp {temp:g} {name}: {d['tokens_per_second']:.1f} tok/s "
                      f"({d['n_tokens']} tokens, mean k {d['n_drafted'] / max(d['n_target_passes'], 1):.1f})",
                      file=sys.stderr)
    rows = []
    for temp in temps:
        for name in names:
            base_of = f"{base_name} via RPC" if name.endswith(" via RPC") else base_name
            base = statistics.median(d["tokens_per_second"] for d in results[(temp, base_of)])
            runs = results[(temp, name)]
            tps = statistics.median(d["tokens_per_second"] for d in runs)
            rows.append({
                "temperature": temp, "config": name, "tokens_per_second": tps, "vs_target_only": tps / base,
                "acceptance_rate": statistics.median(d["acceptance_rate"] for d in runs),
                "mean_draft_length": statistics.median(d["n_drafted"] / max(d["n_target_passes"], 1) for d in runs),
                "wall_seconds": statistics.median(d["wall_seconds"] for d in runs),
            })
    if args.json:
        print(json.dumps({"n_tokens": args.n, "repeat": args.repeat, "rows": rows}))
        return
    print(f"{'temp':>4}  {'configuration':<38} {'tok/s':>6} {'vs -draft-max 0':>15} {'accept':>6} {'mean k':>6} "
          f"{'wall s':>6}")
    for row in rows:
        print(f"{row['temperature']:>4g}  {row['config']:<38} {row['tokens_per_second']:>6.1f} "
              f"{row['vs_target_only']:>14.2f}x {row['acceptance_rate']:>6.0%} {row['mean_draft_length']:>6.1f} "
              f"{row['wall_seconds']:>6.1f}")
    print(f"median of {args.repeat} fresh processes per cell, {args.n} tokens, interleaved")


if __name__ == "__main__":
    main()
