"""Every example in examples/ runs, with a small token budget: on the tiny
models, and (with the demo extra) on the demo pair they default to."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ["completion", "chat_stream", "prompt_lookup", "llama_cpp_drop_in"]


def run(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=300, cwd=EXAMPLES)


@pytest.mark.parametrize("name", NAMES)
def test_example_on_tiny_models(name, tiny_pair):
    draft = "prompt-lookup" if name == "prompt_lookup" else tiny_pair[1]
    r = run(name, "-m", tiny_pair[0], "-md", draft, "-n", "8", "-c", "512")
    assert r.returncode == 0, r.stderr
    if name != "llama_cpp_drop_in":
        assert "'n_drafted': " in r.stdout
    else:
        assert r.stdout.count("> ") == 2


def test_every_example_is_covered():
    assert sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_example_on_the_demo_pair(name, demo_installed):
    """Each on the demo pair it defaults to, which it names: the chat examples on the chat pair (Gemma 3 270M, a
    base model, echoed their system prompts and wrote nonsense)."""
    r = run(name, "-n", "6")
    assert r.returncode == 0, r.stderr
    chat = name in ("chat_stream", "llama_cpp_drop_in")
    assert r.stderr.startswith("(the chat demo pair: " if chat else "(the demo pair: "), r.stderr
    assert ("smollm2-135m-instruct-f32.gguf" in r.stderr.splitlines()[0]) == chat
