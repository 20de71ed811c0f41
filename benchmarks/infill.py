"""Code completion as an editor drives it: a real source file, a cursor moving
forward as typing does, llama.vim's requests to ``/infill`` on the coder pair.

Each configuration is a fresh ``specllama serve`` process (the coder pair; a
fresh remembered-costs file). Per configuration: one warm-up with the extra
chunks, then ``--requests`` completions, the cursor 4 lines further down
each time (256 lines of prefix above it, 64 below, the line to the cursor as
``prompt``, four 64-line chunks of two other files as ``input_extra``; 48
tokens, ``t_max_predict_ms`` off so runs compare), then one chunk changed and
a warm-up for it. The change is what llama.vim's ring buffer does when a chunk
is edited: the old chunk (similar to the new) is evicted, and the new one goes
at the end. Printed per configuration: median and 95th percentile of a
completion's latency (the request, as the editor waits for it), prompt
tokens evaluated per request, the warm-up after a changed chunk (seconds, and
as a share of a completion's median latency), and drafts accepted.

The configurations ("+reuse": ``--cache-reuse 256``):

    default, target-only            specllama serve (adaptive), and --draft-max 0
    model+reuse                     the draft model's drafts only, always 4 (--draft-fixed --draft-max 4)
    lookup+reuse                    prompt-lookup drafts only (-md prompt-lookup)
    mixed+reuse                     both, chosen per pass (--draft-lookup)
    llama-server+reuse              llama.cpp's server, target only
    llama-server+draft+reuse        ... with the draft model (-md, --spec-type draft-simple)
    llama-server+draft+ngram+reuse  ... and n-gram drafts (--spec-type draft-simple,ngram-simple)

The llama-server configurations build ``llama-server`` first (from the
llama.cpp sources of the installed llama-cpp-python, as ``native_compare.py``
builds its tools, into benchmarks/.native/; minutes). ``--rounds R`` repeats
the configurations R times in a rotating order (fresh processes each time)
and pools the latencies.

    python benchmarks/infill.py                       # the first four configurations, 6 requests each
    python benchmarks/infill.py --requests 3 --configs default,default+reuse
    python benchmarks/infill.py --requests 3 --configs target-only+reuse,model+reuse,lookup+reuse,mixed+reuse
    python benchmarks/infill.py --requests 3 --configs mixed+reuse,llama-server+reuse,llama-server+draft+reuse
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import free_port, fresh_env, log  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "specllama" / "engine.py"
EXTRA = [ROOT / "specllama" / "prefix.py", ROOT / "specllama" / "drafters.py"]
CHUNK_LINES = 64  # llama.vim's ring_chunk_size
REUSE = ["--cache-reuse", "256"]
CONFIGS = {
    "default": [],
    "target-only": ["--draft-max", "0"],
    "default+reuse": REUSE,
    "target-only+reuse": ["--draft-max", "0", *REUSE],
    "model+reuse": ["--draft-fixed", "--draft-max", "4", *REUSE],
    "lookup+reuse": ["-md", "prompt-lookup", *REUSE],
    "mixed+reuse": ["--draft-lookup", *REUSE],
    "llama-server+reuse": REUSE,
    "llama-server+draft+reuse": ["-md", "DRAFT", "--spec-type", "draft-simple", *REUSE],  # -md alone drafts nothing
    "llama-server+draft+ngram+reuse": ["-md", "DRAFT", "--spec-type", "draft-simple,ngram-simple", *REUSE],
}
DEFAULT_CONFIGS = "default,target-only,default+reuse,target-only+reuse"
START_LINE = 300  # the cursor's first line (the 256-line window above it then scrolls as it moves)
STEP = 4


def body(lines: list[str], row: int, extra: list[dict], n_predict: int, temp: float | None) -> dict:
    line = lines[row]
    col = len(line) // 2
    # llama.vim sends no temperature (the server's default); --temp 0 makes every configuration write the same
    greedy = {} if temp is None else {"temperature": temp, "samplers": ["top_k", "top_p", "temperature", "infill"]}
    return greedy | {"id_slot": 0, "input_prefix": "".join(lines[max(0, row - 256):row]),
            "input_suffix": line[col:] + "".join(lines[row + 1:row + 65]), "input_extra": extra,
            "prompt": line[:col], "n_predict": n_predict, "stop": [], "n_indent": 0, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 0, "seed": 1} | greedy


def warm_up(extra: list[dict]) -> dict:
    return {"input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
            "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1}


def chunks() -> list[dict]:
    """The first two 64-line chunks of each EXTRA file, as llama.vim sends them."""
    out = []
    for path in EXTRA:
        lines = path.read_text().splitlines(keepends=True)
        out += [{"text": "".join(lines[i:i + CHUNK_LINES]), "filename": path.name, "time": 0}
                for i in (0, CHUNK_LINES)]
    return out


def server_command(name: str, port: int, threads: int | None) -> list[str]:
    """The process of configuration ``name``: specllama serve, or llama-server on the same files."""
    flags = CONFIGS[name]
    if not name.startswith("llama-server"):
        return [sys.executable, "-m", "specllama", "serve", "--pair", "demo-coder", "-c", "8192", "--port",
                str(port), "--no-webui", *flags] + (["-t", str(threads)] if threads else [])
    from native_compare import build, llama_cpp_version

    from specllama.demo import demo_coder_pair

    target, draft = demo_coder_pair()
    server = build(llama_cpp_version(), os.cpu_count() or 2, ("llama-server",))["llama-server"]
    # -b 512: specllama's batch, so both trim the prefix and suffix alike (llama-server keeps 3/4 of a batch of
    # prefix); -np 1: one slot, as specllama has, so a warm-up (no id_slot) fills the cache the completions use
    return [str(server), "-m", target, "-c", "8192", "-b", "512", "-np", "1", "--host", "127.0.0.1", "--port",
            str(port), "--no-webui", *[draft if f == "DRAFT" else f for f in flags],
            "-t", str(threads or os.cpu_count() or 2)]


def run(name: str, requests: int, threads: int | None, n_predict: int, temp: float | None) -> dict:
    lines = SOURCE.read_text().splitlines(keepends=True)
    extra = chunks()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = fresh_env(tmp)
        cmd = server_command(name, port, threads)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
                for _ in range(600):
                    try:
                        if client.get("/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.5)
                client.post("/infill", json=warm_up(extra)).raise_for_status()
                latency, evaluated, drafted, accepted, contents = [], [], 0, 0, []
                predicted, predicted_ms = 0, 0.0
                for i in range(requests):
                    t0 = time.perf_counter()
                    r = client.post("/infill", json=body(lines, START_LINE + STEP * i, extra, n_predict, temp))
                    r.raise_for_status()
                    latency.append(time.perf_counter() - t0)
                    t = r.json()["timings"]
                    contents.append(r.json()["content"])
                    evaluated.append(t["prompt_n"])
                    predicted += t["predicted_n"]
                    predicted_ms += t["predicted_ms"]
                    drafted += t.get("draft_n", 0)  # llama-server gives these only when it drafted
                    accepted += t.get("draft_n_accepted", 0)
                    log(f"{name}: request {i + 1}: {latency[-1]:.2f} s, {t['prompt_n']} prompt tokens evaluated, "
                        f"{t['predicted_n']} predicted")
                changed = extra[1:] + [dict(extra[0], text=extra[0]["text"] + "# changed\n")]
                t0 = time.perf_counter()
                w = client.post("/infill", json=warm_up(changed)).json()
                warm = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(60)
    return {"latency": latency, "evaluated": evaluated, "drafted": drafted, "accepted": accepted,
            "contents": contents, "predicted": predicted, "predicted_ms": predicted_ms, "warm_up": warm,
            "warm_up_evaluated": w["timings"]["prompt_n"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comma-separated, of: {', '.join(CONFIGS)}")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the configurations, rotating their order")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("-n", type=int, default=48, help="tokens per completion")
    ap.add_argument("--temp", type=float, default=None,
                    help="send this temperature (default: none, as llama.vim; 0: every configuration writes the same)")
    args = ap.parse_args()
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration {unknown[0]!r}: one of {', '.join(CONFIGS)}")
    results: dict[str, dict] = {}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got = run(name, args.requests, args.threads, args.n, args.temp)
            if name not in results:
                results[name] = {**got, "warm_ups": [got["warm_up"]]}
                continue
            pooled = results[name]
            for key in ("latency", "evaluated", "contents"):
                pooled[key] += got[key]
            for key in ("drafted", "accepted", "predicted", "predicted_ms"):
                pooled[key] += got[key]
            pooled["warm_ups"].append(got["warm_up"])
            pooled["warm_up"] = statistics.median(pooled["warm_ups"])
    print(f"\n{'configuration':>32}  {'median s':>8}  {'p95 s':>6}  {'evaluated':>9}  {'decode tok/s':>12}  "
          f"{'warm-up s':>9}  {'share':>5}  {'accepted':>9}  same text as {names[0]}")
    first = results[names[0]]["contents"]
    for name, r in results.items():
        lat = sorted(r["latency"])
        median = statistics.median(lat)
        p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
        acc = f"{r['accepted']}/{r['drafted']}" if r["drafted"] else "-"
        rate = 1000 * r["predicted"] / r["predicted_ms"] if r["predicted_ms"] else 0.0
        same = sum(a == b for a, b in zip(r["contents"], first))
        print(f"{name:>32}  {median:8.2f}  {p95:6.2f}  {statistics.median(r['evaluated']):9.0f}  {rate:12.1f}  "
              f"{r['warm_up']:9.2f}  {r['warm_up'] / median:5.0%}  {acc:>9}  {same}/{len(first)}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
