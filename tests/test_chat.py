"""`specllama chat`: the session logic, the REPL through CliRunner, and Ctrl-C
in a real pseudo-terminal."""

from __future__ import annotations

import re
import sys

import pytest
from click.testing import CliRunner

from specllama.backend import LlamaModel
from specllama.chat import ChatSession, template_for
from specllama.cli import main
from specllama.engine import SpeculativeEngine
from specllama.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)


def chat(tiny_pair, script: str, *flags: str):
    args = ["chat", "-m", tiny_pair[0], "-md", tiny_pair[1], "--temp", "0", *flags]
    return CliRunner().invoke(main, args, input=script)


def drain(turn) -> str:
    return "".join(c.text for c in turn)


def test_two_turns_stats_reset_exit(tiny_pair):
    r = chat(tiny_pair, "hello king\nthe cat\n/stats\n/reset\n/stats\nonce upon\n/exit\nnever sent\n",
             "-c", "512", "-n", "8")
    assert r.exit_code == 0, r.output
    out = r.stdout
    # /stats after two replies of 8 tokens
    assert "last reply: 8 tokens" in out
    assert "session (2 replies): 16 tokens" in out
    # /reset keeps the totals (they are the session's) and clears the history
    assert "(conversation cleared)" in r.stderr
    assert "session (3 replies)" not in out  # /exit came before a fourth line was read
    assert r.stderr.count("8 tokens, ") == 3  # a stats line after each of the three replies


def test_second_turn_costs_the_same_whatever_the_history(tiny_pair):
    """Follow-up turns evaluate only the new turn: the same count of prompt
    tokens after a short and after a long first exchange."""
    evaluated = []
    for first in ("hello", "once upon a time there lived a king " * 12):
        engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=1024), LlamaModel(tiny_pair[1], n_ctx=1024))
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
    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=160), LlamaModel(tiny_pair[1], n_ctx=160))
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
            "-n", "-1"]
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
