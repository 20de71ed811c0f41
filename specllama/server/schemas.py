"""Request bodies: pydantic models of the OpenAI (and llama-server) fields,
and their translation into ``SpeculativeLlama`` keyword arguments.

The models check JSON *types* only (strict: ``"0.5"`` is not a number).
Values are checked once, by the API under ``convention="openai"``
(:mod:`specllama.options`, which also refuses what is not supported: its
``REFUSED`` table); this module only renames fields and fills in the
server's defaults for omitted sampling fields. Fields that do not change the output (``user``, ``metadata``,
...) and unknown ones are ignored.
"""

from __future__ import annotations

import json
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..options import REFUSED
from .errors import ApiError
from .settings import RequestDefaults

#: request field -> the API's name for it, where they differ (llama-server's ``mirostat``)
API_NAMES = {"mirostat": "mirostat_mode"}


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Strict):
    include_usage: bool | None = None


class Speculative(_Strict):
    """llama-server's per-request speculation: ``n_max`` draft tokens at most (0: none)."""

    n_max: int | None = None


class _Generation(_Strict):
    """The fields both generation endpoints take."""

    model: str | None = None  # one model is served: the name is not checked
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    n: int | None = None
    speculative: Speculative | None = None
    speculative_n_max: int | None = Field(None, alias="speculative.n_max")
    origins: bool | None = None  # specllama's: each chunk says which tokens the draft proposed
    # refused unless neutral
    typical_p: float | None = None
    tfs_z: float | None = None
    mirostat: int | None = None
    mirostat_mode: int | None = None
    # structured output (specllama.constraint): at most one of them
    grammar: str | None = None
    json_schema: Any = None
    response_format: dict[str, Any] | None = None
    dry_multiplier: float | None = None
    xtc_probability: float | None = None
    dynatemp_range: float | None = None
    top_n_sigma: float | None = None
    repeat_last_n: int | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def _common(self, defaults: RequestDefaults, max_tokens: int | None) -> tuple[dict, dict[str, str]]:
        """API keyword arguments and the renames (API name -> field name) for error messages."""
        for name in ("n", "best_of"):
            value = getattr(self, name, None)
            if value is not None and value != 1:
                raise ApiError(400, f"{name} must be 1 (one choice per request is supported), got {value}",
                               param=name, code="unsupported_value")
        kwargs = defaults.sampling()
        for name in kwargs:
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        kwargs.update(max_tokens=defaults.max_tokens if max_tokens is None else max_tokens, stop=self.stop,
                      seed=self.seed, logit_bias=self.logit_bias, stream=True, timings=True,
                      repeat_last_n=self.repeat_last_n, origins=bool(self.origins), grammar=self.grammar or None,
                      json_schema=self.json_schema, response_format=self.response_format)
        renames: dict[str, str] = {}
        n_max = self.speculative_n_max
        if n_max is None and self.speculative is not None:
            n_max = self.speculative.n_max
        if n_max is not None:
            kwargs["draft_max"] = n_max
            renames["draft_max"] = "speculative.n_max"
        # the options the API refuses unless neutral (options.REFUSED) go to it as given
        for name in type(self).model_fields:
            api_name = API_NAMES.get(name, name)
            value = getattr(self, name)
            if api_name in REFUSED and value is not None and self._given(name, value):
                kwargs[api_name] = value
                if api_name != name:
                    renames[api_name] = name
        return kwargs, renames

    def _given(self, name: str, value: Any) -> bool:
        """Whether a refusable field says more than "nothing" (an empty
        string or list)."""
        return not (isinstance(value, (str, list)) and not value)


class CompletionRequest(_Generation):
    """``POST /v1/completions``."""

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool | None = False
    logprobs: int | None = None
    suffix: str | None = None
    best_of: int | None = None

    def api_kwargs(self, defaults: RequestDefaults) -> tuple[dict, dict[str, str]]:
        """``SpeculativeLlama.create_completion`` keyword arguments, and renames."""
        kwargs, renames = self._common(defaults, self.max_tokens)
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise ApiError(400, f"prompt must be one string or one list of token ids (batches of prompts are "
                                    f"not supported), got {len(prompt)} prompts", param="prompt",
                               code="unsupported_value")
            prompt = prompt[0]
        kwargs.update(prompt=prompt, echo=bool(self.echo), logprobs=self.logprobs, suffix=self.suffix)
        return kwargs, renames


class ChatCompletionRequest(_Generation):
    """``POST /v1/chat/completions``."""

    messages: Any  # checked by the API (specllama.chat_template.normalize_messages)
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: Any = None  # tool calls: checked by the API (specllama.tools.check_tools)
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: Any = None

    def api_kwargs(self, defaults: RequestDefaults) -> tuple[dict, dict[str, str]]:
        """``SpeculativeLlama.create_chat_completion`` keyword arguments, and renames."""
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        kwargs, renames = self._common(defaults, max_tokens)
        if self.max_completion_tokens is not None:
            renames["max_tokens"] = "max_completion_tokens"
        renames["logprobs"] = "top_logprobs"  # the API checks top_logprobs as "logprobs"
        kwargs.update(messages=self.messages, logprobs=bool(self.logprobs), top_logprobs=self.top_logprobs,
                      tools=self.tools, tool_choice=self.tool_choice, parallel_tool_calls=self.parallel_tool_calls,
                      functions=self.functions, function_call=self.function_call)
        return kwargs, renames


class TokenizeRequest(_Strict):
    """``POST /tokenize``, as llama-server: special tokens parsed, no BOS unless asked."""

    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(_Strict):
    """``POST /detokenize``."""

    tokens: list[int]


def parse(model: type[BaseModel], data: object):
    """The request model for a decoded JSON body, or an :class:`ApiError`
    naming the first field of the wrong type."""
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {_json_kind(data)}", code="invalid_type")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise _type_error(model, data, e.errors()[0]) from None


def _type_error(model: type[BaseModel], data: dict, error: dict) -> ApiError:
    loc = error["loc"]
    name = str(loc[0])
    if error["type"] == "missing" and len(loc) == 1:
        return ApiError(400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")
    field = next(f for n, f in model.model_fields.items() if (f.alias or n) == name)
    annotation, value, param = field.annotation, data.get(name), name
    nested = _model_in(annotation)
    if nested is not None and len(loc) > 1 and loc[1] in nested.model_fields and isinstance(value, dict):
        annotation, value = nested.model_fields[loc[1]].annotation, value.get(loc[1])
        param = f"{name}.{loc[1]}"
    return ApiError(400, f"Invalid type for '{param}': expected {describe(annotation)}, got {_short(value)}.",
                    param=param, code="invalid_type")


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for a in (annotation, *get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def describe(annotation: Any) -> str:
    """A JSON type in words: ``str | list[str] | None`` -> "a string or a list of strings"."""
    if get_origin(annotation) in (Union, types.UnionType):
        return " or ".join(describe(a) for a in get_args(annotation) if a is not type(None))
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list:
        return f"a list of {_plural(describe(args[0]))}"
    if origin is dict:
        return f"an object of {_plural(describe(args[1]))}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "an object"
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    return names.get(annotation, "a JSON value")


def _plural(phrase: str) -> str:
    """"a list of strings" -> "lists of strings", "a JSON value" -> "JSON values": the head noun, before any "of"."""
    words = phrase.split(" ")[1:]  # drop the article
    head = words.index("of") - 1 if "of" in words else len(words) - 1
    words[head] += "s"
    return " ".join(words)


def _json_kind(value: object) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _short(value: object, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
