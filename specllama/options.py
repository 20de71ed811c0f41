"""The one place where generation options are checked.

Every surface (the CLI, ``SpeculativeLlama``, the HTTP server) turns its
input into one frozen :class:`GenerationOptions` record, the options of
:func:`specllama.generation.stream_generate`, through
:func:`generation_options`. Surfaces differ only in a *convention*: what a
value means where their users come from.

* ``"llama-cpp-python"``: ``max_tokens`` None or <= 0 generates until the
  context is full, as ``Llama.create_completion`` does; a seed of -1 is a
  fresh one.
* ``"openai"``: ``max_tokens`` >= 1 (None: until the context is full),
  temperature in [0, 2], presence/frequency penalties in [-2, 2].
* ``"cli"``: llama.cpp's flag rules (click checks the ranges; the values
  reach here already typed).

A bad value raises :class:`~specllama.errors.SpecLlamaError` (a ValueError)
naming the option, the value and what is accepted; its ``param`` is the
option's name (nested: ``stop[1]``, ``logit_bias['5']``) and its ``code``
says why (``invalid_value``, ``unsupported_parameter``). The options that
no surface supports yet are refused here too (:data:`REFUSED`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .constraint import GrammarSpec, spec_from_options
from .errors import SpecLlamaError
from .policy import DEFAULT_DRAFT_MAX
from .processors import DEFAULT_PENALTY_LAST_N, Processor, as_list, ban, chain, penalties
from .processors import logit_bias as bias_processor
from .sampling import DEFAULT_RULE, RULES, SamplingParams

CONVENTIONS = ("llama-cpp-python", "openai", "cli")
DEFAULT_MAX_TOKENS = 128  # generate's -n, and stream_generate's max_tokens

# Options llama-cpp-python or llama-server take that would change the output and
# that speculative decoding here cannot honour (yet): refused unless left at
# the value given here, which leaves the output as it is. Every surface reads
# this one table (the API's keyword arguments, the server's request fields).
REFUSED: dict[str, Any] = {
    "typical_p": 1.0, "tfs_z": 1.0, "mirostat_mode": 0, "dry_multiplier": 0.0, "xtc_probability": 0.0,
    "dynatemp_range": 0.0, "top_n_sigma": -1.0,
}
#: options accepted and ignored: no effect on the output (with mirostat off) or on anything
IGNORED = frozenset({"mirostat_tau", "mirostat_eta", "user"})


def refuse_unsupported(options: Mapping[str, object]) -> None:
    """Refuse options from :data:`REFUSED` that are not at their neutral value
    (``SpecLlamaError``, code ``unsupported_parameter``) and names no surface
    knows (``TypeError``, as Python does for an unexpected keyword)."""
    for name, value in options.items():
        if name in IGNORED:
            continue
        if name not in REFUSED:
            raise TypeError(f"unexpected keyword argument {name!r}")
        if value != REFUSED[name]:
            raise SpecLlamaError(f"{name}={value!r} is not supported by speculative decoding here "
                                 f"(leave it at {REFUSED[name]!r})", param=name, code="unsupported_parameter")


@dataclass(frozen=True)
class GenerationOptions:
    """One call's generation options, checked (see :func:`generation_options`);
    changed with :func:`dataclasses.replace`.

    Attributes:
        params: the sampling transforms (``params.seed`` seeds a call's generator).
        max_tokens: the most tokens to generate (None: until the context is full).
        stop: strings that end generation; they are not part of the output.
        processor: a pure ``(input_ids, scores) -> scores`` applied to every
            target and draft row (see :mod:`specllama.processors`).
        stopping_criteria: ``(input_ids, logits) -> bool`` after each token.
        draft_max: draft tokens per target pass (0: target only); the cap when ``adaptive``.
        draft_min: the least the adaptive policy may draft.
        adaptive: choose each pass's draft length from measured costs, or always ``draft_max``.
        rule: the acceptance rule, "block" or "token".
        logprobs: report each token's log-probability with this many alternatives (None: none).
        grammar: a constraint on the output (:mod:`specllama.constraint`; None: free text).
        forced_drafts: under a grammar, draft the tokens it forces without the draft model.
    """

    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    stop: tuple[str, ...] = ()
    processor: Processor | None = None
    stopping_criteria: Callable | None = None
    draft_max: int = DEFAULT_DRAFT_MAX
    draft_min: int = 0
    adaptive: bool = True
    rule: str = DEFAULT_RULE
    logprobs: int | None = None
    grammar: GrammarSpec | None = None
    forced_drafts: bool = True

    def __post_init__(self) -> None:
        # what every convention agrees on is checked (and normalised) on every construction, replace() included
        draft_max, draft_min = check_draft(self.draft_max, self.draft_min)
        for name, value in (("draft_max", draft_max), ("draft_min", draft_min), ("stop", check_stop(self.stop)),
                            ("max_tokens", check_max_tokens(self.max_tokens)), ("rule", check_rule(self.rule)),
                            ("logprobs", check_logprobs(self.logprobs)), ("adaptive", bool(self.adaptive))):
            object.__setattr__(self, name, value)


def _is_int(v: object) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise SpecLlamaError(f"convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}",
                             param="convention")


def check_max_tokens(value: object, convention: str = "cli") -> int | None:
    """``max_tokens`` as the engine takes it: None (until the context is
    full) or a count >= 1."""
    if value is None:
        return None
    if not _is_int(value):
        raise SpecLlamaError(f"max_tokens must be an integer or None, got {value!r}", param="max_tokens")
    value = int(value)  # type: ignore[arg-type]
    if value < 1:
        if convention == "llama-cpp-python":
            return None  # llama-cpp-python: <= 0 means until the context is full
        raise SpecLlamaError(f"max_tokens must be an integer >= 1 (or None: until the context is full), got {value}",
                             param="max_tokens")
    return value


def check_stop(value: object) -> tuple[str, ...]:
    """``stop``: None, a string, or a list of strings (empty ones ignored)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, (list, tuple)):
        for i, s in enumerate(value):
            if not isinstance(s, str):
                raise SpecLlamaError(f"stop[{i}] must be a string, got {s!r} "
                                     "(stop takes a string or a list of strings)", param=f"stop[{i}]")
        return tuple(s for s in value if s)
    raise SpecLlamaError(f"stop must be a string or a list of strings, got {value!r}", param="stop")


def check_draft(draft_max: object, draft_min: object = 0) -> tuple[int, int]:
    """``draft_max`` (the most tokens drafted per target pass, 0: none) and
    ``draft_min`` (the least the adaptive policy may draft)."""
    for name, v in (("draft_max", draft_max), ("draft_min", draft_min)):
        if not _is_int(v) or int(v) < 0:  # type: ignore[arg-type]
            raise SpecLlamaError(f"{name} must be an integer >= 0, got {v!r}", param=name)
    if int(draft_min) > int(draft_max) and int(draft_max) > 0:  # type: ignore[arg-type]
        raise SpecLlamaError(f"draft_min ({draft_min}) must not exceed draft_max ({draft_max})", param="draft_min")
    return int(draft_max), int(draft_min)  # type: ignore[arg-type]


MAX_RPC_SERVERS = 16  # llama.cpp's GGML_RPC_MAX_SERVERS
MAX_DEVICES = 16  # llama.cpp's LLAMA_MAX_DEVICES: the length of a tensor split


def check_rpc_servers(value: object, name: str = "rpc_servers") -> tuple[str, ...]:
    """llama.cpp's RPC servers: None, ``"HOST:PORT[,HOST:PORT...]"`` (the
    ``--rpc`` flag's form) or a list of such strings; returns the endpoints,
    each ``host:port``, in order. ``name``: the option as the caller knows it."""
    if value is None:
        return ()
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        parts = [p for v in value for p in v.split(",")]
    else:
        raise SpecLlamaError(f"{name} must be a string HOST:PORT[,HOST:PORT...] or a list of them, got {value!r}",
                             param=name)
    endpoints: list[str] = []
    for part in parts:
        host, sep, port = part.strip().partition(":")
        # llama.cpp splits an endpoint at its first ':' and resolves IPv4 names only
        ok = bool(sep) and bool(host) and not any(c.isspace() for c in host) and port.isdigit()
        if not ok or not 1 <= int(port) <= 65535:
            raise SpecLlamaError(f"{name}: {part.strip()!r} is not HOST:PORT (an IPv4 address or host name, a port "
                                 f"in 1..65535, e.g. 127.0.0.1:50052; several: comma-separated)", param=name)
        endpoint = f"{host}:{int(port)}"
        if endpoint in endpoints:
            raise SpecLlamaError(f"{name}: {endpoint} is named twice", param=name)
        endpoints.append(endpoint)
    if len(endpoints) > MAX_RPC_SERVERS:
        raise SpecLlamaError(f"{name}: {len(endpoints)} servers; llama.cpp takes at most {MAX_RPC_SERVERS}", param=name)
    return tuple(endpoints)


def check_switch(value: object, name: str) -> bool:
    """A load switch of the API (``flash_attn``, ``draft_lookup``): True or False."""
    if not isinstance(value, bool):
        raise SpecLlamaError(f"{name} must be True or False, got {value!r}", param=name)
    return value


def check_tensor_split(value: object, name: str = "tensor_split") -> tuple[float, ...] | None:
    """llama.cpp's tensor split: None, ``"N0,N1,..."`` (``,`` or ``/``
    between them, the ``--tensor-split`` flag's form) or a list of numbers:
    the share of the target's layers for each of its devices, in order
    (RPC servers first, then local GPUs; all 0: by free memory, llama.cpp's
    default). Returns the shares, or None."""
    if value is None:
        return None
    if isinstance(value, str):
        items: list[object] = []
        for part in value.replace("/", ",").split(","):
            try:
                items.append(float(part))
            except ValueError:
                items.append(part)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise SpecLlamaError(f"{name} must be a list of numbers or a string like '3,1', got {value!r}", param=name)
    def ok(v: object) -> bool:
        return _is_number(v) and math.isfinite(float(v)) and float(v) >= 0  # type: ignore[arg-type]

    bad = next((v for v in items if not ok(v)), None)
    if bad is not None or not items:
        shown = bad if bad is not None else value
        raise SpecLlamaError(f"{name}: {shown!r} is not a share >= 0 (e.g. '3,1': three quarters of the layers on "
                             "the first device)", param=name)
    shares = tuple(float(v) for v in items)  # type: ignore[arg-type]
    if len(shares) > MAX_DEVICES:
        raise SpecLlamaError(f"{name}: {len(shares)} shares; llama.cpp takes at most {MAX_DEVICES} devices", param=name)
    return shares


MAX_LOGPROBS = 20  # OpenAI's top_logprobs limit


def check_logprobs(value: object, name: str = "logprobs") -> int | None:
    """How many alternatives to report with each token's log-probability
    (None: no log-probabilities); ``name``: the option as the caller knows it."""
    if value is None:
        return None
    if not _is_int(value) or not 0 <= int(value) <= MAX_LOGPROBS:  # type: ignore[arg-type]
        raise SpecLlamaError(f"{name} must be an integer in 0..{MAX_LOGPROBS} (or None), got {value!r}", param=name)
    return int(value)  # type: ignore[arg-type]


def check_rule(rule: object) -> str:
    if rule not in RULES:
        raise SpecLlamaError(f"rule must be one of {', '.join(RULES)} (the acceptance rule), got {rule!r}",
                             param="rule")
    return rule  # type: ignore[return-value]


def check_logit_bias(value: object, n_vocab: int | None) -> dict[int, float]:
    """``logit_bias``: token id (an int, or its decimal string as JSON
    carries it) -> a finite number."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecLlamaError(f"logit_bias must be a mapping of token id -> bias, got {value!r}", param="logit_bias")
    out: dict[int, float] = {}
    for key, bias in value.items():
        token = key
        if isinstance(key, str) and key.strip().lstrip("-").isdigit():
            token = int(key)
        in_vocab = n_vocab is None or _is_int(token) and 0 <= int(token) < n_vocab  # type: ignore[arg-type]
        if not _is_int(token) or int(token) < 0 or not in_vocab:  # type: ignore[arg-type]
            limit = "" if n_vocab is None else f" in 0..{n_vocab - 1}"
            raise SpecLlamaError(f"logit_bias key {key!r} is not a token id{limit}", param="logit_bias")
        if not _is_number(bias) or not math.isfinite(float(bias)):  # type: ignore[arg-type]
            raise SpecLlamaError(f"logit_bias[{key!r}] must be a finite number, got {bias!r}",
                                 param=f"logit_bias[{key!r}]")
        out[int(token)] = out.get(int(token), 0.0) + float(bias)  # type: ignore[arg-type]
    return out


def check_seed(value: object, convention: str = "cli") -> int | None:
    """None or -1: fresh randomness; else an integer >= 0."""
    if value is None:
        return None
    if not _is_int(value) or int(value) < -1:  # type: ignore[arg-type]
        raise SpecLlamaError(f"seed must be an integer >= 0 (or -1 / None: a fresh one), got {value!r}", param="seed")
    return None if int(value) == -1 else int(value)  # type: ignore[arg-type]


def _check_number(name: str, value: object, lo: float | None, hi: float | None, *, lo_open: bool = False) -> float:
    ok = _is_number(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (lo is None or (v > lo if lo_open else v >= lo)) and (hi is None or v <= hi)
    if not ok:
        lo_s = "" if lo is None else f"{'>' if lo_open else '>='} {lo:g}"
        hi_s = "" if hi is None else f"<= {hi:g}"
        rng = " and ".join(s for s in (lo_s, hi_s) if s)
        raise SpecLlamaError(f"{name} must be a finite number{' ' + rng if rng else ''}, got {value!r}", param=name)
    return float(value)  # type: ignore[arg-type]


def sampling_params(*, temperature: object, top_k: object, top_p: object, min_p: object, seed: object = None,
                    convention: str = "cli") -> SamplingParams:
    """The sampling transforms, checked under ``convention``."""
    check_convention(convention)
    _check_number("temperature", temperature, 0.0, 2.0 if convention == "openai" else None)
    if not _is_int(top_k) or int(top_k) < 0:  # type: ignore[arg-type]
        raise SpecLlamaError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}", param="top_k")
    _check_number("top_p", top_p, 0.0, 1.0)
    _check_number("min_p", min_p, 0.0, 1.0)
    # every value is checked above: SamplingParams's own checks cannot fail on them
    return SamplingParams(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),  # type: ignore[arg-type]
                          min_p=float(min_p), seed=check_seed(seed, convention))


def processor_for(
    *,
    n_vocab: int | None,
    logits_processor: object = None,
    logit_bias: object = None,
    repeat_penalty: object = 1.0,
    repeat_last_n: object = DEFAULT_PENALTY_LAST_N,
    presence_penalty: object = 0.0,
    frequency_penalty: object = 0.0,
    n_ctx: int | None = None,
    convention: str = "cli",
    banned: Sequence[int] = (),
):
    """The one processor for a call: the user's processors, then
    ``logit_bias``, then the penalties (llama-cpp-python's order), then the
    ``banned`` tokens (``--ignore-eos``), checked."""
    _check_number("repeat_penalty", repeat_penalty, 0.0, None, lo_open=True)
    bound = 2.0 if convention == "openai" else None
    presence = _check_number("presence_penalty", presence_penalty, -bound if bound else None, bound)
    frequency = _check_number("frequency_penalty", frequency_penalty, -bound if bound else None, bound)
    if not _is_int(repeat_last_n) or int(repeat_last_n) < -1:  # type: ignore[arg-type]
        raise SpecLlamaError(f"repeat_last_n must be an integer >= -1 (0: off, -1: the whole context), got "
                             f"{repeat_last_n!r}", param="repeat_last_n")
    last_n = int(repeat_last_n)  # type: ignore[arg-type]
    if last_n == -1:
        last_n = n_ctx if n_ctx is not None else 1 << 30
    user = as_list(logits_processor)
    return chain(user + [bias_processor(check_logit_bias(logit_bias, n_vocab)),
                         penalties(repeat_penalty=float(repeat_penalty), presence_penalty=presence,  # type: ignore[arg-type]
                                   frequency_penalty=frequency, last_n=last_n), ban(banned)])


def check_stopping_criteria(value: object) -> Callable | None:
    """llama-cpp-python's ``stopping_criteria``: None, a callable
    ``(input_ids, logits) -> bool``, or a list of them (any one stops)."""
    if value is None:
        return None
    items = [value] if callable(value) and not isinstance(value, (list, tuple)) else list(value)  # type: ignore[call-overload]
    for i, c in enumerate(items):
        if not callable(c):
            raise SpecLlamaError(f"stopping_criteria[{i}] must be a callable (input_ids, logits) -> bool, got {c!r}",
                                 param=f"stopping_criteria[{i}]")
    if len(items) == 1:
        return items[0]
    return lambda ids, logits: any(c(ids, logits) for c in items)


def generation_options(
    *,
    convention: str,
    n_vocab: int | None,
    n_ctx: int | None = None,
    temperature: object,
    top_k: object,
    top_p: object,
    min_p: object,
    seed: object = None,
    max_tokens: object = None,
    stop: object = None,
    repeat_penalty: object = 1.0,
    repeat_last_n: object = DEFAULT_PENALTY_LAST_N,
    presence_penalty: object = 0.0,
    frequency_penalty: object = 0.0,
    logit_bias: object = None,
    logits_processor: object = None,
    stopping_criteria: object = None,
    draft_max: object,
    draft_min: object = 0,
    adaptive: bool = True,
    rule: object = DEFAULT_RULE,
    logprobs: object = None,
    banned: Sequence[int] = (),
    ignore_eos: bool = False,
    forced_drafts: bool = True,
    grammar: object = None,
    json_schema: object = None,
    response_format: object = None,
    regex: object = None,
) -> GenerationOptions:
    """Check a call's options under ``convention``; return them as one record.

    ``n_vocab`` None checks everything that needs no model (the check every
    command makes before loading one: logit_bias's token ids are checked
    against the vocabulary once it is known). ``banned``: tokens never
    sampled (``ignore_eos``: the end-of-generation ones, refused with a
    grammar, which ends at one)."""
    check_convention(convention)
    d_max, d_min = check_draft(draft_max, draft_min)
    spec = spec_from_options(grammar=grammar, json_schema=json_schema, response_format=response_format, regex=regex)
    if spec is not None and (ignore_eos or banned):
        raise SpecLlamaError(f"ignore_eos cannot be combined with {spec.param}: under a grammar, generation ends "
                             "where the grammar ends, at an end-of-generation token", param="ignore_eos")
    return GenerationOptions(
        grammar=spec,
        forced_drafts=bool(forced_drafts),
        params=sampling_params(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                               convention=convention),
        max_tokens=check_max_tokens(max_tokens, convention),
        stop=check_stop(stop),
        processor=processor_for(n_vocab=n_vocab, logits_processor=logits_processor, logit_bias=logit_bias,
                                repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                                presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                                n_ctx=n_ctx, convention=convention, banned=banned),
        stopping_criteria=check_stopping_criteria(stopping_criteria),
        draft_max=d_max,
        draft_min=d_min,
        adaptive=bool(adaptive),
        rule=check_rule(rule),
        logprobs=check_logprobs(logprobs),
    )


#: llama-server's sampler names (``samplers``) and what each stands for here
SAMPLERS = ("top_k", "top_p", "min_p", "temperature", "infill", "penalties", "dry", "typ_p", "xtc", "top_n_sigma")
#: a listed name that is left out switches its filter off: these values
_OFF = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "temperature": 1.0}


def apply_samplers(call: dict, samplers: object) -> tuple[dict, bool]:
    """llama-server's ``samplers`` list: the filters it leaves out are off
    (temperature then 1, as in llama-server), and "infill" turns llama.cpp's
    infill sampler on (last, whatever its place in the list; the others run in
    this package's one order). None: ``call`` as it is. Returns the call and
    whether "infill" was asked for."""
    if samplers is None:
        return call, False
    if isinstance(samplers, str) or not isinstance(samplers, (list, tuple)) or not all(
            isinstance(s, str) for s in samplers):
        raise SpecLlamaError(f"samplers must be a list of sampler names ({', '.join(SAMPLERS)}), got {samplers!r:.60}",
                             param="samplers")
    unknown = [s for s in samplers if s not in SAMPLERS]
    if unknown:
        raise SpecLlamaError(f"samplers has unknown name {unknown[0]!r}; known: {', '.join(SAMPLERS)}",
                             param="samplers")
    call = dict(call)
    for name, off in _OFF.items():
        if name not in samplers:
            call[name] = off
    return call, "infill" in samplers


def check_prompt_tokens(tokens: Sequence[object], n_vocab: int) -> list[int]:
    out = []
    for t in tokens:
        if not _is_int(t) or not 0 <= int(t) < n_vocab:  # type: ignore[arg-type]
            raise SpecLlamaError(f"prompt token id {t!r} is out of range 0..{n_vocab - 1}", param="prompt")
        out.append(int(t))  # type: ignore[arg-type]
    return out
