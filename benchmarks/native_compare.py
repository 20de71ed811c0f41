"""specllama against llama.cpp's own tools, interleaved in one run.

Builds `llama-speculative-simple` and `llama-bench` once from the llama.cpp
sources vendored in the llama-cpp-python sdist of the installed version (into
benchmarks/.native/, ignored by git), then, for each repetition and each
temperature (0 and 0.8), runs in a fresh process each and in a rotating order:

    native target-only        llama-bench -m TARGET -p 0 -n N -r 1 -o json (its tg tokens/s)
    native target-only -fa 0  the same without flash attention
    native speculative k=4    llama-speculative-simple --spec-type draft-simple --spec-draft-n-max 4
    native speculative k=8    llama-speculative-simple --spec-type draft-simple --spec-draft-n-max 8
    specllama --draft-max 0   (target only)
    specllama --draft-max 0 -fa on
    specllama default         (adaptive draft length)
    specllama --draft-fixed --draft-max 8

on the demo pair (or -m/-md), the same prompt, length, seed (per repetition),
threads and context, and prints the median tokens/s of each with the ratios
specllama default / best native speculative, specllama default / native
target-only and specllama --draft-max 0 / native target-only, each both as the
tools run by default (llama.cpp's tools pick flash attention on for the CPU,
specllama leaves it off: docs/flags.md) and like for like (both off, both on).
See benchmarks/README.md for the flags and what the native figures mean.

    python benchmarks/native_compare.py                 # build if needed, 2 reps, 96 tokens
    python benchmarks/native_compare.py --reps 3 --json
    python benchmarks/native_compare.py --max-load 1.2  # a shared machine: start each run when it is quiet
    python benchmarks/native_compare.py --build-only    # just build the native tools
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NATIVE = HERE / ".native"
STORY = "Once upon a time, in a small village by the sea,"
TARGETS = ("llama-speculative-simple", "llama-bench")
TEMPS = (0.0, 0.8)
CTX = 4096
CONTENDED = 0.75  # a run whose process got less CPU than this share of threads x wall is flagged


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- build

def llama_cpp_version() -> str:
    from importlib.metadata import version
    return version("llama_cpp_python")


def source_dir(ver: str) -> Path:
    return NATIVE / f"llama_cpp_python-{ver}" / "vendor" / "llama.cpp"


def binaries(ver: str, targets=TARGETS) -> dict[str, Path]:
    return {t: source_dir(ver) / "build" / "bin" / t for t in targets}


def build(ver: str, jobs: int, targets=TARGETS) -> dict[str, Path]:
    """Download the sdist, unpack it and build the tools (``targets``: by
    default the two this script runs); skip what exists."""
    bins = binaries(ver, targets)
    if all(p.exists() for p in bins.values()):
        return bins
    NATIVE.mkdir(exist_ok=True)
    if shutil.which("cmake") is None:
        raise SystemExit("cmake not found: `pip install cmake` (into this venv) or `apt-get install cmake`")
    src = source_dir(ver)
    if not (src / "CMakeLists.txt").exists():
        sdists = glob.glob(str(NATIVE / f"llama_cpp_python-{ver}.tar.gz"))
        if not sdists:
            log(f"downloading the llama-cpp-python {ver} sdist ...")
            subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={ver}", "--no-deps",
                            "--no-binary", ":all:", "-d", str(NATIVE)], check=True)
            sdists = glob.glob(str(NATIVE / f"llama_cpp_python-{ver}.tar.gz"))
        with tarfile.open(sdists[0]) as tar:
            try:
                tar.extractall(NATIVE, filter="data")
            except TypeError:  # Python without extraction filters (before 3.11.4)
                tar.extractall(NATIVE)
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    t0 = time.perf_counter()
    log(f"configuring {src} ...")
    subprocess.run([*nice, "cmake", "-B", "build", "-DLLAMA_CURL=OFF"], cwd=src, check=True)
    log(f"building {' '.join(targets)} with -j {jobs} (minutes) ...")
    subprocess.run([*nice, "cmake", "--build", "build", "--config", "Release", "-j", str(jobs),
                    "--target", *targets], cwd=src, check=True)
    log(f"built in {time.perf_counter() - t0:.0f} s")
    missing = [str(p) for p in bins.values() if not p.exists()]
    if missing:
        raise SystemExit(f"build finished but not found: {', '.join(missing)}")
    return bins


# --------------------------------------------------------------------------- runs

NATIVE_TARGET = "native target-only (llama-bench tg)"
NATIVE_TARGET_FA0 = "native target-only -fa 0"
NATIVE_K4 = "native speculative k=4"
NATIVE_K8 = "native speculative k=8"
SPEC_TARGET = "specllama --draft-max 0"
SPEC_TARGET_FA = "specllama --draft-max 0 -fa on"
SPEC_DEFAULT = "specllama default (adaptive)"
SPEC_FIXED8 = "specllama --draft-fixed --draft-max 8"
CONFIGS = (NATIVE_TARGET, NATIVE_TARGET_FA0, NATIVE_K4, NATIVE_K8, SPEC_TARGET, SPEC_TARGET_FA, SPEC_DEFAULT,
           SPEC_FIXED8)
NATIVE_SPEC = {NATIVE_K4: 4, NATIVE_K8: 8}
SPEC_FLAGS = {SPEC_TARGET: ["--draft-max", "0"], SPEC_TARGET_FA: ["--draft-max", "0", "-fa", "on"], SPEC_DEFAULT: [],
              SPEC_FIXED8: ["--draft-fixed", "--draft-max", "8"]}

# llama-speculative-simple prints these (LOG_INF, stderr) at the end of a run
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
N_DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
N_ACCEPT = re.compile(r"n_accept\s*=\s*(\d+)")


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Contended(Exception):
    """A run took longer than --run-timeout: another user had the cores."""


def _run(cmd: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    """Run one process; returns its output and its wall and CPU seconds."""
    c0, t0 = _children_cpu(), time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:  # subprocess.run has killed it
        raise Contended(f"killed after {timeout:g} s") from None
    times = {"wall_seconds": time.perf_counter() - t0, "cpu_seconds": _children_cpu() - c0}
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).splitlines()[-25:])
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}\n{tail}")
    return out, times


def run_native_target(bins: dict[str, Path], target: str, n: int, threads: int, timeout: float,
                      flags: tuple[str, ...] = ()) -> dict:
    """llama-bench tg: decode n tokens one at a time (no sampling, after its own warm-up run)."""
    out, times = _run([str(bins["llama-bench"]), "-m", target, "-p", "0", "-n", str(n), "-r", "1", "-o", "json",
                      "-t", str(threads), *flags], timeout)
    tests = [t for t in json.loads(out.stdout) if t.get("n_gen") == n and t.get("n_prompt") == 0]
    if not tests:
        raise SystemExit(f"llama-bench printed no tg{n} result:\n{out.stdout[-2000:]}")
    return {"tokens_per_second": float(tests[0]["avg_ts"]), "n_tokens": n, **times}


def run_native_spec(bins: dict[str, Path], target: str, draft: str, k: int, temp: float, n: int, seed: int,
                    threads: int, ctx: int, prompt: str, extra: list[str], timeout: float) -> dict:
    """llama-speculative-simple with a draft model and k = `k`: the speed of its "decoded" line, its counts."""
    cmd = [str(bins["llama-speculative-simple"]), "-m", target, "-md", draft, "--spec-type", "draft-simple",
           "--spec-draft-n-max", str(k), "-p", prompt, "-n", str(n), "--temp", str(temp), "-s", str(seed),
           "-c", str(ctx), "-t", str(threads), *extra]
    out, times = _run(cmd, timeout)
    text = out.stderr + out.stdout
    m = DECODED.search(text)
    if not m:
        raise SystemExit(f"no 'decoded N tokens in S seconds' line from: {' '.join(cmd)}\n{text[-2000:]}")
    drafted = N_DRAFTED.search(text)
    accepted = N_ACCEPT.search(text)
    n_drafted = int(drafted.group(1)) if drafted else 0
    n_accept = int(accepted.group(1)) if accepted else 0
    return {"tokens_per_second": float(m.group(3)), "n_tokens": int(m.group(1)), "seconds": float(m.group(2)),
            "n_drafted": n_drafted, "n_accepted": n_accept,
            "acceptance_rate": n_accept / n_drafted if n_drafted else 0.0, **times}


def run_specllama(flags: list[str], target: str, draft: str, temp: float, n: int, seed: int,
                  threads: int, ctx: int, prompt: str, timeout: float) -> dict:
    """`specllama generate --json`: its decoding tokens/s (prompt excluded) and draft counts."""
    # the same files as the native tools (for the demo pair: what `specllama generate` loads without -m/-md)
    cmd = [sys.executable, "-m", "specllama", "generate", "-m", target, "-md", draft, "-p", prompt, "-n", str(n),
           "--temp", str(temp), "--seed", str(seed), "-t", str(threads), "-c", str(ctx), "--json", *flags]
    out, times = _run(cmd, timeout)
    d = json.loads(out.stdout)
    keep = ("tokens_per_second", "n_tokens", "n_drafted", "n_accepted", "n_target_passes", "acceptance_rate",
            "seconds", "python_seconds")
    return {**{k: d[k] for k in keep if k in d}, **times}


def wait_for_quiet(max_load: float | None, max_wait: float) -> None:
    """On a shared machine: wait until the 1-minute load average is below max_load (at most max_wait s)."""
    if max_load is None:
        return
    t0 = time.perf_counter()
    while os.getloadavg()[0] >= max_load and time.perf_counter() - t0 < max_wait:
        time.sleep(5)


def run_cell(name: str, bins: dict[str, Path], target: str, draft: str, temp: float, seed: int,
             extra: list[str], args: argparse.Namespace) -> dict:
    """One fresh process of configuration `name`."""
    if name in (NATIVE_TARGET, NATIVE_TARGET_FA0):
        flags = ("-fa", "0") if name == NATIVE_TARGET_FA0 else ()
        return run_native_target(bins, target, args.n, args.threads, args.run_timeout, flags)
    if name in NATIVE_SPEC:
        return run_native_spec(bins, target, draft, NATIVE_SPEC[name], temp, args.n, seed, args.threads,
                               args.ctx_size, args.prompt, extra, args.run_timeout)
    return run_specllama(SPEC_FLAGS[name], target, draft, temp, args.n, seed, args.threads, args.ctx_size,
                         args.prompt, args.run_timeout)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def summarise(results: dict[tuple[float, str], list[dict]], temps: list[float]) -> tuple[list[dict], list[dict]]:
    rows, ratios = [], []
    for temp in temps:
        med = {}
        for name in CONFIGS:
            runs = results.get((temp, name), [])
            if not runs:
                continue
            med[name] = statistics.median(r["tokens_per_second"] for r in runs)
            row = {"temperature": temp, "config": name, "tokens_per_second": med[name],
                   "runs_tokens_per_second": [r["tokens_per_second"] for r in runs],
                   "n_contended": sum(1 for r in runs if r.get("contended"))}
            if any("acceptance_rate" in r for r in runs):
                row["acceptance_rate"] = statistics.median(r.get("acceptance_rate", 0.0) for r in runs)
            if any("n_drafted" in r for r in runs):
                row["n_drafted"] = statistics.median(r.get("n_drafted", 0) for r in runs)
            if all(r.get("python_seconds") is not None and r.get("n_target_passes") for r in runs):
                # decoding time outside llama.cpp's calls (the loop, sampling, text), per pass and as a share
                row["outside_ms_per_pass"] = statistics.median(
                    1000 * r["python_seconds"] / r["n_target_passes"] for r in runs)
                row["outside_share"] = statistics.median(r["python_seconds"] / r["seconds"] for r in runs)
            rows.append(row)
        natives = {name: med[name] for name in NATIVE_SPEC if name in med}
        best = max(natives, key=natives.get) if natives else None
        ratios.append({
            "temperature": temp,
            "best_native_speculative": best,
            "default_vs_best_native_speculative": ratio(med.get(SPEC_DEFAULT), natives.get(best)),
            "default_vs_native_target_only": ratio(med.get(SPEC_DEFAULT), med.get(NATIVE_TARGET)),
            "target_only_vs_native_target_only": ratio(med.get(SPEC_TARGET), med.get(NATIVE_TARGET)),
            # like for like: both without flash attention, both with it
            "target_only_vs_native_target_only_fa_off": ratio(med.get(SPEC_TARGET), med.get(NATIVE_TARGET_FA0)),
            "target_only_vs_native_target_only_fa_on": ratio(med.get(SPEC_TARGET_FA), med.get(NATIVE_TARGET)),
            "fixed8_vs_best_native_speculative": ratio(med.get(SPEC_FIXED8), natives.get(best)),
            # the goals of issue 10: >= 1x at temperature 0, >= 2x at temperature 0.8
            "goal_default_vs_best_native": 1.0 if temp == 0 else 2.0,
        })
    return rows, ratios


def fmt_ratio(x: float | None) -> str:
    return f"{x:.2f}x" if x is not None else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=96, help="tokens per run (default: 96)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions (default: 2)")
    ap.add_argument("--temp", default=",".join(f"{t:g}" for t in TEMPS), help="temperatures, comma-separated "
                    "(default: 0,0.8)")
    ap.add_argument("-m", "--model", default=None, help="target GGUF (default: the demo pair's)")
    ap.add_argument("-md", "--model-draft", default=None, help="draft GGUF (default: the demo pair's)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1, help="threads (default: all cores)")
    ap.add_argument("-c", "--ctx-size", type=int, default=CTX, help=f"context for both (default: {CTX})")
    ap.add_argument("--seed", type=int, default=1, help="seed of repetition 0; repetition r uses seed + r")
    ap.add_argument("--prompt", default=STORY)
    ap.add_argument("--native-extra", default="", help="extra flags for llama-speculative-simple, e.g. "
                    "'--spec-draft-p-min 0.75'")
    ap.add_argument("--only", default=None, help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument("--build-only", action="store_true", help="build the native tools and print their paths")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="build jobs (default: 2)")
    ap.add_argument("--max-load", type=float, default=None, help="before each run, wait until the 1-minute load "
                    "average is below this (a shared machine; default: do not wait)")
    ap.add_argument("--max-wait", type=float, default=600, help="longest wait for --max-load, s (default: 600)")
    ap.add_argument("--retries", type=int, default=2, help="run a cell again when its process got less than "
                    f"{CONTENDED:g} of its threads' CPU time (another user took the cores), at most this many times "
                    "(default: 2; 0: never)")
    ap.add_argument("--run-timeout", type=float, default=120, help="kill a run after this many seconds and count "
                    "it as contended (default: 120; an idle 2-core machine needs 4-13 s)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    ver = llama_cpp_version()
    bins = build(ver, args.jobs)
    if args.build_only:
        for p in bins.values():
            print(p)
        return
    target, draft = args.model, args.model_draft
    if bool(target) != bool(draft):
        raise SystemExit("give both -m and -md, or neither (the demo pair)")
    if not target:
        from specllama import demo_pair
        target, draft = demo_pair()
    temps = [float(t) for t in args.temp.split(",")]
    names = [c for c in CONFIGS if not args.only or c in args.only.split(",")]
    extra = args.native_extra.split()
    load_before = os.getloadavg()
    results: dict[tuple[float, str], list[dict]] = {}
    raw = []
    block = 0
    for r in range(args.reps):
        seed = args.seed + r
        for temp in temps:
            shift = block % len(names)
            block += 1
            for name in names[shift:] + names[:shift]:
                for attempt in range(args.retries + 1):
                    wait_for_quiet(args.max_load, args.max_wait)
                    try:
                        d = run_cell(name, bins, target, draft, temp, seed, extra, args)
                    except Contended as e:
                        retry = attempt < args.retries
                        raw.append({"rep": r, "seed": seed, "temperature": temp, "config": name, "attempt": attempt,
                                    "discarded": True, "killed": str(e)})
                        log(f"  rep {r} temp {temp:g} {name}: {e}  CONTENDED"
                            f"{', running it again' if retry else ''}")
                        if retry:
                            continue
                        raise SystemExit(f"{name} at temperature {temp:g} was killed after --run-timeout "
                                         f"{args.run_timeout:g} s, {args.retries + 1} times: the machine is busy")
                    d["loadavg_1min"] = os.getloadavg()[0]  # includes this run; other users show as > threads
                    # CPU seconds the process got per wall second and thread: 0.84-0.94 on the idle 2-core
                    # machine (llama.cpp's threads spin), far less when other processes took the cores; llama.cpp's
                    # thread barriers then make it 10-50x slower and its timing says nothing about the tool
                    d["cpu_share"] = d["cpu_seconds"] / (d["wall_seconds"] * args.threads)
                    contended = d["cpu_share"] < CONTENDED
                    retry = contended and attempt < args.retries
                    raw.append({"rep": r, "seed": seed, "temperature": temp, "config": name, "attempt": attempt,
                                "discarded": retry, **d})
                    acc = f", accept {d['acceptance_rate']:.0%}" if "acceptance_rate" in d else ""
                    log(f"  rep {r} temp {temp:g} {name}: {d['tokens_per_second']:.1f} tok/s "
                        f"({d['n_tokens']} tokens{acc}, {d['wall_seconds']:.1f} s wall, load {d['loadavg_1min']:.1f}, "
                        f"cpu share {d['cpu_share']:.2f}){'  CONTENDED, running it again' if retry else ''}"
                        f"{'  CONTENDED (kept: no retries left)' if contended and not retry else ''}")
                    if not retry:
                        break
                d["contended"] = contended
                results.setdefault((temp, name), []).append(d)
    rows, ratios = summarise(results, temps)
    meta = {"n_tokens": args.n, "reps": args.reps, "threads": args.threads, "ctx_size": args.ctx_size,
            "prompt": args.prompt, "target": target, "draft": draft, "llama_cpp_python": ver,
            "native_extra": args.native_extra, "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    if args.json:
        print(json.dumps({**meta, "rows": rows, "ratios": ratios, "runs": raw}))
        return
    print(f"{'temp':>4}  {'configuration':<38} {'tok/s':>6}  {'runs':<16} {'accept':>6}")
    for row in rows:
        runs = " ".join(f"{x:.1f}" for x in row["runs_tokens_per_second"])
        acc = f"{row['acceptance_rate']:>6.0%}" if "acceptance_rate" in row and row.get("n_drafted") else f"{'':>6}"
        print(f"{row['temperature']:>4g}  {row['config']:<38} {row['tokens_per_second']:>6.1f}  {runs:<16} {acc}")
    print()
    for row in rows:
        if row["config"] == SPEC_TARGET and "outside_ms_per_pass" in row:
            print(f"temp {row['temperature']:g}: {SPEC_TARGET} spent {row['outside_ms_per_pass']:.2f} ms per pass "
                  f"outside llama.cpp's calls ({row['outside_share']:.1%} of its decoding time; median of runs)")
    for q in ratios:
        t = q["temperature"]
        best = q["best_native_speculative"] or "n/a"
        print(f"temp {t:g}: specllama default / best native speculative ({best.split()[-1]}): "
              f"{fmt_ratio(q['default_vs_best_native_speculative'])} (goal >= {q['goal_default_vs_best_native']:g}x); "
              f"--draft-fixed --draft-max 8 / best native: {fmt_ratio(q['fixed8_vs_best_native_speculative'])}")
        print(f"         specllama default / native target-only: {fmt_ratio(q['default_vs_native_target_only'])}; "
              f"specllama --draft-max 0 / native target-only: {fmt_ratio(q['target_only_vs_native_target_only'])}")
        print(f"         like for like, --draft-max 0 / llama-bench: flash attention off (-fa 0) "
              f"{fmt_ratio(q['target_only_vs_native_target_only_fa_off'])}, on (specllama -fa on) "
              f"{fmt_ratio(q['target_only_vs_native_target_only_fa_on'])}")
    n_retried = sum(1 for x in raw if x["discarded"])
    n_kept_contended = sum(1 for runs in results.values() for x in runs if x["contended"])
    if n_retried or n_kept_contended:
        print(f"{n_retried} runs were contended (or killed after --run-timeout) and run again; "
              f"{n_kept_contended} contended runs kept in the medians")
    lb, la = meta["loadavg_before"], meta["loadavg_after"]
    print(f"median of {args.reps} fresh processes per cell, {args.n} tokens, {args.threads} threads, "
          f"-c {args.ctx_size}, interleaved; load average {lb[0]:.2f} before, {la[0]:.2f} after")


if __name__ == "__main__":
    main()
