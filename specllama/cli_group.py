"""The ``specllama`` command group. Each command's module loads when that
command runs (click's lazily loaded subcommands), so a command that loads no
model, such as ``specllama models --local``, starts without llama.cpp or numpy.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys

import click

# command name -> "module:attribute" of the click command
COMMANDS = {
    "generate": "specllama.cli:generate",
    "chat": "specllama.cli:chat",
    "bench": "specllama.cli:bench",
    "verify": "specllama.verify_command:verify",
    "serve": "specllama.server.command:serve",
    "batch": "specllama.batch_command:batch",
    "models": "specllama.cli_models:models",
    "pull": "specllama.cli:pull",
    "pair": "specllama.cli:pair",
    "rpc-server": "specllama.cli:rpc_server",
}


class OneLineErrors(click.Group):
    """A command group whose usage errors are one line ("Error: ..."), with
    no usage banner, like every other error of specllama's; its commands load
    on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, _, attribute = COMMANDS[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            # started in the background by a shell, which ignores SIGINT for its children:
            # Ctrl-C (a SIGINT) must still stop a generation
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            click.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=OneLineErrors)
@click.version_option(package_name="specllama")
def main() -> None:
    """Exact speculative decoding for llama.cpp GGUF models."""
    notices = logging.getLogger("specllama")
    if not any(isinstance(h, _Stderr) for h in notices.handlers):
        notices.addHandler(_Stderr(logging.WARNING))


class _Stderr(logging.Handler):
    """The library's notices as lines on stderr (the stderr of the moment: a test's runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr)  # (the message, and a traceback where one is logged)
