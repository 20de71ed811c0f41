"""Every refused option and every range check, through a real server and the
API: each error names its field (``param``) and says why (``code``), set
where the value is checked, never recovered from the message."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import httpx
import pytest

from specllama.errors import SpecLlamaError
from specllama.options import REFUSED

from .conftest import TINY_CTX
from .server_helpers import ServerProcess

COMPLETIONS, CHAT, NATIVE = "/v1/completions", "/v1/chat/completions", "/completion"
MESSAGES = [{"role": "user", "content": "once upon a time"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}

# a value other than the neutral one, and the endpoint that has the field
NOT_NEUTRAL = {
    "typical_p": (0.5, COMPLETIONS), "tfs_z": (0.5, CHAT),
    "mirostat_mode": (2, COMPLETIONS),
    "dry_multiplier": (0.8, CHAT), "xtc_probability": (0.5, COMPLETIONS), "dynatemp_range": (0.5, CHAT),
    "top_n_sigma": (1.0, COMPLETIONS),
}

# (endpoint, the request's fields, the expected param and code): one row per range check a request can reach
RANGE_CHECKS = [
    (CHAT, {"temperature": 2.5}, "temperature", "invalid_value"),
    (COMPLETIONS, {"temperature": -0.5}, "temperature", "invalid_value"),
    (COMPLETIONS, {"top_k": -1}, "top_k", "invalid_value"),
    (COMPLETIONS, {"top_p": 1.5}, "top_p", "invalid_value"),
    (CHAT, {"min_p": -0.1}, "min_p", "invalid_value"),
    (COMPLETIONS, {"seed": -5}, "seed", "invalid_value"),
    (COMPLETIONS, {"max_tokens": 0}, "max_tokens", "invalid_value"),
    (CHAT, {"max_completion_tokens": -3}, "max_completion_tokens", "invalid_value"),
    (COMPLETIONS, {"presence_penalty": 2.5}, "presence_penalty", "invalid_value"),
    (CHAT, {"frequency_penalty": -2.5}, "frequency_penalty", "invalid_value"),
    (COMPLETIONS, {"repeat_penalty": 0.0}, "repeat_penalty", "invalid_value"),
    (COMPLETIONS, {"repeat_last_n": -2}, "repeat_last_n", "invalid_value"),
    (COMPLETIONS, {"logit_bias": {"abc": 1}}, "logit_bias", "invalid_value"),
    (COMPLETIONS, {"logit_bias": {"99999": 1}}, "logit_bias", "invalid_value"),
    (COMPLETIONS, {"speculative.n_max": -1}, "speculative.n_max", "invalid_value"),
    (COMPLETIONS, {"speculative": {"n_max": -2}}, "speculative.n_max", "invalid_value"),
    (COMPLETIONS, {"logprobs": 25}, "logprobs", "invalid_value"),
    (CHAT, {"logprobs": True, "top_logprobs": 25}, "top_logprobs", "invalid_value"),
    (CHAT, {"top_logprobs": 2}, "top_logprobs", "invalid_value"),
    (COMPLETIONS, {"prompt": [99999]}, "prompt", "invalid_value"),
    (COMPLETIONS, {"prompt": []}, "prompt", "invalid_value"),
    (COMPLETIONS, {"prompt": "once upon a time " * 200}, "prompt", "context_length_exceeded"),
    (CHAT, {"messages": [{"role": "user", "content": "once upon a time " * 200}]}, "messages",
     "context_length_exceeded"),
    (CHAT, {"messages": []}, "messages", "invalid_value"),
    (CHAT, {"messages": ["hi"]}, "messages[0]", "invalid_value"),
    (CHAT, {"messages": [{"role": "bot", "content": "hi"}]}, "messages[0]", "invalid_value"),
    (CHAT, {"messages": [MESSAGES[0], {"role": "user"}]}, "messages[1].content", "invalid_value"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_value"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0].type", "invalid_value"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text",
     "invalid_value"),
    # tool calls (specllama.tools; the tiny server's template does not render tools: "hermes" does)
    # fill in the middle (the tiny model has no FIM tokens) and llama-server's sampler list
    (COMPLETIONS, {"suffix": "end"}, "suffix", "not_supported"),
    (NATIVE, {"samplers": ["nope"]}, "samplers", "invalid_value"),
    (CHAT, {"tools": "f"}, "tools", "invalid_value"),
    (CHAT, {"tools": [{"type": "function"}]}, "tools[0]", "invalid_value"),
    (CHAT, {"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools[0].function.name",
     "invalid_value"),
    (CHAT, {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}]},
     "tools[0].function.parameters", "invalid_value"),
    (CHAT, {"tools": [TOOL], "tool_choice": "always"}, "tool_choice", "invalid_value"),
    (CHAT, {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
     "tool_choice.function.name", "invalid_value"),
    (CHAT, {"tools": [TOOL], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "invalid_value"),
    (CHAT, {"functions": [{"name": "f"}], "tools": [TOOL]}, "functions", "invalid_value"),
    (CHAT, {"tools": [TOOL]}, "tools", "invalid_value"),
    (CHAT, {"tool_choice": "required"}, "tool_choice", "invalid_value"),
    (CHAT, {"functions": [{"name": "f"}], "function_call": {"name": "g"}}, "function_call.name", "invalid_value"),
    (CHAT, {"messages": [MESSAGES[0], {"role": "tool", "content": "sunny", "tool_call_id": "x"}]},
     "messages[1].tool_call_id", "invalid_value"),
    (CHAT, {"messages": [MESSAGES[0], {"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                                                                               "function": {"name": "f",
                                                                                            "arguments": "{"}}]}]},
     "messages[1].tool_calls[0].function.arguments", "invalid_value"),
]
# params the API checks that no request field reaches (the server sets them itself, or they are Python-only)
API_ONLY = {"convention", "rule", "draft_min", "stopping_criteria", "logits_processor", "stop", "chat_format",
            "rpc_servers", "tensor_split", "ignore_eos"}


@pytest.fixture(scope="module")
def http(tiny_pair, tmp_path_factory):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", str(TINY_CTX), "--draft-fixed",
                          "--draft-max", "2", "-t", "1"], tmp_path_factory.mktemp("errors"))
    with httpx.Client(base_url=proc.url, timeout=60) as c:
        yield c
    proc.stop()


def _body(path: str, fields: dict) -> dict:
    base = {"messages": MESSAGES} if path == CHAT else {"prompt": "once upon a time"}
    return {**base, "max_tokens": 2, **fields}


def _error(http, path: str, fields: dict) -> tuple[int, str | None, str | None]:
    r = http.post(path, json=_body(path, fields))
    error = r.json().get("error", {})
    return r.status_code, error.get("param"), error.get("code")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_every_refused_option_names_its_field(http, name):
    value, path = NOT_NEUTRAL[name]
    assert _error(http, path, {name: value}) == (400, name, "unsupported_parameter")
    assert _error(http, path, {name: REFUSED[name]})[0] == 200  # neutral: accepted


def test_llama_servers_mirostat_is_refused_under_its_own_name(http):
    assert _error(http, COMPLETIONS, {"mirostat": 1}) == (400, "mirostat", "unsupported_parameter")


@pytest.mark.parametrize("path,fields,param,code", RANGE_CHECKS, ids=[r[2] + "-" + str(i) for i, r in
                                                                      enumerate(RANGE_CHECKS)])
def test_every_range_check_names_its_field(http, path, fields, param, code):
    if "messages" in fields or "prompt" in fields:
        r = http.post(path, json={"max_tokens": 2, **fields})
        error = r.json()["error"]
        assert (r.status_code, error["param"], error["code"]) == (400, param, code)
    else:
        assert _error(http, path, fields) == (400, param, code)


def _checked_params() -> set[str]:
    """The names (before any ``[``) given as ``param=`` where a SpecLlamaError
    is raised in the validator modules, read from their source."""
    names = set()
    for module in ("options.py", "chat_template.py", "processors.py", "generation.py", "tools.py"):
        tree = ast.parse((Path(__file__).resolve().parent.parent / "specllama" / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "param":
                v = node.value
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    names.add(re.split(r"[\[.]", v.value)[0])
                elif isinstance(v, ast.JoinedStr) and isinstance(v.values[0], ast.Constant):
                    names.add(re.split(r"[\[.]", v.values[0].value)[0])
    return names


def test_the_tables_cover_every_param_the_validators_set():
    reached = {re.split(r"[\[.]", p)[0] for _, _, p, _ in RANGE_CHECKS}
    reached |= {"draft_max"}  # speculative.n_max's API name
    literal = _checked_params()
    assert {"temperature", "top_k", "max_tokens", "logit_bias", "messages", "prompt"} - reached == set()
    assert literal - reached - API_ONLY == set()


def test_the_api_raises_the_same_param_and_code(tiny_pair):
    from specllama.api import SpeculativeLlama

    with SpeculativeLlama(*tiny_pair, n_ctx=TINY_CTX, n_threads=1, draft_max=2, convention="openai") as llm:
        for name, (value, path) in NOT_NEUTRAL.items():
            create = llm.create_completion if path == COMPLETIONS else llm.create_chat_completion
            first = "once upon a time" if path == COMPLETIONS else MESSAGES
            with pytest.raises(SpecLlamaError) as e:
                create(first, max_tokens=2, **{name: value})
            assert (e.value.param, e.value.code) == (name, "unsupported_parameter")
        with pytest.raises(SpecLlamaError) as e:
            llm.create_completion("hi", stop=["a", 5])
        assert (e.value.param, e.value.code) == ("stop[1]", "invalid_value")
        with pytest.raises(SpecLlamaError) as e:
            llm.create_completion("hi", logits_processor=[lambda ids, s: s, 3])
        assert (e.value.param, e.value.code) == ("logits_processor[1]", "invalid_value")
        with pytest.raises(SpecLlamaError) as e:
            llm.create_chat_completion([{"role": "user", "content": "once upon a time " * 200}])
        assert (e.value.param, e.value.code) == ("prompt", "context_length_exceeded")
