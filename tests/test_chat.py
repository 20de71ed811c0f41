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


# deterministic flags: greedy, a fixed draft length, one llama.cpp thread
FIXED = ("--temp", "0", "--draft-max", "4", "--draft-fixed", "-t", "1")


def chat(tiny_pair, script: str, *flags: str):
    args = ["chat", "-m", tiny_pair[0], "-md", tiny_pair[1], "--temp", "0", "-t", "1", *flags]
    return CliRunner().invoke(main, args, input=script)


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
            "-n", "-1", "--ignore-eos", "-t", "1"]  # a reply long enough to be interrupted
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
