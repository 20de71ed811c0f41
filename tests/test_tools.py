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
from specllama.sampling import SamplingParams
from specllama.selfcheck import run_verify
from specllama.tools import ReplyReader, ToolRequest, check_tools, tags_for, tool_grammar

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
        rng, reader, out, i = random.Random(seed), ReplyReader(), [], 0
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


def test_a_partial_tag_is_held_back_and_a_cut_call_is_text():
    reader = ReplyReader()
    assert list(reader.feed("Hi <tool")) == ["Hi "]  # "<tool" may start a call: held back
    assert list(reader.feed("box>")) == ["<toolbox>"]
    reader = ReplyReader()
    assert list(reader.feed(CALL[:30])) == [] and list(reader.finish()) == []  # the name is not complete yet
    assert reader.calls == [] and reader.unfinished == CALL[:30]


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
        assert consumed(check_tools(tools=[WEATHER, SWITCH], tool_choice="required"),
                        '<tool_call>\n{"name": "switch", "arguments": {"on": true}}\n</tool_call>') == (True, True)
        wrong_args = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 5, "unit": "celsius"}}\n</tool_call>'
        assert consumed(auto, wrong_args)[0] is False


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


def test_speculation_keeps_the_law_under_the_auto_tool_grammar(tiny_pair):
    """The first two tokens' law (chi-square at alpha 0.001, as ``specllama
    verify`` runs it) under the "auto" tool grammar with spelled-out tags: the
    free text may not contain the opening tag, so the masks differ from no
    grammar at all where a token would spell it. The first token's check
    detects w >= 0.28 with power 0.99 (600 samples); that a planted bias fails
    this check is tests/test_verify.py::test_a_planted_bias_fails."""
    engine = open_tiny_engine(tiny_pair)
    try:
        spec = tool_grammar(check_tools(tools=[SWITCH]), tags_for(engine.target.special_token))
        result = run_verify(engine, params=SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5),
                            prompt="once upon a time <tool_cal", n_samples=600, draft_max=3, grammar=spec)
    finally:
        engine.close()
    assert result.passed, result
    assert result.checks[0].kind == "chi-square" and result.checks[0].detectable_w < 0.28


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
    assert [json.loads(c.function.arguments)["city"] for c in calls[:2]] == ["Paris", "Tokyo"]


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
