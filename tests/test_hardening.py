"""Issue 13, "Inputs that lose text, hang or crash": one regression test per
row, numbered as in the issue, and a test for each thing it found holding.

Rows tested elsewhere: 2 (tokens past a stop string) in
test_generation_path.py (test_tokens_end_where_the_text_ends_at_a_stop_string,
test_cli_json_tokens_end_at_the_stop_string); the engine side of 6 there too
(test_drafts_never_exceed_one_batch); concurrent calls from two threads (4) in
test_api.py (test_two_threads_at_once); content parts through the templates in
test_chat_template.py.

Everything runs on the tiny models the suite writes, on one llama.cpp thread;
row 1 also on the demo pair (Gemma 3, whose GGUF has no chat template).
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

import llama_cpp
import pytest
from click.testing import CliRunner

from specllama import SpeculativeLlama
from specllama.backend import LlamaModel
from specllama.chat import ChatSession, template_for
from specllama.cli import main
from specllama.engine import SpeculativeEngine
from specllama.generate import generate
from specllama.options import processor_for
from specllama.sampling import SamplingParams

from .conftest import require_demo_extra

PROMPT = "once upon a time there lived a king"
OTHER = "the dog said hello"
GREEDY = SamplingParams(temperature=0)
THREADS = 1
CHAT_FIXED = ("--temp", "0", "--draft-max", "4", "--draft-fixed", "-t", "1")
COMMANDS_NOTE = "commands: /help, /stats, /reset, /system, /exit (start a message with // to send a literal /)"


@pytest.fixture(autouse=True)
def no_saved_costs(monkeypatch):
    """No draft-length policy starts from costs another run saved (nor saves any)."""
    monkeypatch.setenv("SPECLLAMA_COST_CACHE", "0")


@pytest.fixture(scope="module")
def spec(tiny_pair):
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, seed=0, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        yield s


@pytest.fixture(scope="module")
def reference(tiny_pair):
    llama = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False, n_threads=THREADS)
    yield llama
    llama.close()


def text_of(out: dict) -> str:
    return out["choices"][0]["text"]


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def one_line_error(r) -> str:
    """The single stderr line of a failed command (no traceback)."""
    assert r.exit_code == 1, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def gen_json(tiny_pair, *flags: str) -> dict:
    r = invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", PROMPT, "--json", *flags)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


AS_LIMIT = 3 << 30  # the address space a subprocess may use: a huge KV cache fails at once, on any machine


def limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    """`specllama ARGS` as a real process (arguments may be bytes, as a shell hands them over)."""
    env = dict(os.environ, SPECLLAMA_COST_CACHE="0")
    return subprocess.run([sys.executable, "-m", "specllama", *args], capture_output=True, timeout=timeout, env=env,
                          preexec_fn=limit_memory)


def stderr_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return proc.stderr.decode("utf-8", "replace").strip().splitlines()


# == Text silently lost ========================================================

# -- 1. system prompts and content parts ----------------------------------------


def chat_messages(system: str | None, user: str = "once upon a time") -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def test_1_system_prompt_reaches_the_model(spec):
    """usage.prompt_tokens with a system message is the token count of the
    rendered prompt, which holds the system text, and differs from without."""
    system = "you are a king of the house"
    counts = {}
    for with_system in (False, True):
        messages = chat_messages(system if with_system else None)
        rendered = spec.chat_template().render(messages)
        assert (system in rendered.text) == with_system
        out = spec.create_chat_completion(messages, max_tokens=4, temperature=0)
        tokens = spec.tokenize(rendered.text.encode(), add_bos=not rendered.has_bos)
        assert out["usage"]["prompt_tokens"] == len(tokens)
        counts[with_system] = len(tokens)
    n_system = len(spec.tokenize(system.encode(), add_bos=False))
    assert counts[True] >= counts[False] + n_system


def test_1_content_parts_are_joined(spec):
    parts = [{"type": "text", "text": "once upon"}, {"type": "text", "text": "a time"}]
    joined = spec.create_chat_completion([{"role": "user", "content": parts}], max_tokens=6, temperature=0)
    plain = spec.create_chat_completion([{"role": "user", "content": "once upon\na time"}], max_tokens=6,
                                        temperature=0)
    assert joined["usage"] == plain["usage"]
    assert joined["choices"][0]["message"] == plain["choices"][0]["message"]
    empty = spec.create_chat_completion([{"role": "user", "content": ""}], max_tokens=1, temperature=0)
    assert joined["usage"]["prompt_tokens"] > empty["usage"]["prompt_tokens"] + 3  # the parts' text is there


@pytest.mark.parametrize("message, error", [
    ({"role": "user", "content": None},
     r"messages\[0\] has no 'content' \(a string, or a list of text parts, is needed\)"),
    ({"role": "wizard", "content": "abracadabra"},
     r"messages\[0\] has role 'wizard'; accepted roles: system, developer \(as system\), user, assistant"),
])
def test_1_no_content_or_an_unknown_role_is_an_error_naming_the_message(spec, message, error):
    with pytest.raises(ValueError, match=error):
        spec.create_chat_completion([message], max_tokens=2)


@pytest.fixture(scope="module")
def demo_target():
    require_demo_extra()
    from specllama import demo_pair

    return demo_pair()[0]


@pytest.fixture(scope="module")
def demo_llm(demo_target):
    """The demo target alone: the draft plays no part in what the prompt holds."""
    with SpeculativeLlama(demo_target, None, n_ctx=512, n_threads=THREADS) as s:
        yield s


PIRATE = "You are a pirate. Answer like one."


def test_1_system_prompt_on_the_demo_target(demo_llm):
    """Gemma's GGUF has no template: the gemma format puts the system text at
    the start of the first user turn (llama-cpp-python's drops it: 10 prompt
    tokens with or without it)."""
    plain = demo_llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, temperature=0)
    pirate = demo_llm.create_chat_completion([{"role": "system", "content": PIRATE},
                                              {"role": "user", "content": "hi"}], max_tokens=2, temperature=0)
    text = demo_llm.chat_template().render([{"role": "system", "content": PIRATE},
                                            {"role": "user", "content": "hi"}]).text
    assert text == f"<start_of_turn>user\n{PIRATE}\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    n_system = len(demo_llm.tokenize(f"{PIRATE}\n\n".encode(), add_bos=False))
    assert plain["usage"]["prompt_tokens"] == 10
    assert pirate["usage"]["prompt_tokens"] == len(demo_llm.tokenize(text.encode())) == 10 + n_system


def test_1_chat_system_flag_on_the_demo_target(demo_llm, demo_target):
    """`specllama chat -sys ...`: /stats counts the system prompt's tokens among
    those evaluated (the issue saw 9, as without it)."""
    r = invoke("chat", "-m", demo_target, "--draft-max", "0", "-c", "512", "-n", "2", "--temp", "0", "-t", "1",
               "-sys", PIRATE, input="hi\n/stats\n")
    assert r.exit_code == 0, r.output
    evaluated = int(re.search(r"\((\d+) new prompt tokens evaluated\)", r.stdout).group(1))
    with_system = demo_llm.chat_template().render([{"role": "system", "content": PIRATE},
                                                   {"role": "user", "content": "hi"}])
    n_prompt = len(demo_llm.tokenize(with_system.text.encode(), add_bos=not with_system.has_bos))
    assert evaluated == n_prompt - 1 > 9  # all but the last prompt token, on a fresh cache


# -- 3. bench --prompts with a null or empty prompt -----------------------------


@pytest.mark.parametrize("line, shown", [('{"prompt": null}', "None"), ('{"prompt": ""}', "''"),
                                         ('{"prompt": "   "}', "'   '"), ('{"prompt": 5}', "5")])
def test_3_bench_prompt_null_or_empty_is_an_error_naming_the_line(tiny_pair, tmp_path, line, shown):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "the cat"}\n' + line + "\n")
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r) == f'Error: {str(f)!r} line 2: "prompt" must be a non-empty string, got {shown}'


# == Hangs =====================================================================

# -- 4. an abandoned stream never blocks a later call ----------------------------


def within(seconds: float, fn):
    """Run ``fn`` in a daemon thread: a call that hangs fails the test
    instead of hanging the suite."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (re-raised below)
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def llm(tiny_pair):
    """An instance of its own: a regression must not leave a shared one locked."""
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        yield s


def solo_text(tiny_pair, prompt: str, max_tokens: int) -> str:
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, draft_max=3, adaptive=False,
                          n_threads=THREADS) as s:
        return text_of(s.create_completion(prompt, max_tokens=max_tokens, temperature=0))


def abandon_by_next_twice(llm):
    it = llm.create_completion(PROMPT, max_tokens=30, temperature=0, stream=True)
    next(it)
    next(it)
    return it


def abandon_by_break(llm):
    it = llm.create_completion(PROMPT, max_tokens=30, temperature=0, stream=True)
    for _ in it:
        break
    return it


def abandon_generate(llm):
    it = llm.generate(llm.tokenize(PROMPT.encode()), temp=0)
    next(it)
    next(it)
    return it


@pytest.mark.parametrize("abandon", [abandon_by_next_twice, abandon_by_break, abandon_generate])
def test_4_an_abandoned_stream_does_not_block_the_same_thread(llm, tiny_pair, abandon):
    def scenario():
        it = abandon(llm)
        text = text_of(llm.create_completion(OTHER, max_tokens=20, temperature=0))
        tokens = list(llm.generate(llm.tokenize(OTHER.encode()), temp=0, stopping_criteria=lambda ids, _: True))
        return it, text, tokens

    it, text, tokens = within(60, scenario)
    assert text == solo_text(tiny_pair, OTHER, 20)
    assert len(tokens) == 1
    assert list(it) == []  # the later call closed the abandoned stream


def test_4_another_thread_waits_for_an_abandoned_stream_until_its_thread_calls_again(llm, tiny_pair):
    """Thread A abandons a stream mid-way; thread B's call waits (A could
    still resume it); A's next call closes it and runs; then B's runs. Each
    text is its solo text."""
    abandoned = threading.Event()
    go_on = threading.Event()
    results: dict[str, str] = {}

    def a():
        it = abandon_by_next_twice(llm)
        abandoned.set()
        assert go_on.wait(30)
        results["A"] = text_of(llm.create_completion(OTHER, max_tokens=20, temperature=0))
        return it

    def b():
        results["B"] = text_of(llm.create_completion(PROMPT, max_tokens=20, temperature=0))

    thread_a = threading.Thread(target=a, daemon=True)
    thread_a.start()
    assert abandoned.wait(30)
    thread_b = threading.Thread(target=b, daemon=True)
    thread_b.start()
    time.sleep(0.5)
    assert thread_b.is_alive() and results == {}  # B waits: A's stream could still be resumed by A
    go_on.set()
    thread_a.join(60)
    thread_b.join(60)
    assert not thread_a.is_alive() and not thread_b.is_alive()
    assert results == {"A": solo_text(tiny_pair, OTHER, 20), "B": solo_text(tiny_pair, PROMPT, 20)}


# == Crashes with a traceback instead of one clear line ============================

# -- 5. a prompt that is not UTF-8 ---------------------------------------------


def test_5_invalid_utf8_prompt_from_the_shell(tiny_pair):
    proc = run_cli(b"generate", b"-m", tiny_pair[0].encode(), b"-md", tiny_pair[1].encode(), b"-t", b"1",
                   b"-p", b"\xff\xfe")
    assert proc.returncode == 1
    lines = stderr_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("Error: the prompt is not valid UTF-8"), lines
    assert lines[0] == "Error: the prompt is not valid UTF-8 (bytes b'\\xff\\xfe' at position 0); give UTF-8 text"


# -- 6. drafts longer than a batch ------------------------------------------------


def test_6_draft_max_1000_until_the_context_is_full(tiny_pair):
    """-n -1 -c 700 --draft-max 1000 --draft-fixed: drafts are capped at one
    batch of 512, and generation runs to the full context. (The target is its
    own draft here, so each pass keeps its whole block: two passes instead of
    hundreds of nearly all-rejected 500-token drafts.)"""
    self_draft = (tiny_pair[0], tiny_pair[0])
    spec = gen_json(self_draft, "-n", "-1", "-c", "700", "--draft-max", "1000", "--draft-fixed", "--temp", "0")
    base = gen_json(self_draft, "-n", "-1", "-c", "700", "--draft-max", "0", "--temp", "0")
    assert spec["finish_reason"] == base["finish_reason"] == "length"
    assert spec["n_prompt_tokens"] + spec["n_tokens"] == 701  # the whole context (the newest token unevaluated)
    assert spec["tokens"] == base["tokens"]
    assert spec["n_drafted"] > 600 and spec["n_target_passes"] <= 3  # blocks as long as a batch allows


# -- 7. a prompts file that is not UTF-8 ------------------------------------------


def test_7_bench_prompts_file_not_utf8(tiny_pair, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes(b"hello\n\xe9t\xe9\n")
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r) == f"Error: prompts file {str(f)!r} is not UTF-8 text (byte 0xe9 at offset 6)"


# -- 8. a message without content --------------------------------------------------


def test_8_message_without_content(spec):
    with pytest.raises(ValueError, match=r"^messages\[0\] has no 'content' \(a string, or a list of text parts, "
                                         r"is needed\)$"):
        spec.create_chat_completion([{"role": "user"}])


# == Wrong or unclear answers to bad arguments =====================================

# -- 9. logit_bias ------------------------------------------------------------------


@pytest.mark.parametrize("bias, error", [
    ({-1: 100}, r"logit_bias key -1 is not a token id in 0\.\.{last}$"),
    ({10**9: 1}, r"logit_bias key 1000000000 is not a token id in 0\.\.{last}$"),
    ({"abc": 1}, r"logit_bias key 'abc' is not a token id in 0\.\.{last}$"),
    ({"-1": 1}, r"logit_bias key '-1' is not a token id in 0\.\.{last}$"),
    ({100: math.nan}, r"logit_bias\[100\] must be a finite number, got nan$"),
    ({100: math.inf}, r"logit_bias\[100\] must be a finite number, got inf$"),
    ({100: "2"}, r"logit_bias\[100\] must be a finite number, got '2'$"),
])
def test_9_bad_logit_bias_names_the_key(spec, bias, error):
    last = spec.engine.target.n_vocab - 1
    with pytest.raises(ValueError, match=error.format(last=last)):
        spec.create_completion(PROMPT, max_tokens=2, logit_bias=bias)
    with pytest.raises(ValueError, match=error.format(last=last)):
        spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, logit_bias=bias)


def test_9_a_json_style_string_key_works(spec):
    (queen,) = spec.tokenize(b"queen", add_bos=False)
    as_string = spec.create_completion(PROMPT, max_tokens=3, temperature=0, logit_bias={str(queen): 100.0})
    as_int = spec.create_completion(PROMPT, max_tokens=3, temperature=0, logit_bias={queen: 100.0})
    assert text_of(as_string) == text_of(as_int) == " queen queen queen"


# -- 10. prompt token ids outside the vocabulary --------------------------------------


@pytest.mark.parametrize("bad", [10**7, -5])
def test_10_prompt_token_out_of_range(spec, bad):
    last = spec.engine.target.n_vocab - 1
    error = rf"^prompt token id {bad} is out of range 0\.\.{last}$"
    with pytest.raises(ValueError, match=error):
        spec.create_completion([1, 372, bad], max_tokens=2)
    with pytest.raises(ValueError, match=error):
        spec.generate([1, bad])
    with pytest.raises(ValueError, match=error):
        generate(spec.engine, [1, bad], params=GREEDY)
    # and the instance still works
    assert spec.create_completion([1, 372], max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2


# -- 11. stop that is not a string -----------------------------------------------------


@pytest.mark.parametrize("stop, error", [
    (5, r"^stop must be a string or a list of strings, got 5$"),
    ([5], r"^stop\[0\] must be a string, got 5 \(stop takes a string or a list of strings\)$"),
    (["ok", None], r"^stop\[1\] must be a string, got None \(stop takes a string or a list of strings\)$"),
])
def test_11_bad_stop_names_stop(spec, stop, error):
    with pytest.raises(ValueError, match=error):
        spec.create_completion(PROMPT, max_tokens=2, stop=stop)
    with pytest.raises(ValueError, match=error):
        spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, stop=stop)


# -- 12. a context too large for memory ------------------------------------------------


def test_12_huge_context_is_one_line_with_a_hint(tiny_pair):
    """-c 1000000000 (a 512 GB KV cache for the tiny model) with the address
    space limited to 3 GiB, so it fails at once on any machine (unlimited,
    llama.cpp first touches ~20 GB of cache bookkeeping, for a minute)."""
    proc = run_cli("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", "hi", "-c", "1000000000")
    assert proc.returncode == 1  # an error, not an abort (134) or a kill
    lines = stderr_lines(proc)
    assert len(lines) == 1, lines
    assert lines[0] == (f"Error: llama.cpp could not load {tiny_pair[0]!r}: Failed to create llama_context "
                        "(the KV cache for a context of 1000000000 tokens may not fit in memory: try a smaller "
                        "-c/--ctx-size)")


@pytest.mark.parametrize("n_ctx", ["4294967296", "4294967552"])
def test_12_a_context_size_past_llama_cpps_range_is_refused(tiny_pair, n_ctx):
    """llama.cpp keeps n_ctx in 32 bits: 2**32 wraps to 0 (the model's own
    1024) and 2**32 + 256 to 256, so with memory to spare a run silently uses
    another context than the one asked for; with less, llama-cpp-python's
    n_ctx-long token array raises MemoryError, a traceback. Either way it
    must be a one-line error naming -c."""
    proc = run_cli("generate", "-m", tiny_pair[0], "-t", "1", "--draft-max", "0", "-p", "hi", "-n", "1",
                   "-c", n_ctx)
    lines = stderr_lines(proc)
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("Error: "), (proc.returncode, lines)
    assert "-c" in lines[0] and n_ctx in lines[0]


# -- 13. a malformed JSON line, a directory ---------------------------------------------


def test_13_malformed_jsonl_line(tiny_pair, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "the cat"}\n{"prompt": "hello"\n')
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r) == f"Error: {str(f)!r} line 2 is not valid JSON (Expecting ',' delimiter at column 19)"


def test_13_json_line_without_a_prompt_key(tiny_pair, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "the cat"}\n')
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r) == f'Error: {str(f)!r} line 1: a JSON line needs a "prompt" key'


def test_13_a_directory_for_prompts(tiny_pair, tmp_path):
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(tmp_path))
    assert one_line_error(r) == (f"Error: prompts file {str(tmp_path)!r} is a directory "
                                 "(give a file: text lines or JSONL)")


# -- 14. drop-in differences from llama-cpp-python -----------------------------------------


@pytest.mark.parametrize("value", [0, -1, -3, None])
def test_14_max_tokens_below_one_fills_the_context_as_llama_cpp(spec, reference, value):
    """llama-cpp-python: max_tokens None or <= 0 generates until the context
    (n_ctx minus the prompt) is full; the same text, token for token."""
    ours = spec.create_completion(PROMPT, max_tokens=value, temperature=0)
    theirs = reference.create_completion(PROMPT, max_tokens=value, temperature=0)
    assert text_of(ours) == text_of(theirs)
    assert ours["usage"] == theirs["usage"]
    assert ours["usage"]["total_tokens"] == 256 or ours["choices"][0]["finish_reason"] == "stop"


def test_14_top_p_zero_keeps_the_likeliest_token(spec, reference):
    greedy = text_of(spec.create_completion(PROMPT, max_tokens=24, temperature=0))
    for seed in (1, 2):
        assert text_of(spec.create_completion(PROMPT, max_tokens=24, temperature=0.8, top_p=0, seed=seed)) == greedy
    assert text_of(reference.create_completion(PROMPT, max_tokens=24, temperature=0.8, top_p=0, seed=1)) == greedy
    assert text_of(spec.create_completion(PROMPT, max_tokens=24, temperature=0.8, top_p=1, seed=1)) != greedy


# -- 15. llama.cpp's penalty flags and --draft-min -------------------------------------------


@pytest.mark.parametrize("flags, penalties", [
    (("--repeat-penalty", "1.5"), dict(repeat_penalty=1.5)),
    (("--presence-penalty", "1.0"), dict(presence_penalty=1.0)),
    (("--frequency-penalty", "0.7"), dict(frequency_penalty=0.7)),
    (("--repeat-penalty", "1.3", "--presence-penalty", "0.5", "--frequency-penalty", "0.3"),
     dict(repeat_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.3)),
])
def test_15_penalty_flags_as_the_api(tiny_pair, spec, flags, penalties):
    """Greedy output with the penalty flags: the tokens SpeculativeLlama.generate
    gives with the same penalties (both over the last 64 tokens), and not the
    unpenalised ones. (llama-cpp-python 0.3.36's own penalties see no history,
    so it is no reference here.)"""
    plain = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3", "--draft-fixed")
    cli = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3", "--draft-fixed", *flags)
    api = []
    stream = spec.generate(spec.tokenize(PROMPT.encode()), temp=0, **penalties)
    for tok in stream:
        api.append(tok)
        if len(api) == 40:
            break
    stream.close()
    assert cli["tokens"] == api
    assert cli["tokens"] != plain["tokens"]


def test_15_repeat_last_n(tiny_pair):
    """--repeat-last-n sets the penalties' window: the library's processor
    with the same window gives the same tokens; another window, others."""
    def cli(last_n):
        return gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3", "--draft-fixed",
                        "--repeat-penalty", "1.5", "--frequency-penalty", "0.5", "--repeat-last-n", str(last_n))

    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=256, n_threads=1),
                               LlamaModel(tiny_pair[1], n_ctx=256, n_threads=1))
    lib = {}
    for last_n in (4, 64):
        processor = processor_for(n_vocab=engine.target.n_vocab, repeat_penalty=1.5, frequency_penalty=0.5,
                                  repeat_last_n=last_n)
        lib[last_n] = generate(engine, PROMPT, params=GREEDY, draft_max=3, max_tokens=40, adaptive=False,
                               processor=processor).tokens
    engine.close()
    assert cli(4)["tokens"] == lib[4] != lib[64] == cli(64)["tokens"]
    assert cli(0)["tokens"] == gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3",
                                        "--draft-fixed")["tokens"]  # 0: no penalties


def never_drafts(monkeypatch):
    """The real policy, except that its own choice is always k = 0."""
    import specllama.adaptive as adaptive

    monkeypatch.setattr(adaptive.DraftLengthPolicy, "_choose", lambda self, cap: 0)


def test_15_draft_min(tiny_pair, monkeypatch):
    """--draft-min 2: every pass with room for 2 drafts drafts at least 2,
    whatever the policy would choose (n = 40: only the last two passes can
    have less room); below it the policy decides (here: never)."""
    flags = ("-c", "256", "--temp", "0", "-n", "40", "--draft-max", "4")
    real = gen_json(tiny_pair, *flags, "--draft-min", "2")
    never_drafts(monkeypatch)
    forced = gen_json(tiny_pair, *flags, "--draft-min", "2")
    unforced = gen_json(tiny_pair, *flags)
    for run in (real, forced):
        assert run["n_drafted"] >= 2 * run["n_target_passes"] - 3
    assert forced["n_drafted"] <= 2 * forced["n_target_passes"]
    assert unforced["n_drafted"] == 0 and unforced["n_target_passes"] == 40
    assert real["tokens"] == forced["tokens"] == unforced["tokens"]  # greedy: the same text either way


def test_15_draft_min_above_draft_max(tiny_pair):
    r = invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", "hi", "--draft-max", "2",
               "--draft-min", "3")
    assert one_line_error(r) == "Error: draft_min (3) must not exceed draft_max (2)"


# == Chat REPL ===================================================================


def chat(tiny_pair, script: str, *flags: str):
    return invoke("chat", "-m", tiny_pair[0], "-md", tiny_pair[1], *CHAT_FIXED, *flags, input=script)


def library_session(tiny_pair, *, n_ctx: int, max_tokens: int | None, system: str | None = None) -> ChatSession:
    """The session the REPL runs for CHAT_FIXED, built directly."""
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=n_ctx, n_threads=1),
                               LlamaModel(tiny_pair[1], n_ctx=n_ctx, n_threads=1))
    return ChatSession(engine, template_for(engine.target), system, params=GREEDY, draft_max=4, adaptive=False,
                       max_tokens=max_tokens)


def replies(tiny_pair, messages, *, n_ctx: int, max_tokens: int | None, system: str | None = None):
    """The library session's replies to ``messages``, its last stats, and
    its last finish reason."""
    session = library_session(tiny_pair, n_ctx=n_ctx, max_tokens=max_tokens, system=system)
    out = ["".join(c.text for c in session.send(m)) for m in messages]
    session.engine.close()
    return out, session.last_stats, session.last_finish


def summary_pattern(stats) -> str:
    """stats.summary() as a regex: every figure exact but the speed."""
    return (f"{stats.n_tokens} tokens, [0-9.]+ tok/s, drafted {stats.n_drafted}, accepted {stats.n_accepted} "
            f"\\({100 * stats.acceptance_rate:.1f}%\\), {stats.tokens_per_pass:.2f} tokens/target pass")


def banner(tiny_pair) -> str:
    return (f"specllama chat: {tiny_pair[0]}, draft {tiny_pair[1]} (--draft-max 4); no chat template in the model; "
            "using 'llama-2' (--chat-format to change). /help for commands.\n")


def stdout_of(r) -> str:
    return r.stdout_bytes.decode()  # not .stdout: it folds a reply's final CR into the newline


# -- 16. a """ block still open at the end of input ----------------------------------


def test_16_an_open_block_at_end_of_input_is_sent_with_a_note(tiny_pair):
    r = chat(tiny_pair, 'hello\n"""\nonce upon\na time\n', "-c", "256", "-n", "6")
    assert r.exit_code == 0, r.output
    (first, second), stats, _ = replies(tiny_pair, ["hello", "once upon\na time"], n_ctx=256, max_tokens=6)
    assert stdout_of(r) == f"> {first}\n> ... ... ... \n{second}\n"
    cut = re.escape("(reply cut at -n 6 tokens)") + "\n"
    assert re.fullmatch(re.escape(banner(tiny_pair)) + cut + r"6 tokens, .*\n"
                        + re.escape('(the input ended inside a """ block: sending what it held)') + "\n"
                        + cut + summary_pattern(stats) + "\n", r.stderr), r.stderr


def test_16_an_empty_open_block_sends_nothing(tiny_pair):
    r = chat(tiny_pair, 'hello\n"""\n\n', "-c", "256", "-n", "6")
    assert r.exit_code == 0, r.output
    assert r.stderr.count("tokens, ") == 1 and "block" not in r.stderr


# -- 17. a mistyped command; a literal / ---------------------------------------------


def test_17_unknown_command_with_an_argument_is_refused(tiny_pair):
    r = chat(tiny_pair, "/sytem be terse\n//hi\n/stats\n", "-c", "256", "-n", "6")
    assert r.exit_code == 0, r.output
    (reply,), stats, _ = replies(tiny_pair, ["/hi"], n_ctx=256, max_tokens=6)
    (other,), _, _ = replies(tiny_pair, ["hi"], n_ctx=256, max_tokens=6)
    assert reply != other  # "/hi" and "hi" are different messages
    assert re.fullmatch(f"> > {re.escape(reply)}\n> last reply: {summary_pattern(stats)}; time to first token "
                        f"[0-9]+ ms \\({stats.n_prompt_evaluated} new prompt tokens evaluated\\)\n"
                        f"session \\(1 replies\\): {summary_pattern(stats)}\n> \n", stdout_of(r)), stdout_of(r)
    assert re.fullmatch(re.escape(banner(tiny_pair) + f"unknown command '/sytem'; {COMMANDS_NOTE}\n"
                                  + "(reply cut at -n 6 tokens)\n") + summary_pattern(stats) + "\n", r.stderr), r.stderr


# -- 18. the context fills up during a reply ---------------------------------------


def test_18_a_reply_cut_by_the_full_context_says_so(tiny_pair):
    r = chat(tiny_pair, "once upon a time\n", "-c", "256")
    assert r.exit_code == 0, r.output
    (reply,), stats, finish = replies(tiny_pair, ["once upon a time"], n_ctx=256, max_tokens=None)
    assert finish == "length" and stats.n_prompt_tokens + stats.n_tokens == 257
    assert stdout_of(r) == f"> {reply}\n> \n"
    notice = (f"(the context is full: the reply stopped after {stats.n_tokens} tokens; /reset or a larger "
              "-c/--ctx-size makes room)\n")
    assert re.fullmatch(re.escape(banner(tiny_pair) + notice) + summary_pattern(stats) + "\n", r.stderr), r.stderr


# -- 19. cosmetic ---------------------------------------------------------------------


def test_19_system_command_without_a_system_prompt(tiny_pair):
    r = chat(tiny_pair, "/system\n/system be brief\n/system\n/system\n", "-c", "256", "-n", "4")
    assert r.exit_code == 0, r.output
    assert r.stderr == banner(tiny_pair) + ("(no system prompt is set)\n(system prompt set)\n"
                                            "(system prompt removed)\n(no system prompt is set)\n")


def test_19_too_long_message_mentions_a_system_prompt_only_if_there_is_one(tiny_pair):
    long = "the king " * 80
    expected = {}
    for system in (None, "be brief"):
        session = library_session(tiny_pair, n_ctx=128, max_tokens=8, system=system)
        with pytest.raises(ValueError) as info:
            session.send(long)
        session.engine.close()
        expected[system] = str(info.value)
    n_plain = int(re.search(r"needs (\d+) tokens", expected[None]).group(1))
    assert expected[None] == (f"this message needs {n_plain} tokens, and the context (-c/--ctx-size 128) keeps 8 "
                              "free for the reply: shorten it or raise -c")
    assert re.fullmatch(r"this message needs \d+ tokens with the system prompt, and the context \(-c/--ctx-size "
                        r"128\) keeps 8 free for the reply: shorten it or raise -c", expected["be brief"])
    for system in (None, "be brief"):
        flags = ("-sys", system) if system else ()
        r = chat(tiny_pair, long + "\n", "-c", "128", "-n", "8", *flags)
        assert r.exit_code == 0, r.output
        assert r.stderr == banner(tiny_pair) + f"Error: {expected[system]}\n"


def test_19_unknown_chat_format_before_any_model_loads():
    """A model file that does not exist: the chat format is reported, so it
    was checked before anything was loaded."""
    r = invoke("chat", "-m", "/nonexistent.gguf", "--chat-format", "nope")
    assert one_line_error(r) == ("Error: unknown chat format 'nope'; known: chatml, gemma, llama-2, llama-3, "
                                 "mistral-instruct, phi-3, zephyr")


def test_19_a_context_of_one_token(tiny_pair):
    """-c 1 cannot hold a prompt and a new token: say so, rather than suggest
    "a prompt of at most 0 tokens"."""
    msg = one_line_error(invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", "hi",
                                "-c", "1"))
    assert "-c/--ctx-size" in msg and "at most 0 tokens" not in msg and "under 1 tokens" not in msg


# == What already holds (keep it so) ================================================


@pytest.mark.parametrize("flags", [
    ("--draft-max", "4"),
    ("--draft-max", "4", "--draft-fixed"),
    ("--draft-max", "1000", "--draft-fixed"),
    ("--temp", "0.8", "--top-k", "1", "--seed", "1"),
    ("--temp", "0.8", "--min-p", "1", "--seed", "1"),
    ("--temp", "1e-9", "--seed", "1", "--draft-fixed"),
    ("--rule", "block", "--draft-fixed"),
])
def test_greedy_output_is_the_same_whatever_the_flags(tiny_pair, flags):
    """Greedy decoding, and what must reduce to it (top-k 1, min-p 1, a
    temperature of 1e-9, which divides the logits without overflow), give
    target-only decoding's tokens at any draft length."""
    base = gen_json(tiny_pair, "-c", "256", "-n", "60", "--temp", "0", "--draft-max", "0")
    run = gen_json(tiny_pair, "-c", "256", "-n", "60", "--temp", "0", *flags)
    assert run["tokens"] == base["tokens"] and len(base["tokens"]) == 60
    if "--draft-fixed" in flags:
        assert run["n_drafted"] > 0


def test_the_target_as_its_own_draft(tiny_pair):
    base = gen_json(tiny_pair, "-c", "256", "-n", "40", "--temp", "0", "--draft-max", "0")
    same = gen_json((tiny_pair[0], tiny_pair[0]), "-c", "256", "-n", "40", "--temp", "0", "--draft-max", "4",
                    "--draft-fixed")
    assert same["tokens"] == base["tokens"]
    assert same["n_accepted"] == same["n_drafted"] > 0  # it agrees with itself everywhere
    assert same["n_target_passes"] == 8  # 40 tokens, 5 a pass


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "started-in-background"])
def test_ctrl_c_keeps_the_partial_text_and_exits_130(tiny_pair, sigint_ignored):
    """Also when the parent ignored SIGINT, as a shell does for a job it starts with &."""
    env = dict(os.environ, SPECLLAMA_COST_CACHE="0")
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    proc = subprocess.Popen([sys.executable, "-m", "specllama", "generate", "-m", tiny_pair[0], "-md", tiny_pair[1],
                             "-t", "1", "-c", "8192", "-n", "-1", "--temp", "0", "--ignore-eos", "-p", PROMPT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=ignore)
    try:
        got = b""
        deadline = time.monotonic() + 60
        while len(got) < 40 and time.monotonic() < deadline:  # the text has begun
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                got += os.read(proc.stdout.fileno(), 4096)
        assert len(got) >= 40 and proc.poll() is None
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    n = int(re.fullmatch(rb"(\d+) tokens, .* tokens/target pass\n", err).group(1))
    assert 0 < n < 8000  # cut short
    assert (got + rest).endswith(b"\n") and len(got + rest) > 40


def test_truncated_model_file_is_one_line(tiny_pair, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(open(tiny_pair[0], "rb").read()[:200_000])
    msg = one_line_error(invoke("generate", "-m", str(cut), "-p", "hi"))
    assert msg == f"Error: llama.cpp could not load {str(cut)!r}: Failed to load model from file: {cut}"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_memory_stays_flat_over_200_calls(spec):
    for _ in range(20):  # warm: buffers, caches
        spec.create_completion(PROMPT, max_tokens=8, temperature=0.8)
        spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=8)
    before = rss_mb()
    for i in range(100):
        spec.create_completion(PROMPT, max_tokens=8, temperature=0.8, seed=i)
        list(spec.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=8, stream=True))
    assert rss_mb() - before < 2.0  # measured: +0.1 MB
