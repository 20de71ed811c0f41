"""The built-in demo pair (Gemma 3 270M: F32 target, Q4_K_M draft).

These need the ``demo`` extra. CI installs it and sets CI, so there a
missing extra fails instead of skipping."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from specllama.demo import DEMO_DRAFT_NAME, DEMO_TARGET_NAME, cache_dir

from .cli_helpers import invoke
from .conftest import require_demo_extra

PROMPT = "Once upon a time, in a small village by the sea,"


@pytest.fixture(scope="module")
def demo_paths():
    require_demo_extra()
    from specllama import demo_pair

    return demo_pair()


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("SPECLLAMA_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "specllama"


def test_demo_pair_files(demo_paths):
    target, draft = demo_paths
    assert Path(target).name == DEMO_TARGET_NAME and Path(draft).name == DEMO_DRAFT_NAME
    for path in (target, draft):
        with open(path, "rb") as f:
            assert f.read(4) == b"GGUF"
    # F32: four bytes a weight; the Q4_K_M file is about a quarter of that
    assert os.path.getsize(target) > 3.5 * os.path.getsize(draft)


def test_demo_greedy_speculative_equals_target_only(demo_paths):
    """Drafting fixed at 4 (``--draft-fixed``): whether the adaptive policy drafts in 48 tokens depends on this
    machine's timings at that moment (a CI run once measured drafting not to pay and drafted nothing), and the
    equality must not hold vacuously."""
    def gen(*draft: str) -> dict:
        r = invoke("generate", "--json", "--temp", "0", "-n", "48", "-c", "512", *draft, "-p", PROMPT)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    spec, base = gen("--draft-fixed", "--draft-max", "4"), gen("--draft-max", "0")
    assert spec["text"] == base["text"]
    assert spec["tokens"] == base["tokens"] and len(base["tokens"]) == 48
    assert spec["n_accepted"] > 0 and spec["n_target_passes"] < base["n_target_passes"]


def test_demo_caches_match_fresh_evaluation(demo_paths):
    """Gemma 3 has sliding-window layers: after rejections and rewinds, the
    target's cache must still give the logits of a fresh evaluation."""
    from specllama.opener import open_engine
    from specllama.sampling import SamplingParams

    with open_engine(*demo_paths, n_ctx=512) as engine:
        target = engine.target
        prompt = target.tokenize(PROMPT)
        emitted: list[int] = []
        rejected = 0
        for step in engine.steps(prompt, params=SamplingParams(temperature=1.0, seed=0), draft_max=6,
                                 max_tokens=40, rng=np.random.default_rng(0), adaptive=False):
            emitted.extend(step.tokens)
            rejected += step.n_accepted < step.n_drafted
        assert rejected > 0
        seq = prompt + emitted
        got = target.eval(seq[len(target.tokens):], n_logits=1)[0]
        target.rewind(0)
        want = target.eval(seq, n_logits=1)[0]
        # F32 logits differ by ~0.01 between batch shapes; a wrong cache by ~3
        assert np.argmax(got) == np.argmax(want)
        np.testing.assert_allclose(got, want, atol=0.05)


def test_prompt_lookup_pays_on_repetitive_text(demo_paths):
    """On a prompt that repeats itself, n-gram drafts are mostly accepted."""
    from specllama import SpeculativeLlama

    minutes = "The committee reviewed the budget. The committee approved the budget. " * 3
    with SpeculativeLlama(demo_paths[0], "prompt-lookup", n_ctx=512, adaptive=False, draft_max=4) as llm:
        out = llm.create_completion(minutes, max_tokens=32, temperature=0)
    stats = out["speculative"]
    assert stats["n_drafted"] > 16
    assert stats["acceptance_rate"] > 0.5
