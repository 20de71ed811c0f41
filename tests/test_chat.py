"""`specllama chat`: the session logic, the REPL through CliRunner, and Ctrl-C
in a real pseudo-terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from specllama.backend import LlamaModel
from specllama.chat import ChatSession, template_for
from specllama.engine import SpeculativeEngine
from specllama.sampling import SamplingParams

from .cli_helpers import invoke, one_line_error
from .conftest import PIRATE

GREEDY = SamplingParams(temperature=0)
COMMANDS_NOTE = "commands: /help, /stats, /reset, /system, /exit (start a message with // to send a literal /)"


# deterministic flags: greedy, a fixed draft length, one llama.cpp thread
FIXED = ("--temp", "0", "--draft-max", "4", "--draft-fixed", "-t", "1")


def chat(tiny_pair, script: str, *flags: str):
    return invoke("chat", "-m", tiny_pair[0], "-md", tiny_pair[1], "--temp", "0", "-t", "1", *flags, input=script)


def chat_fixed(tiny_pair, script: str, *flags: str):
    """:func:`chat` with the FIXED flags."""
    return chat(tiny_pair, script, *FIXED, *flags)


def drain(turn) -> str:
    return "".join(c.text for c in turn)


def library_session(tiny_pair, *, n_ctx: int, max_tokens: int | None, system: str | None = None) -> ChatSession:
    """The session the REPL runs for FIXED flags, built directly."""
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=n_ctx, n_threads=1),
                               LlamaModel(tiny_pair[1], n_ctx=n_ctx, n_threads=1))
    return ChatSession(engine, template_for(engine.target), system, params=GREEDY, draft_max=4, adaptive=False,
                       max_tokens=max_tokens)


def summary_pattern(stats) -> str:
    """stats.summary() as a regex: every figure exact but the speed."""
    return (f"{stats.n_tokens} tokens, [0-9.]+ tok/s, drafted {stats.n_drafted}, accepted {stats.n_accepted} "
            f"\\({100 * stats.acceptance_rate:.1f}%\\), {stats.tokens_per_pass:.2f} tokens/target pass")


def stats_pattern(last, total, n_replies: int) -> str:
    """The two lines of /stats as a regex (time to first token left free)."""
    return (f"last reply: {summary_pattern(last)}; time to first token [0-9]+ ms "
            f"\\({last.n_prompt_evaluated} new prompt tokens evaluated\\)\n"
            f"session \\({n_replies} replies\\): {summary_pattern(total)}\n")


def banner(tiny_pair, draft_max: int = 4) -> str:
    return (f"specllama chat: {tiny_pair[0]}, draft {tiny_pair[1]} (--draft-max {draft_max}); no chat template in "
            "the model; using 'llama-2' (--chat-format to change). /help for commands.\n")


def test_two_turns_stats_reset_exit(tiny_pair, monkeypatch):
    """The whole transcript of two turns, /stats, /reset, /stats, a third
    turn, /stats and /exit, against the same session run directly; /reset
    empties the history: the third reply is a fresh session's first."""
    monkeypatch.setenv("SPECLLAMA_COST_CACHE", "0")
    r = chat(tiny_pair, "hello king\nthe cat\n/stats\n/reset\n/stats\nonce upon\n/stats\n/exit\nnever sent\n",
             "-c", "512", "-n", "8", *FIXED)
    assert r.exit_code == 0, r.output

    session = library_session(tiny_pair, n_ctx=512, max_tokens=8)
    replies = [drain(session.send("hello king"))]
    last1 = session.last_stats
    replies.append(drain(session.send("the cat")))
    last2, total2 = session.last_stats, session.total_stats
    session.reset()
    replies.append(drain(session.send("once upon")))
    last3, total3 = session.last_stats, session.total_stats
    session.engine.close()
    fresh = library_session(tiny_pair, n_ctx=512, max_tokens=8)
    first_reply = drain(fresh.send("once upon"))
    fresh.engine.close()
    # without /reset the third turn sees the history, and its reply differs
    kept = library_session(tiny_pair, n_ctx=512, max_tokens=8)
    drain(kept.send("hello king"))
    drain(kept.send("the cat"))
    with_history = drain(kept.send("once upon"))
    kept.engine.close()
    assert replies[2] == first_reply != with_history
    # the prompt after /reset is a first turn's, token for token
    assert last3.n_prompt_tokens == fresh.last_stats.n_prompt_tokens < kept.last_stats.n_prompt_tokens
    assert (total3.n_tokens, last3.n_tokens) == (24, 8)

    stats2 = stats_pattern(last2, total2, 2)
    expected_out = ("> " + re.escape(replies[0]) + "\n> " + re.escape(replies[1]) + "\n> " + stats2
                    + "> > " + stats2 + "> " + re.escape(replies[2]) + "\n> " + stats_pattern(last3, total3, 3) + "> ")
    stdout = r.stdout_bytes.decode()  # not .stdout: it folds a reply's final CR into the newline
    assert re.fullmatch(expected_out, stdout), stdout
    assert "session (3 replies): 24 tokens, " in stdout
    cut = "\\(reply cut at -n 8 tokens\\)\n"
    expected_err = (re.escape(banner(tiny_pair)) + cut + summary_pattern(last1) + "\n" + cut
                    + summary_pattern(last2) + "\n\\(conversation cleared\\)\n" + cut + summary_pattern(last3) + "\n")
    assert re.fullmatch(expected_err, r.stderr), r.stderr


def test_second_turn_costs_the_same_whatever_the_history(tiny_pair):
    """Follow-up turns evaluate only the new turn: the same count of prompt
    tokens after a short and after a long first exchange."""
    evaluated = []
    for first in ("hello", "once upon a time there lived a king " * 12):
        engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=1024, n_threads=1),
                                   LlamaModel(tiny_pair[1], n_ctx=1024, n_threads=1))
        template = template_for(engine.target, "chatml")
        session = ChatSession(engine, template, "you are a cat", params=GREEDY, max_tokens=12)
        drain(session.send(first))
        drain(session.send("the dog said"))
        evaluated.append((session.last_stats.n_prompt_evaluated, session.last_stats.n_prompt_tokens))
        engine.close()
    (short_new, short_total), (long_new, long_total) = evaluated
    assert long_total > short_total + 90
    assert short_new == long_new
    assert long_new < long_total - 100  # the history was not evaluated again


def test_context_overflow_drops_oldest_turns_keeps_system(tiny_pair):
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=160, n_threads=1),
                               LlamaModel(tiny_pair[1], n_ctx=160, n_threads=1))
    template = template_for(engine.target)
    session = ChatSession(engine, template, "be brief", params=GREEDY, max_tokens=16)
    long_msg = "the king and the queen went to the house " * 3
    drops = []
    for _ in range(4):
        turn = session.send(long_msg)
        drops.append(turn.dropped)
        drain(turn)
    assert drops[0] == 0 and sum(drops) >= 1
    assert session.messages[0] == {"role": "system", "content": "be brief"}
    assert [m["role"] for m in session.messages[1:]] == ["user", "assistant"] * ((len(session.messages) - 1) // 2)
    engine.close()


def test_context_overflow_in_the_repl(tiny_pair):
    msg = "the king and the queen went to the house " * 3
    r = chat(tiny_pair, f"{msg}\n{msg}\n{msg}\n/exit\n", "-c", "160", "-n", "16")
    assert r.exit_code == 0, r.output
    assert re.search(r"\(context full: dropped the \d+ oldest turn\(s\)\)", r.stderr)
    assert r.stderr.count("16 tokens, ") == 3


def test_message_too_long_for_the_context(tiny_pair):
    r = chat(tiny_pair, ("the king " * 80) + "\nhello\n/exit\n", "-c", "128", "-n", "8")
    assert r.exit_code == 0
    assert "Error: this message needs" in r.stderr and "shorten it or raise -c" in r.stderr
    assert r.stderr.count("8 tokens, ") == 1  # the next message still gets its reply


def test_system_command_help_and_unknown(tiny_pair):
    r = chat(tiny_pair, "/help\n/system you are a dog\n/system\n/nope\n", "-c", "256", "-n", "4")
    assert r.exit_code == 0
    assert "/reset" in r.stdout and "Ctrl-C stops a reply" in r.stdout
    assert "(system prompt set)" in r.stderr and "(system prompt removed)" in r.stderr
    assert ("unknown command '/nope'; commands: /help, /stats, /reset, /system, /exit "
            "(start a message with // to send a literal /)") in r.stderr


def test_bytes_that_are_not_utf8_get_a_one_line_error_and_the_session_goes_on(tiny_pair):
    """A pipe (or a terminal in another encoding) hands the REPL raw bytes: each bad message or system prompt is
    refused in one line, the next message gets its reply (a traceback ended the session before)."""
    script = b"caf\xe9\n/system x\xff\nhello\n"
    strict = dict(os.environ, PYTHONIOENCODING="utf-8:strict")  # stdin as most locales read it (C's escapes)
    r = subprocess.run([sys.executable, "-m", "specllama", "chat", "-m", tiny_pair[0], "-md", tiny_pair[1], *FIXED,
                        "-c", "256", "-n", "4"], input=script, capture_output=True, timeout=120, env=strict)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 0 and "Traceback" not in err, err
    assert "Error: the message is not valid UTF-8 (bytes b'\\xe9' at position 3); give UTF-8 text" in err
    assert "Error: the system prompt is not valid UTF-8 (bytes b'\\xff' at position 1); give UTF-8 text" in err
    assert err.count("4 tokens, ") == 1  # "hello" got its reply
    r = subprocess.run([sys.executable, "-m", "specllama", "chat", "-m", tiny_pair[0], "-md", tiny_pair[1], *FIXED,
                        "-sys", b"a\xff"], input=b"hello\n", capture_output=True, timeout=120)
    assert (r.returncode, r.stderr.decode().strip().splitlines()[-1]) == (
        1, "Error: the system prompt is not valid UTF-8 (bytes b'\\xff' at position 1); give UTF-8 text")


def test_multiline_input(tiny_pair):
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=256), None)
    from specllama.repl import read_message

    lines = iter(['"""', "one", "two", '"""', "three \\", "four"])
    read = lambda prompt: next(lines)  # noqa: E731
    assert read_message(read) == "one\ntwo"
    assert read_message(read) == "three \nfour"
    engine.close()


def test_unknown_chat_format(tiny_pair):
    r = chat(tiny_pair, "/exit\n", "--chat-format", "klingon")
    assert r.exit_code == 1
    assert r.stderr.startswith("Error: unknown chat format 'klingon'; known: ")
    assert "chatml" in r.stderr


def test_ctrl_c_stops_the_reply_not_the_session(tiny_pair):
    pexpect = pytest.importorskip("pexpect")
    args = ["-m", "specllama", "chat", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "8192", "--temp", "1",
            "-n", "-1", "--ignore-eos", "-t", "1", "--draft-fixed"]  # a reply long enough to be interrupted
    # (a fixed draft length: on this pair the adaptive one decodes target-only, after a notice on the terminal)
    child = pexpect.spawn(sys.executable, args, timeout=60, encoding="utf-8")
    try:
        child.expect_exact("> ")
        child.sendline("once upon a time")
        child.expect(r"\S{8}")  # the reply has begun
        child.sendintr()
        child.expect_exact("[interrupted]")
        child.expect_exact("> ")
        child.sendline("/stats")
        child.expect(r"last reply: (\d+) tokens")
        assert 0 < int(child.match.group(1)) < 8000  # cut short, and remembered
        child.expect_exact("> ")
        child.sendintr()  # at the prompt: no effect on the session
        child.expect_exact("Ctrl-D to quit")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


# -- a system prompt on the demo target (Gemma 3: no template in its GGUF) -------


def test_the_system_flag_counts_among_the_prompt_tokens_on_the_demo_target(demo_llm, demo_target):
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


# -- what the REPL says when input ends in a block, a command is unknown, the context fills up


def replies(tiny_pair, messages, *, n_ctx: int, max_tokens: int | None, system: str | None = None):
    """The library session's replies to ``messages``, its last stats, and
    its last finish reason."""
    session = library_session(tiny_pair, n_ctx=n_ctx, max_tokens=max_tokens, system=system)
    out = ["".join(c.text for c in session.send(m)) for m in messages]
    session.engine.close()
    return out, session.last_stats, session.last_finish


def stdout_of(r) -> str:
    return r.stdout_bytes.decode()  # not .stdout: it folds a reply's final CR into the newline


def test_an_open_block_at_end_of_input_is_sent_with_a_note(tiny_pair):
    r = chat_fixed(tiny_pair, 'hello\n"""\nonce upon\na time\n', "-c", "256", "-n", "6")
    assert r.exit_code == 0, r.output
    (first, second), stats, _ = replies(tiny_pair, ["hello", "once upon\na time"], n_ctx=256, max_tokens=6)
    assert stdout_of(r) == f"> {first}\n> ... ... ... \n{second}\n"
    cut = re.escape("(reply cut at -n 6 tokens)") + "\n"
    assert re.fullmatch(re.escape(banner(tiny_pair)) + cut + r"6 tokens, .*\n"
                        + re.escape('(the input ended inside a """ block: sending what it held)') + "\n"
                        + cut + summary_pattern(stats) + "\n", r.stderr), r.stderr


def test_an_empty_open_block_at_end_of_input_sends_nothing(tiny_pair):
    r = chat_fixed(tiny_pair, 'hello\n"""\n\n', "-c", "256", "-n", "6")
    assert r.exit_code == 0, r.output
    assert r.stderr.count("tokens, ") == 1 and "block" not in r.stderr


def test_an_unknown_command_with_an_argument_is_refused_and_a_double_slash_is_sent(tiny_pair):
    r = chat_fixed(tiny_pair, "/sytem be terse\n//hi\n/stats\n", "-c", "256", "-n", "6")
    assert r.exit_code == 0, r.output
    (reply,), stats, _ = replies(tiny_pair, ["/hi"], n_ctx=256, max_tokens=6)
    (other,), _, _ = replies(tiny_pair, ["hi"], n_ctx=256, max_tokens=6)
    assert reply != other  # "/hi" and "hi" are different messages
    assert re.fullmatch(f"> > {re.escape(reply)}\n> last reply: {summary_pattern(stats)}; time to first token "
                        f"[0-9]+ ms \\({stats.n_prompt_evaluated} new prompt tokens evaluated\\)\n"
                        f"session \\(1 replies\\): {summary_pattern(stats)}\n> \n", stdout_of(r)), stdout_of(r)
    assert re.fullmatch(re.escape(banner(tiny_pair) + f"unknown command '/sytem'; {COMMANDS_NOTE}\n"
                                  + "(reply cut at -n 6 tokens)\n") + summary_pattern(stats) + "\n", r.stderr), r.stderr


def test_a_reply_cut_by_the_full_context_says_so(tiny_pair):
    r = chat_fixed(tiny_pair, "once upon a time\n", "-c", "256")
    assert r.exit_code == 0, r.output
    (reply,), stats, finish = replies(tiny_pair, ["once upon a time"], n_ctx=256, max_tokens=None)
    assert finish == "length" and stats.n_prompt_tokens + stats.n_tokens == 257
    assert stdout_of(r) == f"> {reply}\n> \n"
    notice = (f"(the context is full: the reply stopped after {stats.n_tokens} tokens; /reset or a larger "
              "-c/--ctx-size makes room)\n")
    assert re.fullmatch(re.escape(banner(tiny_pair) + notice) + summary_pattern(stats) + "\n", r.stderr), r.stderr


def test_system_command_without_a_system_prompt(tiny_pair):
    r = chat_fixed(tiny_pair, "/system\n/system be brief\n/system\n/system\n", "-c", "256", "-n", "4")
    assert r.exit_code == 0, r.output
    assert r.stderr == banner(tiny_pair) + ("(no system prompt is set)\n(system prompt set)\n"
                                            "(system prompt removed)\n(no system prompt is set)\n")


def test_a_too_long_message_mentions_a_system_prompt_only_if_there_is_one(tiny_pair):
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
        r = chat_fixed(tiny_pair, long + "\n", "-c", "128", "-n", "8", *flags)
        assert r.exit_code == 0, r.output
        assert r.stderr == banner(tiny_pair) + f"Error: {expected[system]}\n"


def test_an_unknown_chat_format_is_refused_before_any_model_loads():
    """A model file that does not exist: the chat format is reported, so it
    was checked before anything was loaded."""
    r = invoke("chat", "-m", "/nonexistent.gguf", "--chat-format", "nope")
    assert one_line_error(r, 1) == ("Error: unknown chat format 'nope'; known: chatml, gemma, hermes, llama-2, "
                                    "llama-3, mistral-instruct, phi-3, zephyr")
