"""The boundary where library errors become one-line CLI errors: light (click
only), so that a command that loads no model starts quickly."""

from __future__ import annotations

import functools
import warnings

import click

from .errors import SpecLlamaError, SpecLlamaWarning


def boundary(f):
    """Turn library errors a user can cause into one-line CLI errors."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", SpecLlamaWarning)
                warnings.showwarning = functools.partial(_show_warning, warnings.showwarning)
                return f(*args, **kwargs)
        except SpecLlamaError as e:
            raise click.ClickException(str(e)) from None

    return wrapper


def _show_warning(show, message, category, filename, lineno, file=None, line=None) -> None:
    """specllama's own warnings as one line; others as Python shows them (``show``)."""
    if issubclass(category, SpecLlamaWarning):
        click.echo(f"Warning: {message}", err=True)
    else:
        show(message, category, filename, lineno, file, line)
