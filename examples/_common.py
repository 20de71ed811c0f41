"""Shared flags for the examples: the demo pair by default, -m/-md to choose."""

import argparse

import specllama


def parse(description: str, default_draft: str | None = None, n: int = 64) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("-m", "--model", help="target GGUF (default: the demo F32 Gemma 3 270M)")
    ap.add_argument("-md", "--model-draft", help="draft GGUF, or prompt-lookup (default: the demo Q4_K_M)")
    ap.add_argument("-n", "--n-predict", type=int, default=n, help="tokens to generate")
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    args = ap.parse_args()
    if args.model is None:
        target, draft = specllama.demo_pair()
        args.model = target
        args.model_draft = args.model_draft or default_draft or draft
    args.model_draft = args.model_draft or default_draft
    if args.model_draft is None:
        ap.error("give a draft with -md (a GGUF file or prompt-lookup)")
    return args
