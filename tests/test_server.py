"""``specllama serve`` as a real process on a real port, driven through the
official ``openai`` client and raw HTTP: shapes, streaming, usage, every
error with its status and body, auth, metrics that agree with the
responses, concurrency, queue overflow, disconnects, shutdown."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from .server_helpers import ServerProcess, metric_samples, metrics_delta, sse_json

KEY = "test-key"
ALIAS = "tiny"
CTX = 512
ALLOWED_ORIGIN = "http://allowed.test"
PROMPT = "once upon a time there lived a king"
MESSAGES = [{"role": "system", "content": "be a king"}, {"role": "user", "content": "once upon a time"}]
EOS = "2"  # the tiny vocabulary's </s>: biased away where a request must run long
NO_EOS = {EOS: -100}
LONG_CTX = 16384  # a tiny-model generation over most of it takes a minute
# One thread: no OpenMP barriers, whose spin-waits collapse when other processes share the 2 cores.
THREADS = ["-t", "1"]
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", str(CTX), "--draft-fixed", "--draft-max", "3",
                          "--alias", ALIAS, "--cors-origin", ALLOWED_ORIGIN, "-s", "0", *THREADS],
                         tmp_path_factory.mktemp("serve"), env={"SPECLLAMA_API_KEY": KEY})
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def slow_server(tiny_pair, tmp_path_factory):
    """A long context (slow, long generations), one slot and room for one waiting request."""
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", str(LONG_CTX), "--draft-fixed",
                          "--draft-max", "3", "-np", "1", "--max-queue", "1", *THREADS],
                         tmp_path_factory.mktemp("slow"))
    yield proc
    proc.stop()


def tokenize(http, text: str, add_special: bool = True) -> list[int]:
    r = http.post("/tokenize", json={"content": text, "add_special": add_special})
    assert r.status_code == 200
    return r.json()["tokens"]


def stream_events(http, path: str, body: dict) -> tuple[list[dict], str]:
    with http.stream("POST", path, json=dict(body, stream=True)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return sse_json(list(r.iter_lines()))


# -- completions and chat ----------------------------------------------------------


def test_completion_stream_concatenates_to_the_response(client, http):
    full = client.completions.create(model=ALIAS, prompt=PROMPT, max_tokens=16, temperature=0)
    choice = full.choices[0]
    assert full.object == "text_completion" and full.model == ALIAS and choice.finish_reason == "length"
    assert full.usage.prompt_tokens == len(tokenize(http, PROMPT)) and full.usage.completion_tokens == 16
    assert full.usage.total_tokens == full.usage.prompt_tokens + 16
    spec, timings = full.model_extra["speculative"], full.model_extra["timings"]
    assert timings["predicted_n"] == 16 and timings["draft_n"] == spec["n_drafted"] > 0
    assert timings["draft_n_accepted"] == spec["n_accepted"]
    assert set(spec) == {"n_drafted", "n_accepted", "acceptance_rate", "tokens_per_pass", "acceptance_by_position",
                         "n_target_passes"}
    chunks = list(client.completions.create(model=ALIAS, prompt=PROMPT, max_tokens=16, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage is None
    assert chunks[-1].model_extra["speculative"]["n_drafted"] == spec["n_drafted"]


def test_chat_stream_with_a_seed_equals_the_response(client):
    kwargs = dict(model=ALIAS, messages=MESSAGES, max_tokens=20, temperature=0.8, seed=7)
    full = client.chat.completions.create(**kwargs)
    message = full.choices[0].message
    assert full.object == "chat.completion" and message.role == "assistant" and full.usage.completion_tokens == 20
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == message.content
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage == full.usage
    assert chunks[-2].choices[0].finish_reason == "length" and chunks[-2].usage is None
    assert chunks[-2].model_extra["timings"]["predicted_n"] == 20


def test_stream_on_the_wire_ends_with_usage_and_done(http):
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "stream_options": {"include_usage": True}}
    with http.stream("POST", COMPLETIONS, json=dict(body, stream=True)) as r:
        raw = r.read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    events, done = sse_json(raw.split("\n"))
    assert done == "[DONE]"
    assert events[-1]["choices"] == [] and events[-1]["usage"] == {
        "prompt_tokens": len(tokenize(http, PROMPT)), "completion_tokens": 6,
        "total_tokens": len(tokenize(http, PROMPT)) + 6}
    assert events[-2]["choices"][0]["finish_reason"] == "length" and "timings" in events[-2]
    assert all(e["object"] == "text_completion" and e["id"] == events[0]["id"] for e in events)
    full = http.post(COMPLETIONS, json=body).json()
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == full["choices"][0]["text"]


def test_chat_follow_up_reuses_the_kv_cache(client):
    first = client.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=8, temperature=0)
    again = client.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=8, temperature=0)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.model_extra["timings"]["prompt_n"] == 0  # the whole prompt was in the cache
    follow_up = MESSAGES + [{"role": "assistant", "content": first.choices[0].message.content},
                            {"role": "user", "content": "the king said"}]
    second = client.chat.completions.create(model=ALIAS, messages=follow_up, max_tokens=8, temperature=0)
    new_tokens = second.usage.prompt_tokens - first.usage.prompt_tokens
    # only the reply and the new turn were evaluated, not the first turn again
    assert 0 < second.model_extra["timings"]["prompt_n"] <= new_tokens < second.usage.prompt_tokens


def test_per_request_speculation_off(client, http):
    base = dict(prompt=PROMPT, max_tokens=12, temperature=0)
    spec = http.post(COMPLETIONS, json=base).json()
    nested = client.completions.create(model=ALIAS, **base, extra_body={"speculative": {"n_max": 0}})
    dotted = http.post(COMPLETIONS, json=dict(base, **{"speculative.n_max": 0})).json()
    for off in (nested.model_extra, dotted):
        assert off["speculative"]["n_drafted"] == 0 and off["timings"]["draft_n"] == 0
        assert off["speculative"]["n_target_passes"] == 12
    assert spec["speculative"]["n_drafted"] > 0
    assert nested.choices[0].text == dotted["choices"][0]["text"] == spec["choices"][0]["text"]  # exact either way
    # beyond one target batch: that batch less the pass's first row (a 500 before: the policy's 100000-row arrays)
    huge = http.post(COMPLETIONS, json=dict(base, **{"speculative.n_max": 100000}))
    assert huge.status_code == 200 and huge.json()["choices"][0]["text"] == spec["choices"][0]["text"]
    native = http.post("/completion", json={"prompt": PROMPT, "n_predict": 4, "speculative.n_max": 100000}).json()
    assert native["generation_settings"]["speculative.n_max"] == min(512, CTX) - 1


def test_logit_bias_with_string_keys(client, http):
    (king,) = tokenize(http, "king", add_special=False)
    out = client.completions.create(model=ALIAS, prompt=PROMPT, max_tokens=5, temperature=0,
                                    logit_bias={str(king): 100})
    assert out.choices[0].text == " king" * 5


def test_logprobs_stream_and_response_agree(client):
    kwargs = dict(model=ALIAS, messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
    full = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    streamed = [e for c in client.chat.completions.create(**kwargs, stream=True)
                if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(full) == len(streamed) == 6
    assert [e.token for e in streamed] == [e.token for e in full]
    assert [len(e.top_logprobs) for e in full] == [2] * 6
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in full], abs=1e-4)
    completion = client.completions.create(model=ALIAS, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=3)
    lp = completion.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 4 and all(1 <= len(t) <= 3 for t in lp.top_logprobs)


def test_echo_with_logprobs_scores_the_prompt_as_an_evaluation_harness_asks(client):
    """lm-evaluation-harness's loglikelihood request (echo, logprobs 1, max_tokens 1): the prompt's tokens and
    their log-probabilities come back first (the first None), then the one generated token's, streamed or not."""
    kwargs = dict(model=ALIAS, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1, echo=True)
    out = client.completions.create(**kwargs).choices[0]
    lp = out.logprobs
    n = len(lp.tokens) - 1
    assert out.text.startswith(PROMPT) and n >= 5 and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v < 0 for v in lp.token_logprobs[1:]) and lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens[1:n]) in PROMPT and lp.text_offset[-1] == len(PROMPT)
    streamed = [c.choices[0].logprobs for c in client.completions.create(**kwargs, stream=True)
                if c.choices and c.choices[0].logprobs]
    assert [t for p in streamed for t in p.tokens] == lp.tokens
    assert [v for p in streamed for v in p.token_logprobs][1:] == pytest.approx(lp.token_logprobs[1:], abs=1e-4)


def test_omitted_fields_take_the_server_flags(http):
    def text(**fields) -> str:
        return http.post(COMPLETIONS, json={"prompt": PROMPT, "max_tokens": 16, "seed": 3, **fields}).json()[
            "choices"][0]["text"]

    omitted = text()
    assert omitted == text(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                           presence_penalty=0.0, frequency_penalty=0.0)  # llama.cpp's defaults, the flags here
    assert omitted != text(temperature=0)
    # no max_tokens: -n -1, until the context is full
    full = http.post(COMPLETIONS, json={"prompt": PROMPT, "logit_bias": NO_EOS, "seed": 3}).json()
    assert full["choices"][0]["finish_reason"] == "length"
    assert full["usage"]["completion_tokens"] == CTX - full["usage"]["prompt_tokens"]


def test_fields_that_do_not_change_the_output_are_ignored(http):
    base = {"messages": MESSAGES, "max_tokens": 6, "temperature": 0}
    expected = http.post(CHAT, json=base).json()["choices"][0]["message"]["content"]
    extras = {"user": "u1", "metadata": {"a": "b"}, "stream_options": {"include_usage": True}, "unknown_field": [1],
              "response_format": {"type": "text"}, "tool_choice": "none", "typical_p": 1.0, "mirostat": 0,
              "dry_multiplier": 0, "xtc_probability": 0.0, "n": 1, "model": "any-name", "cache_prompt": True}
    r = http.post(CHAT, json=dict(base, **extras))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == expected


# -- bad input ---------------------------------------------------------------------


def _error(message: str, param: str | None, code: str | None, type: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


BAD_REQUESTS = [
    (COMPLETIONS, b'{"prompt": "hi', 400, _error(
        "the request body is not valid JSON (Unterminated string starting at: line 1 column 12 (char 11))",
        None, "invalid_json")),
    (COMPLETIONS, b"[1, 2]", 400, _error("the request body must be a JSON object, got an array", None,
                                         "invalid_type")),
    (CHAT, {"max_tokens": 4}, 400, _error("Missing required parameter: 'messages'.", "messages",
                                          "missing_required_parameter")),
    (COMPLETIONS, {"prompt": "hi", "temperature": "hot"}, 400, _error(
        "Invalid type for 'temperature': expected a number, got \"hot\".", "temperature", "invalid_type")),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 2.5}, 400, _error(
        "Invalid type for 'max_tokens': expected an integer, got 2.5.", "max_tokens", "invalid_type")),
    (COMPLETIONS, {"prompt": "hi", "stop": [1]}, 400, _error(
        "Invalid type for 'stop': expected a string or a list of strings, got [1].", "stop", "invalid_type")),
    (COMPLETIONS, {"prompt": 5}, 400, _error(
        "Invalid type for 'prompt': expected a string or a list of integers or a list of strings or a list of "
        "lists of integers, got 5.", "prompt", "invalid_type")),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "caf\\udce9"}]}',
     400, _error("the content of messages[1] is not valid UTF-8 (bytes b'\\xe9' at position 3); give UTF-8 text",
                 "messages[1].content", "invalid_value")),
    (CHAT, {"messages": MESSAGES, "response_format": "json_object"}, 400, _error(
        "Invalid type for 'response_format': expected an object of JSON values, got \"json_object\".",
        "response_format", "invalid_type")),
    (CHAT, {"messages": MESSAGES, "stream_options": {"include_usage": "yes"}}, 400, _error(
        "Invalid type for 'stream_options.include_usage': expected a boolean, got \"yes\".",
        "stream_options.include_usage", "invalid_type")),
    (CHAT, {"messages": MESSAGES, "temperature": 2.5}, 400, _error(
        "temperature must be a finite number >= 0 and <= 2, got 2.5", "temperature", "invalid_value")),
    (CHAT, {"messages": MESSAGES, "max_tokens": 0}, 400, _error(
        "max_tokens must be an integer >= 1 (or None: until the context is full), got 0", "max_tokens",
        "invalid_value")),
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": -3}, 400, _error(
        "max_completion_tokens must be an integer >= 1 (or None: until the context is full), got -3",
        "max_completion_tokens", "invalid_value")),
    (COMPLETIONS, {"prompt": "hi", "top_p": 1.5}, 400, _error(
        "top_p must be a finite number >= 0 and <= 1, got 1.5", "top_p", "invalid_value")),
    (COMPLETIONS, {"prompt": "hi", "presence_penalty": 2.5}, 400, _error(
        "presence_penalty must be a finite number >= -2 and <= 2, got 2.5", "presence_penalty", "invalid_value")),
    (COMPLETIONS, {"prompt": "hi", "top_k": -1}, 400, _error(
        "top_k must be an integer >= 0 (0 = off), got -1", "top_k", "invalid_value")),
    (COMPLETIONS, {"prompt": "hi", "logit_bias": {"abc": 1}}, 400, _error(
        "logit_bias key 'abc' is not a token id in 0..462", "logit_bias", "invalid_value")),
    (COMPLETIONS, {"prompt": "hi", "seed": -5}, 400, _error(
        "seed must be an integer >= 0 (or -1 / None: a fresh one), got -5", "seed", "invalid_value")),
    (COMPLETIONS, {"prompt": "hi", "speculative.n_max": -1}, 400, _error(
        "speculative.n_max must be an integer >= 0, got -1", "speculative.n_max", "invalid_value")),
    (COMPLETIONS, {"prompt": [99999]}, 400, _error(
        "prompt token id 99999 is out of range 0..462", "prompt", "invalid_value")),
    (COMPLETIONS, {"prompt": ["a", "b"]}, 400, _error(
        "prompt must be one string or one list of token ids (batches of prompts are not supported), got 2 prompts",
        "prompt", "unsupported_value")),
    (CHAT, {"messages": [{"role": "bot", "content": "hi"}]}, 400, _error(
        "messages[0] has role 'bot'; accepted roles: system, developer (as system), user, assistant, tool",
        "messages[0]", "invalid_value")),
    (CHAT, {"messages": MESSAGES, "logprobs": True, "top_logprobs": 25}, 400, _error(
        "top_logprobs must be an integer in 0..20 (or None), got 25", "top_logprobs", "invalid_value")),
    (CHAT, {"messages": MESSAGES, "n": 2}, 400, _error(
        "n must be 1 (one choice per request is supported), got 2", "n", "unsupported_value")),
    (CHAT, {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, _error(
        "tiny-target.gguf cannot take tools: chat format 'llama-2' does not render them in the Hermes/Qwen 2.5 "
        "<tool_call> format; --chat-format hermes (chat_format='hermes') names a format that does", "tools",
        "invalid_value")),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400,
     _error("response_format.json_schema must be an object with a 'schema' (and a 'name'), got {'name': 'x'}",
            "response_format.json_schema", "invalid_value")),
    (COMPLETIONS, {"prompt": "hi", "typical_p": 0.5}, 400, _error(
        "typical_p=0.5 is not supported by speculative decoding here (leave it at 1.0)", "typical_p",
        "unsupported_parameter")),
    (COMPLETIONS, {"prompt": "hi", "mirostat": 2}, 400, _error(
        "mirostat=2 is not supported by speculative decoding here (leave it at 0)", "mirostat",
        "unsupported_parameter")),
    (CHAT, {"messages": MESSAGES, "dry_multiplier": 0.8}, 400, _error(
        "dry_multiplier=0.8 is not supported by speculative decoding here (leave it at 0.0)", "dry_multiplier",
        "unsupported_parameter")),
    (CHAT, {"messages": MESSAGES, "xtc_probability": 0.5}, 400, _error(
        "xtc_probability=0.5 is not supported by speculative decoding here (leave it at 0.0)", "xtc_probability",
        "unsupported_parameter")),
    (COMPLETIONS, {"prompt": "hi", "suffix": "end"}, 400, _error(
        "Infill is not supported by this model: tiny-target.gguf has no fill-in-the-middle tokens (prefix, suffix "
        "and middle)", "suffix", "not_supported")),
    ("/v1/embeddings", {"input": "hi"}, 404, _error("Not Found: POST /v1/embeddings", None, "not_found")),
    (COMPLETIONS + "?x", None, 405, _error("Method Not Allowed: GET /v1/completions", None,
                                           "method_not_allowed")),
]


@pytest.mark.parametrize("path,body,status,expected", BAD_REQUESTS,
                         ids=[f"{i}-{p}" for i, (p, *_rest) in enumerate(BAD_REQUESTS)])
def test_bad_requests_get_an_openai_error(http, path, body, status, expected):
    if body is None:
        r = http.get(path.split("?")[0])
    elif isinstance(body, bytes):
        r = http.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        r = http.post(path, json=body)
    assert (r.status_code, r.json()) == (status, expected)


def test_a_prompt_longer_than_the_context(client, http):
    prompt = "once upon a time " * 200
    n = len(tokenize(http, prompt))
    assert n > CTX
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=ALIAS, prompt=prompt, max_tokens=4)
    assert e.value.status_code == 400 and e.value.body == {
        "message": f"the prompt is {n} tokens but the context (-c/--ctx-size) holds {CTX}: use a prompt of at most "
                   f"{CTX - 1} tokens or a larger context",
        "type": "invalid_request_error", "param": "prompt", "code": "context_length_exceeded"}
    r = http.post(CHAT, json={"messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert r.json()["error"]["param"] == "messages"


def test_text_that_is_not_utf8_and_json_nested_too_deeply(http):
    lone_surrogate = '"a\\ud800b"'  # JSON can carry it, UTF-8 cannot
    r = http.post("/tokenize", content=f'{{"content": {lone_surrogate}}}')
    assert (r.status_code, r.json()) == (400, _error(
        "content must be valid UTF-8 text ('utf-8' codec can't encode character '\\ud800' in position 1: "
        "surrogates not allowed)", "content", "invalid_value"))
    for path, body, param in ((COMPLETIONS, f'{{"prompt": {lone_surrogate}}}', "prompt"),
                              (CHAT, f'{{"messages": [{{"role": "user", "content": {lone_surrogate}}}]}}',
                               "messages[0].content")):
        r = http.post(path, content=body)
        assert r.status_code == 400 and (r.json()["error"]["param"], r.json()["error"]["code"]) == (param,
                                                                                                 "invalid_value")
    r = http.post(COMPLETIONS, content="[" * 100_000 + "]" * 100_000)
    assert (r.status_code, r.json()) == (400, _error("the request body is not valid JSON (nested too deeply)", None,
                                                     "invalid_json"))


def test_a_body_over_the_size_limit_gets_413(http):
    body = json.dumps({"prompt": "x" * (9 * 1024 * 1024)})
    r = http.post(COMPLETIONS, content=body, headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (413, _error("the request body is larger than the limit of 8388608 bytes",
                                                     None, "request_too_large"))


# -- auth, CORS, the small endpoints -------------------------------------------------


def test_api_key(server):
    unauthorized = _error("an API key is needed: send the header 'Authorization: Bearer KEY'", None,
                          "invalid_api_key")
    for path in ("/v1/models", "/metrics", "/slots", "/tokenize"):
        r = httpx.request("GET" if path != "/tokenize" else "POST", server.url + path, json={"content": "a"})
        assert (r.status_code, r.json()) == (401, unauthorized) and r.headers["www-authenticate"] == "Bearer"
    r = httpx.post(server.url + COMPLETIONS, json={"prompt": "hi"}, headers={"Authorization": "Bearer wrong"})
    assert (r.status_code, r.json()) == (401, _error("the API key is not valid", None, "invalid_api_key"))
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()
    r = httpx.get(server.url + "/health")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


def test_cors_only_for_the_given_origin(server, slow_server):
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    ok = httpx.options(server.url + CHAT, headers={"Origin": ALLOWED_ORIGIN, **preflight})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    other = httpx.options(server.url + CHAT, headers={"Origin": "http://evil.test", **preflight})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    get = httpx.get(server.url + "/health", headers={"Origin": ALLOWED_ORIGIN})
    assert get.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    closed = httpx.get(slow_server.url + "/health", headers={"Origin": ALLOWED_ORIGIN})
    assert closed.status_code == 200 and "access-control-allow-origin" not in closed.headers


def test_models_tokenize_detokenize(client, http, tiny_pair):
    (model,) = client.models.list().data
    assert model.id == ALIAS and model.owned_by == "specllama"
    assert model.model_extra["meta"]["n_ctx"] == CTX and model.model_extra["meta"]["target"] == tiny_pair[0]
    tokens = tokenize(http, PROMPT, add_special=False)
    assert tokenize(http, PROMPT) == [1] + tokens  # add_special: the BOS
    assert http.post("/detokenize", json={"tokens": tokens}).json() == {"content": " " + PROMPT}
    pieces = http.post("/tokenize", json={"content": "king", "with_pieces": True}).json()["tokens"]
    assert pieces == [{"id": tokenize(http, "king", add_special=False)[0], "piece": " king"}]
    r = http.post("/detokenize", json={"tokens": [1, 10**6]})
    assert (r.status_code, r.json()) == (400, _error("prompt token id 1000000 is out of range 0..462", "tokens",
                                                     "invalid_value"))


# -- metrics, concurrency -----------------------------------------------------------


def test_metrics_agree_with_the_responses(http):
    before = metric_samples(http.get("/metrics").text)
    completion = http.post(COMPLETIONS, json={"prompt": PROMPT, "max_tokens": 10, "temperature": 0}).json()
    middle = metric_samples(http.get("/metrics").text)
    events, _ = stream_events(http, CHAT, {"messages": MESSAGES, "max_tokens": 7, "temperature": 0,
                                           "stream_options": {"include_usage": True}})
    assert http.post(CHAT, json={"messages": MESSAGES, "temperature": 9}).status_code == 400
    after = metric_samples(http.get("/metrics").text)
    chat_usage, chat_spec = events[-1]["usage"], events[-2]["speculative"]
    spec = completion["speculative"]
    delta = metrics_delta(before, after)
    assert delta.pop('specllama_requests_total{endpoint="/v1/completions",outcome="ok"}') == 1
    assert delta.pop('specllama_requests_total{endpoint="/v1/chat/completions",outcome="ok"}') == 1
    assert delta.pop('specllama_requests_total{endpoint="/v1/chat/completions",outcome="invalid"}') == 1
    assert delta.pop("specllama_prompt_tokens_total") == completion["usage"]["prompt_tokens"] + chat_usage[
        "prompt_tokens"]
    assert delta.pop("specllama_generated_tokens_total") == 10 + 7 == completion["usage"]["completion_tokens"] + \
        chat_usage["completion_tokens"]
    assert delta.pop("specllama_draft_tokens_total") == spec["n_drafted"] + chat_spec["n_drafted"]
    assert delta.pop("specllama_draft_tokens_accepted_total") == spec["n_accepted"] + chat_spec["n_accepted"]
    assert delta.pop("specllama_target_passes_total") == spec["n_target_passes"] + chat_spec["n_target_passes"]
    assert delta.pop("specllama_prompt_tokens_evaluated_total") == (
        completion["timings"]["prompt_n"] + events[-2]["timings"]["prompt_n"])
    # per draft position, the completion alone: accepted / tried is its acceptance_by_position
    first = metrics_delta(before, middle)
    rates = [first.get(f'specllama_draft_position_accepted_total{{position="{i}"}}', 0)
             / first[f'specllama_draft_position_tried_total{{position="{i}"}}']
             for i in range(len(spec["acceptance_by_position"]))]
    assert rates == spec["acceptance_by_position"]
    assert sum(v for k, v in first.items() if k.startswith("specllama_draft_position_accepted")) == spec["n_accepted"]
    assert after["specllama_queue_length"] == 0 and after["specllama_requests_running"] == 0
    assert delta.pop('specllama_request_duration_seconds_count{endpoint="/v1/completions"}') == 1


def test_concurrent_clients_each_get_their_solo_text(http):
    prompts = [f"{w} upon a time the {v}" for w, v in zip("once the a big old new little happy".split(),
                                                           "king queen cat dog house tree day night".split())]

    def ask(i: int) -> str:
        body = {"prompt": prompts[i], "max_tokens": 24, "temperature": 0}
        if i % 2:
            events, _ = stream_events(http, COMPLETIONS, body)
            return "".join(e["choices"][0]["text"] for e in events)
        return http.post(COMPLETIONS, json=body).json()["choices"][0]["text"]

    solo = [ask(i) for i in range(8)]
    assert len(set(solo)) == 8
    together: list[str | None] = [None] * 8
    threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, ask(i))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert together == solo


# -- faults: disconnects, a full queue, shutdown --------------------------------------------


LONG = {"prompt": PROMPT, "max_tokens": LONG_CTX - 100, "temperature": 0.8, "logit_bias": NO_EOS, "stream": True}
SHORT = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0}


class _LongStream:
    """A long stream that has started (n_events data lines read); the line
    iterator is kept, since dropping it closes the response."""

    def __init__(self, url: str, n_events: int = 2) -> None:
        self.client = httpx.Client(timeout=60)
        self.response = self.client.send(self.client.build_request("POST", url + COMPLETIONS, json=LONG),
                                         stream=True)
        self.lines = self.response.iter_lines()
        seen = 0
        while seen < n_events:
            if next(self.lines).startswith("data: "):
                seen += 1

    def close(self) -> None:
        """Disconnect mid-stream."""
        self.response.close()
        self.client.close()


def test_a_client_that_disconnects_frees_the_pair(slow_server):
    before = metric_samples(httpx.get(slow_server.url + "/metrics").text)
    _LongStream(slow_server.url).close()  # mid-stream: the generation must stop within a target pass
    start = time.monotonic()
    out = httpx.post(slow_server.url + COMPLETIONS, json=SHORT, timeout=60)
    assert out.status_code == 200 and out.json()["usage"]["completion_tokens"] == 8
    assert time.monotonic() - start < 10  # the long one alone would take a minute
    after = metric_samples(httpx.get(slow_server.url + "/metrics").text)
    delta = metrics_delta(before, after)
    assert delta['specllama_requests_total{endpoint="/v1/completions",outcome="cancelled"}'] == 1
    assert delta['specllama_requests_total{endpoint="/v1/completions",outcome="ok"}'] == 1
    assert 8 < delta["specllama_generated_tokens_total"] < LONG["max_tokens"] / 4


def test_a_client_that_leaves_the_queue_is_not_served(slow_server):
    before = metric_samples(httpx.get(slow_server.url + "/metrics").text)
    running = _LongStream(slow_server.url)
    with pytest.raises(httpx.ReadTimeout):  # waits behind the stream, gives up
        httpx.post(slow_server.url + COMPLETIONS, json=dict(LONG, stream=False), timeout=1.0)
    running.close()
    out = httpx.post(slow_server.url + COMPLETIONS, json=SHORT, timeout=60)
    assert out.status_code == 200
    delta = metrics_delta(before, metric_samples(httpx.get(slow_server.url + "/metrics").text))
    assert delta['specllama_requests_total{endpoint="/v1/completions",outcome="cancelled"}'] == 2
    assert delta['specllama_requests_total{endpoint="/v1/completions",outcome="ok"}'] == 1


def test_a_full_queue_answers_503_with_retry_after(slow_server):
    running = _LongStream(slow_server.url)
    waiting = httpx.Client(timeout=60)
    queued = waiting.send(waiting.build_request("POST", slow_server.url + COMPLETIONS, json=LONG), stream=True)
    assert queued.status_code == 200  # a stream's headers come at once; its chunks wait for its turn
    deadline = time.monotonic() + 10
    while metric_samples(httpx.get(slow_server.url + "/metrics").text)["specllama_queue_length"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    full = httpx.post(slow_server.url + COMPLETIONS, json=SHORT, timeout=10)
    assert full.status_code == 503 and full.headers["retry-after"] == "5"
    assert full.json() == _error("the server is busy: 1 requests are already waiting (--max-queue); retry later",
                                 None, "queue_full", type="server_error")
    queued.close()
    waiting.close()
    running.close()
    assert httpx.post(slow_server.url + COMPLETIONS, json=SHORT, timeout=60).status_code == 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_shutdown_ends_requests_cleanly_and_exits_0(tiny_pair, tmp_path, sig):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", str(LONG_CTX), "-np", "1", *THREADS],
                         tmp_path)
    try:
        running = _LongStream(proc.url)
        queued: dict = {}
        t = threading.Thread(target=lambda: queued.update(r=httpx.post(
            proc.url + COMPLETIONS, json=dict(LONG, stream=False), timeout=30)))
        t.start()
        deadline = time.monotonic() + 10
        while metric_samples(httpx.get(proc.url + "/metrics").text)["specllama_queue_length"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.signal(sig)
        events, done = sse_json(list(running.lines))
        assert done == "[DONE]" and events[-1] == _error("the server is shutting down", None, "shutting_down",
                                                        type="server_error")
        t.join(30)
        assert queued["r"].status_code == 503 and queued["r"].json() == events[-1]
        running.close()
        assert proc.wait(30) == 0
    finally:
        proc.stop()
    log = proc.output()
    assert "Traceback" not in log and "specllama serve: stopped, models freed" in log


# -- the command -----------------------------------------------------------------------------


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specllama", "serve", *args], capture_output=True, text=True,
                          timeout=60)


def test_serve_help_lists_the_flags():
    out = _serve("--help")
    assert out.returncode == 0
    for flag in ("--host", "--port", "--api-key", "--alias", "--max-queue", "--chat-format", "--cors-origin",
                 "--draft-max", "--draft-fixed", "-ngl", "--temp", "SPECLLAMA_API_KEY"):
        assert flag in out.stdout


def test_startup_errors_are_one_line(tiny_pair, tmp_path):
    missing = _serve("-m", str(tmp_path / "none.gguf"))
    assert (missing.returncode, missing.stderr.splitlines()[-1]) == (
        1, f"Error: model file not found: '{tmp_path / 'none.gguf'}' (expected a path to a .gguf file)")
    bad_flag = _serve("--repeat-last-n", "-5")
    assert (bad_flag.returncode, bad_flag.stderr.strip()) == (
        2, "Error: Invalid value for '--repeat-last-n': -5 is not in the range x>=-1.")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = _serve("-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "256", *THREADS, "--port", str(port))
    assert taken.returncode == 1 and "address already in use" in taken.stderr
    assert taken.stderr.splitlines()[-1] == f"Error: could not serve on 127.0.0.1:{port} (see the error above)"


# -- the demo pair ---------------------------------------------------------------------------


@pytest.mark.slow  # a real pair (the demo-chat's, the demo's)
def test_demo_pair_chat(tmp_path):
    """With no model flags, serve runs the chat demo pair (SmolLM2-135M-Instruct), which can chat.
    (--draft-fixed: every pass drafts. With one thread the adaptive policy's choice for this pair
    turns on the machine's costs: on an AMD EPYC VM it drafted once in the first call and then
    decoded target-only, which the last check would read as a failure.)"""
    proc = ServerProcess(["-c", "1024", *THREADS, "--draft-fixed"], tmp_path)
    try:
        client = openai.OpenAI(base_url=f"{proc.url}/v1", api_key="none", max_retries=0, timeout=120)
        france = client.chat.completions.create(model="x", temperature=0, max_tokens=16, messages=[
            {"role": "user", "content": "What is the capital of France?"}])
        assert france.choices[0].message.content == "The capital of France is Paris."
        messages = [{"role": "user", "content": "Name three colours."}]
        kwargs = dict(model="x", messages=messages, max_tokens=16, temperature=0)
        full = client.chat.completions.create(**kwargs)
        text = full.choices[0].message.content
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kwargs,
                                                                                                   stream=True))
        assert streamed == text and full.usage.completion_tokens == 16
        assert full.model == "smollm2-135m-instruct-f32.gguf"
        follow = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": "One more."}]
        second = client.chat.completions.create(**dict(kwargs, messages=follow))
        assert second.model_extra["timings"]["prompt_n"] <= second.usage.prompt_tokens - full.usage.prompt_tokens
        assert second.model_extra["speculative"]["n_drafted"] > 0
    finally:
        assert proc.stop() == 0
