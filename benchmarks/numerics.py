"""How much a llama.cpp target's logits depend on how the tokens were batched.

Speculative decoding scores k + 1 positions in one target pass; target-only
decoding scores one at a time. The sampler is exact given the rows the target
computes, but llama.cpp's rows for the same position differ with the batch
they were computed in (other kernels, other summation orders, other
activation quantization), so at temperature 0 a near-tie between the two
likeliest tokens can go either way: speculative output then differs from
one-row decoding, and so does one-row decoding after a prompt that was
evaluated in other pieces. This script measures the size of that effect.

For each target: a 260-token prompt (the start of specllama/prefix.py), then
40 more positions scored in batches of 1, 2, 4, 8 and 16 rows. Printed per
batch size: the largest |logit difference| per row against batches of 1
(median and maximum over the 40 rows), how many argmaxes differ, and the
smallest gap between the two likeliest tokens among the 40 rows. With flash
attention off (specllama's default) and on (`-fa on`), each in turn.

    python benchmarks/numerics.py                  # the demo target (F32) and the coder target (Q4_K_M)
    python benchmarks/numerics.py --targets demo --flash-attn off,on
"""

from __future__ import annotations

import argparse

import numpy as np

from specllama.backend import LlamaModel
from specllama.demo import demo_coder_pair, demo_pair

ROOT_TEXT = "specllama/prefix.py"
N_PROMPT, N_ROWS = 260, 40
BATCHES = (1, 2, 4, 8, 16)


def rows(model: LlamaModel, prompt: list[int], rest: list[int], batch: int) -> np.ndarray:
    """The logits rows of ``rest``'s positions (the row after prompt[-1] first), scored ``batch`` at a time."""
    model.rewind(0)
    model.eval(prompt[:-1], n_logits=1)
    seq = [prompt[-1]] + rest[:-1]
    out = [np.array(model.eval(seq[i:i + batch], n_logits=len(seq[i:i + batch])))
           for i in range(0, len(seq), batch)]
    return np.concatenate(out)


def measure(name: str, path: str, threads: int | None, flash_attn: bool) -> None:
    from pathlib import Path

    model = LlamaModel(path, n_ctx=1024, n_threads=threads, flash_attn=flash_attn)
    text = (Path(__file__).resolve().parent.parent / ROOT_TEXT).read_text()
    tokens = model.tokenize(text)[:N_PROMPT + N_ROWS]
    prompt, rest = tokens[:N_PROMPT], tokens[N_PROMPT:]
    by_batch = {b: rows(model, prompt, rest, b) for b in BATCHES}
    one = by_batch[1]
    top2 = np.sort(one, axis=1)[:, -2:]
    print(f"{name} ({Path(path).name}), flash attention {'on' if flash_attn else 'off'}: "
          f"smallest gap between the two likeliest tokens over the {N_ROWS} rows "
          f"{(top2[:, 1] - top2[:, 0]).min():.3f}")
    for b in BATCHES[1:]:
        d = np.abs(by_batch[b] - one).max(axis=1)
        flips = int((by_batch[b].argmax(axis=1) != one.argmax(axis=1)).sum())
        print(f"  batches of {b:>2} vs 1: max |logit difference| per row: median {np.median(d):.3g}, "
              f"max {d.max():.3g}; argmax differs in {flips} of {N_ROWS} rows")
    model.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="demo,coder", help="comma-separated: demo, coder")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--flash-attn", default="off,on", help="comma-separated: off, on (default: both)")
    args = ap.parse_args()
    settings = args.flash_attn.split(",")
    if set(settings) - {"off", "on"}:
        raise SystemExit(f"--flash-attn: {args.flash_attn!r}: off, on or both (off,on)")
    paths = {"demo": lambda: demo_pair()[0], "coder": lambda: demo_coder_pair()[0]}
    for name in args.targets.split(","):
        if name not in paths:
            raise SystemExit(f"unknown target {name!r}: demo or coder")
        for setting in settings:
            measure(name, paths[name](), args.threads, setting == "on")


if __name__ == "__main__":
    main()
