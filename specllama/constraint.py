"""Grammar constraints beside the engine: which tokens may come next.

A :class:`Constraint` keeps the state of a grammar after the tokens emitted
so far, and answers for any short path of tokens beyond them (the drafts of
one pass) which tokens the grammar allows next, without moving that state:
masks are computed along the draft path and rolled back. Only
:meth:`Constraint.commit`, with the tokens a pass emitted, advances it.

The law this promises (see docs/how-it-works.md): the output of speculative
decoding under a constraint has exactly the law of target-only decoding in
which every target row is *locally masked* (the tokens the grammar does not
allow after the tokens so far get probability 0; end of generation only
where the grammar may end) before temperature and the filters. Draft rows
get the same mask, so the draft proposes legal tokens and is accepted more
often; acceptance, residual and bonus use the masked target rows and the q
the draft truly sampled from.

:class:`GrammarSpec` is what a user asked for (checked without a model);
:class:`LLGuidanceConstraint` is its state for one generation over one
tokenizer (the llguidance matcher); :class:`TokenTableConstraint` is a small
pure-Python stand-in over token ids for the exactness tests.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .errors import SpecLlamaError
from .errors import short_repr as _short

#: what a grammar may be written in: llama.cpp's GBNF, a JSON schema, a regular expression, llguidance's Lark
KINDS = ("gbnf", "json_schema", "regex", "lark")
#: how JSON from a schema is laid out: one line, Python's ``json.dumps`` separators (a schema's own
#: ``"x-guidance"`` options come after these). Fixed layout: no runaway whitespace, and more forced tokens.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def masked(row: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """``row`` with -inf where ``allowed`` is False (None: nothing masked)."""
    if allowed is None:
        return row
    return np.where(allowed[: row.shape[0]], row, -np.inf).astype(row.dtype, copy=False)


class Constraint(Protocol):
    """The state of a grammar after the emitted tokens (see module doc)."""

    def allowed(self, path: Sequence[int]) -> np.ndarray | None:
        """The tokens allowed after the emitted ones and then ``path``, as a
        boolean mask over the vocabulary; None when ``path`` itself breaks
        the grammar (no row after it can be reached)."""

    def legal_prefix(self, path: Sequence[int]) -> int:
        """How many tokens at the start of ``path`` the grammar allows."""

    def forced(self) -> list[int]:
        """The tokens the grammar forces next (its only continuation), maybe none."""

    def commit(self, tokens: Sequence[int]) -> None:
        """Advance by tokens the generation emitted (end of generation excluded)."""

    @property
    def done(self) -> bool:
        """True when the grammar is complete and allows nothing but the end."""


# ------------------------------------------------------------------ what the user asked for


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar as a user gave it, checked: ``kind`` one of :data:`KINDS`,
    ``text`` its source, ``param`` the option it came from (for errors)."""

    kind: str
    text: str
    param: str = "grammar"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecLlamaError(f"grammar kind must be one of {', '.join(KINDS)}, got {self.kind!r}",
                                 param=self.param)
        object.__setattr__(self, "lark", _to_llguidance(self))

    @property
    def llguidance(self) -> str:
        """The grammar in llguidance's own form (computed and validated once)."""
        return self.lark  # type: ignore[attr-defined]


def _to_llguidance(spec: GrammarSpec) -> str:
    """llguidance's grammar for ``spec``, or one SpecLlamaError naming the option with llguidance's message."""
    import llguidance

    try:
        if spec.kind == "json_schema":
            schema = json.loads(spec.text)
            if not isinstance(schema, dict):
                raise SpecLlamaError(f"{spec.param} must be a JSON object (a JSON schema), got "
                                     f"{type(schema).__name__}", param=spec.param)
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT)
        else:
            grammar = llguidance.grammar_from(spec.kind, spec.text)
    except SpecLlamaError:
        raise
    except (ValueError, TypeError) as e:
        raise SpecLlamaError(f"{spec.param} is not a valid {_NAMES[spec.kind]}: {_one_line(e)}",
                             param=spec.param) from None
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise SpecLlamaError(f"{spec.param} is not a valid {_NAMES[spec.kind]}: {_one_line(error)}",
                             param=spec.param)
    return grammar


_NAMES = {"gbnf": "GBNF grammar", "json_schema": "JSON schema", "regex": "regular expression",
          "lark": "Lark grammar"}


def _one_line(e: object) -> str:
    return " ".join(str(e).split())


def spec_from_options(*, grammar: object = None, json_schema: object = None, response_format: object = None,
                      regex: object = None) -> GrammarSpec | None:
    """The one constraint among llama-cpp-python's and llama-server's ways to
    ask for one (at most one of them; ``{"type": "text"}`` counts as none).

    Args:
        grammar: GBNF text, or a ``llama_cpp.LlamaGrammar``.
        json_schema: a JSON schema (a dict, or its JSON text), as llama-server takes it.
        response_format: ``{"type": "json_object"}`` (optional ``"schema"``), or
            OpenAI's ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``.
        regex: a regular expression the whole output must match.
    """
    given = given_constraints(grammar=grammar, json_schema=json_schema, response_format=response_format,
                              regex=regex)
    if len(given) > 1:
        names = " and ".join(given)
        accepted = "grammar, json_schema, response_format" + (", regex" if "regex" in given else "")
        raise SpecLlamaError(f"{names} were given together: a request takes at most one of {accepted}",
                             param=list(given)[1])
    if not given:
        return None
    name, value = next(iter(given.items()))
    if name == "grammar" and isinstance(value, GrammarSpec):  # already checked (tool calls' grammar)
        return value
    if name == "grammar":
        text = getattr(value, "_grammar", value)  # llama_cpp.LlamaGrammar keeps its GBNF text there
        if not isinstance(text, str) or not text.strip():
            raise SpecLlamaError(f"grammar must be GBNF text or a llama_cpp.LlamaGrammar, got {_short(value)}",
                                 param="grammar")
        return GrammarSpec("gbnf", text, "grammar")
    if name == "regex":
        if not isinstance(value, str):
            raise SpecLlamaError(f"regex must be a string, got {_short(value)}", param="regex")
        return GrammarSpec("regex", value, "regex")
    if name == "json_schema":
        return GrammarSpec("json_schema", _schema_text(value, "json_schema"), "json_schema")
    return _response_format(value)


def given_constraints(*, grammar: object = None, json_schema: object = None, response_format: object = None,
                      regex: object = None) -> dict[str, object]:
    """The ways of asking for a constraint that a call used, by name, in
    order (``response_format`` ``{"type": "text"}`` is none)."""
    return {name: v for name, v in (("grammar", grammar), ("json_schema", json_schema),
                                    ("response_format", response_format), ("regex", regex))
            if v is not None and not (name == "response_format" and _is_text_format(v))}


def _is_text_format(value: object) -> bool:
    return isinstance(value, dict) and value.get("type") == "text"


def _schema_text(value: object, param: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value)
    raise SpecLlamaError(f"{param} must be a JSON schema (an object), got {_short(value)}", param=param)


ANY_JSON_OBJECT = '{"type": "object"}'


def _response_format(value: object) -> GrammarSpec:
    if not isinstance(value, dict):
        raise SpecLlamaError(f"response_format must be an object with a 'type', got {_short(value)}",
                             param="response_format")
    kind = value.get("type")
    if kind == "json_object":
        schema = value.get("schema")
        if schema is None:
            return GrammarSpec("json_schema", ANY_JSON_OBJECT, "response_format")
        return GrammarSpec("json_schema", _schema_text(schema, "response_format.schema"), "response_format.schema")
    if kind == "json_schema":
        inner = value.get("json_schema")
        if not isinstance(inner, dict) or "schema" not in inner:
            raise SpecLlamaError("response_format.json_schema must be an object with a 'schema' (and a 'name'), "
                                 f"got {_short(inner)}", param="response_format.json_schema")
        param = "response_format.json_schema.schema"
        return GrammarSpec("json_schema", _schema_text(inner["schema"], param), param)
    raise SpecLlamaError(f"response_format.type must be one of text, json_object, json_schema, got {_short(kind)}",
                         param="response_format.type")


# ------------------------------------------------------------------ llguidance


class LLGuidanceConstraint:
    """A grammar's state for one generation: an llguidance matcher over the
    target's tokenizer (built by the backend), whose end-of-generation tokens
    are the target's whole EOG set."""

    def __init__(self, spec: GrammarSpec, tokenizer: Any, n_vocab: int) -> None:
        import llguidance
        import llguidance.numpy

        self._matcher = llguidance.LLMatcher(tokenizer, spec.llguidance, log_level=0)
        if self._matcher.is_error():
            raise SpecLlamaError(f"{spec.param}: {_one_line(self._matcher.get_error())}", param=spec.param)
        self.n_vocab = n_vocab
        self._bits = llguidance.numpy.allocate_token_bitmask(1, tokenizer.vocab_size)
        self._fill: Callable = llguidance.numpy.fill_next_token_bitmask
        #: the grammar's own time (masks, consumes, rollbacks), for the statistics
        self.seconds = 0.0

    def _mask(self) -> np.ndarray:
        self._fill(self._matcher, self._bits, 0)
        bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        out = np.zeros(self.n_vocab, dtype=bool)
        n = min(self.n_vocab, bits.shape[0])
        out[:n] = bits[:n].astype(bool)
        return out

    def allowed(self, path: Sequence[int]) -> np.ndarray | None:
        t0, m = time.perf_counter(), self._matcher
        n = m.try_consume_tokens(list(path)) if path else 0
        try:
            return self._mask() if n == len(path) else None
        finally:
            if n:
                m.rollback(n)
            self.seconds += time.perf_counter() - t0

    def legal_prefix(self, path: Sequence[int]) -> int:
        t0 = time.perf_counter()
        n = self._matcher.validate_tokens(list(path)) if path else 0
        self.seconds += time.perf_counter() - t0
        return n

    def forced(self) -> list[int]:
        t0 = time.perf_counter()
        tokens = list(self._matcher.compute_ff_tokens())
        self.seconds += time.perf_counter() - t0
        return tokens

    def commit(self, tokens: Sequence[int]) -> None:
        t0 = time.perf_counter()
        if tokens and not self._matcher.consume_tokens(list(tokens)):
            raise RuntimeError(f"the grammar refused emitted tokens {list(tokens)}: {self._matcher.get_error()}")
        self.seconds += time.perf_counter() - t0

    @property
    def done(self) -> bool:
        return self._matcher.is_stopped()


# ------------------------------------------------------------------ a stand-in for the math tests


class TokenTableConstraint:
    """A grammar over token ids given as a finite automaton: ``table[state]``
    maps each allowed token to the next state; ``accepting`` states may end
    (their end-of-generation tokens ``eog`` are allowed); a state with no
    entries and accepting is complete (``done``). ``forced_runs``: whether
    :meth:`forced` proposes a state's only token (and its successors')."""

    def __init__(self, table: dict[int, dict[int, int]], accepting: set[int], n_vocab: int, eog: Sequence[int],
                 *, forced_runs: bool = True) -> None:
        self.table, self.accepting, self.n_vocab, self.eog = table, accepting, n_vocab, list(eog)
        self.forced_runs = forced_runs
        self.state = 0

    def _walk(self, path: Sequence[int]) -> tuple[int | None, int]:
        state, n = self.state, 0
        for t in path:
            nxt = self.table.get(state, {}).get(t)
            if nxt is None:
                return None, n
            state, n = nxt, n + 1
        return state, n

    def allowed(self, path: Sequence[int]) -> np.ndarray | None:
        state, _ = self._walk(path)
        if state is None:
            return None
        out = np.zeros(self.n_vocab, dtype=bool)
        out[list(self.table.get(state, {}))] = True
        if state in self.accepting:
            out[self.eog] = True
        return out

    def legal_prefix(self, path: Sequence[int]) -> int:
        return self._walk(path)[1]

    def forced(self) -> list[int]:
        out, state = [], self.state
        while self.forced_runs and state not in self.accepting and len(self.table.get(state, {})) == 1:
            (t, state), = self.table[state].items()
            out.append(t)
        return out

    def commit(self, tokens: Sequence[int]) -> None:
        state, n = self._walk(tokens)
        if state is None:
            raise RuntimeError(f"the grammar refused emitted tokens {list(tokens)}")
        self.state = state

    @property
    def done(self) -> bool:
        return self.state in self.accepting and not self.table.get(self.state)
