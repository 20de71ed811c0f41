"""``SpeculativeLlama``: llama-cpp-python's completion API, sped up.

An application that calls ``Llama(...).create_completion`` or
``create_chat_completion`` changes two lines: the import and the
constructor. The responses have llama-cpp-python's shapes (``llama_types``),
plus one extra key, ``"speculative"``, with the drafting statistics.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .backend import DEFAULT_N_CTX, LlamaModel, is_llama
from .drafters import PROMPT_LOOKUP
from .engine import SpeculativeEngine, Step
from .generate import DEFAULT_DRAFT_MAX, tokenize_prompt
from .processors import chain, penalties
from .sampling import SamplingParams
from .text import TextAssembler

StoppingCriteria = Callable[[np.ndarray, np.ndarray], bool]


def _open_model(source, role: str, *, n_ctx: int, n_gpu_layers: int, n_threads: int | None, verbose: bool):
    if is_llama(source):
        return LlamaModel.from_llama(source)
    if isinstance(source, (str, os.PathLike)):
        return LlamaModel(source, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads, verbose=verbose)
    accepted = "a GGUF path or a llama_cpp.Llama" + (" or 'prompt-lookup'" if role == "draft" else "")
    raise ValueError(f"{role} must be {accepted}, got {source!r}")


def _bias_processor(logit_bias: dict[int, float] | None):
    """llama-cpp-python's ``logit_bias`` as a processor (None: no bias)."""
    if not logit_bias:
        return None
    ids = np.fromiter(logit_bias.keys(), dtype=np.int64)
    values = np.fromiter(logit_bias.values(), dtype=np.float32)

    def bias(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        scores[ids] += values
        return scores

    return bias


def _as_list(processors) -> list:
    if processors is None:
        return []
    return list(processors) if isinstance(processors, (list, tuple)) else [processors]


def _check_max_tokens(max_tokens: int | None) -> None:
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens must be None (until the model stops) or an integer >= 1, got {max_tokens!r}")


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError(f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got {messages!r}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be a dict with a 'role' string, got {m!r}")


class SpeculativeLlama:
    """A target model and a draft, behind llama-cpp-python's API.

    Args:
        target: a GGUF path, or an existing ``llama_cpp.Llama``.
        draft: a GGUF path, a ``llama_cpp.Llama``, or ``"prompt-lookup"``
            (drafts copied from n-gram matches in the prompt and output).
        n_gpu_layers: target layers on the GPU (paths only).
        n_gpu_layers_draft: draft layers on the GPU (default: as the target).
        n_ctx: context size for models opened from paths.
        draft_max: the most tokens drafted per target pass.
        seed: seeds the sampler (None: fresh randomness); a call's ``seed``
            reseeds it.
        verbose: let llama.cpp print its load log.
        n_threads: CPU threads (default: all cores).
        adaptive: choose each pass's draft length from measured costs.

    One instance runs one generation at a time; a second call from another
    thread waits for the first to finish.
    """

    def __init__(
        self,
        target,
        draft,
        *,
        n_gpu_layers: int = 0,
        n_gpu_layers_draft: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        draft_max: int = DEFAULT_DRAFT_MAX,
        seed: int | None = None,
        verbose: bool = False,
        n_threads: int | None = None,
        adaptive: bool = True,
    ) -> None:
        if not (isinstance(draft, str) and draft == PROMPT_LOOKUP) and not is_llama(draft) \
                and not isinstance(draft, (str, os.PathLike)):
            raise ValueError(f"draft must be a GGUF path, a llama_cpp.Llama or {PROMPT_LOOKUP!r}, got {draft!r}")
        self._target = _open_model(target, "target", n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                                   verbose=verbose)
        if draft == PROMPT_LOOKUP:
            draft_model = PROMPT_LOOKUP
        else:
            ngld = n_gpu_layers if n_gpu_layers_draft is None else n_gpu_layers_draft
            draft_model = _open_model(draft, "draft", n_ctx=self._target.n_ctx, n_gpu_layers=ngld,
                                      n_threads=n_threads, verbose=verbose)
        self.engine = SpeculativeEngine(self._target, draft_model)
        self.model_path = self._target.path
        self.draft_max = draft_max
        self.adaptive = adaptive
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._formatter = None

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> "SpeculativeLlama":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tokens -----------------------------------------------------------

    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = True) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="ignore")
        return self._target.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self._target.token_bytes(t) for t in tokens)

    def generate(
        self,
        tokens: Sequence[int],
        *,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        logits_processor=None,
        stopping_criteria: StoppingCriteria | None = None,
        seed: int | None = None,
    ) -> Iterator[int]:
        """Yield the token ids that follow ``tokens``, as ``Llama.generate``
        does; an end-of-generation token is yielded last."""
        params = SamplingParams(temp, top_k, top_p, min_p)
        processor = self._processor(logits_processor, repeat_penalty, presence_penalty, frequency_penalty)
        with self._lock:
            rng = self._rng if seed is None else np.random.default_rng(seed)
            seq = list(tokens)
            for step in self._steps(seq, params, None, rng, processor):
                for j, tok in enumerate(self._with_eog(step)):
                    seq.append(tok)
                    yield tok
                    if stopping_criteria is not None and step.target_logits is not None and j < len(
                            step.target_logits) and stopping_criteria(np.asarray(seq, np.intc), step.target_logits[j]):
                        return

    # -- completions ------------------------------------------------------

    def create_completion(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        logits_processor=None,
        stopping_criteria: StoppingCriteria | None = None,
        echo: bool = False,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: dict[int, float] | None = None,
        model: str | None = None,
        **unsupported: Any,
    ):
        """llama-cpp-python's ``create_completion``: a ``text_completion``
        dict, or with ``stream=True`` an iterator of its chunks."""
        params, processor = self._prepare(unsupported, max_tokens, temperature, top_k, top_p, min_p, logits_processor,
                                          repeat_penalty, presence_penalty, frequency_penalty, logit_bias)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        usage: dict = {}
        run = self._completion_run(prompt, params, max_tokens, stops, seed, processor, stopping_criteria, echo, model,
                                   usage)
        if stream:
            return run
        text, final = "", None
        for chunk in run:
            text += chunk["choices"][0]["text"]
            final = chunk
        response = {k: final[k] for k in ("id", "object", "created", "model")}
        response["choices"] = [{"text": text, "index": 0, "logprobs": None,
                                "finish_reason": final["choices"][0]["finish_reason"]}]
        response["usage"] = usage
        response["speculative"] = final["speculative"]
        return response

    def create_chat_completion(
        self,
        messages: list[dict],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        logits_processor=None,
        stopping_criteria: StoppingCriteria | None = None,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: dict[int, float] | None = None,
        model: str | None = None,
        **unsupported: Any,
    ):
        """llama-cpp-python's ``create_chat_completion``: a ``chat.completion``
        dict, or with ``stream=True`` an iterator of ``chat.completion.chunk``."""
        _check_messages(messages)
        formatter = self._chat_formatter()
        rendered = formatter(list(messages))
        tokens = self._target.tokenize(rendered.text, add_bos=not rendered.has_bos)
        stops = ([stop] if isinstance(stop, str) else list(stop or [])) + rendered.stop
        params, processor = self._prepare(unsupported, max_tokens, temperature, top_k, top_p, min_p, logits_processor,
                                          repeat_penalty, presence_penalty, frequency_penalty, logit_bias)
        usage: dict = {}
        completion = self._completion_run(tokens, params, max_tokens, stops, seed, processor, stopping_criteria,
                                          False, model, usage)
        chunks = _chat_chunks(completion)
        if stream:
            return chunks
        content, final = "", None
        for chunk in chunks:
            content += chunk["choices"][0]["delta"].get("content", "")
            final = chunk
        return {
            "id": final["id"],
            "object": "chat.completion",
            "created": final["created"],
            "model": final["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": None,
                         "finish_reason": final["choices"][0]["finish_reason"]}],
            "usage": usage,
            "speculative": final["speculative"],
        }

    # -- internals --------------------------------------------------------

    def _prepare(self, unsupported, max_tokens, temperature, top_k, top_p, min_p, logits_processor, repeat_penalty,
                 presence_penalty, frequency_penalty, logit_bias):
        """Check a call's options; return its sampling params and processor."""
        self._refuse(unsupported)
        _check_max_tokens(max_tokens)
        params = SamplingParams(temperature, top_k, top_p, min_p)
        return params, self._processor(logits_processor, repeat_penalty, presence_penalty, frequency_penalty,
                                       logit_bias)

    @staticmethod
    def _refuse(unsupported: dict) -> None:
        neutral = {"suffix": None, "logprobs": None, "typical_p": 1.0, "tfs_z": 1.0, "mirostat_mode": 0,
                   "grammar": None, "response_format": None, "functions": None, "tools": None,
                   "function_call": None, "tool_choice": None, "top_logprobs": None}
        for name, value in unsupported.items():
            if name not in neutral:
                raise TypeError(f"unexpected keyword argument {name!r}")
            if value != neutral[name]:
                raise ValueError(f"{name}={value!r} is not supported by speculative decoding here "
                                 f"(leave it at {neutral[name]!r})")

    def _processor(self, logits_processor, repeat_penalty, presence_penalty, frequency_penalty, logit_bias=None):
        return chain(_as_list(logits_processor) + [_bias_processor(logit_bias), penalties(
            repeat_penalty=repeat_penalty, presence_penalty=presence_penalty, frequency_penalty=frequency_penalty)])

    def _chat_formatter(self):
        if self._formatter is None:
            from .chat import make_formatter

            self._formatter, _ = make_formatter(self._target, None)
        return self._formatter

    def _steps(self, seq, params, max_tokens, rng, processor) -> Iterator[Step]:
        return self.engine.steps(seq, params=params, draft_max=self.draft_max if self.engine.drafter else 0,
                                 max_tokens=max_tokens, rng=rng, adaptive=self.adaptive, processor=processor)

    def _with_eog(self, step: Step) -> list[int]:
        """The step's tokens; for a "stop" finish the EOG token is not among
        them, and Llama.generate yields it, so add the model's EOS."""
        return step.tokens + ([self._target.eos] if step.finish_reason == "stop" else [])

    def _completion_run(self, prompt, params, max_tokens, stops, seed, processor, stopping_criteria, echo,
                        model, usage: dict) -> Iterator[dict]:
        """The one generation loop behind both completion calls: yields
        text_completion chunks (the last with the "speculative" statistics)
        and fills ``usage`` when done."""
        prompt_tokens = tokenize_prompt(self.engine, prompt)  # checked before the lock: errors come at once
        cmpl_id = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        name = model or self.model_path

        def chunk(text: str, finish: str | None) -> dict:
            return {"id": cmpl_id, "object": "text_completion", "created": created, "model": name,
                    "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}

        def run() -> Iterator[dict]:
            with self._lock:
                rng = self._rng if seed is None else np.random.default_rng(seed)
                text = TextAssembler(stops, errors="ignore")
                seq = list(prompt_tokens)
                n_drafted = n_accepted = n_passes = 0
                finish = None
                if echo:  # the prompt as given (a token prompt, as its text)
                    yield chunk(prompt if isinstance(prompt, str) else
                                self.detokenize(prompt_tokens).decode("utf-8", errors="ignore"), None)
                for step in self._steps(seq, params, max_tokens, rng, processor):
                    n_drafted += step.n_drafted
                    n_accepted += step.n_accepted
                    n_passes += 1
                    delta = ""
                    for j, tok in enumerate(step.tokens):
                        seq.append(tok)
                        delta += text.push(self._target.token_bytes(tok))
                        if text.stopped:
                            finish = "stop"
                            break
                        if stopping_criteria is not None and stopping_criteria(
                                np.asarray(seq, dtype=np.intc), step.target_logits[j]):
                            finish = "stop"
                            break
                    finish = finish or step.finish_reason
                    if finish is not None:
                        delta += text.flush()
                    if delta:
                        yield chunk(delta, None)
                    if finish is not None:
                        break
                last = chunk("", finish or "length")
                n_completion = len(seq) - len(prompt_tokens)
                usage.update(prompt_tokens=len(prompt_tokens), completion_tokens=n_completion, total_tokens=len(seq))
                last["speculative"] = {
                    "n_drafted": n_drafted,
                    "n_accepted": n_accepted,
                    "acceptance_rate": n_accepted / n_drafted if n_drafted else 0.0,
                    "tokens_per_pass": n_completion / n_passes if n_passes else 0.0,
                }
                yield last

        return run()


def _chat_chunks(completion: Iterator[dict]) -> Iterator[dict]:
    """text_completion chunks as chat.completion.chunk ones (a role delta
    first, then content deltas, then an empty delta with the finish reason)."""
    first = True
    for c in completion:
        base = {"id": "chat" + c["id"], "model": c["model"], "created": c["created"],
                "object": "chat.completion.chunk"}
        if first:
            first = False
            yield dict(base, choices=[{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                       "finish_reason": None}])
        finish = c["choices"][0]["finish_reason"]
        delta = {"content": c["choices"][0]["text"]} if c["choices"][0]["text"] else {}
        out = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])
        if "speculative" in c:
            out["speculative"] = c["speculative"]
        if delta or finish is not None:
            yield out
