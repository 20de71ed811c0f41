"""llama-server's own endpoints for code editors: ``POST /infill`` (fill in
the middle: llama.vim, llama.vscode) and ``POST /completion`` (Continue,
Tabby), with llama-server's request fields and response shape.

A request becomes the API's calls: :meth:`SpeculativeLlama.fim_prompt` (the
prompt), :meth:`SpeculativeLlama.create_completion` (the text, speculative and
exact) or, for ``n_predict: 0`` (an editor's warm-up),
:meth:`SpeculativeLlama.prefill`. This module only adds what llama-server
does around a generation (``t_max_predict_ms``, ``n_indent``, ``n_cmpl``,
``response_fields``) and its response fields. Responses are one line of JSON
without spaces (llama.vim reads ``"content":"`` line by line).
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from ..api import SpeculativeLlama
from ..errors import SpecLlamaError
from ..stats import GenerationStats
from .errors import ApiError
from .schemas import _Generation
from .settings import RequestDefaults

INFILL, COMPLETION = "/infill", "/completion"
NOT_SUPPORTED = "not_supported"


class _Native(_Generation):
    """The fields ``/completion`` and ``/infill`` share (llama-server's names)."""

    n_predict: int | None = None
    samplers: Any = None
    n_cmpl: int = 1
    response_fields: list[str] | None = None
    t_max_predict_ms: int | float | None = None
    t_max_prompt_ms: int | float | None = None  # accepted, unused (as in llama-server)
    n_indent: int | None = None
    cache_prompt: bool = True  # the cache is always reused: the output is the same either way
    id_slot: int | None = None  # one slot
    return_tokens: bool = False

    def api_kwargs(self, defaults: RequestDefaults) -> tuple[dict, dict[str, str]]:
        """``create_completion`` keyword arguments (without the prompt), and renames."""
        n_predict = self.n_predict if self.n_predict is not None else self.max_tokens
        max_tokens = None if n_predict is None or n_predict < 0 else n_predict
        kwargs, renames = self._common(defaults, max_tokens)
        if self.max_tokens is None or self.n_predict is not None:
            renames["max_tokens"] = "n_predict"
        kwargs["samplers"] = self.samplers
        if not isinstance(self.n_cmpl, int) or not 1 <= self.n_cmpl <= 16:
            raise ApiError(400, f"n_cmpl must be an integer in 1..16, got {self.n_cmpl!r}", param="n_cmpl",
                           code="invalid_value")
        for name in ("t_max_predict_ms", "n_indent"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ApiError(400, f"{name} must be >= 0 (0: off), got {value!r}", param=name, code="invalid_value")
        return kwargs, renames


class NativeCompletionRequest(_Native):
    """``POST /completion``: a prompt the client templated itself (special tokens parsed)."""

    prompt: str | list[int]


class InfillRequest(_Native):
    """``POST /infill``."""

    input_prefix: str
    input_suffix: str
    input_extra: Any = None
    prompt: str = ""  # the current line before the cursor: after the prefix


def create_native(llm: SpeculativeLlama, req: _Native, *, model: str, **kwargs: Any) -> Iterator[dict]:
    """The request's chunk stream (checked now; run by the worker): partial
    ``{"content", "tokens", "stop": false}`` dicts, then the final response
    (``"stop": true``), once per completion (``n_cmpl``)."""
    max_tokens = kwargs.get("max_tokens")
    try:
        if isinstance(req, InfillRequest):
            tokens = llm.fim_prompt(req.input_prefix, req.input_suffix, prompt=req.prompt,
                                    input_extra=req.input_extra, n_predict=max_tokens or 0)
        elif isinstance(req.prompt, str):
            tokens = llm.tokenize(req.prompt, add_bos=True, special=True)
        else:
            tokens = list(req.prompt)
        if is_warm_up(req):
            return _warm_up(llm, req, kwargs, tokens, model)
        runs = [llm.create_completion(tokens, **kwargs) for _ in range(req.n_cmpl)]
    except SpecLlamaError as e:
        if e.code == NOT_SUPPORTED:
            raise ApiError(501, str(e), type="not_supported_error", param=e.param, code=501) from None
        raise
    return _completions(llm, req, kwargs, tokens, runs, model)


def _settings(llm: SpeculativeLlama, req: _Native, kwargs: dict, model: str) -> dict:
    return {"n_ctx": llm.engine.target.n_ctx, "n_predict": req.n_predict if req.n_predict is not None else -1,
            "model": model, "temperature": kwargs.get("temperature"), "top_k": kwargs.get("top_k"),
            "top_p": kwargs.get("top_p"), "min_p": kwargs.get("min_p"), "seed": kwargs.get("seed"),
            "samplers": req.samplers, "stop": kwargs.get("stop") or [], "n_indent": req.n_indent or 0,
            "t_max_predict_ms": req.t_max_predict_ms or 0,
            "speculative.n_max": llm.engine.draft_cap(kwargs.get("draft_max", llm.draft_max)),
            "stream": bool(req.stream), "cache_prompt": req.cache_prompt}


def _warm_up(llm: SpeculativeLlama, req: _Native, kwargs: dict, tokens: list[int], model: str) -> Iterator[dict]:
    """A warm-up: the prompt loaded in pieces (an empty chunk after each, so a
    newer request can stop it in between), then the final response."""
    stream = llm.prefill(tokens)
    try:
        for done in stream:
            if not done["done"]:
                yield {"index": 0, "content": "", "tokens": [], "stop": False, "id_slot": 0}
                continue
            stats = GenerationStats(n_prompt_tokens=done["n_prompt"], n_prompt_evaluated=done["n_evaluated"],
                                    prompt_seconds=done["seconds"])
            yield _final(llm, req, kwargs, model, tokens, content="", stop_type="limit", n_predicted=0,
                         tokens_cached=done["n_cached"], timings=_timings(stats))
    finally:
        stream.close()


def _completions(llm: SpeculativeLlama, req: _Native, kwargs: dict, tokens: list[int], runs: list,
                 model: str) -> Iterator[dict]:
    try:
        for index, run in enumerate(runs):
            yield from _one(llm, req, kwargs, tokens, run, model, index)
    finally:
        for run in runs:
            run.close()


def _one(llm: SpeculativeLlama, req: _Native, kwargs: dict, tokens: list[int], run, model: str,
         index: int) -> Iterator[dict]:
    """One completion: partial chunks as they come, then the final response.
    ``n_indent``: a new line indented less than that ends the completion (the
    line's text is dropped, as llama-server does); ``t_max_predict_ms``: once
    a new line was written, the first chunk after that long ends it."""
    text = ""
    stop_type, stopping_word, start = "none", "", None
    for chunk in run:
        if start is None:  # the first chunk: the prompt is in, generation starts (llama-server's clock)
            start = time.perf_counter()
        piece = chunk["choices"][0]["text"]
        if piece:
            before = len(text)
            text += piece
            cut = _indent_cut(text, req.n_indent) if req.n_indent else None
            if cut is not None:
                piece, text, stop_type = text[before:cut], text[:cut], "limit"
            if piece:
                yield {"index": index, "content": piece, "tokens": [], "stop": False, "id_slot": 0}
            if cut is not None:
                break
        if chunk["choices"][0]["finish_reason"] is not None:
            stopping_word = chunk.get("stopping_word", "")
            finish = chunk["choices"][0]["finish_reason"]
            stop_type = "limit" if finish != "stop" else "word" if stopping_word else "eos"
            break
        # time up: stop at a chunk that writes a new line (llama-server: at such a token)
        elapsed_ms = 1000 * (time.perf_counter() - start)
        if req.t_max_predict_ms and "\n" in piece and elapsed_ms > req.t_max_predict_ms:
            stop_type = "limit"
            break
    run.close()
    stats = llm.take_stats()
    timings = _timings(stats) if stats is not None else {}
    n_predicted = stats.n_tokens if stats is not None else 0
    llm.last_stats = stats  # the worker's metrics read it after the job
    yield _final(llm, req, kwargs, model, tokens, content="", stop_type=stop_type, n_predicted=n_predicted,
                 tokens_cached=len(tokens) + n_predicted, timings=timings, index=index, has_new_line="\n" in text,
                 stopping_word=stopping_word)


def _timings(stats: GenerationStats) -> dict:
    """llama-server's ``timings`` of /infill and /completion: the statistics'
    own, and the milliseconds per token of the prompt and of the output."""
    t = stats.timings()
    t["prompt_per_token_ms"] = t["prompt_ms"] / t["prompt_n"] if t["prompt_n"] else 0.0
    t["predicted_per_token_ms"] = t["predicted_ms"] / t["predicted_n"] if t["predicted_n"] else 0.0
    return t


def _indent_cut(text: str, n_indent: int) -> int | None:
    """Where a completion ends under ``n_indent``: the start of the text of
    the first line (after the first) indented less, once that line has text."""
    pos = text.find("\n")
    while pos >= 0:
        start = pos + 1
        end = start
        while end < len(text) and text[end] in " \t":
            end += 1
        if end < len(text) and text[end] != "\n" and end - start < n_indent:
            return end
        pos = text.find("\n", start)
    return None


def _final(llm: SpeculativeLlama, req: _Native, kwargs: dict, model: str, tokens: list[int], *, content: str,
           stop_type: str, n_predicted: int, tokens_cached: int, timings: dict, index: int = 0,
           has_new_line: bool = False, stopping_word: str = "") -> dict:
    return {
        "index": index, "content": content, "tokens": [], "id_slot": 0, "stop": True, "model": model,
        "tokens_predicted": n_predicted, "tokens_evaluated": len(tokens),
        "generation_settings": _settings(llm, req, kwargs, model),
        "prompt": llm.detokenize(tokens).decode("utf-8", errors="replace"),
        "has_new_line": has_new_line, "truncated": False, "stop_type": stop_type, "stopping_word": stopping_word,
        "tokens_cached": tokens_cached, "timings": timings,
    }


def is_warm_up(req: _Native) -> bool:
    """``n_predict`` (or ``max_tokens``) 0: only load the prompt."""
    return (req.n_predict if req.n_predict is not None else req.max_tokens) == 0


def warm_up_fields(req: _Native, client: str | None) -> dict:
    """What a job needs so that a newer request from its client supersedes it
    while it is a warm-up (``n_predict`` 0): the client, the flag, and the
    answer it then gets (llama-server's fields, nothing evaluated)."""
    warm_up = is_warm_up(req)
    body = {"content": "", "tokens": [], "id_slot": 0, "stop": True, "stop_type": "superseded",
            "tokens_predicted": 0, "tokens_evaluated": 0, "tokens_cached": 0, "truncated": False,
            "timings": {"prompt_n": 0, "prompt_ms": 0.0, "predicted_n": 0, "predicted_ms": 0.0}}
    return {"client": client, "warm_up": warm_up, "superseded_body": _fields(body, req.response_fields)}


def collect_native(req: _Native):
    """The non-streamed response: each completion's final dict with its text
    as ``content`` (an array when ``n_cmpl`` > 1), cut to ``response_fields``."""

    def collect(chunks: Iterator[dict]) -> dict | list:
        texts: dict[int, str] = {}
        finals: dict[int, dict] = {}
        for chunk in chunks:
            i = chunk["index"]
            if chunk["stop"]:
                finals[i] = dict(chunk, content=texts.get(i, ""))
            else:
                texts[i] = texts.get(i, "") + chunk["content"]
        out = [_fields(finals[i], req.response_fields) for i in sorted(finals)]
        return out[0] if len(out) == 1 else out

    return collect


def _fields(response: dict, paths: list[str] | None) -> dict:
    """llama-server's ``response_fields``: a flat object keyed by path
    (``"timings/prompt_n"``); paths that lead nowhere are left out."""
    if paths is None:
        return response
    out = {}
    for path in paths:
        value: Any = response
        for key in path.split("/"):
            if not key or not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out
