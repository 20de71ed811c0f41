"""OpenAI tool calls: the request's tools checked, the grammar that holds a
reply to them, and the reply read back into ``tool_calls``.

A call is written the way Hermes and Qwen 2.5 templates teach their models::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(several such blocks, one per line, when parallel calls are allowed). Where
the vocabulary has ``<tool_call>`` and ``</tool_call>`` as single tokens
(Qwen 2.5), the grammar names those tokens; elsewhere it spells them out.
Small models often write a call their own way instead: the same object,
laid out as they like, bare, in a code fence (```` ```json ````), in a wrapper
tag (``<function_call>``, ``<tools>``, ``<response>``, ``<json>``, ...) or in
doubled braces. Under "auto" these are calls too, as llama-server's
Hermes/Qwen handler takes them.

The grammar (:func:`tool_grammar`) is llguidance Lark:

- ``tool_choice="auto"``: free text, then optionally calls. A call opens
  with the tag or with ``{"name": "<one of the tools>"`` (whatever stands
  before it); the text may contain no such opening, so a call cannot hide in
  the content, and from the opening on the rest of the reply must be calls
  whose arguments follow their tool's schema, and the closing tags and fences
  (llama-server's "lazy grammar", as one grammar: the trigger state is the
  grammar's state, computed along each draft path and rolled back with it).
  Text that merely names a tool, or a JSON block that calls none, is text.
- ``"required"`` or a named function: calls only (that function only), in
  the template's own form.
- ``"none"``: no grammar, and the template is not shown the tools.

The law is that of target-only decoding under the same grammar
(:mod:`specllama.constraint`). :class:`ReplyReader` reads every form back.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import regex

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

#: the wrapper tags small models write around a call instead of their template's own (the ones
#: llama-server's Hermes/Qwen handler accepts too); ``<tool_call>`` closes one as well. A call may also
#: sit in doubled braces, ``{{"name": ...}}``, as Qwen2.5-Coder's own template writes its example.
WRAPPERS = ("function_call", "tools", "response", "json", "JSON", "xml")
_WS = r"[ \t\n]"
_CLOSERS = tuple(f"</{w}>" for w in WRAPPERS + ("tool_call",)) + ("```", "}")
#: how a call written in its own way lays out its arguments: any JSON layout a model writes (one line or
#: indented), with whitespace bounded so that it cannot run away
FREE_LAYOUT = {"whitespace_flexible": True, "whitespace_pattern": r"[ \t]{0,4}(?:\n[ \t]{0,20}){0,2}"}


def _opening(names: Sequence[str], group: str = "?:") -> str:
    """A regex of the opening of a call to one of ``names``: ``{"name": "<name>"``, any whitespace
    around the key and the colon (``group``: how the names' group opens). Names are letters,
    digits, '_' and '-': no escaping needed."""
    return rf'\{{{_WS}*"name"{_WS}*:{_WS}*"({group}{"|".join(names)})"'


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
    """The Lark grammar a reply must follow (None for ``"none"``).

    The template's own form, ``<tool_call>`` + ``{"name": ..., "arguments": ...}`` on one line +
    ``</tool_call>``, is the only one ``"required"`` and a named function allow. With ``"auto"``
    a call may also be written the way small models often write it: ``{"name": "<tool>"`` with
    any layout, bare, in a code fence or in a wrapper tag (:data:`WRAPPERS`). The text before a
    call may contain neither the tag nor such an opening (so a call cannot hide in it); from the
    opening on, the rest must be the call (then more calls where parallel calls are allowed) and
    the closing tags and fences, nothing else."""
    if request.choice == "none":
        return None
    allowed, defs = request.allowed, {}
    bodies = [_call_schema(f, defs) for f in allowed]
    schema = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
    if defs:
        schema["$defs"] = defs
    schema["x-guidance"] = dict(JSON_LAYOUT)
    # where more calls may follow, the line break after the last may end the reply too: models write one there,
    # then end (a grammar that read it only as the start of another call forced calls until max_tokens)
    more = ' ("\\n" call)* "\\n"?' if request.parallel else ""
    lines = [f"calls: call{more}",
             f"call: {tags.open} body",
             f"body: \"\\n\" %json {json.dumps(schema)} \"\\n\" {tags.close}"]
    if request.choice != "auto":
        return GrammarSpec("lark", "\n".join(["start: calls"] + lines), "tools")
    # "auto": every way a call opens ends a lexeme of free text (the text before the call is part of it)
    triggers = f"(?:{re.escape(OPEN)}|{_opening([f.name for f in allowed])})"
    lead = rf"/(?s:.*)%s/ & ~/(?s:.*{triggers}(?s:.+))/"
    lines.append(rf"TEXT: /(?s:.*)/ & ~/(?s:.*{triggers}.*)/")
    if tags.open.startswith("<["):  # a token: the text before it is a lexeme of its own
        starts = ["TEXT? calls?"]
    else:  # spelled out: the tag ends a lexeme of the text before it
        starts = ["TEXT", f"TAGGED first_body{more}"]
        lines += [f"TAGGED: {lead % re.escape(OPEN)}", "first_body: body"]
    # a call in its own way: the opening, then the arguments, the object's end, more calls, closings
    starts.append(f"first{' next*' if request.parallel else ''} END?")
    lines += [f"first: {' | '.join(f'LEAD_{i} rest_{i}' for i in range(len(allowed)))}",
              f"next: {' | '.join(f'NEXT_{i} rest_{i}' for i in range(len(allowed)))}",
              rf'ARGS: /{_WS}*,{_WS}*"arguments"{_WS}*:{_WS}*/',
              rf"OBJECT_END: /{_WS}*\}}/",
              rf"END: /(?:{_WS}|```|\}}|<\/(?:{'|'.join(WRAPPERS)}|tool_call)>){{1,8}}/"]
    for i, f in enumerate(allowed):
        parameters = dict(f.parameters)
        parameters["x-guidance"] = dict(FREE_LAYOUT)
        lines += [f"LEAD_{i}: {lead % _opening([f.name])}",
                  rf"NEXT_{i}: /(?:{_WS}|```(?:json|xml)?|\}}|\{{|<\/?(?:{'|'.join(WRAPPERS)}|tool_call)>)*"
                  rf"{_opening([f.name])}/",
                  f"rest_{i}: ARGS %json {json.dumps(parameters)} OBJECT_END"]
    return GrammarSpec("lark", "\n".join([f"start: {' | '.join(starts)}"] + lines), "tools")


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


_ARGUMENTS_KEY = regex.compile(rf'{_WS}*,{_WS}*"arguments"{_WS}*:')
_OBJECT_END = regex.compile(rf"{_WS}*\}}")


class ReplyReader:
    """Reads a reply's text as it comes: content, then tool calls.

    A call opens with the template's tag or, as the "auto" grammar allows,
    with ``{"name": "<one of names>"`` bare, fenced or in a wrapper tag
    (:func:`tool_grammar`). :meth:`feed` takes text and yields content
    strings and :class:`ToolCallDelta` s. Text that could be the start of an
    opening is held back until it is not (so ``<tool`` or a fence that may
    open a call never reaches the content early). A call's name is yielded
    once the opening is complete, then its arguments in pieces as they come;
    the call is complete at the end of its object, and the closing tags and
    fences after it are dropped. At the end, :meth:`finish` yields what is
    still held back as content, a call the reply stopped in (max_tokens) from
    its opening on, which is also :attr:`unfinished`."""

    def __init__(self, names: Sequence[str]) -> None:
        opening = _opening(names, group="?P<name>")
        wrapper = "|".join(WRAPPERS)
        self._opening = regex.compile(rf"(?:{re.escape(OPEN)}{_WS}*|(?:```(?:json|xml)?[ \t]*\n{_WS}*)?"
                                      rf"(?:<(?:{wrapper})>{_WS}*)?(?:\{{{_WS}*)?){opening}")
        self.content = ""
        self.calls: list[dict] = []  # complete calls, OpenAI's shape
        self.unfinished = ""
        self._pending = ""  # text fed and not yet read
        self._state = "text"  # text | key (before the arguments) | value | end (of the object) | closing
        self._call = ""  # the text of the call being read, from its opening on

    def feed(self, text: str) -> Iterator[str | ToolCallDelta]:
        self._pending += text
        while self._pending:
            before = (self._state, len(self._pending))
            yield from getattr(self, f"_read_{self._state}")()
            if (self._state, len(self._pending)) == before:
                return  # waiting for more text

    def _take(self, n: int) -> str:
        head, self._pending = self._pending[:n], self._pending[n:]
        if self._state != "text":
            self._call += head
        return head

    def _read_text(self) -> Iterator[str | ToolCallDelta]:
        m = self._opening.search(self._pending, partial=True)
        if m is None or m.partial:  # content up to what may still open a call
            yield from self._content(self._take(len(self._pending) if m is None else m.start()))
            return
        yield from self._content(self._take(m.start()))
        self._state, self._call = "key", ""
        self._take(m.end() - m.start())
        self._id, self._name, self._arguments = new_call_id(), m.group("name"), ""
        self._depth, self._in_string, self._escaped = 0, False, False
        yield ToolCallDelta(len(self.calls), self._id, self._name)

    def _read_key(self) -> Iterator[ToolCallDelta]:
        m = _ARGUMENTS_KEY.match(self._pending, partial=True)
        if m is not None and not m.partial:
            self._take(m.end())
            self._state = "value"
        return iter(())

    def _read_value(self) -> Iterator[ToolCallDelta]:
        if not self._arguments:
            start = len(self._pending) - len(self._pending.lstrip(" \t\n"))
            self._take(start)  # the whitespace before the value
        piece = ""
        for c in self._pending:
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
            if self._depth == 0:
                self._state = "end"
                break
        if piece:
            self._arguments += self._take(len(piece))
            yield ToolCallDelta(len(self.calls), arguments=piece)

    def _read_end(self) -> Iterator[str]:
        m = _OBJECT_END.match(self._pending, partial=True)
        if m is not None and not m.partial:
            self._take(m.end())
            self.calls.append({"id": self._id, "type": "function",
                               "function": {"name": self._name, "arguments": self._arguments}})
            self._state, self._call = "closing", ""
        return iter(())

    def _read_closing(self) -> Iterator[str]:
        rest = self._pending.lstrip(" \t\n")
        opening = self._opening.match(rest, partial=True)  # the next call's fence is no closing one
        closer = next((c for c in _CLOSERS if rest.startswith(c)), None)
        if opening is not None and opening.end() > 0:
            self._pending = rest
            if not opening.partial:
                self._state = "text"
        elif closer is not None:
            self._pending = rest[len(closer):]
        elif rest and not any(c.startswith(rest) for c in _CLOSERS):
            self._pending, self._state = rest, "text"
        else:
            self._pending = rest  # a closer maybe, or only whitespace so far
        return iter(())

    def _content(self, text: str) -> Iterator[str]:
        if self.calls:
            text = text.strip()  # after calls: nothing the grammar would put there but whitespace
        if text:
            self.content += text
            yield text

    def finish(self, cut: bool = True) -> Iterator[str]:
        """What is still held back, as content: a call the reply stopped in
        is content too, from its opening on, and :attr:`unfinished`; with
        ``cut`` (max_tokens ended it), so is the opening of a call after
        complete ones (a stop string there ends the reply after them)."""
        rest = self._pending.lstrip(" \t\n")
        if cut and self._state == "closing" and rest and not any(c.startswith(rest) for c in _CLOSERS):
            self._state, self._call, self._pending = "key", "", rest  # cut inside the next call's opening
        if self._state in ("key", "value", "end"):
            self.unfinished = self._call + self._pending
            self.content += self.unfinished
            yield self.unfinished
        elif self._state == "text":
            yield from self._content(self._pending)
        self._pending, self._state = "", "text"
