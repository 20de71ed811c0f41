"""Code completion as an editor drives it: a real source file, a cursor moving
forward as typing does, llama.vim's requests to ``/infill`` on the coder pair.

Each configuration is a fresh ``specllama serve`` process (the coder pair; a
fresh remembered-costs file). Per configuration: one warm-up with the extra
chunks, then ``--requests`` completions, the cursor 4 lines further down
each time (256 lines of prefix above it, 64 below, the line to the cursor as
``prompt``, two chunks of other files as ``input_extra``; 48 tokens,
``t_max_predict_ms`` off so runs compare), then one chunk changed and a
warm-up for it. Printed per configuration: median and 95th percentile of a
completion's latency (the request, as the editor waits for it), prompt
tokens evaluated per request, the warm-up after a changed chunk (seconds, and
as a share of a completion's median latency), and drafts accepted.

    python benchmarks/infill.py                       # 4 configurations, 6 requests each
    python benchmarks/infill.py --requests 3 --configs default,default+reuse   # +reuse: --cache-reuse 256

Not here: the same requests against llama-server (issue 22 asks for it; it
needs llama.cpp's server built, which ``native_compare.py`` does not build).
"""

from __future__ import annotations

import argparse
import json
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
CONFIGS = {
    "default": [],
    "target-only": ["--draft-max", "0"],
    "default+reuse": ["--cache-reuse", "256"],
    "target-only+reuse": ["--draft-max", "0", "--cache-reuse", "256"],
}
START_LINE = 300  # the cursor's first line (the 256-line window above it then scrolls as it moves)
STEP = 4


def body(lines: list[str], row: int, extra: list[dict], n_predict: int) -> dict:
    line = lines[row]
    col = len(line) // 2
    return {"id_slot": 0, "input_prefix": "".join(lines[max(0, row - 256):row]),
            "input_suffix": line[col:] + "".join(lines[row + 1:row + 65]), "input_extra": extra,
            "prompt": line[:col], "n_predict": n_predict, "stop": [], "n_indent": 0, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 0, "seed": 1}


def warm_up(extra: list[dict]) -> dict:
    return {"input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
            "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1}


def run(name: str, flags: list[str], requests: int, threads: int | None, n_predict: int) -> dict:
    lines = SOURCE.read_text().splitlines(keepends=True)
    extra = [{"text": p.read_text(), "filename": p.name, "time": 0} for p in EXTRA]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = fresh_env(tmp)
        cmd = [sys.executable, "-m", "specllama", "serve", "--pair", "demo-coder", "-c", "8192", "--port", str(port),
               "--no-webui", *flags] + (["-t", str(threads)] if threads else [])
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
                latency, evaluated, drafted, accepted = [], [], 0, 0
                for i in range(requests):
                    t0 = time.perf_counter()
                    r = client.post("/infill", json=body(lines, START_LINE + STEP * i, extra, n_predict))
                    r.raise_for_status()
                    latency.append(time.perf_counter() - t0)
                    t = r.json()["timings"]
                    evaluated.append(t["prompt_n"])
                    drafted += t["draft_n"]
                    accepted += t["draft_n_accepted"]
                    log(f"{name}: request {i + 1}: {latency[-1]:.2f} s, {t['prompt_n']} prompt tokens evaluated, "
                        f"{t['predicted_n']} predicted")
                changed = [dict(extra[0], text=extra[0]["text"] + "\n# changed\n")] + extra[1:]
                t0 = time.perf_counter()
                w = client.post("/infill", json=warm_up(changed)).json()
                warm = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(60)
    return {"latency": latency, "evaluated": evaluated, "drafted": drafted, "accepted": accepted,
            "warm_up": warm, "warm_up_evaluated": w["timings"]["prompt_n"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("-n", type=int, default=48, help="tokens per completion")
    args = ap.parse_args()
    results = {}
    for name in args.configs.split(","):
        results[name] = run(name, CONFIGS[name], args.requests, args.threads, args.n)
    print(f"\n{'configuration':>32}  {'median s':>8}  {'p95 s':>6}  {'evaluated':>9}  {'warm-up s':>9}  "
          f"{'share':>5}  accepted")
    for name, r in results.items():
        lat = sorted(r["latency"])
        median = statistics.median(lat)
        p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
        acc = f"{r['accepted']}/{r['drafted']}" if r["drafted"] else "-"
        print(f"{name:>32}  {median:8.2f}  {p95:6.2f}  {statistics.median(r['evaluated']):9.0f}  "
              f"{r['warm_up']:9.2f}  {r['warm_up'] / median:5.0%}  {acc}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
