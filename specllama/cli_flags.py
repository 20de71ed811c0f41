"""The click flags the commands share, and the boundary where library errors
become one-line CLI errors.

Commands import this module; nothing here imports a command, so the command
group (:mod:`specllama.cli`) imports every command at its top. A flag that
several commands declare has one decorator here (``n_predict_option``,
``temp_option``, ``draft_max_option``, ``chat_format_option``).
"""

from __future__ import annotations

import click

from .backend import DEFAULT_N_CTX, DEFAULT_N_GPU_LAYERS
from .cli_errors import boundary  # noqa: F401 (the commands take it from here, with the flags)
from .colors import COLOR_MODES
from .errors import SpecLlamaError
from .options import (
    DEFAULT_DRAFT_MAX,
    DEFAULT_RULE,
    RULES,
    GenerationOptions,
    check_rpc_servers,
    check_tensor_split,
    generation_options,
)
from .processors import DEFAULT_PENALTY_LAST_N
from .sampling import DEFAULT_MIN_P, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P


def _n_predict(ctx: click.Context, param: click.Parameter, value: int) -> int | None:
    if value == 0:
        raise click.BadParameter("0 generates nothing; use -1 (until the context is full) or a count >= 1")
    return None if value < 0 else value


def _apply(f, options):
    for option in reversed(options):
        f = option(f)
    return f


def load_options(f):
    """The flags that choose and load the models."""
    return _apply(f, [
        click.option("-m", "--model", type=str, default=None,
                     help="Target: a GGUF file, a pair name (demo, demo-chat, a curated or saved pair), or a model "
                          "you already have: ollama:NAME:TAG, hf:ORG/REPO/FILE.gguf, lmstudio:PUBLISHER/REPO/FILE.gguf "
                          "(default: the demo pair's)."),
        click.option("-md", "--model-draft", "model_draft", type=str, default=None,
                     help="Draft: a GGUF file or a reference as for -m, prompt-lookup (n-gram drafts from the text "
                          "itself, no second model), or auto (the local model that should pay best)."),
        click.option("--pair", default=None,
                     help="A pair for -m and -md: demo, demo-chat, a curated one (`specllama models`), or one saved "
                          "by `specllama pair --save`."),
        click.option("-c", "--ctx-size", "ctx_size", type=click.IntRange(min=1), default=DEFAULT_N_CTX,
                     show_default=True, help="Context size in tokens, for both models."),
        click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", type=click.IntRange(min=-1),
                     default=DEFAULT_N_GPU_LAYERS, show_default=True,
                     help="Target layers to offload to the GPU (-1: all). Needs a GPU build of llama-cpp-python."),
        click.option("-ngld", "--n-gpu-layers-draft", "n_gpu_layers_draft",
                     type=click.IntRange(min=-1), default=None, help="Draft layers to offload (default: as -ngl)."),
        click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads."),
        click.option("--rpc", "rpc", metavar="HOST:PORT[,...]", default=None, callback=_checked(check_rpc_servers),
                     help="llama.cpp RPC servers (`specllama rpc-server` on each) for the target's -ngl layers. "
                          "Needs llama-cpp-python built with CMAKE_ARGS=\"-DGGML_RPC=on\"."),
        click.option("--rpc-draft", "rpc_draft", metavar="HOST:PORT[,...]", default=None,
                     callback=_checked(check_rpc_servers),
                     help="RPC servers for the draft's -ngld layers (default: the draft stays local)."),
        click.option("-ts", "--tensor-split", "tensor_split", metavar="N0,N1,...", default=None,
                     callback=_checked(check_tensor_split),
                     help="The target's share of offloaded layers per device, RPC servers first, then GPUs "
                          "(e.g. 3,1)."),
        click.option("-fa", "--flash-attn", "flash_attn", type=click.Choice(["on", "off"]), default="off",
                     show_default=True, callback=lambda ctx, param, value: value == "on",
                     help="Flash attention in both models (llama.cpp's -fa). On the CPU about 2% faster, and "
                          "temperature-0 output parts sooner from one-row decoding (docs/flags.md)."),
    ])


def _checked(check):
    """A click callback running one of options.py's checks under the flag's own name."""

    def callback(ctx: click.Context, param: click.Parameter, value):
        try:
            return check(value, param.opts[-1])
        except SpecLlamaError as e:
            raise click.BadParameter(str(e).removeprefix(f"{param.opts[-1]}: ")) from None

    return callback


def load_kwargs(o: dict) -> dict:
    """The RPC and flash-attention flags as open_engine's (and SpeculativeLlama's)
    keyword arguments; they are taken out of ``o``."""
    return {"rpc_servers": o.pop("rpc"), "rpc_servers_draft": o.pop("rpc_draft"),
            "tensor_split": o.pop("tensor_split"), "flash_attn": o.pop("flash_attn")}


def filter_options(f):
    """Sampling filters and the seed."""
    return _apply(f, [
        click.option("--top-k", type=click.IntRange(min=0), default=DEFAULT_TOP_K, show_default=True,
                     help="Top-k filter (0: off)."),
        click.option("--top-p", type=click.FloatRange(0, 1), default=DEFAULT_TOP_P,
                     show_default=True, help="Top-p filter (1: off)."),
        click.option("--min-p", type=click.FloatRange(0, 1), default=DEFAULT_MIN_P, show_default=True,
                     help="Min-p filter (0: off)."),
        click.option("-s", "--seed", type=click.IntRange(min=-1), default=-1, show_default=True,
                     help="Random seed (-1: a fresh one each run)."),
    ])


def penalty_options(f):
    """llama.cpp's repetition penalties."""
    return _apply(f, [
        click.option("--repeat-penalty", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
                     help="Penalise repeats of the last --repeat-last-n tokens (1: off)."),
        click.option("--repeat-last-n", type=click.IntRange(min=-1), default=DEFAULT_PENALTY_LAST_N,
                     show_default=True, help="Tokens the penalties look back on (0: off, -1: the whole context)."),
        click.option("--presence-penalty", type=float, default=0.0, show_default=True,
                     help="Lower a seen token's logit once (0: off)."),
        click.option("--frequency-penalty", type=float, default=0.0, show_default=True,
                     help="Lower a seen token's logit per occurrence (0: off)."),
    ])


def model_options(f):
    """The model and sampling flags generate and chat share."""
    f = filter_options(f)
    f = penalty_options(f)
    f = _apply(f, [
        click.option("--color", "color", type=click.Choice(COLOR_MODES), default="auto", show_default=True,
                     help="Colour the text by origin: tokens drafted and accepted, tokens the target sampled "
                          "(auto: on a terminal)."),
        draft_max_option(),
        click.option("--draft-min", "--spec-draft-n-min", "draft_min", type=click.IntRange(min=0), default=0,
                     show_default=True, help="Least tokens the adaptive length drafts per target pass."),
        click.option("--draft-fixed", is_flag=True,
                     help="Always draft --draft-max tokens (no adaptive length; replays a --seed exactly)."),
        click.option("--ignore-eos", is_flag=True,
                     help="Never end at an end-of-generation token (its logit becomes -inf), as llama.cpp's flag."),
        rule_option,
        temp_option(),
    ])
    return load_options(f)


def n_predict_option(default: int | None, help: str, *, allow_all: bool = True):
    """``-n/--n-predict``: tokens to generate. With ``allow_all``, -1 means
    until the model stops or the context is full (the value becomes None)
    and 0 is refused; without it, a count >= 1 (None: the command's own default)."""
    if not allow_all:
        return click.option("-n", "--n-predict", "n_predict", type=click.IntRange(min=1), default=default, help=help)
    return click.option("-n", "--n-predict", "n_predict", type=click.IntRange(min=-1), default=default,
                        show_default=True, callback=_n_predict, help=help)


def temp_option(help: str = "Temperature (0: greedy).", default: float = DEFAULT_TEMPERATURE):
    """``--temp``: one temperature."""
    return click.option("--temp", "temperature", type=click.FloatRange(min=0), default=default, show_default=True,
                        help=help)


def draft_max_option(default: int = DEFAULT_DRAFT_MAX,
                     help: str = "Most tokens drafted per target pass (0: no draft; at most 511, what one target "
                                 "batch holds beside its first row). The length adapts below it."):
    """``--draft-max`` (llama.cpp's ``--spec-draft-n-max``): one draft length."""
    return click.option("--draft-max", "--spec-draft-n-max", "draft_max", type=click.IntRange(min=0), default=default,
                        show_default=True, help=help)


def chat_format_option(f):
    """``--chat-format``: a named chat format instead of the model's template, checked before any model loads."""
    return click.option("--chat-format", default=None, callback=_checked_format,
                        help="A named chat format (chatml, gemma, llama-3, ...) instead of the model's own "
                             "template.")(f)


def _checked_format(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from .chat_template import check_chat_format

    try:
        check_chat_format(value)
    except ValueError as e:
        raise click.ClickException(str(e)) from None  # the message names the flag and the known formats
    return value


def rule_option(f):
    return click.option("--rule", type=click.Choice(RULES), default=DEFAULT_RULE, show_default=True,
                        help="Acceptance rule: token-wise, or block verification (jointly over the block; exact, "
                             "keeps at least as many tokens on average).")(f)


def grammar_options(f):
    """Structured output: llama.cpp's grammar and JSON-schema flags, and a regular expression."""
    return _apply(f, [
        click.option("--grammar", default=None, metavar="GBNF",
                     help="A GBNF grammar (llama.cpp's) the output must follow."),
        click.option("--grammar-file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Read the GBNF grammar from this file."),
        click.option("-j", "--json-schema", "json_schema", default=None, metavar="SCHEMA",
                     help="A JSON schema the output must follow ('{}': any JSON value)."),
        click.option("--json-schema-file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Read the JSON schema from this file."),
        click.option("--regex", default=None, help="A regular expression the whole output must match."),
    ])


_GRAMMAR_FLAGS = {"grammar": ("--grammar", "grammar"), "grammar_file": ("--grammar-file", "grammar"),
                  "json_schema": ("--json-schema", "json_schema"),
                  "json_schema_file": ("--json-schema-file", "json_schema"), "regex": ("--regex", "regex")}


def _grammar_kwargs(o: dict) -> dict:
    """The one constraint flag given, as generation_options' keyword (files read)."""
    given = {key: o[key] for key in _GRAMMAR_FLAGS if o.get(key) is not None}
    if len(given) > 1:
        raise SpecLlamaError(f"{' and '.join(_GRAMMAR_FLAGS[k][0] for k in given)} were given together: "
                             "give at most one grammar, JSON schema or regex", param=next(iter(given)))
    if not given:
        return {}
    key, value = next(iter(given.items()))
    if key.endswith("_file"):
        try:
            with open(value, encoding="utf-8") as f:
                value = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise SpecLlamaError(f"cannot read {_GRAMMAR_FLAGS[key][0]} {value!r}: {e}", param=key) from None
    return {_GRAMMAR_FLAGS[key][1]: value}


def generation_flags(o: dict, *, convention: str = "cli", n_vocab: int | None = None, n_ctx: int | None = None,
                     max_tokens: int | None = None, stop=(), banned=(), adaptive: bool | None = None,
                     rule: str | None = None) -> GenerationOptions:
    """The sampling, penalty and draft flags in ``o`` as one checked options
    record. Every command calls it once before loading a model (``n_vocab``
    None: what needs no model) and, where it generates, again with the
    model's vocabulary and context."""
    return generation_options(
        convention=convention, n_vocab=n_vocab, n_ctx=n_ctx, temperature=o["temperature"], top_k=o["top_k"],
        top_p=o["top_p"], min_p=o["min_p"], seed=o["seed"], max_tokens=max_tokens, stop=list(stop),
        repeat_penalty=o["repeat_penalty"], repeat_last_n=o["repeat_last_n"], presence_penalty=o["presence_penalty"],
        frequency_penalty=o["frequency_penalty"], draft_max=o["draft_max"], draft_min=o.get("draft_min", 0),
        adaptive=(not o.get("draft_fixed", False)) if adaptive is None else adaptive,
        rule=o.get("rule", DEFAULT_RULE) if rule is None else rule, banned=banned,
        ignore_eos=bool(o.get("ignore_eos")), **_grammar_kwargs(o))

