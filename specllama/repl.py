"""The interactive loop of ``specllama chat``: read a line, run a command or
send it to the :class:`ChatSession`, stream the reply."""

from __future__ import annotations

import io
import os
import sys
from typing import Callable

import click

from .chat import ChatSession
from .colors import legend, styled
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
A message that starts with / is taken as a command; start it with // to send
a literal /. Ctrl-C stops a reply and keeps what was written; at the prompt
it does nothing."""

EXIT_WORDS = {"/exit", "/quit", "exit", "quit"}
COMMANDS = ("/help", "/stats", "/reset", "/system", "/exit")
HISTORY_VARIABLE = "SPECLLAMA_HISTORY_FILE"  # the history file's full path, instead of the cache folder's


class EndInsideBlock(EOFError):
    """The input ended inside a \"\"\" block; ``text`` is what it held."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _setup_line_editing() -> Callable[[], None]:
    """Arrow keys and a persistent history, when a terminal is attached."""
    if not sys.stdin.isatty():
        return lambda: None
    try:
        import readline
    except ImportError:  # Windows without pyreadline
        return lambda: None
    path = os.environ.get(HISTORY_VARIABLE) or os.path.join(cache_dir(), "chat_history")
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
        lines: list[str] = []
        try:
            while (more := read("... ")).strip() != '"""':
                lines.append(more)
        except EOFError:
            raise EndInsideBlock("\n".join(lines)) from None
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


def run(session: ChatSession, *, read: Callable[[str], str] = input, banner: str = "", color: bool = False) -> None:
    """Run the chat until /exit or end of input (``color``: replies coloured
    by token origin)."""
    save_history = _setup_line_editing()
    if read is input and isinstance(sys.stdin, io.TextIOWrapper):
        # bytes that are not UTF-8 come through as surrogates whatever the locale, for the one-line error of
        # check_prompt_text (a strict stdin, as in most locales other than C, raised on reading them)
        sys.stdin.reconfigure(errors="surrogateescape")
    if banner:
        click.secho(banner, err=True, dim=True)
    if color:
        click.echo(legend(), err=True, color=True)
    try:
        while True:
            try:
                text = read_message(read)
            except KeyboardInterrupt:
                click.echo("")
                click.secho("(Ctrl-C: type /exit or press Ctrl-D to quit)", err=True, dim=True)
                continue
            except EndInsideBlock as e:
                click.echo("")
                if e.text.strip():
                    click.secho('(the input ended inside a """ block: sending what it held)', err=True, dim=True)
                    _reply(session, e.text, color)
                return
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
                had = session.system_prompt is not None
                try:
                    session.set_system(cmd[len("/system"):].strip())
                except SpecLlamaError as e:
                    click.secho(f"Error: {e}", err=True)
                    continue
                note = ("(system prompt set)" if session.system_prompt else
                        "(system prompt removed)" if had else "(no system prompt is set)")
                click.secho(note, err=True, dim=True)
            elif cmd.startswith("//"):
                _reply(session, text.lstrip()[1:], color)  # a literal "/..." message
            elif cmd.startswith("/"):
                click.secho(f"unknown command {cmd.split()[0]!r}; commands: {', '.join(COMMANDS)} "
                            "(start a message with // to send a literal /)", err=True)
            else:
                _reply(session, text, color)
    finally:
        save_history()


def _reply(session: ChatSession, text: str, color: bool = False) -> None:
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
                click.echo(styled(chunk.pieces) if color else chunk.text, nl=False, color=color)
                sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        turn.chunks.close()
    click.echo("")
    if interrupted:
        click.secho("[interrupted]", err=True, dim=True)
    stats = session.last_stats
    if stats is not None and not interrupted:
        if session.last_finish == "length":
            if session.max_tokens is not None and stats.n_tokens >= session.max_tokens:
                click.secho(f"(reply cut at -n {session.max_tokens} tokens)", err=True, dim=True)
            else:
                click.secho(f"(the context is full: the reply stopped after {stats.n_tokens} tokens; "
                            "/reset or a larger -c/--ctx-size makes room)", err=True, dim=True)
        click.secho(stats.summary(), err=True, dim=True)
