"""``SpeculativeLlama``: llama-cpp-python's completion API, sped up.

An application that calls ``Llama(...).create_completion`` or
``create_chat_completion`` changes two lines: the import and the
constructor. The responses have llama-cpp-python's shapes (``llama_types``),
plus one extra key, ``"speculative"``, with the drafting statistics.

This module only turns arguments into :func:`~specllama.generation.stream_generate`
calls (through :mod:`specllama.options`, under llama-cpp-python's rules)
and its chunks into llama-cpp-python's dicts.
"""

from __future__ import annotations

import codecs
import functools
import os
import threading
import time
import uuid
import warnings
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .backend import DEFAULT_N_CTX
from .chat_template import chat_template_for, normalize_messages
from .constraint import given_constraints
from .engine import SpeculativeEngine
from .errors import SpecLlamaError
from .generation import DEFAULT_DRAFT_MAX, Chunk, prompt_logprobs, stream_generate, tokenize_prompt
from .infill import check_extra, fim_prompt
from .lookup_mix import LookupMix
from .opener import open_engine
from .options import (
    DEFAULT_RULE,
    GenerationOptions,
    apply_samplers,
    check_convention,
    check_draft,
    check_logprobs,
    check_rule,
    check_seed,
    check_switch,
    generation_options,
    refuse_unsupported,
)
from .processors import DEFAULT_PENALTY_LAST_N
from .sampling import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P
from .slots import Slots
from .stats import GenerationStats
from .tools import ReplyReader, ToolCallDelta, check_tools, tags_for, tool_grammar

CONVENTION = "llama-cpp-python"


class _Turns:
    """One generation at a time. A call waits for another thread's stream;
    a thread's own abandoned stream (never finished, never closed) is
    closed by its next call instead of blocking it forever."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._holder: tuple[int, "_Stream"] | None = None

    def start(self, stream: "_Stream", make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        self.acquire(stream)
        return make()

    def acquire(self, stream: "_Stream") -> None:
        me = threading.get_ident()
        with self._cond:
            while self._holder is not None:
                thread, other = self._holder
                if thread == me:
                    if other.running:
                        raise RuntimeError("SpeculativeLlama was called again from inside its own generation "
                                           "(a callback); finish or close the first stream first")
                    other.close()  # abandoned by this very thread: it can never be resumed concurrently
                else:
                    self._cond.wait()
            self._holder = (me, stream)

    def release(self, stream: "_Stream") -> None:
        with self._cond:
            if self._holder is not None and self._holder[1] is stream:
                self._holder = None
                self._cond.notify_all()


class _Stream:
    """An iterator that holds the instance's turn from its first item until
    it is exhausted, closed or garbage-collected; with parallel slots, a job
    of theirs (:class:`~specllama.slots.Job`), started at the first item."""

    def __init__(self, turns: "_Turns | Slots", make: Callable[[], Iterator[Any]], prompt: Sequence[int] = (),
                 closed: Callable[[], bool] = lambda: False) -> None:
        self._turns, self._make, self._prompt, self._closed = turns, make, prompt, closed
        self._inner: Iterator[Any] | None = None
        self._job: Iterator[Any] | None = None  # the inner iterator, kept once closed (its statistics)
        self._done = False
        self.running = False

    def __iter__(self) -> "_Stream":
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if self._closed():  # its SpeculativeLlama was closed (the models are gone: nothing of them is touched)
            self._done, self._inner = True, None
            raise SpecLlamaError("this SpeculativeLlama was closed before its stream was read to the end")
        if self._inner is None:
            self._inner = self._turns.start(self, self._make) if isinstance(self._turns, _Turns) else (
                self._turns.run(self._make, self._prompt))
            self._job = self._inner
        self.running = True
        try:
            return next(self._inner)
        except BaseException:
            self.running = False
            self.close()
            raise
        finally:
            self.running = False

    def close(self) -> None:
        self._done = True
        inner, self._inner = self._inner, None
        try:
            if inner is not None and hasattr(inner, "close"):
                inner.close()  # type: ignore[union-attr]
        finally:
            if isinstance(self._turns, _Turns):
                self._turns.release(self)

    @property
    def stats(self) -> GenerationStats | None:
        """With parallel slots: this generation's statistics record (None before its first pass)."""
        return getattr(self._job, "stats", None)

    def __del__(self) -> None:
        self.close()


def _while_open(method: Callable) -> Callable:
    """A method that needs the models: a clear error once the instance is closed."""

    @functools.wraps(method)
    def checked(self: "SpeculativeLlama", *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise SpecLlamaError(f"this SpeculativeLlama is closed (close() or the end of its with block): "
                                 f"{method.__name__}() needs a new one")
        return method(self, *args, **kwargs)

    return checked


class SpeculativeLlama:
    """A target model and a draft, behind llama-cpp-python's API.

    Args:
        target: a GGUF path, a curated pair name, or an existing
            ``llama_cpp.Llama`` (for a sliding-window model such as Gemma 3,
            made with ``swa_full=True``). None with draft None: the demo pair.
        draft: a GGUF path, a pair name, a ``llama_cpp.Llama``,
            ``"prompt-lookup"`` (n-gram drafts from the prompt and output),
            or None (target only).
        pair: a curated pair name for whichever of target/draft is None.
        n_gpu_layers: target layers on the GPU (files only).
        n_gpu_layers_draft: draft layers on the GPU (default: as the target).
        n_ctx: context size for models opened from files.
        draft_max: the most tokens drafted per target pass.
        draft_min: the least the adaptive policy drafts.
        seed: seeds the sampler (None: fresh randomness); a call's ``seed``
            reseeds it.
        verbose: let llama.cpp print its load log.
        n_threads: CPU threads (default: all cores).
        adaptive: choose each pass's draft length from measured costs.
        rule: "block" (block verification, the default) or "token" (token-wise) acceptance.
        chat_format: a named chat format instead of the model's template.
        convention: how call options are read: "llama-cpp-python" (the
            default, a drop-in) or "openai" (the HTTP server's rules; see
            :mod:`specllama.options`). ``policy=`` is its former, deprecated name.
        last_n_tokens_size: tokens the penalties look back on (llama-cpp-python's
            name; a call's ``repeat_last_n`` overrides it; 0: off, -1: the context).
        rpc_servers: llama.cpp RPC servers for the target, ``"HOST:PORT,..."``
            or a list (llama-cpp-python's former parameter; llama.cpp's
            ``--rpc``); ``n_gpu_layers`` of its layers go to them. Needs a
            llama-cpp-python built with ``CMAKE_ARGS="-DGGML_RPC=on"``.
        rpc_servers_draft: RPC servers for the draft (None: it stays local).
        tensor_split: the target's share of offloaded layers per device, RPC
            servers first (llama.cpp's ``--tensor-split``).
        forced_drafts: under a grammar, draft the tokens it forces without
            the draft model (False: a control for benchmarks).
        cache_reuse: llama-server's ``--cache-reuse``: cached runs of at
            least this many tokens that a new prompt holds further on are
            shifted into place in both caches (0: only the shared prefix).
        draft_lookup: with a draft model, also draft by prompt lookup (the
            tokens that followed the latest earlier occurrence of the text's
            last 1-3 tokens), in the passes where the measured costs and
            acceptance say it gives more than the draft model
            (:mod:`specllama.lookup_mix`); the output's law is unchanged.
        flash_attn: flash attention in models opened from files (llama.cpp's
            ``-fa on``; off by default, as in llama-cpp-python's ``Llama``: on
            the CPU it is about 2% faster, and makes a row's logits depend
            more on the batch it was computed in, so temperature-0 output
            parts sooner from one-row decoding).
        n_parallel: generations that run at once (llama-server's ``-np``):
            several threads may call ``create_completion``/``create_chat_completion``
            together, and their passes are decoded in shared batches
            (:mod:`specllama.slots`), each exact on its own. ``n_ctx`` is then the
            cache that all of them share; models must be opened from files.

    With ``n_parallel=1`` (the default) one instance runs one generation at a
    time: a call from a second thread waits for the first; a stream abandoned
    by a thread is closed by that thread's next call.
    """

    def __init__(
        self,
        target: object = None,
        draft: object = None,
        *,
        pair: str | None = None,
        n_gpu_layers: int = 0,
        n_gpu_layers_draft: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        draft_max: int = DEFAULT_DRAFT_MAX,
        draft_min: int = 0,
        seed: int | None = None,
        verbose: bool = False,
        n_threads: int | None = None,
        adaptive: bool = True,
        rule: str = DEFAULT_RULE,
        chat_format: str | None = None,
        convention: str = CONVENTION,
        last_n_tokens_size: int = DEFAULT_PENALTY_LAST_N,
        rpc_servers: str | Sequence[str] | None = None,
        rpc_servers_draft: str | Sequence[str] | None = None,
        tensor_split: Sequence[float] | None = None,
        policy: str | None = None,
        forced_drafts: bool = True,
        cache_reuse: int = 0,
        draft_lookup: bool = False,
        flash_attn: bool = False,
        n_parallel: int = 1,
        model_path: str | None = None,
    ) -> None:
        if model_path is not None:  # llama-cpp-python's name for the (target) model
            if target is not None:
                raise SpecLlamaError("give the target once: target or model_path (llama-cpp-python's name), not both",
                                     param="model_path")
            target = model_path
        if policy is not None:
            warnings.warn("SpeculativeLlama(policy=...) is deprecated: use convention=...", DeprecationWarning,
                          stacklevel=2)
            convention = policy
        # the options are checked before anything is loaded
        check_convention(convention)
        check_draft(draft_max, draft_min)
        check_rule(rule)
        seed = check_seed(seed, convention)
        if isinstance(cache_reuse, bool) or not isinstance(cache_reuse, int) or cache_reuse < 0:
            raise SpecLlamaError(f"cache_reuse must be an integer >= 0 (0: off), got {cache_reuse!r}",
                                 param="cache_reuse")
        check_switch(draft_lookup, "draft_lookup")
        if isinstance(n_parallel, bool) or not isinstance(n_parallel, int) or n_parallel < 1:
            raise SpecLlamaError(f"n_parallel must be an integer >= 1 (generations at once), got {n_parallel!r}",
                                 param="n_parallel")
        self.convention = convention
        self._closed = False

        def open_pair():
            engine = open_engine(target, draft, pair=pair, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers,
                                 n_gpu_layers_draft=n_gpu_layers_draft, n_threads=n_threads, verbose=verbose,
                                 rpc_servers=rpc_servers, rpc_servers_draft=rpc_servers_draft,
                                 tensor_split=tensor_split, flash_attn=flash_attn, n_seq_max=n_parallel)
            engine.cache_reuse = cache_reuse
            if draft_lookup:
                if engine.draft is None:
                    engine.close()
                    raise SpecLlamaError("draft_lookup mixes prompt-lookup drafts with a draft model's, and no draft "
                                         "model is loaded (prompt lookup alone: draft='prompt-lookup'; on the command "
                                         "line -md prompt-lookup)", param="draft_lookup")
                engine.lookup_mix = LookupMix()
            return engine

        #: with n_parallel > 1, the slots that run generations (and own the models' thread)
        self.slots: Slots | None = Slots(open_pair, n_parallel) if n_parallel > 1 else None
        self.engine = self.slots.engine if self.slots is not None else open_pair()
        self._target = self.engine.target
        self.n_parallel = n_parallel
        self.model_path = self._target.path
        self.draft_max = draft_max
        self.draft_min = draft_min
        self.adaptive = adaptive
        self.rule = rule
        self.forced_drafts = forced_drafts
        self._rng = np.random.default_rng(seed)
        self._turns: _Turns | Slots = self.slots if self.slots is not None else _Turns()
        self.last_stats: GenerationStats | None = None
        self.last_n_tokens_size = last_n_tokens_size
        self._chat_format = chat_format
        self._template = None

    def _is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Free both models (a later call raises :class:`SpecLlamaError`, where llama-cpp-python's crashes)."""
        self._closed = True
        if self.slots is not None:
            self.slots.close()
        else:
            self.engine.close()

    def __enter__(self) -> "SpeculativeLlama":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- llama-cpp-python's accessors ----------------------------------------

    @_while_open
    def n_ctx(self) -> int:
        """The context size in tokens (with n_parallel > 1, the cache the slots share)."""
        return self._target.n_ctx

    @_while_open
    def n_vocab(self) -> int:
        return self._target.n_vocab

    @_while_open
    def token_bos(self) -> int:
        return self._target.bos

    @_while_open
    def token_eos(self) -> int:
        return self._target.eos

    @property
    @_while_open
    def metadata(self) -> dict[str, str]:
        """The target's GGUF metadata, as ``Llama.metadata``."""
        return dict(self._target.metadata)

    def set_seed(self, seed: int) -> None:
        """The seed of later calls that give none (``seed=-1``: a fresh one), as ``Llama.set_seed``."""
        self._rng = np.random.default_rng(check_seed(seed, self.convention))

    # -- tokens -----------------------------------------------------------

    @_while_open
    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = True) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="ignore")
        return self._target.tokenize(text, add_bos=add_bos, special=special)

    @_while_open
    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self._target.token_bytes(t) for t in tokens)

    @_while_open
    def generate(
        self,
        tokens: Sequence[int],
        *,
        top_k: int = DEFAULT_TOP_K,
        top_p: float = DEFAULT_TOP_P,
        min_p: float = DEFAULT_MIN_P,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        logits_processor=None,
        stopping_criteria=None,
        seed: int | None = None,
        draft_max: int | None = None,
    ) -> Iterator[int]:
        """Yield the token ids that follow ``tokens``, as ``Llama.generate``
        does; the end-of-generation token actually sampled is yielded last."""
        options = self._options(dict(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                                     max_tokens=None, repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                                     frequency_penalty=frequency_penalty, logits_processor=logits_processor,
                                     stopping_criteria=stopping_criteria), {}, draft_max)
        prompt = tokenize_prompt(self.engine, tokens)

        def run() -> Iterator[int]:
            for chunk in self._stream(prompt, options):
                yield from chunk.tokens
                if chunk.eog_token is not None:
                    yield chunk.eog_token

        return _Stream(self._turns, run, prompt, self._is_closed)

    # -- completions ------------------------------------------------------

    def __call__(self, prompt: str | Sequence[int], **kwargs: Any):
        return self.create_completion(prompt, **kwargs)

    @_while_open
    def create_completion(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = DEFAULT_TOP_P,
        top_k: int = DEFAULT_TOP_K,
        min_p: float = DEFAULT_MIN_P,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        logits_processor=None,
        stopping_criteria=None,
        echo: bool = False,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_last_n: int | None = None,
        logit_bias: dict[int, float] | None = None,
        model: str | None = None,
        logprobs: int | None = None,
        draft_max: int | None = None,
        timings: bool = False,
        origins: bool = False,
        grammar: Any = None,
        json_schema: Any = None,
        response_format: dict | None = None,
        suffix: str | None = None,
        samplers: Sequence[str] | None = None,
        **unsupported: Any,
    ):
        """llama-cpp-python's ``create_completion``: a ``text_completion``
        dict, or with ``stream=True`` an iterator of its chunks.

        ``max_tokens`` None or <= 0 generates until the context is full, as
        in llama-cpp-python. ``logprobs=N`` reports each token's
        log-probability under the processed target distribution with the N
        likeliest alternatives. Extensions: ``draft_max`` overrides the
        instance's for this call (0: no drafting); ``timings=True`` adds
        llama-server's ``timings`` object (and ``usage``, also when
        streaming) to the last chunk; ``origins=True`` adds to each chunk an
        ``"origins"`` object: its text split by origin (``"pieces"``:
        ``[text, "draft"|"target"]`` pairs), how many tokens it holds
        (``n_tokens``) and its target pass's ``n_drafted``/``n_accepted``
        (extra fields OpenAI clients ignore).

        Structured output: at most one of ``grammar`` (GBNF text or a
        ``llama_cpp.LlamaGrammar``), ``json_schema`` (llama-server's) and
        ``response_format`` (``{"type": "json_object"}`` with an optional
        ``"schema"``, or OpenAI's ``{"type": "json_schema", "json_schema":
        {"schema": ...}}``) constrains the output; the text keeps exactly the
        law of target-only decoding under the same grammar (see
        docs/how-it-works.md). Log-probabilities are then those of the
        masked distribution each token was drawn from.

        Fill in the middle: ``suffix`` (with a text ``prompt`` as the prefix)
        builds the model's FIM prompt (:meth:`fim_prompt`); a model without
        FIM tokens raises ``ValueError``. ``samplers``: llama-server's list of
        sampler names (:func:`specllama.options.apply_samplers`; "infill" is
        llama.cpp's infill sampler, on target and draft rows alike)."""
        call, infill = apply_samplers(dict(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, max_tokens=max_tokens,
            stop=stop, repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, repeat_last_n=repeat_last_n, logit_bias=logit_bias,
            logits_processor=logits_processor, stopping_criteria=stopping_criteria, logprobs=logprobs,
            grammar=grammar, json_schema=json_schema, response_format=response_format), samplers)
        options = self._options(call, unsupported, draft_max)
        if infill:
            options = replace(options, params=replace(options.params, infill=self._target.infill_vocab()))
        given = prompt  # what echo repeats: the prompt as given (with a suffix, not the FIM prompt built from it)
        if suffix is not None:
            if not isinstance(prompt, str) or not isinstance(suffix, str):
                raise SpecLlamaError("suffix (fill in the middle) takes a text prompt and a text suffix, got "
                                     f"{type(prompt).__name__} and {type(suffix).__name__}", param="suffix")
            prompt = self.fim_prompt(prompt, suffix, n_predict=options.max_tokens or 0, param="suffix")
        prompt_tokens = tokenize_prompt(self.engine, prompt)  # errors come at the call, not at the first chunk
        options = _fill_context(options, prompt_tokens, self._target.n_ctx)
        # the prompt as given (a token prompt, as its text)
        prompt_text = given if isinstance(given, str) else self.detokenize(prompt_tokens).decode("utf-8", "ignore")
        chunks = _Stream(self._turns, lambda: map(_public, self._completion_chunks(
            prompt_tokens, options, model, prompt_text if echo else "", usage=not stream, timings=timings,
            offset=len(prompt_text), origins=origins)), prompt_tokens, self._is_closed)
        return chunks if stream else collect_completion(chunks)

    @_while_open
    def create_chat_completion(
        self,
        messages: list[dict],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.2,
        top_p: float = DEFAULT_TOP_P,
        top_k: int = DEFAULT_TOP_K,
        min_p: float = DEFAULT_MIN_P,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        logits_processor=None,
        stopping_criteria=None,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_last_n: int | None = None,
        logit_bias: dict[int, float] | None = None,
        model: str | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        draft_max: int | None = None,
        timings: bool = False,
        origins: bool = False,
        grammar: Any = None,
        json_schema: Any = None,
        response_format: dict | None = None,
        tools: list[dict] | None = None,
        tool_choice: Any = None,
        parallel_tool_calls: bool | None = None,
        functions: list[dict] | None = None,
        function_call: Any = None,
        **unsupported: Any,
    ):
        """llama-cpp-python's ``create_chat_completion``: a ``chat.completion``
        dict, or with ``stream=True`` an iterator of ``chat.completion.chunk``.

        Messages are checked: roles system/developer/user/assistant, content
        a string or a list of text parts; no message is ever dropped.
        ``logprobs=True`` (with ``top_logprobs=N`` alternatives) gives
        OpenAI's ``logprobs.content`` entries. ``draft_max``, ``timings`` and
        ``origins``, and the structured output of ``grammar``, ``json_schema``
        and ``response_format``, as for :meth:`create_completion`.

        Tool calls: OpenAI's ``tools`` (``tool_choice`` "auto", "none",
        "required" or a named function; ``parallel_tool_calls``, default
        true; the older ``functions``/``function_call``). The template renders
        the tools; a grammar (:mod:`specllama.tools`) holds every call to its
        tool's schema, and the reply has ``message.tool_calls`` (streamed as
        ``delta.tool_calls``) with ``finish_reason`` "tool_calls"."""
        if not isinstance(logprobs, bool):
            raise SpecLlamaError(f"logprobs must be true or false for chat completions, got {logprobs!r}",
                                 param="logprobs")
        if top_logprobs is not None and not logprobs:
            raise SpecLlamaError("top_logprobs needs logprobs=True", param="top_logprobs")
        check_logprobs(top_logprobs, "top_logprobs")
        request = check_tools(tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                              functions=functions, function_call=function_call)
        template = self.chat_template()
        if request is not None and request.renders:
            if not template.renders_tools():
                what = "its own chat template" if template.name == "model" else f"chat format {template.name!r}"
                raise SpecLlamaError(f"{os.path.basename(self.model_path)} cannot take tools: {what} does not render "
                                     f"them in the Hermes/Qwen 2.5 <tool_call> format; --chat-format hermes "
                                     f"(chat_format='hermes') names a format that does", param="tools")
            given = list(given_constraints(grammar=grammar, json_schema=json_schema, response_format=response_format))
            if given:
                raise SpecLlamaError(f"tools and {given[0]} were given together: a reply is either tool calls or "
                                     f"follows {given[0]} (unless tool_choice is 'none')", param=given[0])
            grammar = tool_grammar(request, tags_for(self._target.special_token))
        rendered = template.render(normalize_messages(messages),
                                   tools=request.template_tools() if request is not None else None)
        tokens = self._target.tokenize(rendered.text, add_bos=not rendered.has_bos)
        options = self._options(dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                                     max_tokens=max_tokens, stop=stop, repeat_penalty=repeat_penalty,
                                     presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                                     repeat_last_n=repeat_last_n, logit_bias=logit_bias,
                                     logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                                     logprobs=(top_logprobs or 0) if logprobs else None, grammar=grammar,
                                     json_schema=json_schema, response_format=response_format), unsupported,
                                draft_max)
        options = replace(options, stop=options.stop + tuple(rendered.stop))
        prompt_tokens = tokenize_prompt(self.engine, tokens)
        options = _fill_context(options, prompt_tokens, self._target.n_ctx)
        reader = ReplyReader([f.name for f in request.allowed]) if request is not None and request.renders else None
        chunks = _Stream(self._turns, lambda: _chat_chunks(
            self._completion_chunks(prompt_tokens, options, model, "", usage=not stream, timings=timings,
                                    origins=origins),
            # (chat's entries carry the bytes: a piece of a character is "" as token)
            lambda t: (self._target.token_bytes(t).decode("utf-8", "ignore"), self._target.token_bytes(t)), reader),
            prompt_tokens, self._is_closed)
        return chunks if stream else collect_chat(chunks)

    @_while_open
    def fim_prompt(self, prefix: str, suffix: str, *, prompt: str = "", input_extra: object = None,
                   n_predict: int = 0, param: str = "input_suffix") -> list[int]:
        """The fill-in-the-middle prompt's tokens, as llama-server assembles
        them (:mod:`specllama.infill`): ``input_extra`` chunks, the prefix with
        ``prompt`` (the current line) after it, the suffix.

        Raises:
            ValueError: bad ``input_extra``; a model without FIM tokens (code
                ``not_supported``, ``param`` the field that asked for it).
        """
        extra = check_extra(input_extra)
        fim = self._target.fim_tokens()
        if fim is None:
            raise SpecLlamaError(f"Infill is not supported by this model: {os.path.basename(self.model_path)} has no "
                                 "fill-in-the-middle tokens (prefix, suffix and middle)", param=param,
                                 code="not_supported")
        for name, value in (("prefix", prefix), ("suffix", suffix), ("prompt", prompt)):
            if not isinstance(value, str):
                raise SpecLlamaError(f"{name} must be a string, got {type(value).__name__}", param=name)
        t = self._target
        return fim_prompt(lambda text: t.tokenize(text, add_bos=False, special=False), fim, prefix=prefix,
                          suffix=suffix, prompt=prompt, extra=extra, n_batch=t.n_batch, n_ctx=t.n_ctx,
                          n_predict=n_predict)

    @_while_open
    def prefill(self, prompt_tokens: Sequence[int]) -> Iterator[dict]:
        """Load a prompt into the caches without generating (an editor's
        warm-up). A stream (it waits its turn like a generation) of
        ``{"n_prompt", "n_evaluated", "n_cached", "seconds", "done"}``, one per
        piece of the prompt the target evaluates (closing it between pieces
        stops the loading; what was loaded stays cached), the last with
        ``"done": True``."""
        tokens = tokenize_prompt(self.engine, list(prompt_tokens))

        def run() -> Iterator[dict]:
            t0 = time.perf_counter()
            engine = self._engine_here()
            drafting = engine.feeds_draft(self.draft_max, self.adaptive)
            n_evaluated = 0
            for n_evaluated in engine.prefill_pieces(tokens, draft=drafting):
                yield {"n_prompt": len(tokens), "n_evaluated": n_evaluated, "n_cached": len(engine.target.tokens),
                       "seconds": time.perf_counter() - t0, "done": False}
            yield {"n_prompt": len(tokens), "n_evaluated": n_evaluated, "n_cached": len(engine.target.tokens),
                   "seconds": time.perf_counter() - t0, "done": True}

        return _Stream(self._turns, run, tokens, self._is_closed)

    @_while_open
    def chat_template(self):
        """The chat template in use (the model's own, or a named format)."""
        if self._template is None:
            t = self._target
            self._template = chat_template_for(t.metadata, bos_token=t.bos_text, eos_token=t.eos_text,
                                               chat_format=self._chat_format)
        return self._template

    # -- internals --------------------------------------------------------

    def _options(self, call: dict, unsupported: dict, draft_max: int | None) -> GenerationOptions:
        """A call's options, checked under this instance's convention."""
        refuse_unsupported(unsupported)
        call = dict(call)
        if call.get("repeat_last_n") is None:
            call["repeat_last_n"] = self.last_n_tokens_size
        return generation_options(convention=self.convention, n_vocab=self._target.n_vocab,
                                  n_ctx=self._target.n_ctx,
                                  draft_max=self.draft_max if draft_max is None else draft_max,
                                  draft_min=self.draft_min, adaptive=self.adaptive, rule=self.rule,
                                  forced_drafts=self.forced_drafts, **call)

    def take_stats(self) -> GenerationStats | None:
        """The statistics record of the latest generation (None before any
        first target pass), forgotten once taken: for a server's metrics,
        also of a generation its client abandoned."""
        stats, self.last_stats = self.last_stats, None
        return stats

    def _stream(self, prompt_tokens: list[int], options: GenerationOptions) -> Iterator[Chunk]:
        seed = options.params.seed
        rng = self._rng if seed is None else np.random.default_rng(seed)
        inner = stream_generate(self._engine_here(), prompt_tokens, options, rng=rng, invalid_utf8="ignore")
        try:
            for chunk in inner:
                self.last_stats = chunk.stats  # one record, updated in place to the end
                if self.slots is not None:
                    self.slots.record_stats(chunk.stats)
                yield chunk
        finally:
            inner.close()  # a closed stream stops its generation now, not at garbage collection

    def _engine_here(self) -> SpeculativeEngine:
        """The engine a generation runs on: the instance's, or its parallel slot's."""
        return self.slots.engine_here() if self.slots is not None else self.engine

    def _token_text(self, token: int) -> str:
        """A token's text for logprobs; a token that is not whole UTF-8 (part of a character) as OpenAI writes it,
        ``bytes:\\xe6\\x97``."""
        raw = self._target.token_bytes(token)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)

    def _completion_chunks(self, prompt_tokens: list[int], options: GenerationOptions, model: str | None,
                           echo_text: str, *, usage: bool, timings: bool = False, offset: int = 0,
                           origins: bool = False) -> Iterator[dict]:
        """text_completion chunks; the last one carries the ``"speculative"``
        statistics and, if ``usage``, the token counts (llama-cpp-python's
        streams have none). ``offset``: where the first token's text starts
        in llama-cpp-python's ``text_offset`` (after the prompt)."""
        cmpl_id = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        name = model or self.model_path

        def chunk(text: str, finish: str | None, logprobs: dict | None = None) -> dict:
            return {"id": cmpl_id, "object": "text_completion", "created": created, "model": name,
                    "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}]}

        if echo_text:
            yield chunk(echo_text, None, self._prompt_logprobs(prompt_tokens, options.logprobs, echo_text))
        last, entries = None, _LogprobEntries(self._target.token_bytes)
        for last in self._stream(prompt_tokens, options):
            lp = None
            if options.logprobs is not None:
                entries.add(last.tokens, last.logprobs, last.text)
                lp = self._logprobs(entries.release(last.finish_reason is not None, last.stop_word is not None),
                                    offset)
            if last.text or lp or (origins and last.tokens):
                out = chunk(last.text, None, lp)
                if origins:
                    out["origins"] = {"pieces": [list(p) for p in last.pieces], "n_tokens": len(last.tokens),
                                      "n_drafted": last.n_drafted, "n_accepted": last.n_accepted}
                yield out
        assert last is not None and last.finish_reason is not None
        final = chunk("", last.finish_reason)
        stats = last.stats
        if usage or timings:
            final["usage"] = {"prompt_tokens": stats.n_prompt_tokens, "completion_tokens": stats.n_tokens,
                              "total_tokens": stats.n_prompt_tokens + stats.n_tokens}
        final["speculative"] = stats.speculative()
        if timings:  # (llama-server's extras, for its own endpoints)
            final["timings"] = stats.timings()
            final["stopping_word"] = last.stop_word or ""
        yield final

    def _prompt_logprobs(self, prompt_tokens: list[int], n: int | None, text: str) -> dict | None:
        """``echo`` with ``logprobs``: the prompt's entries, as OpenAI's legacy completions and llama-cpp-python
        (``logits_all=True``) give them: a leading BOS left out, the first token's log-probability None. Offsets
        are in the echoed ``text``: a tokenizer's space before the first word, in the tokens' text and not in the
        prompt, shifts none past its start."""
        if n is None:
            return None
        scored = prompt_logprobs(self._engine_here(), prompt_tokens, n)  # (for tokens 1 .. end)
        shown = 1 if prompt_tokens and prompt_tokens[0] == self._target.bos else 0
        entries = _LogprobEntries(self._target.token_bytes)
        entries.add(prompt_tokens[shown:], [(None, None)] + scored[shown:], text)
        extra = len(entries.decoded) - len(text) if entries.decoded.endswith(text) else 0
        return self._logprobs([(tok, lp, top, max(start - extra, 0))
                               for tok, lp, top, start in entries.release(True, False)], 0)

    def _logprobs(self, entries: list[tuple[int, float, list, int]], offset: int) -> dict | None:
        """llama-cpp-python's completion ``logprobs`` object for released entries (:class:`_LogprobEntries`);
        ``text_offset`` counts from ``offset`` (where the completion starts)."""
        if not entries:
            return None
        return {
            "tokens": [self._token_text(tok) for tok, _, _, _ in entries],
            "text_offset": [offset + start for _, _, _, start in entries],
            "token_logprobs": [lp for _, lp, _, _ in entries],
            "top_logprobs": [None if top is None else _first_per_text((self._token_text(t), v) for t, v in top)
                             for _, _, top, _ in entries],
            # for chat's entries (token texts can collide; ids do not); removed from completions
            "_ids": [(tok, lp, top) for tok, lp, top, _ in entries],
        }


def _fill_context(options: GenerationOptions, prompt_tokens: list[int], n_ctx: int) -> GenerationOptions:
    """llama-cpp-python's "until the context is full" (max_tokens None or
    <= 0) is n_ctx minus the prompt, exactly."""
    if options.max_tokens is not None:
        return options
    return replace(options, max_tokens=max(n_ctx - len(prompt_tokens), 1))


class _LogprobEntries:
    """The tokens' logprob entries, each released with the text it writes: an entry waits while its text is held
    back (it may begin a stop string), and one whose text a stop string removed entirely is dropped at the end, so
    the entries are those of the tokens that wrote the returned text (a token the stop string cuts in two keeps its
    entry). Where each token's text starts is counted in characters of the decoded output, as the text is decoded
    (invalid UTF-8 dropped: ``invalid_utf8="ignore"``)."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")("ignore")
        self.decoded = ""  # the tokens' text so far
        self._shown = 0  # characters of text returned so far
        self._waiting: list[tuple[int, float, list, int]] = []

    def add(self, tokens: Sequence[int], logprobs: Sequence[tuple], text: str) -> None:
        """A chunk's tokens with their (logprob, top) pairs, and the text it returned."""
        for tok, (lp, top) in zip(tokens, logprobs):
            self._waiting.append((tok, lp, top, len(self.decoded)))
            self.decoded += self._decoder.decode(self._token_bytes(tok))
        self._shown += len(text)

    def release(self, last: bool, stopped: bool) -> list[tuple[int, float, list, int]]:
        """The entries whose text has started to show; after the ``last`` chunk, all (those a stop string removed
        dropped, where one ``stopped`` the text)."""
        if last and not stopped:
            out, self._waiting = self._waiting, []
            return out
        n = sum(1 for _, _, _, start in self._waiting if start < self._shown)
        out, self._waiting = self._waiting[:n], [] if last else self._waiting[n:]
        return out


def _first_per_text(pairs) -> dict[str, float]:
    """{token text: logprob}, most likely first; two tokens with one text keep the likelier."""
    out: dict[str, float] = {}
    for text, lp in pairs:
        out.setdefault(text, lp)
    return out


def _public(chunk: dict) -> dict:
    """A completion chunk without the ids kept for chat's logprobs."""
    lp = chunk["choices"][0]["logprobs"]
    if lp:
        lp.pop("_ids", None)
    return chunk


def collect_completion(chunks: Iterator[dict]) -> dict:
    """A non-streamed completion response from its chunks (the server's too)."""
    text, final, logprobs = "", None, None
    for final in chunks:
        text += final["choices"][0]["text"]
        lp = final["choices"][0]["logprobs"]
        if lp:
            logprobs = lp if logprobs is None else {k: logprobs[k] + lp[k] for k in lp}
    assert final is not None
    response = {k: final[k] for k in ("id", "object", "created", "model")}
    response["choices"] = [{"text": text, "index": 0, "logprobs": logprobs,
                            "finish_reason": final["choices"][0]["finish_reason"]}]
    response["usage"] = final["usage"]
    for key in ("speculative", "timings"):
        if key in final:
            response[key] = final[key]
    return response



def _chat_logprobs(lp: dict | None, token_text: Callable[[int], tuple[str, bytes]]) -> dict | None:
    """Completion logprobs as OpenAI's chat ``logprobs.content`` entries."""
    if not lp:
        return None

    def entry(token: int, logprob: float) -> dict:
        text, raw = token_text(token)
        return {"token": text, "logprob": logprob, "bytes": list(raw)}

    return {"content": [dict(entry(tok, v), top_logprobs=[entry(a, b) for a, b in top])
                        for tok, v, top in lp["_ids"]]}


def _chat_chunks(completion: Iterator[dict], token_text: Callable[[int], tuple[str, bytes]],
                 reader: ReplyReader | None = None) -> Iterator[dict]:
    """text_completion chunks as chat.completion.chunk ones (a role delta
    first, then content deltas, then an empty delta with the finish reason,
    which carries ``usage`` and ``"speculative"``).

    With a ``reader`` (tool calls) the text goes through it: content deltas,
    and each call, once it is complete, as ``tool_calls`` deltas (the name
    first, then the arguments in the pieces they were generated in); the
    finish reason is "tool_calls" when calls were made. A call that
    max_tokens cuts short is never sent as a call: its text ends the content."""
    first = True
    held: list[ToolCallDelta] = []
    for c in completion:
        base = {"id": "chat" + c["id"], "model": c["model"], "created": c["created"],
                "object": "chat.completion.chunk"}
        if first:
            first = False
            yield dict(base, choices=[{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                       "finish_reason": None}])
        finish = c["choices"][0]["finish_reason"]
        text = c["choices"][0]["text"]
        deltas = [{"content": text}] if text else []
        if reader is not None:
            deltas = []
            for piece in reader.feed(text):
                if isinstance(piece, str):
                    deltas.append({"content": piece})
                else:
                    held.append(piece)
            if finish is not None:
                deltas += [{"content": piece} for piece in reader.finish(cut=finish == "length")]
                if reader.calls and not reader.unfinished and finish == "stop":
                    finish = "tool_calls"
            done = [d for d in held if d.index < len(reader.calls)]
            held = [d for d in held if d.index >= len(reader.calls)]
            deltas += [{"tool_calls": [d.as_delta()]} for d in done]
        logprobs = _chat_logprobs(c["choices"][0]["logprobs"], token_text)
        extra = {key: c[key] for key in ("usage", "speculative", "timings", "origins") if key in c}
        for delta in deltas[:-1]:
            yield dict(base, choices=[{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}])
            logprobs = None
        last = deltas[-1] if deltas else {}
        out = dict(base, choices=[{"index": 0, "delta": last, "logprobs": logprobs, "finish_reason": finish}],
                   **extra)
        if last or logprobs or finish is not None or "origins" in out:
            yield out


def collect_chat(chunks: Iterator[dict]) -> dict:
    """A non-streamed chat response from its chunks (the server's too)."""
    content, final, logprobs = "", None, None
    calls: list[dict] = []
    for final in chunks:
        delta = final["choices"][0]["delta"]
        content += delta.get("content", "")
        for piece in delta.get("tool_calls", ()):
            if "id" in piece:
                calls.append({"id": piece["id"], "type": "function",
                              "function": {"name": piece["function"]["name"], "arguments": ""}})
            calls[piece["index"]]["function"]["arguments"] += piece["function"]["arguments"]
        lp = final["choices"][0]["logprobs"]
        if lp:
            logprobs = {"content": (logprobs["content"] if logprobs else []) + lp["content"]}
    assert final is not None
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["content"] = content if content.strip() else None  # (a space before the calls is none)
        message["tool_calls"] = calls
    response = {
        "id": final["id"],
        "object": "chat.completion",
        "created": final["created"],
        "model": final["model"],
        "choices": [{"index": 0, "message": message, "logprobs": logprobs,
                     "finish_reason": final["choices"][0]["finish_reason"]}],
        "usage": final["usage"],
    }
    for key in ("speculative", "timings"):
        if key in final:
            response[key] = final[key]
    return response
