"""The interactive loop of ``specllama chat``: read a line, run a command or
send it to the :class:`ChatSession`, stream the reply."""

from __future__ import annotations

import os
import sys
from typing import Callable

import click

from .chat import ChatSession
from .demo import cache_dir
from .errors import SpecLlamaError

HELP = """\
Type a message and press Enter. End a line with \\ to continue it on the next
line, or put \"\"\" alone on a line to start and end a multi-line message.
  /help          this help
  /stats         the last reply's statistics and the session's totals
  /reset         forget the conversation (the system prompt stays)
  /system TEXT   set the system prompt (empty TEXT removes it)
  /exit          quit (also: exit, quit, Ctrl-D)
Ctrl-C stops a reply and keeps what was written; at the prompt it does nothing."""

EXIT_WORDS = {"/exit", "/quit", "exit", "quit"}


def _setup_line_editing() -> Callable[[], None]:
    """Arrow keys and a persistent history, when a terminal is attached."""
    if not sys.stdin.isatty():
        return lambda: None
    try:
        import readline
    except ImportError:  # Windows without pyreadline
        return lambda: None
    path = os.path.join(cache_dir(), "chat_history")
    try:
        readline.read_history_file(path)
    except OSError:
        pass

    def save() -> None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            readline.set_history_length(1000)
            readline.write_history_file(path)
        except OSError:
            pass

    return save


def read_message(read: Callable[[str], str]) -> str:
    """One message: a line, a line continued with a trailing backslash, or a
    block between two \"\"\" lines. Raises EOFError at end of input."""
    line = read("> ")
    if line.strip() == '"""':
        lines = []
        while (more := read("... ")).strip() != '"""':
            lines.append(more)
        return "\n".join(lines)
    lines = []
    while line.endswith("\\"):
        lines.append(line[:-1])
        line = read("... ")
    lines.append(line)
    return "\n".join(lines)


def _stats_line(session: ChatSession) -> str:
    last, total = session.last_stats, session.total_stats
    if last is None:
        return "no replies yet"
    return (
        f"last reply: {last.summary()}; time to first token {1000 * last.ttft_seconds:.0f} ms "
        f"({last.n_prompt_evaluated} new prompt tokens evaluated)\n"
        f"session ({session.n_turns} replies): {total.summary()}"
    )


def run(session: ChatSession, *, read: Callable[[str], str] = input, banner: str = "") -> None:
    """Run the chat until /exit or end of input."""
    save_history = _setup_line_editing()
    if banner:
        click.secho(banner, err=True, dim=True)
    try:
        while True:
            try:
                text = read_message(read)
            except KeyboardInterrupt:
                click.echo("")
                click.secho("(Ctrl-C: type /exit or press Ctrl-D to quit)", err=True, dim=True)
                continue
            except EOFError:
                click.echo("")
                return
            cmd = text.strip()
            if not cmd:
                continue
            if cmd in EXIT_WORDS:
                return
            if cmd == "/help":
                click.echo(HELP)
            elif cmd == "/stats":
                click.echo(_stats_line(session))
            elif cmd == "/reset":
                session.reset()
                click.secho("(conversation cleared)", err=True, dim=True)
            elif cmd == "/system" or cmd.startswith("/system "):
                session.set_system(cmd[len("/system"):].strip())
                click.secho("(system prompt set)" if session.system_prompt else "(system prompt removed)",
                            err=True, dim=True)
            elif cmd.startswith("/") and " " not in cmd:
                click.secho(f"unknown command {cmd!r}: try /help", err=True)
            else:
                _reply(session, text)
    finally:
        save_history()


def _reply(session: ChatSession, text: str) -> None:
    try:
        turn = session.send(text)
    except SpecLlamaError as e:
        click.secho(f"Error: {e}", err=True)
        return
    if turn.dropped:
        click.secho(f"(context full: dropped the {turn.dropped} oldest turn(s))", err=True, dim=True)
    interrupted = False
    try:
        for chunk in turn:
            if chunk.text:
                click.echo(chunk.text, nl=False)
                sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        turn.chunks.close()
    click.echo("")
    if interrupted:
        click.secho("[interrupted]", err=True, dim=True)
    if session.last_stats is not None and not interrupted:
        click.secho(session.last_stats.summary(), err=True, dim=True)
