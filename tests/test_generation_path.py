"""The one road from the engine to every surface: what it owns (stop strings,
end-of-generation tokens, room in both caches, the batch, statistics) and
that every surface gets the same answer from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import llama_cpp
import pytest

from specllama import SpeculativeLlama
from specllama.backend import LlamaModel
from specllama.engine import SpeculativeEngine
from specllama.generation import DRAFT, TARGET, generate
from specllama.sampling import SamplingParams

from .cli_helpers import gen_json, invoke

PROMPT = "once upon a time there lived a king"
GREEDY = SamplingParams(temperature=0)
PACKAGE = Path(__file__).resolve().parent.parent / "specllama"


def test_only_the_backend_imports_llama_cpp():
    importers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                       if re.search(r"^\s*(import llama_cpp|from llama_cpp)", p.read_text(), re.M))
    assert importers and all(p.startswith("backend/") for p in importers), importers


# -- room in both caches ---------------------------------------------------


def test_a_draft_with_a_smaller_context_stops_drafting_not_generating(tiny_pair):
    """Only the draft is out of room: drafting stops there, and the target
    goes on to its own full context, with target-only decoding's tokens."""
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=128, n_threads=1),
                               LlamaModel(tiny_pair[1], n_ctx=40, n_threads=1))
    prompt = engine.target.tokenize(PROMPT)
    base = generate(engine, prompt, params=GREEDY, draft_max=0, max_tokens=None)
    spec = generate(engine, prompt, params=GREEDY, draft_max=4, max_tokens=None, adaptive=False)
    engine.close()
    assert (base.finish_reason, len(prompt) + len(base.tokens)) == ("length", 129)
    assert spec.tokens == base.tokens and spec.finish_reason == "length"
    assert spec.stats.n_drafted > 0  # it drafted while the draft had room
    # after the draft's 40 positions every pass is target-only
    assert spec.stats.n_target_passes > len(base.tokens) - 40


@pytest.mark.parametrize("draft_max", [0, 4])
def test_a_draft_llama_with_a_smaller_context_through_the_api(tiny_pair, draft_max):
    draft = llama_cpp.Llama(tiny_pair[1], n_ctx=64, verbose=False, n_threads=1)
    with SpeculativeLlama(tiny_pair[0], draft, n_ctx=256, draft_max=draft_max, adaptive=False, n_threads=1) as s:
        out = s.create_completion(PROMPT, max_tokens=200, temperature=0)
    draft.close()
    assert out["usage"]["completion_tokens"] == 200 and out["choices"][0]["finish_reason"] == "length"
    assert (out["speculative"]["n_drafted"] > 0) == (draft_max > 0)


@pytest.mark.slow  # a context filled with batch-long drafts: hundreds of draft evaluations a pass
def test_drafts_never_exceed_one_batch(tiny_pair):
    """--draft-max 1000 with a 512-token batch: k is capped, nothing fails,
    and the text is target-only decoding's to the last token of the context."""
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=700, n_threads=1),
                               LlamaModel(tiny_pair[1], n_ctx=700, n_threads=1))  # see conftest.open_tiny_engine
    assert engine.target.n_batch == 512
    prompt = engine.target.tokenize(PROMPT)
    spec = generate(engine, prompt, params=GREEDY, draft_max=1000, max_tokens=None, adaptive=False)
    base = generate(engine, prompt, params=GREEDY, draft_max=0, max_tokens=None)
    engine.close()
    assert spec.finish_reason == "length" and len(prompt) + len(spec.tokens) == 701
    assert spec.tokens == base.tokens
    assert spec.stats.n_drafted / spec.stats.n_target_passes > 100  # it did draft long blocks


@pytest.mark.slow  # batch-long drafts; --json then reports on every draft length up to 1000 (seconds)
def test_draft_max_1000_through_the_cli_fills_the_context_in_batch_long_drafts(tiny_pair):
    """-n -1 -c 700 --draft-max 1000 --draft-fixed: drafts are capped at one
    batch of 512, and generation runs to the full context. (The target is its
    own draft here, so each pass keeps its whole block: two passes instead of
    hundreds of nearly all-rejected 500-token drafts.)"""
    self_draft = (tiny_pair[0], tiny_pair[0])
    spec = gen_json(self_draft, "-n", "-1", "-c", "700", "--draft-max", "1000", "--draft-fixed", "--temp", "0")
    base = gen_json(self_draft, "-n", "-1", "-c", "700", "--draft-max", "0", "--temp", "0")
    assert spec["finish_reason"] == base["finish_reason"] == "length"
    assert spec["n_prompt_tokens"] + spec["n_tokens"] == 701  # the whole context (the newest token unevaluated)
    assert spec["tokens"] == base["tokens"]
    assert spec["n_drafted"] > 600 and spec["n_target_passes"] <= 3  # blocks as long as a batch allows


def test_a_draft_length_beyond_one_batch_is_one_batch_on_every_surface(tiny_pair):
    """--draft-max 100000 (adaptive): the policy plans, reports and judges at most one batch less the pass's
    first row (511 here); it asked numpy for a 100000 x 100000 array before (74.5 GiB: a traceback, a 500)."""
    spec = gen_json(tiny_pair, "-n", "8", "--temp", "0", "--draft-max", "100000")
    base = gen_json(tiny_pair, "-n", "8", "--temp", "0", "--draft-max", "0")
    assert spec["tokens"] == base["tokens"] and len(spec["policy"]["acceptance_by_position"]) == 511
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=700, n_threads=1, verbose=False) as llm:
        assert llm.engine.draft_cap(10 ** 6) == llm.engine.target.n_batch - 1 == 511
        out = llm.create_completion(PROMPT, max_tokens=8, temperature=0, draft_max=10 ** 6)
        assert out["choices"][0]["text"] == llm.create_completion(PROMPT, max_tokens=8, temperature=0,
                                                                  draft_max=0)["choices"][0]["text"]


# -- stop strings ------------------------------------------------------------


def test_tokens_end_where_the_text_ends_at_a_stop_string(tiny_engine):
    """A stop string met in the middle of a target pass: the tokens after it
    are neither returned nor counted, exactly as target-only decoding gives."""
    full = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=0, max_tokens=64)
    mid_pass = 0
    for start in range(4, 60, 5):
        stop = full.text[start:start + 3]
        base = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=0, max_tokens=64, stop=[stop])
        spec = generate(tiny_engine, PROMPT, params=GREEDY, draft_max=6, max_tokens=64, stop=[stop], adaptive=False)
        assert spec.text == base.text == full.text[: full.text.index(stop)]
        assert spec.tokens == base.tokens and spec.finish_reason == base.finish_reason == "stop"
        assert spec.stats.n_tokens == len(spec.tokens) == len(spec.origins)
        # how many tokens the pass that met the stop string had after it
        mid_pass += spec.stats.n_accepted + spec.stats.n_target_passes - len(spec.tokens) > 0
    assert mid_pass >= 3  # the cut did fall inside passes


def test_cli_json_tokens_end_at_the_stop_string(tiny_pair):
    def run(*extra):
        return gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "64", *extra)

    full = run("--draft-max", "0")["text"]
    stop = full[20:23]
    base = run("--draft-max", "0", "--stop", stop)
    spec = run("--draft-max", "6", "--draft-fixed", "--stop", stop)
    assert spec["text"] == base["text"] and spec["tokens"] == base["tokens"]
    assert spec["n_tokens"] == len(spec["tokens"])


# -- end of generation -------------------------------------------------------


def test_generate_yields_the_end_of_generation_token_actually_sampled(eot_pair):
    """A vocabulary with two end-of-generation tokens (EOS 2 and an EOT):
    SpeculativeLlama.generate, like Llama.generate, yields the one sampled."""
    target = llama_cpp.Llama(eot_pair[0], n_ctx=256, verbose=False)
    eot = target.n_vocab() - 1
    assert llama_cpp.llama_vocab_is_eog(target._model.vocab, eot) and eot != target.token_eos()
    tokens = target.tokenize(PROMPT.encode())
    n_prompt = len(tokens)

    def eot_after_three(input_ids, scores):  # a pure function of its input
        if len(input_ids) >= n_prompt + 3:
            scores[eot] += 100.0
        return scores

    theirs = []
    for tok in target.generate(tokens, temp=0, logits_processor=llama_cpp.LogitsProcessorList([eot_after_three])):
        theirs.append(tok)
        if llama_cpp.llama_vocab_is_eog(target._model.vocab, tok):
            break
    target.close()
    with SpeculativeLlama(eot_pair[0], eot_pair[1], n_ctx=256, draft_max=3, adaptive=False) as s:
        ours = list(s.generate(tokens, temp=0, logits_processor=[eot_after_three]))
        out = s.create_completion(tokens, max_tokens=20, temperature=0, logits_processor=[eot_after_three])
    assert ours == theirs and len(ours) == 4 and ours[-1] == eot
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 3


# -- the contract of logits processors ----------------------------------------


def test_processors_see_draft_and_rejected_rows(tiny_pair):
    """Why a processor must be a pure function of (input_ids, scores): it is
    called on draft rows and on rows whose tokens are then rejected, so it
    sees prefixes that never become part of the output, and more calls than
    tokens."""
    seen: list[tuple[int, ...]] = []

    def record(input_ids, scores):
        seen.append(tuple(int(t) for t in input_ids))
        return scores

    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, draft_max=4, adaptive=False, seed=5) as s:
        prompt = s.tokenize(PROMPT.encode())
        out = list(s.generate(prompt, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, logits_processor=[record]))[:40]
    final = tuple(prompt) + tuple(out)
    off_path = [p for p in seen if final[: len(p)] != p]
    assert off_path  # rows after rejected draft tokens were processed too
    assert len(seen) > 2 * 40  # every draft row and every target row, for 40 tokens and more


# -- every surface gets the same answer ---------------------------------------


def test_every_surface_gives_the_same_text_tokens_and_counts(tiny_pair):
    """Greedy, fixed k: the CLI, the Python API and stream_generate are one
    code path, so text, tokens and drafting statistics agree exactly (the
    API drops invalid UTF-8 as llama-cpp-python does; the CLI shows U+FFFD)."""
    r = invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "256", "-p", PROMPT,
               "--temp", "0", "-n", "30", "--draft-max", "3", "--draft-fixed", "--json")
    cli = json.loads(r.stdout)
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, draft_max=3, adaptive=False) as s:
        api = s.create_completion(PROMPT, max_tokens=30, temperature=0)
        lib = generate(s.engine, PROMPT, params=GREEDY, draft_max=3, max_tokens=30, adaptive=False)
        lib_ignore = generate(s.engine, PROMPT, params=GREEDY, draft_max=3, max_tokens=30, adaptive=False,
                              invalid_utf8="ignore")
    assert cli["text"] == lib.text and api["choices"][0]["text"] == lib_ignore.text
    assert "\ufffd" in lib.text and "\ufffd" not in lib_ignore.text  # the tiny vocabulary emits stray bytes
    assert cli["tokens"] == lib.tokens and api["usage"]["completion_tokens"] == len(lib.tokens) == 30
    assert (cli["n_drafted"], cli["n_accepted"]) == (api["speculative"]["n_drafted"],
                                                    api["speculative"]["n_accepted"]) \
        == (lib.stats.n_drafted, lib.stats.n_accepted)
    assert cli["acceptance_by_position"] == api["speculative"]["acceptance_by_position"]


def test_origins_say_which_tokens_the_draft_proposed(tiny_engine):
    """Per pass: the accepted draft tokens come first ("draft"), then the one
    token the target sampled itself ("target")."""
    from specllama.generation import stream_generate

    passes = []
    n_acc_before = n_drafted_before = 0
    for chunk in stream_generate(tiny_engine, PROMPT, params=SamplingParams(temperature=1.0, seed=3), draft_max=4,
                                 max_tokens=60, adaptive=False):
        n_acc = chunk.stats.n_accepted - n_acc_before
        n_acc_before = chunk.stats.n_accepted
        n_drafted_before = chunk.stats.n_drafted
        passes.append((list(chunk.origins), n_acc, len(chunk.tokens)))
    assert n_drafted_before > 0
    for origins, n_acc, n_tok in passes[:-1]:  # the last pass may be cut by max_tokens
        assert origins == [DRAFT] * n_acc + [TARGET]
    origins, n_acc, n_tok = passes[-1]
    assert origins == ([DRAFT] * n_acc + [TARGET])[:n_tok]
    assert {o for p in passes for o in p[0]} == {DRAFT, TARGET}
