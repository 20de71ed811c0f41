"""OpenAI tool calls: the request's tools checked, the grammar that holds a
reply to them, and the reply read back into ``tool_calls``.

One output format is supported, the one Hermes and Qwen 2.5 templates teach
their models::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(several such blocks, one per line, when parallel calls are allowed). Where
the vocabulary has ``<tool_call>`` and ``</tool_call>`` as single tokens
(Qwen 2.5), the grammar names those tokens; elsewhere it spells them out.

The grammar (:func:`tool_grammar`) is llguidance Lark:

- ``tool_choice="auto"``: free text, then optionally calls. The text may not
  contain the opening tag, so a call cannot hide in the content, and once
  the tag is emitted the rest of the reply must be calls whose arguments
  follow their tool's schema (llama-server's "lazy grammar", as one grammar:
  the trigger state is the grammar's state, computed along each draft path
  and rolled back with it).
- ``"required"`` or a named function: calls only (that function only).
- ``"none"``: no grammar, and the template is not shown the tools.

The law is that of target-only decoding under the same grammar
(:mod:`specllama.constraint`).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from .constraint import JSON_LAYOUT, GrammarSpec
from .errors import SpecLlamaError
from .errors import short_repr as _short

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
CHOICES = ("none", "auto", "required")


@dataclass(frozen=True)
class Function:
    """One tool: a function with a JSON-schema ``parameters`` object."""

    name: str
    description: str | None
    parameters: Mapping[str, Any]

    def as_tool(self) -> dict:
        """OpenAI's ``{"type": "function", "function": {...}}`` (what templates render)."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = dict(self.parameters)
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolRequest:
    """A request's tools, checked: ``choice`` is "none", "auto", "required"
    or "function" (then ``name`` is the one function allowed)."""

    functions: tuple[Function, ...]
    choice: str
    name: str | None = None
    parallel: bool = True

    @property
    def renders(self) -> bool:
        """Whether the template is shown the tools ("none": it is not)."""
        return self.choice != "none"

    def template_tools(self) -> list[dict] | None:
        return [f.as_tool() for f in self.functions] if self.renders else None

    @property
    def allowed(self) -> tuple[Function, ...]:
        return tuple(f for f in self.functions if self.name is None or f.name == self.name)


def check_tools(*, tools: object = None, tool_choice: object = None, parallel_tool_calls: object = None,
                functions: object = None, function_call: object = None) -> ToolRequest | None:
    """The request's tools checked (None: no tools). The legacy ``functions``
    and ``function_call`` map onto ``tools`` and ``tool_choice``.

    Raises:
        SpecLlamaError: naming the bad field (``tools[1].function.name``, ``tool_choice``, ...).
    """
    if functions is not None:
        if tools is not None:
            raise SpecLlamaError("tools and functions were given together: functions is the older name of tools",
                                 param="functions")
        tools = functions
    if function_call is not None:
        if tool_choice is not None:
            raise SpecLlamaError("tool_choice and function_call were given together: function_call is the older "
                                 "name of tool_choice", param="function_call")
        tool_choice = ({"type": "function", "function": function_call} if isinstance(function_call, Mapping)
                       else function_call)
    field = "functions" if functions is not None else "tools"
    if tools is None:
        if tool_choice not in (None, "none", "auto"):
            raise SpecLlamaError(f"tool_choice {_short(tool_choice)} needs tools", param="tool_choice")
        return None
    if not isinstance(tools, (list, tuple)) or not tools:
        raise SpecLlamaError(f"{field} must be a non-empty list of function definitions "
                             f"({{'type': 'function', 'function': {{'name': ..., 'parameters': ...}}}}), got "
                             f"{_short(tools)}", param=field)
    checked = tuple(_function(i, t, field) for i, t in enumerate(tools))
    seen: set[str] = set()
    for i, f in enumerate(checked):
        if f.name in seen:
            raise SpecLlamaError(f"{field} has two functions named {f.name!r}", param=_param(field, i, "name"))
        seen.add(f.name)
    if parallel_tool_calls is None:
        parallel_tool_calls = True  # OpenAI's default
    if not isinstance(parallel_tool_calls, bool):
        raise SpecLlamaError(f"parallel_tool_calls must be true or false, got {_short(parallel_tool_calls)}",
                             param="parallel_tool_calls")
    choice, name = _choice(tool_choice, seen, "function_call" if function_call is not None else "tool_choice")
    return ToolRequest(checked, choice, name, parallel_tool_calls)


def _param(field: str, i: int, key: str) -> str:
    return f"{field}[{i}].{key}" if field == "functions" else f"{field}[{i}].function.{key}"


def _function(i: int, tool: object, field: str) -> Function:
    if field == "tools":
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(
                tool.get("function"), Mapping):
            raise SpecLlamaError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                                 f"'parameters': ...}}}}, got {_short(tool)}", param=f"tools[{i}]")
        tool = tool["function"]
    elif not isinstance(tool, Mapping):
        raise SpecLlamaError(f"functions[{i}] must be an object with a 'name', got {_short(tool)}",
                             param=f"functions[{i}]")
    name = tool.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecLlamaError(f"{_param(field, i, 'name')} must be 1-64 letters, digits, '_' or '-', got "
                             f"{_short(name)}", param=_param(field, i, "name"))
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise SpecLlamaError(f"{_param(field, i, 'description')} must be a string, got {_short(description)}",
                             param=_param(field, i, "description"))
    parameters = tool.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
        raise SpecLlamaError(f"{_param(field, i, 'parameters')} must be a JSON schema of an object "
                             f"({{'type': 'object', 'properties': ...}}), got {_short(parameters)}",
                             param=_param(field, i, "parameters"))
    # compiled alone, so a schema llguidance refuses is named by its own field
    GrammarSpec("json_schema", json.dumps(parameters), _param(field, i, "parameters"))
    return Function(name, description, parameters)


def _choice(value: object, names: set[str], param: str) -> tuple[str, str | None]:
    if value is None:
        return "auto", None
    if isinstance(value, str):
        if value not in CHOICES:
            raise SpecLlamaError(f"{param} must be one of {', '.join(CHOICES)} or {{'type': 'function', "
                                 f"'function': {{'name': ...}}}}, got {value!r}", param=param)
        return value, None
    inner = value.get("function") if isinstance(value, Mapping) else None
    name = inner.get("name") if isinstance(inner, Mapping) else None
    if not isinstance(value, Mapping) or value.get("type") != "function" or not isinstance(name, str):
        raise SpecLlamaError(f"{param} must be one of {', '.join(CHOICES)} or {{'type': 'function', 'function': "
                             f"{{'name': ...}}}}, got {_short(value)}", param=param)
    if name not in names:
        raise SpecLlamaError(f"{param} names function {name!r}, which is not among the tools "
                             f"({', '.join(sorted(names))})", param=f"{param}.function.name"
                             if param == "tool_choice" else f"{param}.name")
    return "function", name


# ------------------------------------------------------------------ the grammar


@dataclass(frozen=True)
class Tags:
    """How the grammar writes the opening and closing tags: a token of the
    vocabulary (``<[id]>``) where there is one, else the text."""

    open: str
    close: str


def tags_for(single_token: Any) -> Tags:
    """``single_token(text)``: the id of the one token that spells ``text``
    as a special token, or None."""
    def tag(text: str) -> str:
        token = single_token(text)
        return f"<[{token}]>" if token is not None else json.dumps(text)

    return Tags(tag(OPEN), tag(CLOSE))


DEFS = ("$defs", "definitions")


def _call_schema(f: Function, defs: dict) -> dict:
    """``{"name": <const>, "arguments": <parameters>}``. The parameters'
    ``$defs``/``definitions`` move into ``defs`` (the grammar's top-level
    ``$defs``, named ``<function>__<name>``), and their ``$ref`` s with them: a
    reference resolves from the top of the whole schema."""
    local = {}
    for key in DEFS:
        for name in (f.parameters.get(key) or {}):
            local[f"#/{key}/{name}"] = f"#/$defs/{f.name}__{name}"
    parameters = _rewrite_refs({k: v for k, v in f.parameters.items() if k not in DEFS}, local)
    for key in DEFS:
        for name, schema in (f.parameters.get(key) or {}).items():
            defs[f"{f.name}__{name}"] = _rewrite_refs(schema, local)
    return {"type": "object", "properties": {"name": {"const": f.name}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def _rewrite_refs(value: Any, refs: dict[str, str]) -> Any:
    if isinstance(value, Mapping):
        return {k: (refs.get(v, v) if k == "$ref" and isinstance(v, str) else _rewrite_refs(v, refs))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite_refs(v, refs) for v in value]
    return value


def tool_grammar(request: ToolRequest, tags: Tags) -> GrammarSpec | None:
    """The Lark grammar a reply must follow (None for ``"none"``)."""
    if request.choice == "none":
        return None
    allowed, defs = request.allowed, {}
    bodies = [_call_schema(f, defs) for f in allowed]
    schema = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
    if defs:
        schema["$defs"] = defs
    schema["x-guidance"] = dict(JSON_LAYOUT)
    calls = "call (\"\\n\" call)*" if request.parallel else "call"
    if tags.open.startswith("<["):  # a token: text never spells it, the regex below keeps the text out
        text = f"TEXT: /(?s:.*)/ & ~/(?s:.*{re.escape(OPEN)}.*)/"
        auto = "start: TEXT? calls?"
        opening = tags.open
    else:
        # Spelled out, the tag is the end of one lexeme with the text before it:
        # free text (PLAIN) or text that ends at its first tag (LEAD).
        text = (f"PLAIN: /(?s:.*)/ & ~/(?s:.*{re.escape(OPEN)}.*)/\n"
                f"LEAD: /(?s:.*){re.escape(OPEN)}/ & ~/(?s:.*{re.escape(OPEN)}.+)/")
        auto = "start: PLAIN | LEAD first_body (\"\\n\" call)*" if request.parallel else \
            "start: PLAIN | LEAD first_body"
        opening = tags.open
    lines = [
        auto if request.choice == "auto" else "start: calls",
        f"calls: {calls}",
        f"call: {opening} body",
        f"body: \"\\n\" %json {json.dumps(schema)} \"\\n\" {tags.close}",
        text,
    ]
    if not tags.open.startswith("<["):
        lines.append("first_body: body")
    return GrammarSpec("lark", "\n".join(lines), "tools")


# ------------------------------------------------------------------ the reply read back


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCallDelta:
    """A piece of one call for a stream: its name (first) or arguments text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def as_delta(self) -> dict:
        out: dict[str, Any] = {"index": self.index}
        if self.id is not None:
            out["id"] = self.id
            out["type"] = "function"
        function: dict[str, str] = {"arguments": self.arguments}
        if self.name is not None:
            function["name"] = self.name
        out["function"] = function
        return out


class ReplyReader:
    """Reads a reply's text as it comes: content, then tool calls.

    :meth:`feed` takes text and yields content strings and
    :class:`ToolCallDelta` s. Content that could be the start of the opening
    tag is held back until it is not (so ``<tool`` never reaches the
    content). A call's name is yielded once the name is complete, then its
    arguments in pieces as they come. At the end, :meth:`finish` yields what
    is still held back, and :attr:`unfinished` is the text of a call the
    reply stopped in (max_tokens), which then counts as content."""

    _HEAD = re.compile(r'^\s*\{"name": "([A-Za-z0-9_-]{1,64})", "arguments": ')

    def __init__(self) -> None:
        self.content = ""
        self.calls: list[dict] = []  # complete calls, OpenAI's shape
        self.unfinished = ""
        self._pending = ""  # text fed and not yet read
        self._call: str | None = None  # the text of the call being read, from its tag on

    def feed(self, text: str) -> Iterator[str | ToolCallDelta]:
        self._pending += text
        while self._pending:
            if self._call is not None:
                yield from self._read_call()
                if self._call is not None:
                    return
                continue
            at = self._pending.find(OPEN)
            if at >= 0:
                head, self._pending = self._pending[:at], self._pending[at + len(OPEN):]
                yield from self._content(head)
                self._call, self._name, self._arguments, self._tail = OPEN, None, "", ""
                self._depth, self._in_string, self._escaped = 0, False, False
                continue
            keep = _partial_suffix(self._pending, OPEN)
            cut = len(self._pending) - keep
            head, self._pending = self._pending[:cut], self._pending[cut:]
            yield from self._content(head)
            return

    def _content(self, text: str) -> Iterator[str]:
        if self.calls:
            text = text.strip()  # between calls: the newlines the grammar puts there
        if text:
            self.content += text
            yield text

    def _read_call(self) -> Iterator[ToolCallDelta]:
        index = len(self.calls)
        if self._name is None:
            self._call += self._pending
            head, self._pending = self._call[len(OPEN):], ""
            m = self._HEAD.match(head)
            if not m:
                return
            self._name, self._id = m.group(1), new_call_id()
            yield ToolCallDelta(index, self._id, self._name)
            self._call, self._pending = OPEN + head[: m.end()], head[m.end():]
        piece = ""
        while self._pending and not (self._arguments + piece and self._depth == 0):
            c, self._pending = self._pending[0], self._pending[1:]
            piece += c
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
            elif c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
        if piece:
            self._arguments += piece
            self._call += piece
            yield ToolCallDelta(index, arguments=piece)
        if self._arguments and self._depth == 0:
            self._call += self._pending
            self._tail += self._pending
            self._pending = ""
            at = self._tail.find(CLOSE)
            if at < 0:
                return
            self.calls.append({"id": self._id, "type": "function",
                               "function": {"name": self._name, "arguments": self._arguments}})
            self._pending, self._tail = self._tail[at + len(CLOSE):], ""
            self._call = None

    def finish(self) -> Iterator[str]:
        """What is still held back, as content; a call the reply stopped in
        becomes :attr:`unfinished` (and content, for a collected reply)."""
        if self._call is not None:
            self.unfinished, self._call = self._call + self._pending, None
        elif self._pending:
            yield from self._content(self._pending)
        self._pending = ""


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of ``text`` that starts ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
