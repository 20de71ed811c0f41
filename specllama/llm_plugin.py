"""The ``llm`` plugin: speculative pairs as models of Simon Willison's ``llm``.

Models: ``specllama-demo`` (the ``demo-chat`` pair, alias ``specllama``),
``specllama-NAME`` for each curated pair whose two files are in the local
Hugging Face cache, and ``specllama-NAME`` for each pair registered with
``llm specllama add NAME TARGET DRAFT`` (kept in ``specllama.json`` in
llm's user directory).

Glue only: a hook that registers models, an options class, an ``execute``
that turns the conversation into chat messages for
:class:`~specllama.api.SpeculativeLlama` and yields its text. Nothing that
loads llama.cpp is imported until a model runs, so ``llm --help`` stays fast.
"""

from __future__ import annotations

import atexit
import json
import re
from pathlib import Path
from typing import Any, Iterator

import click
import llm
from pydantic import Field

from .demo import DEMO_CHAT
from .drafters import PROMPT_LOOKUP
from .errors import SpecLlamaError
from .generation import DEFAULT_DRAFT_MAX
from .sampling import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P

PREFIX = "specllama-"
DEMO_MODEL_ID = PREFIX + "demo"
DEMO_ALIASES = ("specllama",)
PAIRS_FILE = "specllama.json"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
CHAT_TEMPERATURE = 0.2  # SpeculativeLlama.create_chat_completion's default (llama-cpp-python's)

# options that change what is loaded; the rest are per call
LOAD_OPTIONS = ("n_gpu_layers", "n_threads", "draft_fixed")
CALL_OPTIONS = ("temperature", "top_k", "top_p", "min_p", "max_tokens", "seed", "draft_max")

# One pair stays loaded per process (``llm chat`` keeps it, and its KV
# cache, across turns); asking for another closes it first.
_loaded: dict[tuple, Any] = {}


def _close_loaded() -> None:
    for old in _loaded.values():
        old.close()
    _loaded.clear()


atexit.register(_close_loaded)  # before the interpreter tears llama.cpp's bindings down


class PairError(llm.ModelError, click.ClickException):
    """A user's error from a model: llm's ModelError for Python callers, and a
    ClickException so that ``llm chat`` too shows it as one ``Error:`` line."""


# -- the registered pairs (llm.user_dir() / specllama.json) ---------------

def pairs_path() -> Path:
    return llm.user_dir() / PAIRS_FILE


def read_pairs() -> dict[str, dict]:
    """The user's pairs: {name: {"target", "draft", "aliases"}}."""
    path = pairs_path()
    if not path.exists():
        return {}
    try:
        pairs = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise click.ClickException(f"cannot read {path} ({e}): fix it or delete it") from None
    if not isinstance(pairs, dict):
        raise click.ClickException(f"{path} must hold a JSON object of pairs: fix it or delete it")
    return pairs


def write_pairs(pairs: dict[str, dict]) -> None:
    pairs_path().write_text(json.dumps(pairs, indent=2) + "\n", encoding="utf-8")


def _reserved_names() -> set[str]:
    from .demo import BUILTIN_PAIRS
    from .pairs import curated_pairs

    return set(BUILTIN_PAIRS) | set(curated_pairs())


def _model_file(value: str, role: str) -> str:
    """An absolute path to an existing GGUF file, or a store reference (``ollama:``, ``hf:``,
    ``lmstudio:``) that finds one, kept as given so that it follows the store (a draft may be
    prompt-lookup)."""
    if role == "draft" and value == PROMPT_LOOKUP:
        return value
    from .backend import check_gguf_file
    from .model_refs import is_store_ref, resolve

    try:
        path = check_gguf_file(resolve(value, role) if is_store_ref(value) else value)
        return value if is_store_ref(value) else str(Path(path).resolve())
    except SpecLlamaError as e:
        raise click.ClickException(f"{role}: {e}") from None


# -- models ---------------------------------------------------------------

class SpecLlama(llm.Model):
    """A target and a draft, decoded speculatively (the output follows the
    target's distribution exactly)."""

    can_stream = True
    supports_schema = True  # llm --schema / --schema-multi: the reply follows the JSON schema
    supports_tools = True  # llm -T / --functions: OpenAI-style tool calls (specllama.tools)

    class Options(llm.Options):
        temperature: float | None = Field(
            default=None, ge=0, description=f"Sampling temperature, 0 = greedy (default {CHAT_TEMPERATURE})")
        top_k: int | None = Field(default=None, ge=0, description=f"Top-k filter, 0 = off (default {DEFAULT_TOP_K})")
        top_p: float | None = Field(
            default=None, ge=0, le=1, description=f"Top-p filter, 1 = off (default {DEFAULT_TOP_P})")
        min_p: float | None = Field(
            default=None, ge=0, le=1, description=f"Min-p filter, 0 = off (default {DEFAULT_MIN_P})")
        max_tokens: int | None = Field(
            default=None, ge=1,
            description="Most tokens to generate (default: until the reply ends or the context is full)")
        seed: int | None = Field(default=None, ge=-1, description="Random seed, -1 = fresh (default)")
        draft_max: int | None = Field(
            default=None, ge=0,
            description=f"Most tokens drafted per target pass, 0 = target only (default {DEFAULT_DRAFT_MAX})")
        draft_fixed: bool | None = Field(
            default=None, description="Always draft draft_max tokens instead of adapting the length (default false)")
        n_gpu_layers: int | None = Field(
            default=None, ge=-1, description="Layers of both models on the GPU, -1 = all (default 0)")
        n_threads: int | None = Field(default=None, ge=1, description="CPU threads (default: all cores)")
        tool_choice: str | None = Field(
            default=None, pattern="^(auto|none|required)$",
            description="With tools: auto (default), none, or required: the reply must call a tool (replies to "
                        "tool results are free, so the chain can answer)")

    def __init__(self, model_id: str, *, pair: str | None = None, target: str | None = None,
                 draft: str | None = None) -> None:
        self.model_id = model_id
        self.pair = pair  # a built-in or curated pair name, or None for target + draft paths
        self.target = target
        self.draft = draft

    def execute(self, prompt, stream, response, conversation) -> Iterator[str]:
        options = {k: v for k, v in prompt.options if v is not None}
        call = {k: options[k] for k in CALL_OPTIONS if k in options}
        if prompt.schema:
            call["response_format"] = {"type": "json_schema", "json_schema": {"name": "llm", "schema": prompt.schema}}
        if prompt.tools:
            choice = options.get("tool_choice", "auto")
            if choice == "required" and prompt.tool_results:
                choice = "auto"  # the results are in: the model may answer
            call["tool_choice"] = choice
            call["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description,
                "parameters": t.input_schema or {"type": "object", "properties": {}}}} for t in prompt.tools]
        calls: dict[int, dict] = {}
        try:
            model = self._speculative_llama({k: options[k] for k in LOAD_OPTIONS if k in options})
            result = model.create_chat_completion(_messages(prompt), stream=stream,
                                                  timings=True, **call)
            if stream:
                final: dict = {}
                for final in result:
                    delta = final["choices"][0]["delta"]
                    for piece in delta.get("tool_calls", ()):
                        entry = calls.setdefault(piece["index"], {"id": piece.get("id"), "name": None, "args": ""})
                        entry["name"] = piece["function"].get("name") or entry["name"]
                        entry["args"] += piece["function"]["arguments"]
                    if delta.get("content"):
                        yield delta["content"]
            else:
                final = result
                message = final["choices"][0]["message"]
                for i, c in enumerate(message.get("tool_calls", ())):
                    calls[i] = {"id": c["id"], "name": c["function"]["name"], "args": c["function"]["arguments"]}
                if message["content"]:
                    yield message["content"]
        except SpecLlamaError as e:
            message = str(e)
            if e.code == "context_length_exceeded":  # (the command line's flag, which llm does not have)
                message = message.replace(" (-c/--ctx-size)", " (the plugin's)").replace(" or a larger context", "")
            raise PairError(message) from None
        for _, c in sorted(calls.items()):
            response.add_tool_call(llm.ToolCall(name=c["name"], arguments=json.loads(c["args"]),
                                                tool_call_id=c["id"]))
        _record(response, final)

    def _speculative_llama(self, load: dict):
        """The pair opened with the load options given, on first use; kept
        for the process."""
        key = (self.pair, self.target, self.draft, tuple(sorted(load.items())))
        if key not in _loaded:
            from .api import SpeculativeLlama

            _close_loaded()
            if "draft_fixed" in load:
                load["adaptive"] = not load.pop("draft_fixed")
            _loaded[key] = SpeculativeLlama(self.target, self.draft, pair=self.pair, **load)
        return _loaded[key]


def _messages(prompt) -> list[dict]:
    """``prompt.messages`` (the whole chain, earlier turns, system prompt,
    tool calls and their results included) as OpenAI chat messages."""
    from llm.parts import TextPart, ToolCallPart, ToolResultPart

    out: list[dict] = []
    for m in prompt.messages:
        text = "".join(p.text for p in m.parts if isinstance(p, TextPart))
        calls = [{"id": p.tool_call_id, "type": "function",
                  "function": {"name": p.name, "arguments": json.dumps(p.arguments)}}
                 for p in m.parts if isinstance(p, ToolCallPart)]
        results = [p for p in m.parts if isinstance(p, ToolResultPart)]
        if calls:
            out.append({"role": "assistant", "content": text or None, "tool_calls": calls})
        elif results:
            out += [{"role": "tool", "tool_call_id": p.tool_call_id, "content": p.exception or p.output}
                    for p in results]
        else:
            out.append({"role": m.role, "content": text})
    return out


def _record(response, final: dict) -> None:
    """Drafting statistics and timings into the logged ``response_json``;
    token counts into llm's usage."""
    timings = final.get("timings", {})
    response.response_json = {
        "finish_reason": final["choices"][0]["finish_reason"],
        "speculative": final.get("speculative"),
        "timings": timings,
    }
    usage = final.get("usage")
    if usage:
        response.set_usage(input=usage["prompt_tokens"], output=usage["completion_tokens"])
    elif "predicted_n" in timings:  # streamed: llama-cpp-python's chunks carry no usage
        response.set_usage(output=timings["predicted_n"])


@llm.hookimpl
def register_models(register):
    register(SpecLlama(DEMO_MODEL_ID, pair=DEMO_CHAT), aliases=DEMO_ALIASES)
    for name in sorted(_curated_present()):
        register(SpecLlama(PREFIX + name, pair=name))
    try:
        pairs = read_pairs()
    except click.ClickException as e:
        click.echo(f"specllama: {e.message}; its pairs are not registered", err=True)
        pairs = {}
    for name, info in pairs.items():
        register(SpecLlama(PREFIX + name, target=info["target"], draft=info["draft"]),
                 aliases=info.get("aliases") or None)
    for name in sorted(_saved_present(set(pairs))):
        register(SpecLlama(PREFIX + name, pair=name))


def _saved_present(registered: set[str]) -> list[str]:
    """The pairs saved by ``specllama pair --save`` that no registered pair's name hides."""
    from .saved_pairs import saved_pairs

    try:
        return [name for name in saved_pairs() if name not in registered]
    except SpecLlamaError as e:
        click.echo(f"specllama: {e}; its pairs are not registered", err=True)
        return []


def _curated_present() -> list[str]:
    """The curated pairs (models.txt) whose two files are both cached."""
    from .pairs import cached_path, curated_pairs

    return [name for name, p in curated_pairs().items()
            if cached_path(p.target) is not None and cached_path(p.draft) is not None]


# -- commands -------------------------------------------------------------

@llm.hookimpl
def register_commands(cli):
    @cli.group(name="specllama")
    def specllama_group():
        "Speculative decoding pairs (a target GGUF and a draft) as llm models"

    @specllama_group.command(name="add")
    @click.argument("name")
    @click.argument("target")
    @click.argument("draft")
    @click.option("aliases", "-a", "--alias", multiple=True, help="An alias for the model (repeatable)")
    def add(name, target, draft, aliases):
        """Register TARGET (a GGUF file) with DRAFT (a GGUF file sharing its
        vocabulary, or prompt-lookup) as the model specllama-NAME"""
        if not NAME_RE.match(name):
            raise click.ClickException(f"pair name {name!r} must be letters, digits, '.', '_' or '-' "
                                       "(starting with a letter or digit)")
        if name in _reserved_names():
            raise click.ClickException(f"{name!r} is a built-in or curated pair name: pick another NAME")
        pairs = read_pairs()
        if name in pairs:
            raise click.ClickException(f"pair {name!r} is already registered: remove it first with  "
                                       f"llm specllama remove {name}")
        info = {"target": _model_file(target, "target"), "draft": _model_file(draft, "draft")}
        if aliases:
            info["aliases"] = list(aliases)
        pairs[name] = info
        write_pairs(pairs)
        click.echo(f"Added {PREFIX}{name}: target {info['target']}, draft {info['draft']}")

    @specllama_group.command(name="list")
    def list_():
        "List the registered pairs"
        pairs = read_pairs()
        if not pairs:
            click.echo("No pairs registered: add one with  llm specllama add NAME TARGET DRAFT")
        for name, info in pairs.items():
            aliases = info.get("aliases")
            click.echo(f"{PREFIX}{name}{' (aliases: ' + ', '.join(aliases) + ')' if aliases else ''}: "
                       f"target {info['target']}, draft {info['draft']}")

    @specllama_group.command(name="remove")
    @click.argument("name")
    def remove(name):
        "Remove the registered pair NAME"
        pairs = read_pairs()
        if name.startswith(PREFIX) and name not in pairs:
            name = name[len(PREFIX):]
        if name not in pairs:
            known = ", ".join(sorted(pairs)) or "none"
            raise click.ClickException(f"no registered pair {name!r} (registered: {known})")
        del pairs[name]
        write_pairs(pairs)
        click.echo(f"Removed {PREFIX}{name}")


__all__ = ["PairError", "SpecLlama", "register_commands", "register_models"]
