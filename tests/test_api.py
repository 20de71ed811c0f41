"""SpeculativeLlama: llama-cpp-python's shapes, its greedy text, exactness with
logits processors, penalties and prompt-lookup drafts, threads, bad input."""

from __future__ import annotations

import threading
import time

import llama_cpp
import numpy as np
import pytest

from specllama import SpeculativeLlama
from specllama.sampling import SamplingParams, to_probs

from .stats_helpers import assert_distributed_as, detectable_effect, pooled_bins

PROMPT = "once upon a time there lived a king"
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


def test_logprobs_equal_llama_cpp(spec, tiny_pair):
    """Each token's log-probability (and the top alternatives) under the
    target's distribution, as llama-cpp-python reports them."""
    reference = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False, logits_all=True, n_threads=THREADS)
    theirs = reference.create_completion(PROMPT, max_tokens=8, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    reference.close()
    ours = spec.create_completion(PROMPT, max_tokens=8, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    n = len(ours["tokens"])
    assert n == 8 and set(ours) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert ours["tokens"] == theirs["tokens"][:n] and ours["text_offset"] == theirs["text_offset"][:n]
    np.testing.assert_allclose(ours["token_logprobs"], theirs["token_logprobs"][:n], rtol=1e-5)
    for a, b in zip(ours["top_logprobs"], theirs["top_logprobs"]):
        assert list(a) == list(b)[: len(a)]
        np.testing.assert_allclose(list(a.values()), [b[k] for k in a], rtol=1e-5)
    # greedy: each chosen token is the likeliest
    assert all(lp == max(top.values()) for lp, top in zip(ours["token_logprobs"], ours["top_logprobs"]))


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
    with pytest.raises(ValueError, match=r"draft must be a GGUF path, a pair name or a llama_cpp.Llama or 'prompt-lookup', got 42"):
        SpeculativeLlama(tiny_pair[0], 42)


def test_missing_draft_file(tiny_pair):
    with pytest.raises(ValueError, match="model file not found: '/no/draft.gguf'"):
        SpeculativeLlama(tiny_pair[0], "/no/draft.gguf")


def test_messages_without_roles(spec):
    with pytest.raises(ValueError, match=r"messages\[1\] has role None; accepted roles: system, developer \(as system\), user, assistant"):
        spec.create_chat_completion([{"role": "user", "content": "a"}, {"content": "hi"}])
    with pytest.raises(ValueError, match="messages must be a non-empty list"):
        spec.create_chat_completion([])


def test_unsupported_options_are_refused(spec):
    with pytest.raises(ValueError, match="suffix='x' is not supported"):
        spec.create_completion(PROMPT, suffix="x")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        spec.create_completion(PROMPT, colour="red")
