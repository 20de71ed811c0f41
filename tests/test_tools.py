"""Tool calls: the reply reader, the grammar (token tags on the coder pair,
spelled-out tags on the tiny pair), its law under speculation, and the
OpenAI surface end to end on the real Qwen2.5-Coder pair with the real
``openai`` client, an agent loop included."""

from __future__ import annotations

import json
import random

import jsonschema
import llguidance
import openai
import pytest

from specllama import SpeculativeLlama
from specllama import engine as engine_module
from specllama.constraint import LLGuidanceConstraint
from specllama.processors import Processor, logit_bias
from specllama.sampling import SamplingParams
from specllama.selfcheck import run_verify
from specllama.tools import WRAPPERS, ReplyReader, ToolRequest, check_tools, tags_for, tool_grammar

from .conftest import open_tiny_engine
from .server_helpers import ServerProcess

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
# for the tiny models, whose random text would make a free string long: a call that is nearly all forced
SWITCH = {"type": "function", "function": {
    "name": "switch", "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}},
                                     "required": ["on"], "additionalProperties": False}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa\\"ris}", "unit": "celsius"}}\n</tool_call>'


def _schema(tool: dict) -> dict:
    return tool["function"]["parameters"]


# -- the reply read back ----------------------------------------------------------------------------------


def test_the_reader_gets_content_and_calls_whatever_the_pieces():
    text = "Let me look.\n" + CALL + "\n" + CALL.replace("Pa\\\"ris}", "Tokyo")
    for seed in range(300):
        rng, reader, out, i = random.Random(seed), ReplyReader(["get_weather"]), [], 0
        while i < len(text):
            n = rng.randint(1, 9)
            out += list(reader.feed(text[i:i + n]))
            i += n
        out += list(reader.finish())
        assert reader.content == "".join(p for p in out if isinstance(p, str)) == "Let me look.\n"
        assert [json.loads(c["function"]["arguments"]) for c in reader.calls] == [
            {"city": 'Pa"ris}', "unit": "celsius"}, {"city": "Tokyo", "unit": "celsius"}]
        for index, call in enumerate(reader.calls):
            pieces = [p for p in out if not isinstance(p, str) and p.index == index]
            assert pieces[0].name == "get_weather" and pieces[0].id == call["id"]  # the name first, with the id
            assert "".join(p.arguments for p in pieces) == call["function"]["arguments"]


ARGS = '{"city": "Paris", "unit": "celsius"}'
#: every way a call may be written under "auto": the template's tag, and the ways small models write one
FORMS = {
    "tag": '<tool_call>\n{"name": "get_weather", "arguments": ' + ARGS + '}\n</tool_call>',
    "bare": '{"name": "get_weather", "arguments": ' + ARGS + '}',
    "fence": '```\n{"name": "get_weather", "arguments": ' + ARGS + '}\n```',
    "json fence": ('```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris",\n'
                   '    "unit": "celsius"\n  }\n}\n```'),
    **{f"<{w}>": f'<{w}>\n{{"name" : "get_weather",\n"arguments":{ARGS}}}\n</{w}>' for w in WRAPPERS},
    "fenced <tools>": '```json\n<tools>\n{"name": "get_weather", "arguments": ' + ARGS + '}\n</tools>\n```',
    "doubled braces": '{{"name": "get_weather", "arguments": ' + ARGS + '}}',  # Qwen2.5-Coder's template's example
}


def test_a_line_break_after_the_last_call_is_no_content():
    """What a "required" reply may end with since the grammar lets the line break after a call end it: two calls
    and their trailing line break read back as the two calls and no content, whatever the pieces."""
    text = CALL + "\n" + CALL.replace("Pa\\\"ris}", "Tokyo") + "\n"
    for seed in range(100):
        reader, out = _read(text, seed)
        assert reader.content == "".join(p for p in out if isinstance(p, str)) == ""
        assert [json.loads(c["function"]["arguments"])["city"] for c in reader.calls] == ['Pa"ris}', "Tokyo"]


def _read(text: str, seed: int, names=("get_weather", "switch")) -> tuple[ReplyReader, list]:
    """``text`` fed to a reader in random pieces of 1-9 characters."""
    rng, reader, out, i = random.Random(seed), ReplyReader(list(names)), [], 0
    while i < len(text):
        n = rng.randint(1, 9)
        out += list(reader.feed(text[i:i + n]))
        i += n
    return reader, out + list(reader.finish())


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_reads_back_as_calls_whatever_the_pieces(form):
    """Content before the call, then two calls: the text before is content
    (the fence or wrapper that opens a call is not), each call's name comes
    first with its id and its arguments are the JSON the model wrote."""
    text = "Let me look.\n" + FORMS[form] + "\n" + FORMS[form].replace("Paris", "Tokyo")
    for seed in range(40):
        reader, out = _read(text, seed)
        assert reader.content == "".join(p for p in out if isinstance(p, str)) == "Let me look.\n", (form, seed)
        assert [json.loads(c["function"]["arguments"]) for c in reader.calls] == [
            {"city": "Paris", "unit": "celsius"}, {"city": "Tokyo", "unit": "celsius"}]
        assert [c["function"]["name"] for c in reader.calls] == ["get_weather"] * 2
        for index, call in enumerate(reader.calls):
            pieces = [p for p in out if not isinstance(p, str) and p.index == index]
            assert pieces[0].name == "get_weather" and pieces[0].id == call["id"]
            assert "".join(p.arguments for p in pieces) == call["function"]["arguments"]


@pytest.mark.parametrize("text", [
    "Use the get_weather tool for that.",  # a mention
    '```json\n{"name": "Paris", "country": "France"}\n```',  # a fenced block that names no tool
    '```python\nprint({"name": "get_weathers"})\n```',  # a longer name
    "<tools> and <tool> and ``` and {\"name\"",
])
def test_text_that_is_no_call_stays_text(text):
    for seed in range(20):
        reader, out = _read(text, seed)
        assert reader.calls == [] and reader.content == "".join(out) == text


def test_a_call_cut_short_is_text():
    text = "Sure.\n" + FORMS["json fence"][:60]
    reader, out = _read(text, 0)
    assert reader.calls == [] and reader.content == "".join(p for p in out if isinstance(p, str)) == text
    assert reader.unfinished == FORMS["json fence"][:60]  # (its name was read: a stream holds it back)


def test_a_second_call_cut_in_its_opening_is_text_after_the_first():
    """max_tokens inside the next call's opening (the name not yet whole): the first call stands, the cut one is
    the reply's content (it was dropped); a cut closing tag of a complete call is no content."""
    second = CALL.replace("Pa\\\"ris}", "Tokyo")
    for cut in range(2, 30):  # (a lone "<" may as well begin a closing tag: it is no content)
        reader, out = _read(CALL + "\n" + second[:cut], cut)
        assert [c["function"]["name"] for c in reader.calls] == ["get_weather"], cut
        assert reader.unfinished == reader.content == "".join(p for p in out if isinstance(p, str)) == second[:cut]
    reader, out = _read(CALL[: CALL.rindex("</")] + "</tool_ca", 0)
    assert len(reader.calls) == 1 and reader.content == reader.unfinished == ""
    reader = ReplyReader(["get_weather"])  # a stop string there, not max_tokens: the reply is the first call
    list(reader.feed(CALL + "\n" + second[:12]))
    assert list(reader.finish(cut=False)) == [] and len(reader.calls) == 1 and reader.unfinished == ""


def test_a_partial_tag_is_held_back_and_a_cut_call_is_text():
    reader = ReplyReader(["get_weather"])
    assert list(reader.feed("Hi <tool")) == ["Hi "]  # "<tool" may start a call: held back
    assert list(reader.feed("box>")) == ["<toolbox>"]
    reader = ReplyReader(["get_weather"])
    assert list(reader.feed(CALL[:30])) == [] and list(reader.finish()) == [CALL[:30]]  # the name is cut
    assert reader.calls == [] and reader.content == CALL[:30]


# -- the request checked ---------------------------------------------------------------------------------


def test_legacy_functions_map_onto_tools():
    legacy = check_tools(functions=[WEATHER["function"]], function_call={"name": "get_weather"})
    assert legacy == check_tools(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert legacy.choice == "function" and legacy.name == "get_weather" and legacy.parallel is True
    assert check_tools(tools=[WEATHER], tool_choice="none").template_tools() is None
    assert check_tools() is None and check_tools(tool_choice="auto") is None


# -- the grammar -----------------------------------------------------------------------------------------


def _matcher(tokenizer, request: ToolRequest, tags):
    return llguidance.LLMatcher(tokenizer, tool_grammar(request, tags).llguidance, log_level=0)


def test_the_grammar_with_token_tags_on_the_coder_vocabulary(coder_paths):
    from specllama.backend import LlamaModel

    with LlamaModel(coder_paths[1], n_ctx=256) as model:
        tags = tags_for(model.special_token)
        assert tags.open == f"<[{model.special_token('<tool_call>')}]>" and tags.open != "<[None]>"

        def consumed(request, text):
            return _consume(_matcher(model.grammar_tokenizer(), request, tags), model.tokenize(text, add_bos=False))

        auto = check_tools(tools=[WEATHER])
        assert consumed(auto, "Sure." + CALL) == (True, True)
        assert consumed(auto, "No call needed.") == (True, True)
        assert consumed(auto, "Sure.<tool_call>\nhello")[0] is False  # after the tag: a call, nothing else
        single = check_tools(tools=[WEATHER], parallel_tool_calls=False, tool_choice="required")
        assert consumed(single, CALL) == (True, True)
        assert consumed(single, CALL + "\n" + CALL)[0] is False
        assert consumed(single, "Sure." + CALL)[0] is False  # required: no text first
        several = check_tools(tools=[WEATHER], tool_choice="required")
        # the line break a model writes after its last call may end the reply, or open another call
        assert consumed(several, CALL + "\n") == consumed(several, CALL + "\n" + CALL) == (True, True)
        assert consumed(several, CALL + "\n\n")[0] is False
        assert consumed(check_tools(tools=[WEATHER, SWITCH], tool_choice="required"),
                        '<tool_call>\n{"name": "switch", "arguments": {"on": true}}\n</tool_call>') == (True, True)
        wrong_args = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 5, "unit": "celsius"}}\n</tool_call>'
        assert consumed(auto, wrong_args)[0] is False


@pytest.mark.parametrize("vocabulary", ["coder", "tiny"])
def test_every_form_under_the_auto_grammar(vocabulary, coder_paths, tiny_pair):
    """The coder vocabulary has the tags as tokens, the tiny one spells them:
    under "auto", each form is a call (two where parallel calls are allowed),
    its arguments follow the schema, and nothing but closings may follow;
    a mention or a block that calls no tool is text."""
    from specllama.backend import LlamaModel

    with LlamaModel(coder_paths[1] if vocabulary == "coder" else tiny_pair[0], n_ctx=64) as model:
        tags, tok = tags_for(model.special_token), model.grammar_tokenizer()

        def consumed(request, text):
            return _consume(_matcher(tok, request, tags), model.tokenize(text, add_bos=False))

        auto, single = check_tools(tools=[WEATHER, SWITCH]), check_tools(tools=[WEATHER], parallel_tool_calls=False)
        for form, text in FORMS.items():
            assert consumed(auto, "Let me look.\n" + text) == (True, True), form
            assert consumed(auto, text + "\n" + text) == (True, True), form
            assert consumed(single, text + "\n" + text)[0] is False, form  # one call only
            assert consumed(auto, text + "\nThat is all.")[0] is False, form  # nothing after the calls
            if form != "tag":
                assert consumed(auto, text.replace('"Paris"', "5"))[0] is False, form  # held to the schema
        for text in ("Use the get_weather tool.", '```json\n{"name": "Paris", "country": "France"}\n```\nok'):
            assert consumed(auto, text) == (True, True)


def _consume(matcher, tokens) -> tuple[bool, bool]:
    """(every token legal, the grammar may end there)."""
    ok = all(matcher.consume_token(t) for t in tokens)
    return ok, ok and matcher.is_accepting()


def test_spelled_out_tags_on_the_tiny_vocabulary(tiny_pair):
    from specllama.backend import LlamaModel

    with LlamaModel(tiny_pair[0], n_ctx=64) as model:
        tags = tags_for(model.special_token)
        assert (tags.open, tags.close) == ('"<tool_call>"', '"</tool_call>"')  # no such token: the text
        tok = model.grammar_tokenizer()
        auto = check_tools(tools=[SWITCH])
        call = '<tool_call>\n{"name": "switch", "arguments": {"on": false}}\n</tool_call>'
        assert _consume(_matcher(tok, auto, tags), model.tokenize("the king " + call, add_bos=False)) == (True, True)
        assert _consume(_matcher(tok, auto, tags), model.tokenize("the king <tool", add_bos=False)) == (True, True)
        assert _consume(_matcher(tok, auto, tags), model.tokenize("a <tool_call> b", add_bos=False))[0] is False
        required = check_tools(tools=[SWITCH], tool_choice="required")  # (its tokenize puts no space first)
        assert _consume(_matcher(tok, required, tags), tok.tokenize_str(call + "\n")) == (True, True)
        assert _consume(_matcher(tok, required, tags), tok.tokenize_str(call + "\n" + call)) == (True, True)
        assert _consume(_matcher(tok, required, tags), tok.tokenize_str(call + "\n\n"))[0] is False


def test_schemas_with_definitions_and_non_object_parameters(tiny_pair):
    """A Pydantic-style schema (a nested model in ``$defs``, reached by
    ``$ref``) works: its definitions move to the grammar's top, renamed per
    function. Parameters that are not an object schema are refused, as OpenAI does."""
    from specllama.backend import LlamaModel

    point = {"type": "function", "function": {"name": "move", "parameters": {
        "type": "object", "properties": {"to": {"$ref": "#/$defs/Point"}}, "required": ["to"],
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                            "required": ["x", "y"], "additionalProperties": False}}}}}
    request = check_tools(tools=[point, SWITCH])
    with LlamaModel(tiny_pair[0], n_ctx=64) as model:
        tags, tok = tags_for(model.special_token), model.grammar_tokenizer()
        good = 'go <tool_call>\n{"name": "move", "arguments": {"to": {"x": 1, "y": 2}}}\n</tool_call>'
        bad = 'go <tool_call>\n{"name": "move", "arguments": {"to": {"x": 1}}}\n</tool_call>'
        assert _consume(_matcher(tok, request, tags), model.tokenize(good, add_bos=False)) == (True, True)
        assert _consume(_matcher(tok, request, tags), model.tokenize(bad, add_bos=False))[0] is False
    with pytest.raises(ValueError) as e:
        check_tools(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}])
    assert e.value.param == "tools[0].function.parameters"


# -- the law under speculation, end to end on the tiny pair -----------------------------------------------


#: a call written in its own way, cut one character before its opening is complete: the grammar has
#: consumed it and the next token may complete the opening (then only the call may follow)
FENCED_OPENING = '```json\n{"name": "switch'


def _quote_bias(engine) -> Processor:
    """+9 on the token '"', so that the first token most likely completes the fenced opening."""
    (quote,) = [t for t in range(engine.target.n_vocab) if engine.target.token_bytes(t) == b'"']
    return logit_bias({quote: 9.0})


def _verify_auto_tools(tiny_pair, trigger: str):
    """``specllama verify``'s check of the first two tokens' law (chi-square
    at alpha 0.001, 600 samples, k = 3) under the "auto" tool grammar with
    spelled-out tags. ``trigger`` "tag": the prompt ends with "<tool_cal" (the
    free text may not spell the tag, so masks differ from no grammar where a
    token would spell it). "fence": the grammar has consumed a fenced call's
    opening but for its last '"', which the first token most likely writes, so
    that the row after it (the second token's) belongs to the call."""
    engine = open_tiny_engine(tiny_pair)
    try:
        spec = tool_grammar(check_tools(tools=[SWITCH]), tags_for(engine.target.special_token))
        params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5)
        if trigger == "tag":
            return run_verify(engine, params=params, prompt="once upon a time <tool_cal", n_samples=600,
                              draft_max=3, grammar=spec)
        consumed = engine.target.tokenize(FENCED_OPENING, add_bos=False)
        return run_verify(engine, params=params, prompt=engine.target.tokenize("once upon a time") + consumed,
                          n_samples=600, draft_max=3, grammar=spec, grammar_consumed=consumed,
                          processor=_quote_bias(engine))
    finally:
        engine.close()


@pytest.mark.parametrize("trigger, w_first", [("tag", 0.28), ("fence", 0.30)])
def test_speculation_keeps_the_law_under_the_auto_tool_grammar(tiny_pair, trigger, w_first):
    """The first two tokens' law under "auto" (see :func:`_verify_auto_tools`).
    The first token's check detects w >= ``w_first`` with power 0.99; where the
    first token completes the fenced opening, the second token's check is over
    the call's few legal tokens (',' and whitespace: 241 samples) and detects
    w >= 0.40 with power 0.99. That a planted bias fails this check is
    tests/test_verify.py::test_a_planted_bias_fails; a planted bug of the
    trigger's own fails it in the next test."""
    result = _verify_auto_tools(tiny_pair, trigger)
    assert result.passed, result
    assert result.checks[0].kind == "chi-square" and result.checks[0].detectable_w < w_first
    if trigger == "fence":
        second = result.checks[1]
        assert second.context == "the prompt + '\"'"  # the first token most likely completes the opening ...
        assert second.kind == "chi-square" and second.detectable_w < 0.40
        # ... and after it only the call may follow: ',' or whitespace, nothing of free text
        assert {r.text for r in second.rows if r.expected_prob > 0} <= {repr(c) for c in ", \n\t"}


def test_a_trigger_seen_only_in_emitted_text_fails_the_check(tiny_pair, monkeypatch):
    """The same check, same seed and samples, fails an engine with a planted
    bug: the trigger found in the emitted text only, as a lazy grammar that
    wakes on what was generated finds it. Every row of a pass gets the mask of
    the emitted state, so a drafted opening stays free text and the rows after
    it are not held to the call. (Emitted tokens the grammar refuses are
    committed up to its legal prefix, so that the runs go on.)"""
    rows_mask, commit = engine_module._ConstrainedRows.mask, LLGuidanceConstraint.commit
    monkeypatch.setattr(engine_module._ConstrainedRows, "mask", lambda self, path: rows_mask(self, ()))
    monkeypatch.setattr(LLGuidanceConstraint, "commit",
                        lambda self, tokens: commit(self, list(tokens)[: self.legal_prefix(tokens)]))
    result = _verify_auto_tools(tiny_pair, "fence")
    assert result.checks[0].passed and result.checks[1].passed is False
    assert result.checks[1].test.off_support > 0  # tokens of free text where only the call may follow


def _without_ids(response: dict) -> dict:
    choice = json.loads(json.dumps(response["choices"][0]))
    for c in choice["message"].get("tool_calls", ()):
        c.pop("id")
    return choice


@pytest.fixture(scope="module")
def tiny_llm(tiny_pair):
    with SpeculativeLlama(*tiny_pair, n_ctx=2048, n_threads=1, draft_max=3, chat_format="hermes") as model:
        yield model


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "switch"}}])
def test_tiny_pair_calls_parse_and_greedy_equals_target_only(tiny_llm, choice):
    messages = [{"role": "user", "content": "once upon a time"}]

    def call(tools=(SWITCH, WEATHER), **kw):
        return tiny_llm.create_chat_completion(messages, tools=list(tools), tool_choice=choice,
                                               parallel_tool_calls=False, max_tokens=120, **kw)

    assert _without_ids(call(temperature=0)) == _without_ids(call(temperature=0, draft_max=0))
    for seed in range(6):  # (the random model's free strings run long: a tool without one)
        r = call(tools=[SWITCH], temperature=1.0, seed=seed)
        choice_ = r["choices"][0]
        assert choice_["finish_reason"] == "tool_calls", choice_
        (only,) = choice_["message"]["tool_calls"]
        tool = {"switch": SWITCH, "get_weather": WEATHER}[only["function"]["name"]]
        jsonschema.validate(json.loads(only["function"]["arguments"]), _schema(tool))
        if isinstance(choice, dict):
            assert only["function"]["name"] == "switch"


# -- the real pair through the server and the openai client ----------------------------------------------


@pytest.fixture(scope="module")
def coder_client(coder_paths, tmp_path_factory):
    proc = ServerProcess(["-m", coder_paths[0], "-md", coder_paths[1], "-c", "2048", "-t", "2"],
                         tmp_path_factory.mktemp("tools"))
    yield openai.OpenAI(base_url=f"{proc.url}/v1", api_key="none", max_retries=0, timeout=300)
    proc.stop()


def _ask(client, messages, **kw):
    return client.chat.completions.create(model="x", messages=messages, tools=[WEATHER], temperature=0,
                                          **{"max_tokens": 120, **kw})


def test_an_agent_loop_on_the_coder_pair(coder_client):
    """Call, run the function, send the result, get the answer: the official
    client parses the calls; the call validates against the tool's schema."""
    messages = [{"role": "user", "content": "What is the weather in Paris right now, in celsius?"}]
    first = _ask(coder_client, messages, tool_choice="required", parallel_tool_calls=False)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    arguments = json.loads(call.function.arguments)
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(arguments, _schema(WEATHER))
    assert arguments["city"] == "Paris"
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})}]
    answer = _ask(coder_client, messages, tool_choice="none")
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    assert "21" in answer.choices[0].message.content


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_required_call_ends_the_reply_where_more_calls_may_follow(coder_client, choice):
    """With parallel calls allowed (OpenAI's default), the model writes one call and a line break, then ends: the
    reply is that call, not calls forced after it until max_tokens (7 of them and "length" before)."""
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = _ask(coder_client, messages, tool_choice=choice, max_tokens=150).choices[0]
    assert reply.finish_reason == "tool_calls" and reply.message.content is None
    (call,) = reply.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"


AGENT = ("You are a helpful assistant. Call a tool when you need data; once a tool's result is in, answer the "
         "user in words.")


def test_the_coder_pair_calls_in_its_own_way_under_auto(coder_client):
    """The request of issue 46: under "auto" this 1.5B model writes its call
    as a ```json block, not in <tool_call> tags; it comes back as the call,
    streamed and not, and the agent loop (the result sent back) ends in an
    answer that uses it."""
    question = [{"role": "user", "content": "What is the weather in Paris in celsius?"}]
    whole = _ask(coder_client, question)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}
    names, arguments, finish = [], "", None
    for chunk in _ask(coder_client, question, stream=True):
        for piece in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            names += [piece.function.name] if piece.function.name else []
            arguments += piece.function.arguments or ""
        assert not (chunk.choices and chunk.choices[0].delta.content)
        finish = chunk.choices[0].finish_reason if chunk.choices else finish
    assert (names, arguments, finish) == (["get_weather"], call.function.arguments, "tool_calls")
    messages = [{"role": "system", "content": AGENT}] + question
    first = _ask(coder_client, messages).choices[0]
    assert first.finish_reason == "tool_calls"
    messages += [first.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": first.message.tool_calls[0].id,
                  "content": json.dumps({"temperature": 21, "sky": "clear"})}]
    answer = _ask(coder_client, messages).choices[0]  # "auto" again: the model may call again, it answers
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert "21" in answer.message.content and "Paris" in answer.message.content


def test_coder_pair_streamed_calls_equal_the_collected_ones_and_target_only(coder_client):
    messages = [{"role": "user", "content": "Weather in Paris and in Tokyo, in celsius?"}]
    whole = _ask(coder_client, messages, tool_choice="required", max_tokens=60)
    alone = _ask(coder_client, messages, tool_choice="required", max_tokens=60, extra_body={"speculative.n_max": 0})
    calls = whole.choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        (c.function.name, c.function.arguments) for c in alone.choices[0].message.tool_calls]
    assert whole.choices[0].finish_reason == alone.choices[0].finish_reason
    streamed: dict[int, dict] = {}
    for chunk in _ask(coder_client, messages, tool_choice="required", max_tokens=60, stream=True):
        for piece in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            entry = streamed.setdefault(piece.index, {"name": None, "arguments": ""})
            if piece.function.name:
                assert entry["name"] is None and entry["arguments"] == ""  # the name comes first, once
                entry["name"] = piece.function.name
            entry["arguments"] += piece.function.arguments or ""
    assert [(e["name"], e["arguments"]) for _, e in sorted(streamed.items())] == [
        (c.function.name, c.function.arguments) for c in calls]
    for c in calls:
        jsonschema.validate(json.loads(c.function.arguments), _schema(WEATHER))
    # the model calls for the first city and ends; calls were forced after it
    # until max_tokens when the grammar read the line break after a call only as the start of another
    assert [json.loads(c.function.arguments)["city"] for c in calls] == ["Paris"]
    assert whole.choices[0].finish_reason == "tool_calls"


class Script:
    """A logits processor that makes the model write ``text`` and then end:
    the text's next token gets +100 (a pure function of the tokens so far, as
    processors must be; the draft gets it too, so it drafts the text)."""

    def __init__(self, llm, messages: list, text: str, **kw) -> None:
        self.n_prompt = llm.create_chat_completion(messages, **{**kw, "max_tokens": 1})["usage"]["prompt_tokens"]
        self.tokens = llm.tokenize(text, add_bos=False, special=False)
        self.text = llm.detokenize(self.tokens).decode()  # the text as the model writes it
        (self.eos,) = llm.tokenize("</s>", add_bos=False)

    def __call__(self, input_ids, scores):
        i = len(input_ids) - self.n_prompt
        scores[self.tokens[i] if i < len(self.tokens) else self.eos] += 100.0
        return scores


def _written(llm, text: str, *, stream: bool = False, **kw) -> tuple[dict, Script]:
    """The tiny pair's reply, under "auto" with both tools, when the model writes ``text``
    (collected from the stream's chunks with ``stream``)."""
    messages = [{"role": "user", "content": "once upon a time"}]
    kw = {"tools": [WEATHER, SWITCH], **kw}
    script = Script(llm, messages, text, **kw)
    call = dict(messages=messages, temperature=0, logits_processor=[script], **{"max_tokens": 300, **kw})
    if not stream:
        return llm.create_chat_completion(**call), script
    chunks = list(llm.create_chat_completion(stream=True, **call))
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    calls: dict[int, dict] = {}
    for c in chunks:
        for piece in c["choices"][0]["delta"].get("tool_calls", ()):
            entry = calls.setdefault(piece["index"], {"id": piece.get("id"), "type": "function",
                                                      "function": {"name": piece["function"].get("name"),
                                                                   "arguments": ""}})
            entry["function"]["arguments"] += piece["function"]["arguments"]
    message = {"role": "assistant", "content": content if content.strip() else None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"choices": [{"message": message, "finish_reason": chunks[-1]["choices"][0]["finish_reason"]}]}, script


def _calls(response: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in response["choices"][0]["message"].get("tool_calls", ())]


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_is_a_call_end_to_end_on_the_tiny_pair(tiny_llm, form, stream):
    """The tiny pair made to write each form (a scripted logits processor)
    under "auto": the reply is the call, the text before it content."""
    response, script = _written(tiny_llm, "Let me look.\n" + FORMS[form], stream=stream)
    choice = response["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert _calls(response) == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    assert choice["message"]["content"] == script.text[: script.text.index("Let me look.\n") + 13]


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
def test_two_calls_a_block_of_no_tool_and_a_cut_call_on_the_tiny_pair(tiny_llm, stream):
    two = FORMS["json fence"] + "\n" + FORMS["<tools>"].replace(
        '"get_weather",\n"arguments":' + ARGS, '"switch",\n"arguments":{"on": true}')
    response, _ = _written(tiny_llm, two, stream=stream)
    assert response["choices"][0]["finish_reason"] == "tool_calls" and response["choices"][0]["message"][
        "content"] is None
    assert _calls(response) == [("get_weather", {"city": "Paris", "unit": "celsius"}), ("switch", {"on": True})]
    # one call only where parallel calls are not allowed: the grammar ends the reply after the first
    response, _ = _written(tiny_llm, two, stream=stream, parallel_tool_calls=False)
    assert _calls(response) == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    # a fenced block that names no tool is text
    response, script = _written(tiny_llm, 'See:\n```json\n{"name": "Paris"}\n```', stream=stream)
    assert response["choices"][0]["finish_reason"] == "stop" and _calls(response) == []
    assert response["choices"][0]["message"]["content"] == script.text
    # a call cut by max_tokens: "length", the text so far as content, no call
    response, script = _written(tiny_llm, "Sure.\n" + FORMS["json fence"], stream=stream, max_tokens=40)
    assert response["choices"][0]["finish_reason"] == "length" and _calls(response) == []
    assert response["choices"][0]["message"]["content"] == tiny_llm.detokenize(script.tokens[:40]).decode()


def test_tool_choice_none_length_and_refusals_on_the_api(tiny_llm):
    messages = [{"role": "user", "content": "once upon a time"}]
    plain = tiny_llm.create_chat_completion(messages, temperature=0, max_tokens=8)
    none = tiny_llm.create_chat_completion(messages, tools=[SWITCH], tool_choice="none", temperature=0, max_tokens=8)
    assert none["choices"][0]["message"] == plain["choices"][0]["message"]  # not rendered, not constrained
    assert none["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]
    cut = tiny_llm.create_chat_completion(messages, tools=[SWITCH], tool_choice="required", temperature=0,
                                          max_tokens=24)
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"].startswith("<tool_call>\n{")  # the text so far, as content
    for fields, param in (({"response_format": {"type": "json_object"}}, "response_format"),
                          ({"grammar": 'root ::= "a"'}, "grammar")):
        with pytest.raises(ValueError) as e:
            tiny_llm.create_chat_completion(messages, tools=[SWITCH], **fields)
        assert e.value.param == param and str(e.value).startswith(f"tools and {param} were given together")
    assert tiny_llm.create_chat_completion(messages, tools=[SWITCH], tool_choice="none", max_tokens=2,
                                           response_format={"type": "json_object"})["choices"][0]
