"""SpeculativeLlama: llama-cpp-python's shapes, its greedy text, exactness with
logits processors, penalties and prompt-lookup drafts, threads, bad input."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time

import llama_cpp
import numpy as np
import pytest

from specllama import SpeculativeLlama
from specllama.errors import SpecLlamaError
from specllama.generation import generate
from specllama.sampling import SamplingParams, to_probs

from .conftest import PIRATE
from .stats_helpers import assert_distributed_as, detectable_effect, pooled_bins

PROMPT = "once upon a time there lived a king"
OTHER = "the dog said hello"
GREEDY = SamplingParams(temperature=0)
EOS = 2
# one llama.cpp thread: the tiny models gain nothing from more, and on a busy
# machine threads that wait on each other run ten times slower
THREADS = 1


@pytest.fixture(scope="module")
def reference(tiny_pair):
    llama = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False, n_threads=THREADS)
    yield llama
    llama.close()


@pytest.fixture(scope="module")
def spec(tiny_pair):
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, seed=0, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        yield s


def text_of(out: dict) -> str:
    return out["choices"][0]["text"]


def shape(obj, top: bool = True):
    """The key structure of a response, values left out; our one extra key
    (speculative) is set aside."""
    if isinstance(obj, dict):
        return {k: shape(v, False) for k, v in obj.items() if not (top and k == "speculative")}
    if isinstance(obj, list):
        return [shape(v, False) for v in obj]
    return type(obj).__name__ if obj is not None else None


def test_completion_shape_matches_llama_cpp(spec, reference):
    ours = spec.create_completion(PROMPT, max_tokens=6, temperature=0)
    theirs = reference.create_completion(PROMPT, max_tokens=6, temperature=0)
    assert shape(ours) == shape(theirs)
    assert ours["object"] == "text_completion" and ours["id"].startswith("cmpl-")
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
    assert set(ours["speculative"]) == {"n_drafted", "n_accepted", "acceptance_rate", "tokens_per_pass",
                                        "acceptance_by_position", "n_target_passes"}


COMPLETION_CHUNK = {"id": "str", "object": "str", "created": "int", "model": "str",
                    "choices": [{"text": "str", "index": "int", "logprobs": None, "finish_reason": None}]}
CHAT_CHUNK = {"id": "str", "model": "str", "created": "int", "object": "str",
              "choices": [{"index": "int", "delta": {"content": "str"}, "logprobs": None, "finish_reason": None}]}


def test_streaming_completion_shape_matches_llama_cpp(spec, reference):
    ours = list(spec.create_completion(PROMPT, max_tokens=12, temperature=0, stream=True))
    theirs = list(reference.create_completion(PROMPT, max_tokens=12, temperature=0, stream=True))
    # the chunks before the last: text pieces, the shape llama-cpp-python's all have
    assert len(ours) >= 3 and all(shape(c) == COMPLETION_CHUNK for c in ours[:-1])
    assert all(shape(c) == COMPLETION_CHUNK for c in theirs[:-1])
    assert all(c["choices"][0]["text"] for c in ours[:-1])  # no empty pieces
    # the last: "" with the finish reason (and our "speculative" key)
    assert shape(ours[-1]) == shape(theirs[-1]) == dict(COMPLETION_CHUNK, choices=[
        {"text": "str", "index": "int", "logprobs": None, "finish_reason": "str"}])
    assert ours[-1]["choices"][0]["finish_reason"] == theirs[-1]["choices"][0]["finish_reason"] == "length"
    assert "speculative" in ours[-1] and all("speculative" not in c for c in ours[:-1])
    assert len({c["id"] for c in ours}) == 1 and all(c["object"] == "text_completion" for c in ours)
    assert "".join(c["choices"][0]["text"] for c in ours) == spec.create_completion(
        PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"]


def test_chat_shapes_match_llama_cpp(spec, reference):
    messages = [{"role": "system", "content": "be a king"}, {"role": "user", "content": "once upon a time"}]
    ours = spec.create_chat_completion(messages, max_tokens=12, temperature=0)
    theirs = reference.create_chat_completion(messages, max_tokens=12, temperature=0)
    assert shape(ours) == shape(theirs)
    assert ours["object"] == "chat.completion" and ours["choices"][0]["message"]["role"] == "assistant"
    ours_stream = list(spec.create_chat_completion(messages, max_tokens=12, temperature=0, stream=True))
    theirs_stream = list(reference.create_chat_completion(messages, max_tokens=12, temperature=0, stream=True))
    assert shape(ours_stream[0]) == shape(theirs_stream[0])  # the role delta
    assert ours_stream[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert shape(ours_stream[-1]) == shape(theirs_stream[-1])  # the empty delta with the finish reason
    assert ours_stream[-1]["choices"][0]["delta"] == {} and ours_stream[-1]["choices"][0]["finish_reason"] == "length"
    # the middle: content deltas, the shape of each of llama-cpp-python's
    middle = ours_stream[1:-1]
    assert len(middle) >= 2 and all(shape(c) == CHAT_CHUNK for c in middle)
    assert all(shape(c) == CHAT_CHUNK for c in theirs_stream[1:-1])
    assert all(c["choices"][0]["delta"]["content"] for c in middle)
    assert len({c["id"] for c in ours_stream}) == 1 and all(c["object"] == "chat.completion.chunk" for c in ours_stream)
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in ours_stream)
    assert content == ours["choices"][0]["message"]["content"]


def test_greedy_text_equals_llama_cpp(spec, reference):
    for prompt in (PROMPT, "the cat and the dog went to the house"):
        theirs = reference.create_completion(prompt, max_tokens=40, temperature=0)
        n = theirs["usage"]["completion_tokens"]  # llama-cpp-python may run past 40 to finish a character
        ours = spec.create_completion(prompt, max_tokens=n, temperature=0)
        assert ours["choices"][0]["text"] == theirs["choices"][0]["text"]
        assert ours["speculative"]["n_drafted"] > 0


def test_wrapping_an_existing_llama(tiny_pair, reference):
    target = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False, n_threads=THREADS)
    with SpeculativeLlama(target, tiny_pair[1], adaptive=False, n_threads=THREADS) as s:
        ours = s.create_completion(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"]
    theirs = reference.create_completion(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"]
    assert ours and theirs.startswith(ours)
    # the application's Llama still works on its own afterwards
    assert target.create_completion(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"] == theirs
    target.close()


def test_generate_yields_token_ids(spec, reference):
    tokens = spec.tokenize(PROMPT.encode())
    ours = []
    for tok in spec.generate(tokens, temp=0):
        ours.append(tok)
        if len(ours) == 10:
            break
    theirs = []
    for tok in reference.generate(reference.tokenize(PROMPT.encode()), temp=0):
        theirs.append(tok)
        if len(theirs) == 10:
            break
    assert ours == theirs


def test_stopping_criteria_and_echo(spec):
    calls = []

    def after_five(input_ids, logits):
        calls.append((len(input_ids), logits.shape))
        return len(calls) == 5

    out = spec.create_completion(PROMPT, max_tokens=20, temperature=0, stopping_criteria=after_five)
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] == 5
    n_prompt = out["usage"]["prompt_tokens"]
    assert [n for n, _ in calls] == list(range(n_prompt + 1, n_prompt + 6))  # prompt + tokens so far
    assert all(s == (spec.engine.target.n_vocab,) for _, s in calls)  # one logits row each
    full = spec.create_completion(PROMPT, max_tokens=5, temperature=0)["choices"][0]["text"]
    assert out["choices"][0]["text"] == full
    echoed = spec.create_completion(PROMPT, max_tokens=5, temperature=0, echo=True)["choices"][0]["text"]
    assert echoed == PROMPT + full


def test_llama_cpp_accessors_model_path_and_set_seed(spec, tiny_pair):
    reference = llama_cpp.Llama(model_path=tiny_pair[0], n_ctx=256, verbose=False, n_threads=THREADS)
    try:
        for name in ("n_ctx", "n_vocab", "token_bos", "token_eos"):
            assert getattr(spec, name)() == getattr(reference, name)(), name
        assert spec.metadata == reference.metadata and spec.metadata["general.architecture"] == "llama"
    finally:
        reference.close()
    with SpeculativeLlama(model_path=tiny_pair[0], n_ctx=128, n_threads=THREADS) as alone:
        assert alone.model_path == tiny_pair[0] and alone.engine.draft is None and alone.n_ctx() == 128
    with pytest.raises(SpecLlamaError, match="give the target once: target or model_path"):
        SpeculativeLlama(tiny_pair[0], model_path=tiny_pair[0])
    texts = []
    for _ in range(2):
        spec.set_seed(5)
        texts.append([text_of(spec(PROMPT, max_tokens=6, temperature=1.0)) for _ in range(2)])
    assert texts[0] == texts[1] and texts[0][0] != texts[0][1]  # the seed's stream, from its start each time


def test_a_closed_instance_raises_where_llama_cpp_crashes(tiny_pair, tmp_path):
    """After close() (or its with block), every call is a SpecLlamaError naming it, also a stream made before and
    read (or begun, or dropped) after, with one slot or several; llama-cpp-python's Llama ends the process with a
    segmentation fault there (hence a subprocess)."""
    script = f"""
from specllama import SpeculativeLlama, SpecLlamaError
for n_parallel in (1, 2):
    def opened():
        return SpeculativeLlama({tiny_pair[0]!r}, {tiny_pair[1]!r}, n_ctx=256, n_threads=1, n_parallel=n_parallel)
    for case in ("unread", "begun", "loading"):
        with opened() as s:
            if case == "loading":
                it = s.prefill(s.tokenize(b"once upon a time"))
            else:
                it = s.create_completion("once", max_tokens=40, stream=True)
            if case != "unread":
                next(it)
        try:
            next(it)
        except SpecLlamaError as e:
            print(case, e)
        del it  # (its clean-up touches no freed model either)
    with opened() as s:
        pass
    for call in (lambda: s.tokenize(b"Hi"), lambda: s("once", max_tokens=2), lambda: s.n_ctx(),
                 lambda: s.chat_template()):
        try:
            call()
        except SpecLlamaError as e:
            print(e)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    closed = "this SpeculativeLlama is closed (close() or the end of its with block): {}() needs a new one"
    unread = "this SpeculativeLlama was closed before its stream was read to the end"
    assert run.stdout.splitlines() == 2 * ([f"{case} {unread}" for case in ("unread", "begun", "loading")] + [
        closed.format(name) for name in ("tokenize", "create_completion", "n_ctx", "chat_template")])


def test_the_policys_notice_is_the_programs_to_print(tiny_pair, tmp_path):
    """The "drafting cannot pay" notice goes to the "specllama" logger: a program that set up no logging prints
    nothing (llama-cpp-python's verbose=False prints nothing either), the command line prints it on stderr."""
    script = f"""
import sys
from specllama import open_engine
from specllama.cli_group import main
engine = open_engine({tiny_pair[0]!r}, {tiny_pair[1]!r}, n_ctx=128, n_threads=1)
engine.policy.verdict = lambda cap: "drafting cannot pay here"
engine._notice(4)
print("then the command line", file=sys.stderr)
try:
    main.main(["pull", "--help"], standalone_mode=False)
except SystemExit:
    pass
engine._noticed = False
engine._notice(4)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.splitlines() == [
        "then the command line",
        "specllama: drafting cannot pay here; decoding target-only (costs are measured again now and then)"]


def test_logprobs_equal_llama_cpp(spec, tiny_pair):
    """Each token's log-probability (and the top alternatives) under the
    target's distribution, as llama-cpp-python reports them; a token that is
    part of a character is OpenAI's bytes:\\xNN where llama-cpp-python has ""
    (and merges such alternatives into one)."""
    reference = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False, logits_all=True, n_threads=THREADS)
    theirs = reference.create_completion(PROMPT, max_tokens=8, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    reference.close()
    ours = spec.create_completion(PROMPT, max_tokens=8, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    n = len(ours["tokens"])
    assert n == 8 and set(ours) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert [re.sub(r"^bytes:.*", "", t) for t in ours["tokens"]] == theirs["tokens"][:n]
    assert any(t.startswith("bytes:") for t in ours["tokens"]) and ours["text_offset"] == theirs["text_offset"][:n]
    np.testing.assert_allclose(ours["token_logprobs"], theirs["token_logprobs"][:n], rtol=1e-5)
    for a, b in zip(ours["top_logprobs"], theirs["top_logprobs"]):
        whole = [k for k in a if not k.startswith("bytes:")]
        assert whole == [k for k in b if k][: len(whole)]
        np.testing.assert_allclose([a[k] for k in whole], [b[k] for k in whole], rtol=1e-5)
    # greedy: each chosen token is the likeliest
    assert all(lp == max(top.values()) for lp, top in zip(ours["token_logprobs"], ours["top_logprobs"]))


def test_echo_with_logprobs_scores_the_prompt_as_llama_cpp_does(spec, tiny_pair):
    """echo with logprobs (what an evaluation harness asks to score a text): the prompt's tokens come first, the
    first with None, each later one with its log-probability after those before it, as llama-cpp-python's
    logits_all=True gives them; each entry's offset is where its text is in the returned text."""
    reference = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False, logits_all=True, n_threads=THREADS)
    theirs = reference.create_completion(PROMPT, max_tokens=3, temperature=0, logprobs=2, echo=True)
    reference.close()
    theirs = theirs["choices"][0]["logprobs"]
    plain = spec.create_completion(PROMPT, max_tokens=3, temperature=0, logprobs=2)["choices"][0]
    for stream in (False, True):
        out = spec.create_completion(PROMPT, max_tokens=3, temperature=0, logprobs=2, echo=True, stream=stream)
        chunks = list(out) if stream else [out]
        text = "".join(c["choices"][0]["text"] for c in chunks)
        lps = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["logprobs"]]
        ours = {k: [v for lp in lps for v in lp[k]] for k in ("tokens", "text_offset", "token_logprobs",
                                                               "top_logprobs")}
        n = len(spec.tokenize(PROMPT.encode())) - 1  # (the BOS is left out)
        assert text == PROMPT + plain["text"] and len(ours["tokens"]) == n + len(plain["logprobs"]["tokens"])
        assert ours["tokens"][:n] == theirs["tokens"][:n] and ours["token_logprobs"][0] is None
        assert ours["top_logprobs"][0] is None
        np.testing.assert_allclose(ours["token_logprobs"][1:n], theirs["token_logprobs"][1:n], rtol=1e-5)
        for a, b in zip(ours["top_logprobs"][1:n], theirs["top_logprobs"][1:n]):
            whole = [k for k in a if not k.startswith("bytes:")]  # (llama-cpp-python's "" for those)
            assert whole == [k for k in b if k][: len(whole)]
        for token, offset in list(zip(ours["tokens"], ours["text_offset"]))[1:n]:
            assert text[offset:offset + len(token)] == token
        assert ours["tokens"][n:] == plain["logprobs"]["tokens"]
        assert ours["text_offset"][n:] == plain["logprobs"]["text_offset"]


def test_logprobs_are_those_of_the_tokens_that_wrote_the_text(spec):
    """At a stop string the entries end with the text (a token the stop string removed has none), streamed or
    not, and each entry's text_offset is where its token's text starts; a token that is part of a character is
    written as OpenAI writes it (bytes:\\xNN), not as an empty string."""
    full = spec.create_completion(PROMPT, max_tokens=12, temperature=0, logprobs=1)["choices"][0]
    tokens, text = full["logprobs"]["tokens"], full["text"]
    assert "".join(t for t in tokens if not t.startswith("bytes:")) == text
    assert any(re.fullmatch(r"bytes:(\\x[0-9a-f]{2})+", t) for t in tokens)
    stop = text[3:5]
    want = text[: text.index(stop)]
    for stream in (False, True):
        out = spec.create_completion(PROMPT, max_tokens=12, temperature=0, logprobs=1, stop=[stop], stream=stream)
        chunks = list(out) if stream else [out]
        got = "".join(c["choices"][0]["text"] for c in chunks)
        lps = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["logprobs"]]
        kept = [t for lp in lps for t in lp["tokens"]]
        offsets = [o for lp in lps for o in lp["text_offset"]]
        assert got == want and "".join(t for t in kept if not t.startswith("bytes:")) == want
        assert kept == tokens[: len(kept)] and offsets == full["logprobs"]["text_offset"][: len(kept)]
        assert offsets[-1] < len(PROMPT) + len(want)  # the last kept token wrote some of the text


def test_chat_logprobs_have_openai_shape(spec):
    out = spec.create_chat_completion([{"role": "user", "content": "once upon a time"}], max_tokens=4, temperature=0,
                                      logprobs=True, top_logprobs=2)
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"] == 4
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"} and len(e["top_logprobs"]) == 2
        # bytes are the token's own (a piece of a UTF-8 character too); token is their text
        assert bytes(e["bytes"]).decode("utf-8", "ignore") == e["token"]
        assert e["logprob"] == e["top_logprobs"][0]["logprob"]
    with pytest.raises(ValueError, match="top_logprobs needs logprobs=True"):
        spec.create_chat_completion([{"role": "user", "content": "hi"}], top_logprobs=2)
    with pytest.raises(ValueError, match=r"logprobs must be an integer in 0..20 \(or None\), got 21"):
        spec.create_completion(PROMPT, logprobs=21)


def test_logit_bias(spec):
    (token,) = spec.tokenize(b"queen", add_bos=False)  # "▁queen": one token
    out = spec.create_completion(PROMPT, max_tokens=3, temperature=0, logit_bias={token: 100.0})
    assert out["choices"][0]["text"] == " queen queen queen"


# -- exactness with processors, penalties and prompt-lookup ----------------

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def first_two_counts(s, processor, prompt_tokens, n_runs, **gen):
    """(t1, t2) counts over seeded runs, and the processed target's exact
    joint probabilities for the same bins (EOS first, and any rare first
    token, pooled in the last two bins)."""
    target = s.engine.target

    def p_next(prefix):
        target.rewind(0)
        row = target.eval(prefix, n_logits=1)[0]
        if processor is not None:
            row = processor(np.asarray(prefix, np.intc), row.copy())
        return to_probs(row, PLAIN)

    p1 = p_next(prompt_tokens)
    likely = [int(t) for t in np.flatnonzero(p1 * n_runs >= 0.5) if t != EOS]
    joint = [p1[t1] * p_next(prompt_tokens + [t1]) for t1 in likely]
    expected = np.concatenate(joint + [[p1[EOS], 1.0 - p1[likely].sum() - p1[EOS]]])
    index = {t1: i for i, t1 in enumerate(likely)}
    v = target.n_vocab
    counts = np.zeros(len(expected), dtype=np.int64)
    for _ in range(n_runs):
        out = []
        for tok in s.generate(prompt_tokens, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, **gen):
            out.append(tok)
            if len(out) == 2 or tok == EOS:
                break
        t1 = out[0]
        counts[-2 if t1 == EOS else index[t1] * v + out[1] if t1 in index else -1] += 1
    return counts, expected, p1


def detectable(expected, n: int) -> float:
    """The smallest w the check on these bins detects at n with power 0.99."""
    return detectable_effect(n, len(pooled_bins(expected, n)) - 1)


def test_logits_processor_and_repeat_penalty_are_exact(tiny_pair):
    """SpeculativeLlama.generate with a user's processor and a repeat
    penalty: the first two tokens follow the processed target exactly.
    N = 3,000 on 96 bins: detects w >= 0.197 with power 0.99."""
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, seed=3, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        prompt = s.tokenize(PROMPT.encode())
        raw = s.engine.target.eval(prompt, n_logits=1)[0]
        banned, boosted = int(np.argmax(raw)), int(np.argsort(raw)[-8])

        def ban_and_boost(input_ids, scores):
            scores[banned] = -np.inf
            scores[boosted] += 3.0
            return scores

        from specllama.processors import chain, penalties

        processor = chain([ban_and_boost, penalties(repeat_penalty=1.3)])
        counts, expected, p1 = first_two_counts(s, processor, prompt, 3000, logits_processor=[ban_and_boost],
                                                repeat_penalty=1.3)
        assert p1[banned] == 0.0 and p1[boosted] > 0.05  # the processors matter here
        assert detectable(expected, 3000) <= 0.197
        assert_distributed_as(counts, expected)


def test_prompt_lookup_is_exact(tiny_pair):
    """Prompt-lookup drafts (one-hot proposals from the text) leave the
    first two tokens' law the target's. N = 3,000 on 92 bins: detects
    w >= 0.195 with power 0.99."""
    with SpeculativeLlama(tiny_pair[0], "prompt-lookup", n_ctx=256, seed=4, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        prompt = s.tokenize("the cat and the dog and the cat and the".encode())
        counts, expected, _ = first_two_counts(s, None, prompt, 3000)
        assert detectable(expected, 3000) <= 0.195
        assert_distributed_as(counts, expected)
        drafted = s.create_completion(prompt, max_tokens=8, temperature=1.0)["speculative"]["n_drafted"]
        assert drafted > 0


def test_while_drafting_cannot_pay_the_draft_is_not_fed(tiny_pair):
    """A policy that measured a draft step dearer than a target step decodes
    target-only, and the draft model evaluates nothing, not even the prompt
    (it would catch up when drafting resumes): the output is target-only's."""
    from specllama.policy import AdaptivePolicy, WarmUp

    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, seed=1, n_threads=THREADS) as s:
        s.engine.policy = AdaptivePolicy()
        s.engine.policy.observe_warm_up(WarmUp([0.05] * 5, {1: [0.01] * 5, 2: [0.02] * 5, 9: [0.09] * 5}))
        assert s.engine.policy.verdict(s.draft_max) is not None
        s.engine.draft.rewind(0)
        out = s.create_completion(PROMPT, max_tokens=12, temperature=0)
        assert out["speculative"]["n_drafted"] == 0 and s.engine.draft.tokens == []
        alone = s.create_completion(PROMPT, max_tokens=12, temperature=0, draft_max=0)
    assert out["choices"][0]["text"] == alone["choices"][0]["text"] != ""


def test_two_threads_at_once(tiny_pair):
    """Thread A holds a stream mid-way (two chunks read) while thread B calls:
    B waits (it is still running after a pause, with no result) until A's
    stream ends; then each text is exactly its solo text."""
    other = "the dog said hello"
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, draft_max=4, adaptive=False,
                          n_threads=THREADS) as s:
        solo = {p: s.create_completion(p, max_tokens=30, temperature=0)["choices"][0]["text"] for p in (PROMPT, other)}
        assert solo[PROMPT] != solo[other]
        stream = s.create_completion(PROMPT, max_tokens=30, temperature=0, stream=True)
        a_chunks = [next(stream), next(stream)]
        assert a_chunks[1]["choices"][0]["finish_reason"] is None  # A is mid-way
        results: dict[str, str] = {}
        b_called = threading.Event()

        def b():
            b_called.set()
            results["B"] = s.create_completion(other, max_tokens=30, temperature=0)["choices"][0]["text"]

        thread = threading.Thread(target=b, daemon=True)
        thread.start()
        assert b_called.wait(10)
        time.sleep(0.5)  # B alone takes about 30 ms: it would be done by now
        assert thread.is_alive() and results == {}  # B waits for A's stream
        a_chunks += list(stream)
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert "".join(c["choices"][0]["text"] for c in a_chunks) == solo[PROMPT]
        assert results == {"B": solo[other]}


# -- bad input -------------------------------------------------------------


def test_bad_draft(tiny_pair):
    with pytest.raises(ValueError,
                       match=r"draft must be a GGUF path, a model reference, a pair name or a llama_cpp.Llama or "
                             r"'prompt-lookup' or 'auto', got 42"):
        SpeculativeLlama(tiny_pair[0], 42)


def test_flash_attn_is_true_or_false(tiny_pair):
    with pytest.raises(SpecLlamaError, match=r"^flash_attn must be True or False, got 'auto'$") as e:
        SpeculativeLlama(tiny_pair[0], tiny_pair[1], flash_attn="auto")
    assert e.value.param == "flash_attn"


def test_missing_draft_file(tiny_pair):
    with pytest.raises(ValueError, match="model file not found: '/no/draft.gguf'"):
        SpeculativeLlama(tiny_pair[0], "/no/draft.gguf")


def test_messages_without_roles(spec):
    with pytest.raises(ValueError, match=r"messages\[1\] has role None; accepted roles: system, "
                                         r"developer \(as system\), user, assistant"):
        spec.create_chat_completion([{"role": "user", "content": "a"}, {"content": "hi"}])
    with pytest.raises(ValueError, match="messages must be a non-empty list"):
        spec.create_chat_completion([])


def test_unsupported_options_are_refused(spec):
    with pytest.raises(ValueError, match="typical_p=0.5 is not supported"):
        spec.create_completion(PROMPT, typical_p=0.5)
    with pytest.raises(ValueError, match="^Infill is not supported by this model: tiny-target.gguf has no "
                                         "fill-in-the-middle tokens") as e:
        spec.create_completion(PROMPT, suffix="x")  # the tiny model has no FIM tokens
    assert (e.value.param, e.value.code) == ("suffix", "not_supported")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        spec.create_completion(PROMPT, colour="red")


# -- what a chat prompt holds: the system message, content parts ---------------


def chat_messages(system: str | None, user: str = "once upon a time") -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def test_a_system_prompt_reaches_the_model(spec):
    """usage.prompt_tokens with a system message is the token count of the
    rendered prompt, which holds the system text, and differs from without."""
    system = "you are a king of the house"
    counts = {}
    for with_system in (False, True):
        messages = chat_messages(system if with_system else None)
        rendered = spec.chat_template().render(messages)
        assert (system in rendered.text) == with_system
        out = spec.create_chat_completion(messages, max_tokens=4, temperature=0)
        tokens = spec.tokenize(rendered.text.encode(), add_bos=not rendered.has_bos)
        assert out["usage"]["prompt_tokens"] == len(tokens)
        counts[with_system] = len(tokens)
    n_system = len(spec.tokenize(system.encode(), add_bos=False))
    assert counts[True] >= counts[False] + n_system


def test_content_parts_are_joined(spec):
    parts = [{"type": "text", "text": "once upon"}, {"type": "text", "text": "a time"}]
    joined = spec.create_chat_completion([{"role": "user", "content": parts}], max_tokens=6, temperature=0)
    plain = spec.create_chat_completion([{"role": "user", "content": "once upon\na time"}], max_tokens=6,
                                        temperature=0)
    assert joined["usage"] == plain["usage"]
    assert joined["choices"][0]["message"] == plain["choices"][0]["message"]
    empty = spec.create_chat_completion([{"role": "user", "content": ""}], max_tokens=1, temperature=0)
    assert joined["usage"]["prompt_tokens"] > empty["usage"]["prompt_tokens"] + 3  # the parts' text is there


@pytest.mark.parametrize("message, error", [
    ({"role": "user", "content": None},
     r"messages\[0\] has no 'content' \(a string, or a list of text parts, is needed\)"),
    ({"role": "wizard", "content": "abracadabra"},
     r"messages\[0\] has role 'wizard'; accepted roles: system, developer \(as system\), user, assistant"),
])
def test_no_content_or_an_unknown_role_is_an_error_naming_the_message(spec, message, error):
    with pytest.raises(ValueError, match=error):
        spec.create_chat_completion([message], max_tokens=2)


def test_a_message_without_a_content_key_is_an_error(spec):
    with pytest.raises(ValueError, match=r"^messages\[0\] has no 'content' \(a string, or a list of text parts, "
                                         r"is needed\)$"):
        spec.create_chat_completion([{"role": "user"}])


def test_a_system_prompt_on_the_demo_target_opens_the_first_user_turn(demo_llm):
    """Gemma's GGUF has no template: the gemma format puts the system text at
    the start of the first user turn (llama-cpp-python's drops it: 10 prompt
    tokens with or without it)."""
    plain = demo_llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, temperature=0)
    pirate = demo_llm.create_chat_completion([{"role": "system", "content": PIRATE},
                                              {"role": "user", "content": "hi"}], max_tokens=2, temperature=0)
    text = demo_llm.chat_template().render([{"role": "system", "content": PIRATE},
                                            {"role": "user", "content": "hi"}]).text
    assert text == f"<start_of_turn>user\n{PIRATE}\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    n_system = len(demo_llm.tokenize(f"{PIRATE}\n\n".encode(), add_bos=False))
    assert plain["usage"]["prompt_tokens"] == 10
    assert pirate["usage"]["prompt_tokens"] == len(demo_llm.tokenize(text.encode())) == 10 + n_system


# -- an abandoned stream never blocks a later call --------------------------------


def within(seconds: float, fn):
    """Run ``fn`` in a daemon thread: a call that hangs fails the test
    instead of hanging the suite."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (re-raised below)
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def llm(tiny_pair):
    """An instance of its own: a regression must not leave a shared one locked."""
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        yield s


def solo_text(tiny_pair, prompt: str, max_tokens: int) -> str:
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        return text_of(s.create_completion(prompt, max_tokens=max_tokens, temperature=0))


def abandon_by_next_twice(llm):
    it = llm.create_completion(PROMPT, max_tokens=30, temperature=0, stream=True)
    next(it)
    next(it)
    return it


def abandon_by_break(llm):
    it = llm.create_completion(PROMPT, max_tokens=30, temperature=0, stream=True)
    for _ in it:
        break
    return it


def abandon_generate(llm):
    it = llm.generate(llm.tokenize(PROMPT.encode()), temp=0)
    next(it)
    next(it)
    return it


@pytest.mark.parametrize("abandon", [abandon_by_next_twice, abandon_by_break, abandon_generate])
def test_an_abandoned_stream_does_not_block_the_same_thread(llm, tiny_pair, abandon):
    def scenario():
        it = abandon(llm)
        text = text_of(llm.create_completion(OTHER, max_tokens=20, temperature=0))
        tokens = list(llm.generate(llm.tokenize(OTHER.encode()), temp=0, stopping_criteria=lambda ids, _: True))
        return it, text, tokens

    it, text, tokens = within(60, scenario)
    assert text == solo_text(tiny_pair, OTHER, 20)
    assert len(tokens) == 1
    assert list(it) == []  # the later call closed the abandoned stream


def test_another_thread_waits_for_an_abandoned_stream_until_its_thread_calls_again(llm, tiny_pair):
    """Thread A abandons a stream mid-way; thread B's call waits (A could
    still resume it); A's next call closes it and runs; then B's runs. Each
    text is its solo text."""
    abandoned = threading.Event()
    go_on = threading.Event()
    results: dict[str, str] = {}

    def a():
        it = abandon_by_next_twice(llm)
        abandoned.set()
        assert go_on.wait(30)
        results["A"] = text_of(llm.create_completion(OTHER, max_tokens=20, temperature=0))
        return it

    def b():
        results["B"] = text_of(llm.create_completion(PROMPT, max_tokens=20, temperature=0))

    thread_a = threading.Thread(target=a, daemon=True)
    thread_a.start()
    assert abandoned.wait(30)
    thread_b = threading.Thread(target=b, daemon=True)
    thread_b.start()
    time.sleep(0.5)
    assert thread_b.is_alive() and results == {}  # B waits: A's stream could still be resumed by A
    go_on.set()
    thread_a.join(60)
    thread_b.join(60)
    assert not thread_a.is_alive() and not thread_b.is_alive()
    assert results == {"A": solo_text(tiny_pair, OTHER, 20), "B": solo_text(tiny_pair, PROMPT, 20)}


# -- bad arguments name themselves ----------------------------------------------


@pytest.mark.parametrize("bias, error", [
    ({-1: 100}, r"logit_bias key -1 is not a token id in 0\.\.{last}$"),
    ({10**9: 1}, r"logit_bias key 1000000000 is not a token id in 0\.\.{last}$"),
    ({"abc": 1}, r"logit_bias key 'abc' is not a token id in 0\.\.{last}$"),
    ({"-1": 1}, r"logit_bias key '-1' is not a token id in 0\.\.{last}$"),
    ({100: math.nan}, r"logit_bias\[100\] must be a finite number, got nan$"),
    ({100: math.inf}, r"logit_bias\[100\] must be a finite number, got inf$"),
    ({100: "2"}, r"logit_bias\[100\] must be a finite number, got '2'$"),
])
def test_a_bad_logit_bias_names_the_key(spec, bias, error):
    last = spec.engine.target.n_vocab - 1
    with pytest.raises(ValueError, match=error.format(last=last)):
        spec.create_completion(PROMPT, max_tokens=2, logit_bias=bias)
    with pytest.raises(ValueError, match=error.format(last=last)):
        spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, logit_bias=bias)


def test_a_logit_bias_key_may_be_a_json_style_string(spec):
    (queen,) = spec.tokenize(b"queen", add_bos=False)
    as_string = spec.create_completion(PROMPT, max_tokens=3, temperature=0, logit_bias={str(queen): 100.0})
    as_int = spec.create_completion(PROMPT, max_tokens=3, temperature=0, logit_bias={queen: 100.0})
    assert text_of(as_string) == text_of(as_int) == " queen queen queen"


@pytest.mark.parametrize("bad", [10**7, -5])
def test_a_prompt_token_out_of_range_is_refused_and_the_instance_still_works(spec, bad):
    last = spec.engine.target.n_vocab - 1
    error = rf"^prompt token id {bad} is out of range 0\.\.{last}$"
    with pytest.raises(ValueError, match=error):
        spec.create_completion([1, 372, bad], max_tokens=2)
    with pytest.raises(ValueError, match=error):
        spec.generate([1, bad])
    with pytest.raises(ValueError, match=error):
        generate(spec.engine, [1, bad], params=GREEDY)
    # and the instance still works
    assert spec.create_completion([1, 372], max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("stop, error", [
    (5, r"^stop must be a string or a list of strings, got 5$"),
    ([5], r"^stop\[0\] must be a string, got 5 \(stop takes a string or a list of strings\)$"),
    (["ok", None], r"^stop\[1\] must be a string, got None \(stop takes a string or a list of strings\)$"),
])
def test_a_bad_stop_names_stop(spec, stop, error):
    with pytest.raises(ValueError, match=error):
        spec.create_completion(PROMPT, max_tokens=2, stop=stop)
    with pytest.raises(ValueError, match=error):
        spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, stop=stop)


# -- drop-in differences from llama-cpp-python -----------------------------------


@pytest.mark.parametrize("value", [0, -1, -3, None])
def test_max_tokens_below_one_fills_the_context_as_llama_cpp(spec, reference, value):
    """llama-cpp-python: max_tokens None or <= 0 generates until the context
    (n_ctx minus the prompt) is full; the same text, token for token."""
    ours = spec.create_completion(PROMPT, max_tokens=value, temperature=0)
    theirs = reference.create_completion(PROMPT, max_tokens=value, temperature=0)
    assert text_of(ours) == text_of(theirs)
    assert ours["usage"] == theirs["usage"]
    assert ours["usage"]["total_tokens"] == 256 or ours["choices"][0]["finish_reason"] == "stop"


def test_top_p_zero_keeps_the_likeliest_token(spec, reference):
    greedy = text_of(spec.create_completion(PROMPT, max_tokens=24, temperature=0))
    for seed in (1, 2):
        assert text_of(spec.create_completion(PROMPT, max_tokens=24, temperature=0.8, top_p=0, seed=seed)) == greedy
    assert text_of(reference.create_completion(PROMPT, max_tokens=24, temperature=0.8, top_p=0, seed=1)) == greedy
    assert text_of(spec.create_completion(PROMPT, max_tokens=24, temperature=0.8, top_p=1, seed=1)) != greedy


# -- memory ------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_memory_stays_flat_over_200_calls(spec):
    for _ in range(20):  # warm: buffers, caches
        spec.create_completion(PROMPT, max_tokens=8, temperature=0.8)
        spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=8)
    before = rss_mb()
    for i in range(100):
        spec.create_completion(PROMPT, max_tokens=8, temperature=0.8, seed=i)
        list(spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=8, stream=True))
    assert rss_mb() - before < 2.0  # measured: +0.1 MB
