"""Code completion in the editor: the FIM prompt as llama-server assembles
it, llama.cpp's "infill" sampler, and llama-server's ``/infill`` and
``/completion`` replayed as llama.vim and llama.vscode send them, on the real
Qwen2.5-Coder pair (its FIM tokens) through a real server process."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from specllama.infill import SNIPPET, Chunk, FimTokens, check_extra, fim_prompt
from specllama.sampling import InfillVocab, SamplingParams, sparse_probs

from .conftest import TINY_CTX
from .server_helpers import ServerProcess


def chars(text: str) -> list[int]:
    """A stand-in tokenizer: one id per character (ord + 1000)."""
    return [1000 + ord(c) for c in text]


QWEN_LIKE = FimTokens(pre=1, suf=2, mid=3, rep=4, sep=5)


# -- the prompt -------------------------------------------------------------------------------------------


def test_the_repository_level_prompt_in_llama_servers_order():
    tokens = fim_prompt(chars, QWEN_LIKE, prefix="ab", suffix="cd", prompt="x", extra=[Chunk("T", "f.py")],
                        n_batch=2048, n_ctx=4096, n_predict=16)
    assert tokens == ([4] + chars("myproject\n") + [5] + chars("f.py\n") + chars("T") + [5] + chars("filename\n")
                      + [1] + chars("ab") + chars("x") + [2] + chars("cd") + [3])


def test_trimming_keeps_the_end_of_the_prefix_the_start_of_the_suffix_and_the_end_of_the_chunks():
    fim = FimTokens(pre=1, suf=2, mid=3, bos=9)  # no repository tokens: snippets; a BOS after the chunks
    tokens = fim_prompt(chars, fim, prefix="0123456789", suffix="abcdefghij", prompt="P", extra=[Chunk("XYZ")],
                        n_batch=8, n_ctx=8 + 2 * 1 + 1, n_predict=1)
    # prefix: 3 * (8 // 4) = 6 tokens; suffix: 8 // 4 - (2 + 1) < 0 -> none; chunks: 11 - 8 - 2 * 1 = 1 token
    assert tokens == chars("Z") + [9, 1] + chars("456789P") + [2, 3]
    extra = fim_prompt(chars, fim, prefix="", suffix="", extra=[Chunk("XYZ")], n_batch=8, n_ctx=100, n_predict=0)
    assert extra == chars(SNIPPET + "XYZ") + [9, 1, 2, 3]


def test_input_extra_is_checked():
    assert check_extra([{"text": "a", "time": 3}, {"text": "b", "filename": "x.py"}]) == [Chunk("a"),
                                                                                           Chunk("b", "x.py")]
    for bad, param in (({"text": "a"}, "input_extra"), ([{"filename": "x"}], "input_extra[0].text"),
                       ([{"text": "a", "filename": 3}], "input_extra[0].filename")):
        with pytest.raises(ValueError) as e:
            check_extra(bad)
        assert e.value.param == param


# -- cache reuse ------------------------------------------------------------------------------------------


def test_cache_reuse_shifts_cached_runs_into_place(tiny_pair):
    """llama-server's --cache-reuse on the real backend: text cut from the
    middle (an editor's window that moved) leaves a run the cache holds
    further on; it is shifted into place and only the rest is evaluated. The
    shifted run keeps the keys and values computed after the text that was
    cut, so the next row is not a fresh evaluation's (here the logits differ
    by up to 0.68): an approximation, as in llama-server, and off by default."""
    from specllama.backend import LlamaModel
    from specllama.prefix import common_prefix_len, sync_prefix

    with LlamaModel(tiny_pair[0], n_ctx=256, n_threads=1) as model:
        head = model.tokenize("the king went to the house", add_bos=True)
        moved = model.tokenize(" and the queen ran to the little tree and the dog came", add_bos=False)
        old = head + model.tokenize(" at night", add_bos=False) + moved
        new = head + moved + model.tokenize(" to the", add_bos=False)
        model.eval(old, n_logits=0)
        n_evaluated = sync_prefix(model, new[:-1], reuse=8)
        assert n_evaluated == len(new) - 1 - len(head) - len(moved)  # " to" only: the moved run was shifted
        assert model.tokens == new[:-1]
        reused = model.eval(new[-1:])[0]
        model.rewind(0)
        fresh = model.eval(new)[0]
        assert 0.05 < float(np.abs(reused - fresh).max()) < 2.0
        model.rewind(0)
        model.eval(old, n_logits=0)
        shared = common_prefix_len(old, new)  # the head (and the first piece of a word both spellings start with)
        assert sync_prefix(model, new[:-1], reuse=len(moved) + 1) == len(new) - 1 - shared  # the run is too short


def test_speculation_stays_exact_on_a_reused_cache(tiny_pair):
    """What the promise is under --cache-reuse: greedy speculative decoding
    equals greedy target-only decoding from the same reused caches."""
    from specllama.sampling import SamplingParams

    from .conftest import open_tiny_engine

    engine = open_tiny_engine(tiny_pair)
    engine.cache_reuse = 8
    try:
        t = engine.target
        old = t.tokenize("the king went to the house at night and the queen ran to the little tree and the dog came")
        new = t.tokenize("the king went to the house and the queen ran to the little tree and the dog came")
        outs = {}
        for k in (0, 3):
            engine.prefill(old)
            steps = engine.steps(new, params=SamplingParams(temperature=0), draft_max=k, max_tokens=24,
                                 rng=np.random.default_rng(0), adaptive=False)
            outs[k] = [tok for s in steps for tok in s.tokens]
            assert engine.target.tokens[:len(new) - 1] == new[:-1]
        assert outs[0] == outs[3] and len(outs[0]) == 24
    finally:
        engine.close()


# -- the infill sampler -----------------------------------------------------------------------------------

PIECES = [b"", b"a", b"ab", b"abc", b"x", b"y", b"z"]
INFILL = InfillVocab(PIECES, frozenset({0}), 0)
ALL = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def _law(probs) -> dict[int, float]:
    sp = sparse_probs(np.log(np.array(probs)), SamplingParams(**ALL, infill=INFILL))
    return {int(t): round(float(p), 6) for t, p in zip(sp.ids, sp.probs)}


def test_the_infill_sampler_merges_prefixes_and_drops_the_unlikely():
    # "a" takes "ab" and "abc" (0.6); text under 0.2 goes; then under 1/3 of the rest: "x" (0.25/0.86) goes
    assert _law([0.01, 0.3, 0.2, 0.1, 0.25, 0.1, 0.04]) == {0: round(0.01 / 0.61, 6), 1: round(0.6 / 0.61, 6)}


def test_the_infill_sampler_ends_when_the_end_is_likely_enough():
    # 3 * n * p_eog = 3 * 7 * 0.05 > 0.95: only end-of-generation tokens stay
    assert _law([0.05, 0.4, 0.1, 0.1, 0.15, 0.1, 0.1]) == {0: 1.0}
    # no text token survives the thresholds: the fallback token
    flat = InfillVocab([b"", b"p", b"q", b"r", b"s", b"t", b"u"], frozenset({0}), 0)
    sp = sparse_probs(np.log(np.full(7, 1 / 7) + np.array([-0.14] + [0.14 / 6] * 6)),
                      SamplingParams(**ALL, infill=flat))
    assert sp.ids.tolist() == [0] and sp.probs.tolist() == [1.0]


# -- the endpoints, replayed as the editors send them ------------------------------------------------------

SOURCE = '''import math


def area(radius):
    """The area of a circle."""
    return math.pi * radius ** 2


def circumference(radius):
    """The circumference of a circle."""
'''
CHUNKS = [{"text": "def square(x):\n    return x * x\n", "time": 1733000000, "filename": "shapes.py"},
          {"text": "PI = 3.14159\n", "time": 1733000005, "filename": "consts.py"}]
PREFIX, LINE, SUFFIX = SOURCE, "    return ", "\n\ndef volume(radius):\n    pass\n"
VIM_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
              "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
              "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached"]
EMPTY_BEARER = {"Authorization": "Bearer"}  # llama.vim sends "Bearer " with no key (the space is whitespace HTTP trims)


def vim_warm_up() -> dict:
    return {"input_prefix": "", "input_suffix": "", "input_extra": CHUNKS, "prompt": "", "n_predict": 0,
            "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1,
            "response_fields": [""]}


def vim_completion(**changes) -> dict:
    body = {"id_slot": 0, "input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": CHUNKS, "prompt": LINE,
            "n_predict": 32, "stop": [], "n_indent": 4, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 0, "response_fields": VIM_FIELDS, "model": ""}
    return {**body, **changes}


def vim_reads(text: str) -> dict:
    """What llama.vim keeps of a response: a line matching ^\\s*{ that holds "content":" (one line of JSON)."""
    lines = [line for line in text.splitlines() if line.lstrip().startswith("{") and '"content":"' in line]
    assert len(lines) == 1 and text.count("\n") <= 1, text
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def coder_http(coder_paths, tmp_path_factory):
    # --draft-fixed: the drafts are made (on two cores the policy would decode this pair target-only)
    proc = ServerProcess(["-m", coder_paths[0], "-md", coder_paths[1], "-c", "4096", "-t", "2", "--draft-fixed",
                          "--draft-max", "4"], tmp_path_factory.mktemp("infill"))
    with httpx.Client(base_url=proc.url, timeout=300) as client:
        yield client
    proc.stop()


def test_llama_vim_warm_up_then_completion(coder_http):
    """The warm-up (n_predict 0) loads the chunks' tokens: the completion
    after it evaluates only what follows them; both responses parse the way
    llama.vim parses them, with exactly the fields it asked for."""
    warm = coder_http.post("/infill", json=vim_warm_up(), headers=EMPTY_BEARER)
    assert warm.status_code == 200 and warm.text == "{}"
    full = coder_http.post("/infill", json=vim_completion(response_fields=None), headers=EMPTY_BEARER).json()
    warmed = coder_http.post("/infill", json=vim_warm_up() | {"response_fields": None}).json()
    assert warmed["tokens_evaluated"] < full["tokens_evaluated"] and warmed["timings"]["predicted_n"] == 0
    r = coder_http.post("/infill", json=vim_completion(), headers=EMPTY_BEARER)
    assert r.status_code == 200
    got = vim_reads(r.text)
    assert sorted(got) == sorted(VIM_FIELDS) and got["truncated"] is False
    # the chunks (all of the warm-up's prompt but its last token) came from the cache
    assert full["tokens_evaluated"] - got["timings/prompt_n"] >= warmed["tokens_evaluated"] - 1
    assert got["tokens_cached"] >= full["tokens_evaluated"]
    assert got["timings/predicted_n"] >= 1 and isinstance(got["content"], str)


def test_infill_at_temperature_zero_speculative_and_target_only(coder_http):
    """Greedy fill in the middle, speculative (k = 4, fixed) and target-only:
    both complete, the first with drafts. Their texts are not compared token
    for token on this pair: its Q4_K_M target computes other rows in a batch
    of 5 than in a batch of 1 (up to 0.8 in a logit, docs/how-it-works.md),
    so greedy texts may part at a near-tie, as this one did after about 40
    characters on an AMD EPYC VM (2026-12-02) and did not on an Intel Xeon
    one. Token-for-token equality with target-only is checked where
    llama.cpp's rows allow it: the F32 demo, chat and tiny pairs
    (tests/test_demo.py, tests/test_origins_and_chat_pair.py,
    tests/test_engine_llama.py)."""
    body = vim_completion(temperature=0, samplers=["top_k", "top_p", "temperature", "infill"], n_indent=0,
                          response_fields=None, n_predict=24)
    spec = coder_http.post("/infill", json=body | {"speculative.n_max": 4}).json()
    alone = coder_http.post("/infill", json=body | {"speculative.n_max": 0}).json()
    assert spec["tokens_predicted"] > 0 and alone["tokens_predicted"] > 0
    assert spec["content"] and alone["content"]
    assert spec["timings"]["draft_n"] > 0 == alone["timings"]["draft_n"]
    assert spec["generation_settings"]["n_ctx"] == 4096 and spec["stop"] is True and spec["model"]
    for key in ("tokens", "id_slot", "prompt", "has_new_line", "stop_type", "stopping_word", "tokens_evaluated"):
        assert key in spec
    # OpenAI's fill in the middle: /v1/completions with suffix, the same prompt without chunks or line
    plain = coder_http.post("/infill", json={"input_prefix": PREFIX + LINE, "input_suffix": SUFFIX,
                                             "n_predict": 24, "temperature": 0}).json()
    oai = coder_http.post("/v1/completions", json={"prompt": PREFIX + LINE, "suffix": SUFFIX, "max_tokens": 24,
                                                   "temperature": 0}).json()
    assert oai["choices"][0]["text"] == plain["content"]
    # echo repeats the prompt as given, not the fill-in-the-middle prompt built from it and the suffix
    echoed = coder_http.post("/v1/completions", json={"prompt": PREFIX + LINE, "suffix": SUFFIX, "max_tokens": 24,
                                                      "temperature": 0, "echo": True}).json()
    assert echoed["choices"][0]["text"] == PREFIX + LINE + plain["content"]


def test_n_cmpl_indent_and_the_native_completion_stream(coder_http):
    three = coder_http.post("/infill", json=vim_completion(n_cmpl=3, response_fields=None, seed=1)).json()
    assert isinstance(three, list) and [c["index"] for c in three] == [0, 1, 2]
    assert all(c["generation_settings"]["n_ctx"] == 4096 for c in three)
    # n_indent: no line of the completion starts less indented than 4 (the line that would is dropped)
    for c in three:
        for line in c["content"].split("\n")[1:]:
            assert not line.strip() or len(line) - len(line.lstrip(" \t")) >= 4, c["content"]
    with coder_http.stream("POST", "/completion", json={"prompt": "def fib(n):", "n_predict": 12, "stream": True,
                                                         "temperature": 0}) as r:
        payloads = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(p) for p in payloads]  # no [DONE]: llama-server's own endpoints end with "stop": true
    assert events[-1]["stop"] is True and all(e["stop"] is False for e in events[:-1])
    whole = coder_http.post("/completion", json={"prompt": "def fib(n):", "n_predict": 12, "temperature": 0}).json()
    assert "".join(e["content"] for e in events) == whole["content"] and whole["tokens_predicted"] == 12
    assert (whole["stop_type"], whole["stopping_word"]) == ("limit", "")
    # a stop string ends it as llama-server says so: "word", and which
    word = whole["content"].strip().split()[0]
    stopped = coder_http.post("/completion", json={"prompt": "def fib(n):", "n_predict": 12, "temperature": 0,
                                                   "stop": ["@@", word]}).json()
    assert (stopped["stop_type"], stopped["stopping_word"]) == ("word", word)
    assert stopped["content"] == whole["content"][:whole["content"].index(word)]


def test_models_without_fim_tokens_and_bad_chunks(tiny_pair, tmp_path):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", str(TINY_CTX), "-t", "1"], tmp_path)
    try:
        with httpx.Client(base_url=proc.url, timeout=60) as client:
            r = client.post("/infill", json={"input_prefix": "a", "input_suffix": "b"})
            assert r.status_code == 501
            error = r.json()["error"]
            assert error["code"] == 501 and error["type"] == "not_supported_error"
            assert error["message"].startswith("Infill is not supported by this model")
            r = client.post("/v1/completions", json={"prompt": "a", "suffix": "b", "max_tokens": 2})
            assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"
            r = client.post("/infill", json={"input_prefix": "a", "input_suffix": "b", "input_extra": "x"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "input_extra"
            r = client.post("/infill", json={"input_prefix": "a"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "input_suffix"
            r = client.post("/completion", json={"prompt": "once upon", "n_predict": 3, "samplers": ["nope"]})
            assert r.status_code == 400 and r.json()["error"]["param"] == "samplers"
    finally:
        proc.stop()


def test_speculation_keeps_the_law_under_the_infill_sampler(tiny_pair):
    """The first two tokens' law (chi-square at alpha 0.001, ``specllama
    verify``'s check) with llama.cpp's infill sampler after top-k 40 and
    top-p 0.9, on target and draft rows alike: speculative sampling keeps the
    transformed target law. The first token's check detects w >= 0.25 with
    power 0.99 (600 samples); a planted bias failing the check:
    tests/test_verify.py::test_a_planted_bias_fails."""
    from specllama.selfcheck import run_verify

    from .conftest import open_tiny_engine

    engine = open_tiny_engine(tiny_pair)
    try:
        params = SamplingParams(temperature=1.0, top_k=40, top_p=0.9, min_p=0.0, seed=5,
                                infill=engine.target.infill_vocab())
        # (a prompt after which three tokens survive the sampler: 0.30, 0.34 and 0.35)
        result = run_verify(engine, params=params, prompt="the queen went to the", n_samples=600, draft_max=3)
    finally:
        engine.close()
    assert result.passed, result
    assert result.checks[0].kind == "chi-square" and result.checks[0].detectable_w < 0.25


def _infill_reference(vocab: InfillVocab, ids: np.ndarray, probs: np.ndarray) -> dict[int, float]:
    """llama.cpp's infill sampler as written there: the EOG test, every (i0, i1)
    pair in order, then the two thresholds."""
    order = np.argsort(-probs, kind="stable")
    ids, probs = ids[order], probs[order].astype(np.float64)
    eog = np.array([int(t) in vocab.eog for t in ids])
    if 3 * probs[eog].sum() * len(ids) > probs[~eog].sum():
        return {int(t): q / probs[eog].sum() for t, q in zip(ids[eog], probs[eog])}
    alive = np.ones(ids.shape[0], dtype=bool)
    for i0 in range(ids.shape[0]):
        for i1 in range(ids.shape[0]):
            if not alive[i0]:
                break
            if i0 == i1 or not alive[i1]:
                continue
            a, b = vocab.pieces[int(ids[i0])], vocab.pieces[int(ids[i1])]
            if a and len(a) <= len(b) and b.startswith(a):
                dst, src = (i1, i0) if probs[i1] > probs[i0] else (i0, i1)
                probs[dst] += probs[src]
                probs[src], alive[src] = 0.0, False
    kept = [(int(t), q, e) for t, q, a, e in zip(ids, probs, alive, eog) if a and (q >= 0.2 or e)]
    n_text = sum(1 for *_, e in kept if not e)
    if n_text == 0:
        return {vocab.fallback: 1.0}
    total = sum(q for _, q, _ in kept)
    kept = [(t, q / total, e) for t, q, e in kept]
    kept = [(t, q, e) for t, q, e in kept if q >= 1.0 / (n_text + 1) or e]
    total = sum(q for _, q, _ in kept)
    return {t: q / total for t, q, _ in kept}


def test_the_infill_sampler_equals_llama_cpps_all_pairs_loop():
    """The merge over sorted prefix pairs gives llama.cpp's result (200
    random rows over pieces from a 3-letter alphabet: many prefix pairs,
    duplicates and chains; to 1e-12); and a row of 20,000 candidates finishes."""
    rng = np.random.default_rng(0)
    n_merged = 0
    for _ in range(200):
        n = int(rng.integers(2, 40))
        pieces = [b""] + [bytes(rng.choice(list(b"abc"), size=int(rng.integers(1, 4)))) for _ in range(n)]
        vocab = InfillVocab(pieces, frozenset({0}), 0)
        ids, probs = np.arange(n + 1), rng.dirichlet(np.ones(n + 1)) * np.r_[0.01, np.ones(n)]
        probs /= probs.sum()
        got_ids, got_probs = vocab.apply(ids, probs)
        got = {int(t): float(q) for t, q in zip(got_ids, got_probs)}
        expected = _infill_reference(vocab, ids, probs)
        assert got.keys() == expected.keys() and all(abs(got[t] - expected[t]) < 1e-12 for t in got)
        n_merged += len(got) > 1
    assert n_merged > 20  # rows where merging and the thresholds leave a real choice
    big = InfillVocab([b""] + [f"t{i}".encode() for i in range(20000)], frozenset({0}), 0)
    sp = sparse_probs(np.zeros(20001), SamplingParams(**ALL, infill=big))
    assert sp.ids.tolist() == [0]  # a flat row: no text token reaches 0.2, the fallback
