"""Chat messages to prompt text: the GGUF's own Jinja template, or a named format.

Pure Python and jinja2 (no llama_cpp): a GGUF's ``tokenizer.chat_template`` and
the named formats below, themselves Jinja templates, go through one render path,
in the sandbox Hugging Face uses for chat templates, with the globals those
templates expect (``raise_exception``, ``strftime_now``, a ``tojson`` filter).

No format drops text without saying so. After rendering, every message's text
must be in the prompt. If it is not, or the template raises (some refuse the
system role), the system text is merged into the first user message and the
conversation rendered again; if text is still missing, :meth:`ChatTemplate.render`
raises a ``ValueError`` naming the template and the message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

import jinja2
import jinja2.ext
import jinja2.sandbox

from .errors import SpecLlamaError
from .errors import short_repr as _short
from .text import check_prompt_text

# The roles a message may have; "developer" is OpenAI's newer name for "system".
ROLES = ("system", "developer", "user", "assistant", "tool")
ROLE_ALIASES = {"developer": "system"}

GGUF_TEMPLATE_KEY = "tokenizer.chat_template"
GGUF_TEMPLATE_NAME = "model"

FALLBACK_CHAT_FORMAT = "chatml"
# For GGUF files without a template: the named format of their family
# ("llama" is decided by the BOS text, see _format_for_architecture).
FORMAT_BY_ARCHITECTURE = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3n": "gemma",
    "qwen": "chatml",
    "qwen2": "chatml",
    "qwen2moe": "chatml",
    "qwen3": "chatml",
    "qwen3moe": "chatml",
    "phi3": "phi-3",
}
LLAMA3_BOS = "<|begin_of_text|>"

# Reasoning that templates (Qwen3, DeepSeek-R1) drop from earlier assistant turns
# by design: only the text after it has to be in the prompt.
THINK_END = "</think>"


@dataclass(frozen=True)
class Rendered:
    """A rendered conversation.

    Attributes:
        text: the prompt text.
        stop: stop strings for the reply (non-empty strings only).
        has_bos: the text already starts with the BOS token's text, so the caller
            tokenizes it with ``add_bos=False`` (else ``add_bos=True``).
    """

    text: str
    stop: list[str]
    has_bos: bool


@dataclass(frozen=True)
class NamedFormat:
    """A named format: its Jinja template and the stop strings of its replies."""

    template: str
    stop: tuple[str, ...]


# The named formats. None writes the BOS text: the caller adds BOS when it
# tokenizes (has_bos is False), as llama-cpp-python does for its named formats.
# Formats without a system role fold a first system message into the first
# turn, as Gemma's own template does, and refuse one anywhere else (render then
# merges it into the first user message).
_NO_SYSTEM_ROLE = (
    "{% if messages and messages[0]['role'] == 'system' and messages[0]['content'] %}"
    "{% set first_prefix = messages[0]['content'] + '\\n\\n' %}"
    "{% else %}{% set first_prefix = '' %}{% endif %}"
    "{% set loop_messages = messages[1:] if messages and messages[0]['role'] == 'system' else messages %}"
)
_REFUSE_LATER_SYSTEM = (
    "{% if message['role'] == 'system' %}"
    "{{ raise_exception('this format has no system role: only a first system message can be folded "
    "into the first turn') }}{% endif %}"
)

# Hermes / Qwen 2.5 tool calls on ChatML: the tools listed in the system turn,
# calls as <tool_call>{json}</tool_call>, results as <tool_response> in a user turn.
_HERMES = (
    "{% if tools %}"
    "{{ '<|im_start|>system\\n' }}"
    "{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n\\n' }}{% endif %}"
    "{{ 'You may call one or more functions. Their signatures are within <tools></tools>, one JSON object per "
    "line:\\n<tools>\\n' }}"
    "{% for tool in tools %}{{ (tool | tojson) + '\\n' }}{% endfor %}"
    "{{ '</tools>\\nTo call a function, write a JSON object with its name and arguments within "
    "<tool_call></tool_call> tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{% set loop_messages = messages[1:] if messages and messages[0]['role'] == 'system' else messages %}"
    "{% else %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if message['role'] == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{% elif message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{ '<|im_start|>assistant\\n' }}{% if message['content'] %}{{ message['content'] + '\\n' }}{% endif %}"
    "{% for call in message['tool_calls'] %}"
    "{{ '<tool_call>\\n{\\\"name\\\": \\\"' + call['function']['name'] + '\\\", \\\"arguments\\\": ' "
    "+ (call['function']['arguments'] | tojson) + '}\\n</tool_call>' + ('' if loop.last else '\\n') }}"
    "{% endfor %}{{ '<|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

NAMED_FORMATS: dict[str, NamedFormat] = {
    # ChatML with Hermes tool calls (what Qwen 2.5's own template writes)
    "hermes": NamedFormat(_HERMES, ("<|im_end|>",)),
    # OpenHermes / Qwen: <|im_start|>role\ntext<|im_end|>\n
    "chatml": NamedFormat(
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        ("<|im_end|>",),
    ),
    # Gemma 1-3 (their templates, without the leading bos_token): no system role,
    # the system text opens the first user turn.
    "gemma": NamedFormat(
        _NO_SYSTEM_ROLE
        + "{% for message in loop_messages %}"
        + _REFUSE_LATER_SYSTEM
        + "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\\n'"
        " + (first_prefix if loop.first else '') + (message['content'] | trim) + '<end_of_turn>\\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
        ("<end_of_turn>",),
    ),
    # Meta's Llama 2 chat: [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] reply </s><s>[INST] ...
    "llama-2": NamedFormat(
        "{% if messages and messages[0]['role'] == 'system' %}"
        "{% set system_block = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
        "{% set loop_messages = messages[1:] %}"
        "{% else %}{% set system_block = '' %}{% set loop_messages = messages %}{% endif %}"
        "{% for message in loop_messages %}"
        + _REFUSE_LATER_SYSTEM
        + "{% if message['role'] == 'user' %}"
        "{{ ('' if loop.first else '<s>') + '[INST] ' + (system_block if loop.first else '')"
        " + (message['content'] | trim) + ' [/INST]' }}"
        "{% else %}{{ ' ' + (message['content'] | trim) + ' </s>' }}{% endif %}"
        "{% endfor %}",
        ("</s>",),
    ),
    # Meta's Llama 3 instruct (its template, without the leading bos_token).
    "llama-3": NamedFormat(
        "{% for message in messages %}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim)"
        " + '<|eot_id|>' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
        ("<|eot_id|>",),
    ),
    # Mistral / Mixtral instruct: [INST] user [/INST]reply</s>[INST] ...; no system role.
    "mistral-instruct": NamedFormat(
        _NO_SYSTEM_ROLE
        + "{% for message in loop_messages %}"
        + _REFUSE_LATER_SYSTEM
        + "{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + (first_prefix if loop.first else '') + message['content'] + ' [/INST]' }}"
        "{% else %}{{ (first_prefix if loop.first else '') + message['content'] + '</s>' }}{% endif %}"
        "{% endfor %}",
        ("</s>",),
    ),
    # Microsoft Phi-3 / Phi-3.5: <|role|>\ntext<|end|>\n
    "phi-3": NamedFormat(
        "{% for message in messages %}"
        "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
        ("<|end|>",),
    ),
    # HuggingFaceH4 Zephyr (also TinyLlama chat): <|role|>\ntext</s>\n
    "zephyr": NamedFormat(
        "{% for message in messages %}"
        "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '</s>\\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
        ("</s>",),
    ),
}


def chat_format_names() -> list[str]:
    """The named chat formats this module ships, sorted."""
    return sorted(NAMED_FORMATS)


def check_chat_format(name: str | None) -> None:
    """Raise ``ValueError`` unless ``name`` is None or a known format name."""
    if name is not None and name not in NAMED_FORMATS:
        raise SpecLlamaError(f"unknown chat format {name!r}; known: {', '.join(chat_format_names())}",
                             param="chat_format")


# ------------------------------------------------------------------ messages


def _content_text(i: int, content: object) -> str:
    """A message's content as one string (text parts joined with newlines), valid UTF-8."""
    if isinstance(content, str):
        return check_prompt_text(content, f"content of messages[{i}]", f"messages[{i}].content")
    if content is None:
        raise SpecLlamaError(f"messages[{i}] has no 'content' (a string, or a list of text parts, is needed)",
                             param=f"messages[{i}].content")
    if not isinstance(content, (list, tuple)):
        raise SpecLlamaError(f"messages[{i}] has content {_short(content)}: a string, or a list of text parts, is "
                             "needed", param=f"messages[{i}].content")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
        if kind != "text":
            raise SpecLlamaError(
                f"messages[{i}] has a content part of type {kind!r}: only text parts "
                f"({{'type': 'text', 'text': ...}}) are supported", param=f"messages[{i}].content[{j}].type"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise SpecLlamaError(f"messages[{i}] content part {j} is a text part without a string 'text': "
                                 f"{_short(part)}", param=f"messages[{i}].content[{j}].text")
        texts.append(check_prompt_text(text, f"text of messages[{i}].content[{j}]", f"messages[{i}].content[{j}].text"))
    return "\n".join(texts)


def normalize_messages(messages: object) -> list[dict[str, Any]]:
    """Validate OpenAI / llama-cpp-python style messages.

    Args:
        messages: a non-empty list (or tuple) of dicts with a ``role`` (system,
            developer, user, assistant or tool) and a ``content``: a string, or a
            list of text parts ``{"type": "text", "text": ...}``. An assistant
            message may carry ``tool_calls`` (its content may then be null); a
            tool message answers one of them by its ``tool_call_id``.

    Returns:
        new ``{"role", "content"}`` dicts with string content (plus
        ``tool_calls``, with ``arguments`` parsed into objects as templates
        expect them, and ``tool_call_id``); "developer" becomes "system", text
        parts are joined with newlines. The input is not changed.
    """
    shape = "messages must be a non-empty list of {'role': ..., 'content': ...} dicts"
    if not isinstance(messages, (list, tuple)) or not messages:
        raise SpecLlamaError(f"{shape}, got {_short(messages)}", param="messages")
    out: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise SpecLlamaError(f"{shape}, got messages[{i}] = {_short(message)}", param=f"messages[{i}]")
        role = message.get("role")
        if role not in ROLES:
            raise SpecLlamaError(
                f"messages[{i}] has role {_short(role)}; accepted roles: system, developer (as system), "
                f"user, assistant, tool", param=f"messages[{i}]"
            )
        calls = (message.get("tool_calls") or None) if role == "assistant" else None  # [] is no calls
        content = message.get("content")
        if calls is not None:
            normalized = {"role": "assistant", "content": "" if content is None else _content_text(i, content),
                          "tool_calls": _tool_calls(i, calls)}
            call_ids.update(c["id"] for c in normalized["tool_calls"])
            out.append(normalized)
            continue
        normalized = {"role": ROLE_ALIASES.get(role, role), "content": _content_text(i, content)}
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in call_ids:
                known = ", ".join(sorted(call_ids)) or "none"
                raise SpecLlamaError(f"messages[{i}] (role 'tool') has tool_call_id {_short(call_id)}, which answers "
                                     f"no earlier assistant tool call (their ids: {known})",
                                     param=f"messages[{i}].tool_call_id")
            normalized["tool_call_id"] = call_id
        out.append(normalized)
    return out


def _tool_calls(i: int, calls: object) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls``, checked, ``arguments`` parsed."""
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, (list, tuple)) or not calls:
        raise SpecLlamaError(f"{where} must be a non-empty list of calls, got {_short(calls)}", param=where)
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(call, Mapping) or not isinstance(call.get("id"), str) or not isinstance(name, str):
            raise SpecLlamaError(f"{where}[{j}] must be {{'id': ..., 'type': 'function', 'function': {{'name': ..., "
                                 f"'arguments': ...}}}}, got {_short(call)}", param=f"{where}[{j}]")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                raise SpecLlamaError(f"{where}[{j}].function.arguments is not JSON: {_short(arguments)}",
                                     param=f"{where}[{j}].function.arguments") from None
        if not isinstance(arguments, Mapping):
            raise SpecLlamaError(f"{where}[{j}].function.arguments must be a JSON object, got {_short(arguments)}",
                                 param=f"{where}[{j}].function.arguments")
        out.append({"id": call["id"], "type": "function", "function": {"name": name, "arguments": dict(arguments)}})
    return out


def _merge_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation without system messages: their text ("\\n\\n"-joined)
    opens the first user message, or becomes one if there is none."""
    system = [m["content"] for m in messages if m["role"] == "system" and m["content"].strip()]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    prefix = "\n\n".join(system)
    for m in rest:
        if m["role"] == "user":
            m["content"] = f"{prefix}\n\n{m['content']}"
            return rest
    return [{"role": "user", "content": prefix}] + rest


def _missing(messages: list[dict[str, Any]], text: str) -> int | None:
    """The index of the first message whose text is not in ``text``, or None.

    Outer whitespace aside (templates trim), the user and assistant texts must
    appear in order; system texts anywhere (some templates move them).
    """
    cursor = 0
    for i, m in enumerate(messages):
        needle = m["content"]
        if m["role"] == "assistant" and THINK_END in needle:
            needle = needle.rsplit(THINK_END, 1)[1]
        needle = needle.strip()
        for call in m.get("tool_calls", ()):
            if call["function"]["name"] not in text:
                return i
        if not needle:  # "" is in any text
            continue
        if m["role"] == "system":
            if needle not in text:
                return i
            continue
        at = text.find(needle, cursor)
        if at < 0:
            return i
        cursor = at + len(needle)
    return None


# ------------------------------------------------------------------ Jinja


class _TemplateRaised(Exception):
    """``raise_exception(...)`` called by a template."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # as transformers' chat templates: no HTML escaping, non-ASCII kept
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers marks the
    assistant's text with it): renders its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[jinja2.nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _GenerationTag]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


class ChatTemplate:
    """Messages to a :class:`Rendered` prompt, through one Jinja template.

    Made by :func:`chat_template_for`.

    Attributes:
        name: "model" for the GGUF's own template, else the format's name.
        origin: where it came from, in words, for a banner.
        source: the Jinja template text.
    """

    def __init__(self, source: str, *, name: str, origin: str, stop: Sequence[str], bos_token: str,
                 eos_token: str) -> None:
        self.source = source
        self.name = name
        self.origin = origin
        self.stop = [s for s in stop if s]
        self.bos_token = bos_token
        self.eos_token = eos_token
        # how errors name it
        self._what = "the model's chat template" if name == GGUF_TEMPLATE_NAME else f"chat format {name!r}"
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ValueError(
                f"{self._what} does not compile: {_one_line(e)} (line {e.lineno}); "
                f"--chat-format picks a named format"
            ) from None

    def __repr__(self) -> str:
        return f"ChatTemplate(name={self.name!r}, origin={self.origin!r})"

    def _render_text(self, messages: list[dict[str, Any]], add_generation_prompt: bool,
                     tools: list[dict] | None = None) -> str:
        """The template's text; ``ValueError`` with one line if it fails."""
        try:
            return self._template.render(
                messages=messages,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                add_generation_prompt=add_generation_prompt,
                # as transformers passes them when there are none ("is not none" tests)
                tools=tools,
                documents=None,
            )
        except _TemplateRaised as e:
            raise SpecLlamaError(f"{self._what} refused the messages: {_one_line(e)}", param="messages") from None
        except Exception as e:  # a foreign template: any failure is its failure
            raise SpecLlamaError(f"{self._what} failed: {type(e).__name__}: {_one_line(e)}", param="messages") from None

    def render(self, messages: object, *, add_generation_prompt: bool = True,
               tools: list[dict] | None = None) -> Rendered:
        """Render a conversation.

        Args:
            messages: as for :func:`normalize_messages`.
            add_generation_prompt: end with the opening of the assistant's turn.

        Returns:
            the prompt text, the stop strings, and whether the text starts with BOS.

        Raises:
            ValueError: bad messages, or the template fails or leaves out a
                message's text, also with the system text merged into the first
                user message.
        """
        conversation = normalize_messages(messages)
        try:
            text = self._render_text(conversation, add_generation_prompt, tools)
            missing = _missing(conversation, text)
            problem = None
        except ValueError as e:
            text, missing, problem = "", None, e
        if problem is None and missing is None:
            return self._rendered(text)
        if not any(m["role"] == "system" for m in conversation):
            raise problem or self._left_out(conversation, missing, merged=False)
        # Retry without a system role: its text opens the first user message.
        # The check is against the original messages, the system ones included.
        try:
            text = self._render_text(_merge_system(conversation), add_generation_prompt, tools)
        except ValueError as e:
            raise SpecLlamaError(f"{e} (also with the system text merged into the first user message)",
                                 param="messages") from None
        missing = _missing(conversation, text)
        if missing is not None:
            raise self._left_out(conversation, missing, merged=True)
        return self._rendered(text)

    def renders_tools(self) -> bool:
        """Whether this template shows the model the tools it is given and
        teaches the Hermes/Qwen 2.5 call format (a probe function's name and
        the ``<tool_call>`` tag must be in the rendered text): templates of
        other formats (Llama 3.1's JSON, Mistral's) would have the model write
        calls the grammar does not read."""
        probe = [{"type": "function", "function": {"name": "specllama_probe_function", "parameters": {
            "type": "object", "properties": {}}}}]
        try:
            text = self._render_text([{"role": "user", "content": "hi"}], True, probe)
        except ValueError:
            return False
        return "specllama_probe_function" in text and "<tool_call>" in text

    def _rendered(self, text: str) -> Rendered:
        return Rendered(text, list(self.stop), bool(self.bos_token) and text.startswith(self.bos_token))

    def _left_out(self, conversation: list[dict[str, str]], i: int, *, merged: bool) -> ValueError:
        also = " (also with the system text merged into the first user message)" if merged else ""
        return SpecLlamaError(
            f"{self._what} leaves out the text of messages[{i}] (role {conversation[i]['role']!r}){also}; "
            f"--chat-format picks another format", param=f"messages[{i}].content"
        )


def _format_for_architecture(architecture: str, bos_token: str) -> str:
    if architecture == "llama":
        # Llama 3 GGUFs carry their template; one without it, or an older
        # "llama" file (Llama 2, its fine-tunes), is told apart by the BOS text.
        return "llama-3" if bos_token == LLAMA3_BOS else "llama-2"
    return FORMAT_BY_ARCHITECTURE.get(architecture, FALLBACK_CHAT_FORMAT)


def chat_template_for(metadata: Mapping[str, str], *, bos_token: str, eos_token: str,
                      chat_format: str | None = None) -> ChatTemplate:
    """The chat template for a model.

    Args:
        metadata: the GGUF's key/value metadata (``Llama.metadata``): its
            "tokenizer.chat_template" and "general.architecture" are read.
        bos_token, eos_token: the text of the model's BOS and EOS tokens
            ("" if it has none).
        chat_format: a named format (:func:`chat_format_names`), which overrides
            the GGUF's template; None: the GGUF's template, else the named format
            of the model's family.

    Returns:
        the :class:`ChatTemplate`. A GGUF template's stop string is the EOS text;
        a named format has its own.

    Raises:
        ValueError: an unknown format name, or a template that does not compile.
    """
    check_chat_format(chat_format)
    if chat_format is None:
        source = metadata.get(GGUF_TEMPLATE_KEY)
        if source:
            return ChatTemplate(source, name=GGUF_TEMPLATE_NAME, origin="the model's chat template",
                                stop=[eos_token], bos_token=bos_token, eos_token=eos_token)
        name = _format_for_architecture(metadata.get("general.architecture", ""), bos_token)
        origin = f"no chat template in the model; using {name!r} (--chat-format to change)"
    else:
        name, origin = chat_format, f"chat format {chat_format!r}"
    fmt = NAMED_FORMATS[name]
    return ChatTemplate(fmt.template, name=name, origin=origin, stop=fmt.stop, bos_token=bos_token,
                        eos_token=eos_token)
