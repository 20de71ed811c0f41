"""Shared flags for the examples: a demo pair by default (the chat one where the example chats: Gemma 3 270M is a
base model), -m/-md to choose."""

import argparse
import sys

import specllama
from specllama.demo import demo_chat_pair


def parse(description: str, default_draft: str | None = None, n: int = 64, chat: bool = False) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    which = "SmolLM2-135M-Instruct" if chat else "Gemma 3 270M"
    ap.add_argument("-m", "--model", help=f"target GGUF (default: the demo's F32 {which})")
    ap.add_argument("-md", "--model-draft", help="draft GGUF, or prompt-lookup (default: the demo's quantized one)")
    ap.add_argument("-n", "--n-predict", type=int, default=n, help="tokens to generate")
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    args = ap.parse_args()
    if args.model is None:
        target, draft = demo_chat_pair() if chat else specllama.demo_pair()
        args.model = target
        args.model_draft = args.model_draft or default_draft or draft
        print(f"(the {'chat ' if chat else ''}demo pair: {target} with {args.model_draft}; -m/-md for another)",
              file=sys.stderr)
    args.model_draft = args.model_draft or default_draft
    if args.model_draft is None:
        ap.error("give a draft with -md (a GGUF file or prompt-lookup)")
    return args
